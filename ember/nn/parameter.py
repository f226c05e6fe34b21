"""``Parameter``: a leaf tensor that a Module registers as trainable."""
from __future__ import annotations

from ..tensor import Tensor, _wrap


class Parameter(Tensor):
    """A tensor that is a module parameter (``requires_grad=True`` by default).

    Example:
        >>> w = ember.nn.Parameter(ember.zeros(3))
        >>> w.requires_grad
        True
    """

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            from ..ops.factories import empty
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter: expected a Tensor, got {type(data).__name__}")
        p = object.__new__(cls)
        src = data.detach()
        p._data, p._storage, p._dtype, p._device = src._data, src._storage, src._dtype, \
            src._device
        p._base = None
        p._grad_fn = None
        p._out_nr = 0
        p._requires_grad = False
        if requires_grad:
            p.requires_grad_(True)
        return p

    def __init__(self, data=None, requires_grad: bool = True):
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + Tensor.__repr__(self)


class Buffer(Tensor):
    """Marks a tensor to be registered as a module buffer when assigned (``torch.nn.Buffer``)."""

    def __new__(cls, data: Tensor, *, persistent: bool = True):
        b = _wrap(data._data, data._dtype, data._device, data._storage, data._base)
        b.__class__ = Buffer
        b.__dict__["persistent"] = persistent
        return b

    def __init__(self, data=None, *, persistent: bool = True):
        pass
