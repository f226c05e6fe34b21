"""Gradient clipping: ``clip_grad_norm_`` and ``clip_grad_value_`` (PyTorch's semantics)."""
from __future__ import annotations

import math

from ...autograd.grad_mode import no_grad
from ...ops.factories import tensor as _tensor
from ...tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_",
           "get_total_norm"]


def _as_list(tensors) -> list:
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None) -> Tensor:
    """The ``norm_type``-norm of all ``tensors`` together (as if concatenated).

    Example:
        >>> ember.nn.utils.get_total_norm([ember.tensor([3.0]), ember.tensor([4.0])])
        tensor(5.)
    """
    tensors = [t for t in _as_list(tensors) if t is not None]
    norm_type = float(norm_type)
    if not tensors:
        return _tensor(0.0)
    with no_grad():
        if math.isinf(norm_type):
            norms = [t.detach().abs().max() for t in tensors]
            total = norms[0] if len(norms) == 1 else _stack(norms).max()
        else:
            norms = [t.detach().norm(p=norm_type) for t in tensors]
            total = _stack(norms).norm(p=norm_type)
    if error_if_nonfinite and not bool(total.isfinite()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                           f"`parameters` is non-finite, so it cannot be clipped. To disable "
                           f"this error and scale the gradients by the non-finite norm anyway, "
                           f"set `error_if_nonfinite=False`")
    return total


def _stack(norms: list) -> Tensor:
    from ...ops.join import stack
    dt = norms[0].dtype
    return stack([n.to(dt) for n in norms])


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor,
                          foreach=None) -> None:
    """Scale the gradients by ``max_norm / (total_norm + 1e-6)`` when that is below 1."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    with no_grad():
        coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Rescale gradients in place so their total norm is at most ``max_norm``.

    The total norm is over all gradients together; gradients are multiplied by
    ``min(1, max_norm / (total_norm + 1e-6))``. Returns the total norm before clipping.

    Example:
        >>> w = ember.nn.Parameter(ember.ones(4))
        >>> (w * 10).sum().backward()
        >>> ember.nn.utils.clip_grad_norm_([w], max_norm=1.0)
        tensor(20.)
    """
    params = _as_list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(params, max_norm, total, foreach)
    return total


def clip_grad_norm(parameters, max_norm: float, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Deprecated alias of :func:`clip_grad_norm_` (as in PyTorch)."""
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient element to ``[-clip_value, clip_value]`` in place.

    Example:
        >>> w = ember.nn.Parameter(ember.ones(2))
        >>> (w * 5).sum().backward()
        >>> ember.nn.utils.clip_grad_value_([w], 1.0); w.grad
        tensor([1., 1.])
    """
    clip_value = float(clip_value)
    with no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
