"""Flatten parameters into one vector and back (``parameters_to_vector`` and inverse)."""
from __future__ import annotations

from ...tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_same_device(p: Tensor, device):
    if device is not None and p.device != device:
        raise TypeError(f"Found two parameters on different devices, this is currently not "
                        f"supported ({device} and {p.device})")
    return p.device


def parameters_to_vector(parameters) -> Tensor:
    """One 1-D tensor holding all parameters in order (differentiable: a ``cat``).

    Example:
        >>> m = ember.nn.Linear(3, 2)
        >>> ember.nn.utils.parameters_to_vector(m.parameters()).shape
        ember.Size([8])
    """
    from ...ops.join import cat
    device, parts = None, []
    for p in parameters:
        device = _check_same_device(p, device)
        parts.append(p.reshape(-1))
    return cat(parts)


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Make each parameter's ``.data`` the matching slice of ``vec`` (they share memory).

    Example:
        >>> m = ember.nn.Linear(3, 2)
        >>> ember.nn.utils.vector_to_parameters(ember.zeros(8), m.parameters())
    """
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected ember.Tensor, but got: {type(vec).__name__}")
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if vec.dim() != 1 or vec.numel() != total:
        raise ValueError(f"vector_to_parameters: expected a 1-D vector of {total} elements "
                         f"(the parameters' total), got shape {tuple(vec.shape)}")
    device, pointer = None, 0
    for p in params:
        device = _check_same_device(p, device)
        n = p.numel()
        p.data = vec[pointer:pointer + n].view_as(p).data
        pointer += n
