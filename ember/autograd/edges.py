"""Gradient edges and hooks over several tensors (``torch.autograd.graph``'s
``GradientEdge``, ``get_gradient_edge``, ``register_multi_grad_hook``).

A :class:`GradientEdge` names one place in the graph where a gradient flows — output
``output_nr`` of a node, or a leaf's ``AccumulateGrad`` — without holding the tensor there.
``autograd.grad`` takes edges as ``inputs`` (the gradient flowing into that edge) and as
``outputs`` (with ``grad_outputs``): how pipeline schedules split a stage's backward into
the input gradient first and the weight gradients later.

Example:
    >>> x = ember.randn(3, requires_grad=True)
    >>> h = x * 2
    >>> edge = ember.autograd.graph.get_gradient_edge(h)
    >>> (dh,) = ember.autograd.grad(h.sum(), edge)      # the gradient into h, ones
"""
from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

from ..errors import GraphError
from ..tensor import Tensor
from .graph import AccumulateGrad, Node, accumulate_grad

__all__ = ["GradientEdge", "get_gradient_edge", "register_multi_grad_hook"]


class GradientEdge(NamedTuple):
    """Output ``output_nr`` of autograd node ``node`` (an ``AccumulateGrad`` for a leaf)."""

    node: object
    output_nr: int


def get_gradient_edge(tensor: Tensor) -> GradientEdge:
    """The edge ``tensor``'s gradient flows through: ``(grad_fn, output_nr)``, or the leaf's
    ``AccumulateGrad`` (``torch.autograd.graph.get_gradient_edge``).

    Raises:
        RuntimeError: ``tensor`` does not require grad.
    """
    if not tensor.requires_grad:
        raise GraphError("It is not possible to get the gradient edge for a Tensor that does "
                         "not require gradients")
    fn = tensor.grad_fn
    if fn is None:
        return GradientEdge(accumulate_grad(tensor), 0)
    return GradientEdge(fn, tensor._out_nr)


def resolve(x):
    """An ``autograd.grad`` input or output: a tensor as it is, a leaf's edge as the leaf,
    a node's edge as ``(node, output_nr)``."""
    if isinstance(x, GradientEdge):
        node, k = x
        if isinstance(node, AccumulateGrad):
            return node.variable
        if not isinstance(node, Node):
            raise TypeError(f"GradientEdge: expected an autograd node, got "
                            f"{type(node).__name__}")
        return GradientEdge(node, int(k))
    return x


def register_multi_grad_hook(tensors, fn, *, mode: str = "all"):
    """Run ``fn`` once per backward pass over the gradients of several ``tensors``
    (``torch.autograd.graph.register_multi_grad_hook``).

    ``mode="all"``: ``fn(grads)`` after every gradient of ``tensors`` that the pass computes
    is ready; ``grads[i]`` is None for a tensor the pass does not reach. ``mode="any"``:
    ``fn(grad)`` with the first of their gradients the pass computes. Returns a handle whose
    ``remove()`` unregisters it.

    Example:
        >>> handle = register_multi_grad_hook((a, b), lambda gs: print([g is None for g in gs]))
    """
    if mode not in ("all", "any"):
        raise ValueError(f"register_multi_grad_hook: expected mode 'all' or 'any', got "
                         f"{mode!r}")
    tensors = tuple(tensors)
    lock = threading.Lock()
    seen: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # pass -> its state

    def current():
        from .engine import current_pass
        p = current_pass()
        if p is None:
            raise GraphError("register_multi_grad_hook: a hook ran outside a backward pass")
        return p

    if mode == "any":
        def any_hook(grad):
            p = current()
            with lock:
                if p in seen:
                    return None
                seen[p] = True
            fn(grad)
            return None
        hooks = [any_hook] * len(tensors)
    else:
        def all_hook(i):
            def hook(grad):
                p = current()
                with lock:
                    st = seen.get(p)
                    if st is None:
                        expect = sum(p.will_execute(t) for t in tensors)
                        st = seen[p] = [0, expect, [None] * len(tensors)]
                    st[0] += 1
                    st[2][i] = grad
                    done = st[0] >= st[1]
                if done:
                    del seen[p]
                    fn(tuple(st[2]))
                return None
            return hook
        hooks = [all_hook(i) for i in range(len(tensors))]
    handles = [t.register_hook(h) for t, h in zip(tensors, hooks)]
    return _MultiHandle(handles)


class _MultiHandle:
    """Removes every per-tensor hook of one :func:`register_multi_grad_hook`."""

    def __init__(self, handles):
        self._handles = handles

    def remove(self) -> None:
        for h in self._handles:
            h.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False
