"""``torch.autograd.Variable``: the pre-0.4 wrapper, kept for old code.

Since PyTorch 0.4 every tensor is a Variable: ``Variable(t, requires_grad=True)`` is a new
leaf sharing ``t``'s memory, and ``isinstance(t, Variable)`` is true for any tensor. Ember
keeps both behaviours so such code runs unchanged; new code writes ``t.detach()
.requires_grad_()`` or ``ember.tensor(..., requires_grad=True)``.

Example:
    >>> v = Variable(ember.ones(2), requires_grad=True)
    >>> v.is_leaf, v.requires_grad, isinstance(ember.zeros(1), Variable)
    (True, True, True)
"""
from __future__ import annotations

from ..tensor import Tensor

__all__ = ["Variable"]


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """A leaf tensor over ``data``'s memory (``volatile`` is accepted and ignored, as in
    PyTorch since 0.4, where it only warns)."""

    def __new__(cls, data, requires_grad: bool = False, volatile: bool = False):
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got "
                            f"{type(data).__name__}")
        return data.detach().requires_grad_(bool(requires_grad))
