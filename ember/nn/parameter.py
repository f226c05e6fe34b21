"""``Parameter``: a leaf tensor that a Module registers as trainable; ``Buffer``; and
``copy``/``deepcopy`` support for tensors (Ember tensors refuse pickling by design, so
``copy.deepcopy(model)`` needs an explicit ``Tensor.__deepcopy__``)."""
from __future__ import annotations

import copy as _copy

from ..autograd.grad_mode import no_grad
from ..tensor import Tensor, _alias, _wrap

__all__ = ["Parameter", "Buffer"]


class Parameter(Tensor):
    """A tensor that is a module parameter (``requires_grad=True`` by default).

    It shares memory with ``data``. Operations on a Parameter return plain Tensors.

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
        p._data, p._storage, p._dtype, p._device = data._data, data._storage, data._dtype, \
            data._device
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

    __str__ = __repr__

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        with no_grad():
            result = type(self)(self.detach().clone(), self.requires_grad)
        memo[id(self)] = result
        return result

    def __copy__(self):
        return type(self)(self.detach(), self.requires_grad)


class Buffer(Tensor):
    """Marks a tensor to be registered as a module buffer when assigned (``torch.nn.Buffer``).

    Example:
        >>> m = ember.nn.Module()
        >>> m.stats = ember.nn.Buffer(ember.zeros(2))
        >>> [k for k, _ in m.named_buffers()]
        ['stats']
    """

    def __new__(cls, data: Tensor, *, persistent: bool = True):
        if not isinstance(data, Tensor):
            raise TypeError(f"Buffer: expected a Tensor, got {type(data).__name__}")
        b = _wrap(data._data, data._dtype, data._device, data._storage, data._base)
        b.__class__ = Buffer
        b.__dict__["persistent"] = persistent
        return b

    def __init__(self, data=None, *, persistent: bool = True):
        pass


# NOTE: attributes Ember keeps in a tensor's __dict__ (class defaults shadowed per instance);
# deepcopy rebuilds them instead of copying them (hooks and tangents are not copied).
_INTERNAL = frozenset({"_grad", "_retains_grad", "_fw", "_hooks", "_inference",
                       "_view_version"})


def _tensor_deepcopy(self: Tensor, memo) -> Tensor:
    """``copy.deepcopy(t)``: new memory, same values, ``requires_grad`` and ``.grad`` copied."""
    if id(self) in memo:
        return memo[id(self)]
    if self._grad_fn is not None:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                           "the deepcopy protocol at the moment")
    with no_grad():
        new = self.detach().clone()
    new._requires_grad = self._requires_grad
    memo[id(self)] = new
    if self._grad is not None:
        new._grad = _tensor_deepcopy(self._grad, memo)
    for k, v in self.__dict__.items():
        if k not in _INTERNAL:
            new.__dict__[k] = _copy.deepcopy(v, memo)
    if type(self) is not Tensor:
        new.__class__ = type(self)
    return new


def _tensor_copy(self: Tensor) -> Tensor:
    """``copy.copy(t)``: a new tensor object sharing memory (like PyTorch's shallow copy)."""
    t = _alias(self, keep_grad=self._grad_fn is None)
    t.__dict__.update((k, v) for k, v in self.__dict__.items() if k not in _INTERNAL)
    return t


Tensor.__deepcopy__ = _tensor_deepcopy
Tensor.__copy__ = _tensor_copy


from ._uninitialized import UninitializedBuffer, UninitializedParameter, is_lazy  # noqa: E402,F401
