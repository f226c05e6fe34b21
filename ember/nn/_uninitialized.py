"""``UninitializedParameter`` / ``UninitializedBuffer``: placeholders whose shape is not
known yet (``torch.nn.parameter``'s names), filled in by :meth:`materialize` — what the
``Lazy*`` modules hold until their first call.

The placeholder keeps its identity when materialised (its class becomes ``Parameter`` or
``Tensor``), so references taken before (a module's ``_parameters``) stay valid. As in
PyTorch, create optimizers *after* a dry run: an optimizer built earlier holds the same
objects but PyTorch refuses uninitialised parameters there, and so should your code.
"""
from __future__ import annotations

from ..tensor import Tensor
from .parameter import Parameter

__all__ = ["UninitializedParameter", "UninitializedBuffer", "is_lazy"]

_MSG = ("Can't access the {} of an uninitialized parameter or buffer. This error usually "
        "happens in `load_state_dict` when trying to load an uninitialized parameter into an "
        "initialized one. Call `forward` to initialize the parameters before accessing "
        "their attributes.")


def _placeholder(device=None, dtype=None) -> Tensor:
    from ..ops.factories import empty
    return empty(0, device=device, dtype=dtype)


class _UninitializedMixin:
    """Shared behaviour: refuse shape-dependent questions, ``materialize`` in place."""

    cls_to_become: type = Tensor

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Allocate (uninitialised) memory of ``shape`` and become ``cls_to_become``.

        Args:
            shape: the tensor's shape (int or sequence of ints).
            device: defaults to the placeholder's device.
            dtype: defaults to the placeholder's dtype.
        """
        from ..ops.factories import empty
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        t = empty(*shape, device=device or self._device, dtype=dtype or self._dtype)
        self._data, self._storage, self._dtype, self._device = (t._data, t._storage, t._dtype,
                                                                t._device)
        self.__class__ = self.cls_to_become

    @property
    def shape(self):
        raise RuntimeError(_MSG.format("shape"))

    def size(self, dim=None):
        raise RuntimeError(_MSG.format("size"))

    def numel(self):
        raise RuntimeError(_MSG.format("numel"))

    @property
    def ndim(self):
        raise RuntimeError(_MSG.format("ndim"))

    def dim(self):
        raise RuntimeError(_MSG.format("dim"))

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    __str__ = __repr__

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(requires_grad=self.requires_grad, device=self._device,
                                        dtype=self._dtype)
        return memo[id(self)]


class UninitializedParameter(_UninitializedMixin, Parameter):
    """A parameter whose shape is set on the first call of its ``Lazy*`` module.

    Example:
        >>> p = ember.nn.UninitializedParameter()
        >>> p.materialize((2, 3))
        >>> type(p).__name__, tuple(p.shape)
        ('Parameter', (2, 3))
    """

    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        return Parameter.__new__(cls, _placeholder(device, dtype), requires_grad)

    def __init__(self, requires_grad: bool = True, device=None, dtype=None):
        pass


class UninitializedBuffer(_UninitializedMixin, Tensor):
    """A buffer whose shape is set on the first call of its ``Lazy*`` module (becomes a
    plain ``Tensor`` when materialised)."""

    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None):
        t = _placeholder(device, dtype)
        b = object.__new__(cls)
        b._data, b._storage, b._dtype, b._device = t._data, t._storage, t._dtype, t._device
        b._base, b._grad_fn, b._out_nr = None, None, 0
        b._requires_grad = False
        if requires_grad:
            b.requires_grad_(True)
        return b

    def __init__(self, requires_grad: bool = False, device=None, dtype=None):
        pass


def is_lazy(param) -> bool:
    """True for an uninitialised parameter or buffer (``torch.nn.parameter.is_lazy``)."""
    return isinstance(param, _UninitializedMixin)
