"""Tensor gradient hooks and ``.grad`` housekeeping: ``Tensor.register_hook``,
``retain_grad``, the removable handles they return, and ``zero_grads`` (behind
``Module.zero_grad`` and ``Optimizer.zero_grad``). The engine (``engine.py``) runs the hooks;
``register_post_accumulate_grad_hook`` is in ``accumulate.py`` beside the flag the engine reads.
"""
from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict

from ..errors import GraphError
from ..tensor import Tensor


def register_hook(t: Tensor, fn):
    """Register ``fn(grad) -> grad | None`` to run when ``t``'s gradient is computed."""
    if not t._requires_grad:
        raise GraphError("cannot register a hook on a tensor that doesn't require gradient")
    if t._grad_fn is None:
        if t._hooks is None:
            t._hooks = []
        t._hooks.append(fn)
        lst = t._hooks
        from . import accumulate     # NOTE: the engine now counts leaves' edges
        accumulate._post_hooks_live = True
    else:
        node = t._grad_fn
        if node.pre_hooks is None:
            node.pre_hooks = {}
        lst = node.pre_hooks.setdefault(t._out_nr, [])
        lst.append(fn)
    return _RemovableHandle(lst, fn)


def retain_grad(t: Tensor) -> None:
    if not t._requires_grad:
        raise GraphError("can't retain_grad on Tensor that has requires_grad=False")
    if t._grad_fn is None:
        return
    node = t._grad_fn
    if node.retain is None:
        node.retain = {}
    node.retain[t._out_nr] = weakref.ref(t)
    t._retains_grad = True


_ids = itertools.count(1)


class RemovableHandle:
    """What every ``register_*hook`` returns (``torch.utils.hooks.RemovableHandle``):
    ``remove()``, or leaving a ``with`` block, unregisters the hook kept in ``store``
    under ``id``."""

    def __init__(self, store: OrderedDict, hook, prepend: bool = False, extra=()):
        self.id = next(_ids)
        self._store = store
        self._extra = extra
        store[self.id] = hook
        if prepend:
            store.move_to_end(self.id, last=False)

    def remove(self) -> None:
        self._store.pop(self.id, None)
        for s in self._extra:
            s.discard(self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class _RemovableHandle(RemovableHandle):
    """The handle of a hook kept in a plain list (tensor, node and accumulate hooks)."""

    def __init__(self, lst, fn):
        self.id = next(_ids)
        self._lst, self._fn = lst, fn

    def remove(self) -> None:
        if self._fn in self._lst:
            self._lst.remove(self._fn)


def zero_grads(tensors, set_to_none: bool = True) -> None:
    """Reset the ``.grad`` of ``tensors``: to None, or to zeros in place (cut from any graph).

    The one implementation behind ``Module.zero_grad`` and ``Optimizer.zero_grad``.
    """
    for p in tensors:
        g = p.grad
        if g is None:
            continue
        if set_to_none:
            p.grad = None
            continue
        if g.grad_fn is not None:
            g.detach_()
        else:
            g.requires_grad_(False)
        g.zero_()
