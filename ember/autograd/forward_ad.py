"""Forward-mode AD: tangents ride on tensors and are pushed through each op's JVP rule.

A tensor's ``_fw`` maps a *level* (one per active ``dual_level`` / ``func.jvp``) to its
tangent. Levels nest: when the dispatcher pushes level ``L`` through an op it hands the
JVP rule primals stripped of levels ``>= L``, so the rule's own ops carry the outer
levels' tangents along — which is what makes ``jvp(jvp(f))`` and forward-over-reverse
correct without perturbation confusion.

Example:
    >>> with forward_ad.dual_level():
    ...     x = forward_ad.make_dual(ember.tensor(2.0), ember.tensor(1.0))
    ...     y = x * x
    ...     forward_ad.unpack_dual(y).tangent     # tensor(4.)
"""
from __future__ import annotations

from collections import namedtuple
import itertools

from ..tensor import Tensor, _alias
from .grad_mode import state

_level_ids = itertools.count(1)

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


def _strip(x, level):
    fw = getattr(x, "_fw", None)
    if not fw or max(fw) < level:
        return x
    t = _differentiable_alias(x)
    keep = {k: v for k, v in fw.items() if k < level}
    t._fw = keep or None
    return t


def _differentiable_alias(x):
    """A new Tensor object over ``x``'s data whose gradient flows back to ``x``.

    A plain alias of a leaf that requires grad would be a second, disconnected leaf
    (reverse-over-forward would lose the gradient), so leaves get an identity view op.
    """
    if not (x._requires_grad and x._grad_fn is None and state.grad_enabled):
        return _alias(x, keep_grad=True)
    levels = state.fw_levels
    state.fw_levels = []      # NOTE: the caller sets the tangents; don't push any here
    try:
        return x.view(tuple(x._data.shape))
    finally:
        state.fw_levels = levels


def push_tangents(op, inputs, params, out) -> None:
    levels = set()
    for x in inputs:
        fw = getattr(x, "_fw", None)
        if fw:
            levels.update(fw)
    if not levels or not op.differentiable or not out._dtype.is_inexact:
        return
    if op.jvp is None:
        raise NotImplementedError(f"{op.name}: no JVP rule, forward-mode AD is not supported")
    from ..ops.factories import zeros_like
    for level in sorted(levels):
        tangents = []
        any_t = False
        for x in inputs:
            fw = getattr(x, "_fw", None)
            t = fw.get(level) if fw else None
            if t is None and isinstance(x, Tensor) and x._dtype.is_inexact:
                t = None
            else:
                any_t = any_t or t is not None
            tangents.append(t)
        if not any_t:
            continue
        prim = [_strip(x, level) for x in inputs]
        tangents = [zeros_like(p) if t is None and isinstance(p, Tensor)
                    and p._dtype.is_inexact else t for t, p in zip(tangents, prim)]
        out_p = _strip(out, level)
        if op.jvp == "linear":
            tout = op(tangents[0], *prim[1:], **params)
        else:
            tout = op.jvp(tangents, out_p, *prim, **params)
        if tout is None:
            continue
        if tout._dtype is not out._dtype:
            tout = tout.to(out._dtype)
        if tout._data.shape != out._data.shape:
            tout = tout.expand(out._data.shape)
        if out._fw is None:
            out._fw = {}
        out._fw[level] = tout
    node = out._grad_fn
    if out._fw and node is not None and node.out_saved is not None and \
            node.out_saved[1] is out._storage and node.out_saved[6] is None:
        node.out_saved = node.out_saved[:6] + (out._fw,)  # VJPs reading `out` see tangents


def enter_dual_level() -> int:
    """Open a forward-AD level and return it (``torch.autograd.forward_ad.enter_dual_level``;
    :class:`dual_level` is the context manager over this and :func:`exit_dual_level`)."""
    level = next(_level_ids)
    state.fw_levels.append(level)
    return level


def exit_dual_level(*, level=None) -> None:
    """Close forward-AD level ``level`` (the innermost one by default); tangents of that
    level are no longer seen (``torch.autograd.forward_ad.exit_dual_level``)."""
    level = _current_level(level)
    if level not in state.fw_levels:
        raise RuntimeError(f"exit_dual_level: level {level} is not open (open levels: "
                           f"{list(state.fw_levels)})")
    state.fw_levels.remove(level)


class dual_level:
    """Context manager opening a forward-AD level (``torch.autograd.forward_ad.dual_level``)."""

    def __enter__(self):
        self.level = enter_dual_level()
        return self.level

    def __exit__(self, *exc):
        exit_dual_level(level=self.level)
        return False


def _current_level(level=None):
    if level is not None:
        return level
    if not state.fw_levels:
        raise RuntimeError("forward AD: make_dual/unpack_dual need an active dual_level()")
    return state.fw_levels[-1]


def make_dual(tensor: Tensor, tangent: Tensor, *, level=None) -> Tensor:
    """A tensor whose tangent (directional derivative) at the current level is ``tangent``."""
    level = _current_level(level)
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise ValueError(f"make_dual: tangent shape {tuple(tangent.shape)} must match primal "
                         f"shape {tuple(tensor.shape)}")
    if not tensor.dtype.is_inexact:
        raise TypeError(f"make_dual: primal must be floating point, got {tensor.dtype}")
    t = _differentiable_alias(tensor)
    t._fw = dict(tensor._fw or {})
    t._fw[level] = tangent.to(tensor.dtype)
    return t


def unpack_dual(tensor: Tensor, *, level=None) -> UnpackedDualTensor:
    """``(primal, tangent)``; the tangent is None if the tensor carries none at this level."""
    level = _current_level(level)
    fw = getattr(tensor, "_fw", None)
    tangent = fw.get(level) if fw else None
    return UnpackedDualTensor(_strip(tensor, level), tangent)
