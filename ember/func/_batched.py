"""``BatchedTensor``: the per-example (logical) view of a physical tensor inside ``vmap``.

A batched tensor of vmap level ``L`` holds the physical tensor ``_phys`` (which may itself be
batched at an outer level), the batch dim ``_bdim`` in it and ``_level``. It presents the
logical shape and dtype: its ``_data`` is the first example's slice of the physical array
(for shape, dtype and stride queries only; reading its values into Python raises).

Its own ``_requires_grad``/``_grad_fn``/``_fw`` are *logical* autograd state, for transforms
that run inside the vmap (``vmap(grad(f))``): they record nodes on batched tensors whose VJPs
run batched. Physical autograd (``grad(vmap(f))``) happens on ``_phys`` below the vmap mode.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..tensor import Tensor, _wrap

__all__ = ["BatchedTensor", "make_batched", "unwrap", "is_batched_at"]

_new = object.__new__


class BatchedTensor(Tensor):
    """A tensor inside ``vmap``: one example's view of a physical tensor with a batch dim."""

    # NOTE: no new slots (attributes live in the inherited __dict__): a random factory's
    # plain result is turned into a BatchedTensor in place (``randomness="different"``).
    __slots__ = ()

    @property
    def requires_grad(self) -> bool:
        """Logical or physical (an outer ``grad``'s): composites that pick a differentiable
        path by ``requires_grad`` must see both."""
        return self._requires_grad or self._phys.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self.requires_grad_(flag)

    def __repr__(self) -> str:
        return (f"BatchedTensor(lvl={self._level}, bdim={self._bdim}, "
                f"value={self._phys!r})")

    __str__ = __repr__

    def __format__(self, spec) -> str:
        return repr(self) if not spec else format(str(self), spec)


def _logical_data(phys, bdim):
    a = phys._data
    if a.shape[bdim] > 0:
        return a[(slice(None),) * bdim + (0, Ellipsis)]      # a 0-d array, never a scalar
    shape = a.shape[:bdim] + a.shape[bdim + 1:]
    return np.lib.stride_tricks.as_strided(np.zeros(1, a.dtype), shape, (0,) * len(shape))


#: level -> weak references to its batched tensors, while that vmap runs (see :func:`retire`)
_LIVE: dict = {}


class _Dead(np.ndarray):
    """The per-example view of a batched tensor whose vmap has returned: computing on it
    would silently use the first example's values, so every NumPy operation raises."""

    def __array_ufunc__(self, *args, **kwargs):
        _used_after_vmap()

    def __array_function__(self, *args, **kwargs):
        _used_after_vmap()


def _used_after_vmap():
    raise RuntimeError("vmap: a batched tensor was used after the vmap that made it had "
                       "returned (it was kept outside the vmapped function): return it from "
                       "the function instead, and vmap gives it back with its batch dim")


def track(t: BatchedTensor) -> None:
    refs = _LIVE.get(t._level)
    if refs is not None:
        refs.append(weakref.ref(t))


def retire(level: int) -> None:
    """Level ``level`` has returned: poison its batched tensors still alive."""
    for ref in _LIVE.pop(level, ()):
        t = ref()
        if t is not None and t.__class__ is BatchedTensor and t._level == level:
            t._data = t._data.view(_Dead)


def make_batched(phys: Tensor, bdim: int, level: int) -> BatchedTensor:
    """Wrap physical ``phys`` (batch dim ``bdim``) as a tensor of vmap level ``level``."""
    t = _new(BatchedTensor)
    t._data = _logical_data(phys, bdim)
    t._dtype = phys._dtype
    t._device = phys._device
    t._storage = phys._storage
    t._base = None
    t._requires_grad = False
    t._grad_fn = None
    t._out_nr = 0
    t._phys, t._bdim, t._level = phys, bdim, level
    refs = _LIVE.get(level)
    if refs is not None:
        refs.append(weakref.ref(t))
    return t


def alias(x: BatchedTensor, keep_grad: bool) -> BatchedTensor:
    """``tensor._alias`` of a batched tensor: a new wrapper of the same physical value."""
    t = make_batched(x._phys, x._bdim, x._level)
    if keep_grad:
        t._requires_grad, t._grad_fn, t._out_nr = x._requires_grad, x._grad_fn, x._out_nr
    return t


def copy(x: BatchedTensor) -> BatchedTensor:
    """A batched tensor over a copy of ``x``'s physical values (no autograd history)."""
    p = x._phys
    phys = copy(p) if p.__class__ is BatchedTensor else _wrap(p._data.copy(), p._dtype,
                                                                  p._device)
    return make_batched(phys, x._bdim, x._level)


def batched_map(x: BatchedTensor, fn, bdim=None) -> BatchedTensor:
    """``fn`` applied to the physical value (which keeps the batch dim where it is, or moves
    it to ``bdim``), wrapped at ``x``'s level: for non-primitive views (``view(dtype)``)."""
    return make_batched(fn(x._phys), x._bdim if bdim is None else bdim, x._level)


BatchedTensor._batched_alias = alias
BatchedTensor._batched_map = batched_map
BatchedTensor._batched_copy = copy


def is_batched_at(x, level: int) -> bool:
    return x.__class__ is BatchedTensor and x._level == level


def unwrap(x, level: int):
    """``(physical, bdim)`` of ``x`` at ``level``; ``(x, None)`` if not batched there."""
    if x.__class__ is BatchedTensor and x._level == level:
        return x._phys, x._bdim
    return x, None
