"""Eager ``unbind`` as one autograd node whose backward is one ``stack`` (PyTorch's
``UnbindBackward``).

Built from ``select``s, ``q, k, v = t.unbind(0)`` records three nodes; each one's VJP
writes its gradient into a fresh zero tensor of ``t``'s shape and the engine adds the three
full-size results (W3 GPT: ~1.5 ms a layer for a 1.5 MB ``(3, B, H, T, D)`` gradient).
Here the outputs are the same views (same storage, base and version counter) made
directly on the array, and they share one node with ``nout`` outputs whose VJP stacks the
output gradients (zeros where an output got none) in one copy — laid out like the input's
memory, so that a permuted input (``qkv.view(...).permute(...)``) gets a gradient whose
inverse permute is C-contiguous and the ``reshape`` behind it stays a view.

Only plain eager calls take this path: under a dispatch mode (``ember.compile``'s tracer,
``vmap``), forward-mode AD or the profiler-free abstract tracer, ``unbind`` stays a
sequence of ``select``s, which every rule already covers (vmap batching, JVP, and the
compiled graph's ``scatter_stack`` / ``sdpa_layout`` passes that rewrite those scatters).

NOTE: the stacked gradient is written ``+ 0.0`` in place (``-0.0`` becomes ``+0.0``), as the
selects' sum of scatters into zeros did: the compiled graph's ``scatter_stack`` /
``sdpa_layout`` nodes do the same, so eager and compiled gradients stay equal bit for bit
(PyTorch's stack keeps ``-0.0``; one in-place pass over the gradient is the price).
"""
from __future__ import annotations

from ..autograd.grad_mode import state
from ..autograd.graph import EngineOp, Node
from ..tensor import Tensor, _wrap

__all__ = ['fast_unbind', 'unbind_slots']


class _UnbindOp(EngineOp):
    """The engine-facing op of an eager unbind node (one instance serves every node)."""

    name = "unbind"

    def vjp(self, g, out, x, *, dim, order):
        grads = list(g) if isinstance(g, (list, tuple)) else [g]
        whole = _slots_of_one(grads, x, dim)
        return (whole if whole is not None else _stack_grads(grads, x, dim, order),)


_UNBIND = _UnbindOp()


def _stack_grads(grads, x, dim, order):
    """The input's gradient: the output gradients stacked along ``dim`` (zeros for None),
    in the memory layout ``order`` (dims by decreasing stride) when it is not C order."""
    from .factories import zeros
    from .join import stack
    shape = tuple(x.shape[:dim]) + tuple(x.shape[dim + 1:])
    gs = [zeros(shape, dtype=x.dtype, device=x.device) if gi is None else gi for gi in grads]
    if order is None:
        return stack(gs, dim).add_(0.0)
    # Stack in memory order (one copy reading each gradient strided), then view back.
    rest = tuple(k - (k > dim) for k in order if k != dim)
    s = stack([gi.permute(rest) for gi in gs], order.index(dim)).add_(0.0)
    inv = [0] * len(order)
    for i, k in enumerate(order):
        inv[k] = i
    return s.permute(tuple(inv))


def _slots_of_one(grads, x, dim):
    """The tensor whose slots along ``dim`` the gradients are, when one was written that way
    (``sdpa``'s VJP writes dq, dk, dv into the slots of one buffer laid out like the
    unbind's input, each ``+ 0.0``: see :func:`unbind_slots`); else None."""
    b = grads[0]._base if grads[0] is not None else None
    if b is None or not getattr(b, "_unbind_slots", False) or tuple(b.shape) != tuple(x.shape):
        return None
    st, off = b.stride(), b.storage_offset()
    rest = st[:dim] + st[dim + 1:]
    for i, gi in enumerate(grads):
        if gi is None or gi._base is not b or gi.stride() != rest or \
                gi.storage_offset() != off + i * st[dim]:
            return None
    return b


def unbind_slots(*ts):
    """``(dim, order)`` of the eager unbind node whose outputs ``0..n-1`` are ``ts``, in
    order and all of them, else None: a VJP reading these may write their gradients into
    the slots of one buffer of the unbind input's shape, laid out in ``order``, marked
    ``_unbind_slots`` (the unbind's VJP then returns that buffer, no stack)."""
    n = ts[0]._grad_fn
    if n is None or n.op is not _UNBIND or n.nout != len(ts):
        return None
    for i, t in enumerate(ts):
        if t._grad_fn is not n or t._out_nr != i:
            return None
    return n.params["dim"], n.params["order"]


def _memory_order(a):
    """Dims of array ``a`` by decreasing stride when that order is a dense C layout and not
    the identity; None otherwise (C-contiguous, or not a permuted dense layout)."""
    if a.flags.c_contiguous or a.ndim < 2:
        return None
    st = a.strides
    order = tuple(sorted(range(a.ndim), key=lambda k: -st[k]))
    if order == tuple(range(a.ndim)) or not a.transpose(order).flags.c_contiguous:
        return None
    return order


def fast_unbind(x: Tensor, d: int):
    """``x.unbind(d)`` as views with one shared autograd node, or None when this call must
    take the ``select`` path (a dispatch mode, forward AD, a batched or abstract tensor)."""
    st = state.__dict__
    if st["modes"] or st["fw_levels"] or x.__class__ is not Tensor or x._fw:
        return None
    a = x._data
    n = a.shape[d]
    base = x._base if x._base is not None else x
    lead = (slice(None),) * d
    dt, dev, storage = x._dtype, x._device, x._storage
    outs = tuple(_wrap(a[lead + (i,)], dt, dev, storage, base) for i in range(n))
    if x._requires_grad and st["grad_enabled"] and dt.is_inexact:
        if n:
            node = Node(_UNBIND, {"dim": d, "order": _memory_order(a)}, (x,), False, None,
                        nout=n)
            v = storage.version
            for k, o in enumerate(outs):
                o._grad_fn, o._out_nr, o._requires_grad, o._view_version = node, k, True, v
    elif st["inference"] and not st["grad_enabled"]:
        for o in outs:
            o._inference = True
    return outs
