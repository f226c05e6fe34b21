"""The kernel IR evaluated with NumPy: the fallback without a C compiler, and the reference.

Each :class:`~ember.codegen.ir.Apply` runs its registry kernel (the very function eager
mode runs) on arguments cast to the node's compute dtype, so a fused kernel computed
here equals the unfused eager ops it came from.
"""
from __future__ import annotations

import numpy as np

from ..ops.registry import REGISTRY
from .ir import Apply, Const, Index, Kernel, Load, Philox, ReduceKernel, Row


def evaluate(e, arrays, rows=(), memo=None, shape=None):
    """``e`` over NumPy ``arrays`` (broadcast against each other) and per-row ``rows``;
    ``shape``: the loop space, which :class:`~ember.codegen.ir.Index` leaves need."""
    memo = {} if memo is None else memo
    if e in memo:
        return memo[e]
    if isinstance(e, Load):
        r = arrays[e.index]
    elif isinstance(e, Row):
        r = rows[e.index]
    elif isinstance(e, Index):
        r = index_values(e, shape)
    elif isinstance(e, Philox):
        r = philox_values(e, [evaluate(w, arrays, rows, memo, shape) for w in
                              (e.seed, e.offset)], shape)
    elif isinstance(e, Const):
        r = e.value if e.dtype is None else np.asarray(e.value, e.dtype.np)
    elif isinstance(e, Apply):
        args = []
        for k, a in enumerate(e.args):
            v = evaluate(a, arrays, rows, memo, shape)
            if e.compute is not None and not (e.op == "where" and k == 0):
                v = np.asarray(v).astype(e.compute.np, copy=False)
            args.append(v)
        with np.errstate(all="ignore"):
            r = REGISTRY[e.op].kernel_for("cpu")(np, *args, **e.kwargs)
        r = np.asarray(r).astype(e.dtype.np, copy=False)
    else:
        raise TypeError(f"codegen: unknown expression node {e!r}")
    memo[e] = r
    return r


def index_values(e: Index, shape) -> np.ndarray:
    """Index leaf ``e`` over loop space ``shape``: ``(flat // inner) % size`` of each
    element's flat (C-order) position, so any reshape of the space gives the same values."""
    if shape is None:
        raise TypeError(f"codegen: evaluating {e!r} needs the kernel's loop shape")
    n = int(np.prod(shape, dtype=np.int64))
    return ((np.arange(n, dtype=np.int64) // e.inner) % e.size).astype(
        e.dtype.np).reshape(shape)


def philox_values(e: Philox, key, shape) -> np.ndarray:
    """Philox leaf ``e`` over loop space ``shape`` from its ``(seed, offset)`` operands'
    values (int64 bits of the uint64 words): ``cuda_philox.reference``'s draw."""
    from .cuda_philox import reference
    seed, off = (int(np.asarray(v).reshape(-1)[0].astype(np.int64).view(np.uint64))
                 for v in key)
    return reference(e.kind, seed, off, e.numel, e.scalars, e.dtype.np).reshape(shape)


def _store(res, shape, dtype, out):
    res = np.broadcast_to(res, shape) if res.shape != tuple(shape) else res
    if out is None:
        return np.array(res, dtype=dtype.np)
    out[...] = res.reshape(out.shape)
    return out


def run_elementwise(k: Kernel, arrays, out=None, extra_outs=None):
    """Elementwise kernel ``k`` on ``arrays`` with NumPy (broadcast to the output shape).

    Returns the output, or a tuple of all outputs when the kernel has ``extra`` ones.
    """
    arrays = [np.broadcast_to(a, k.out.shape) for a in arrays]
    memo: dict = {}
    outs = [out] + list(extra_outs or [None] * len(k.extra))
    res = [_store(np.asarray(evaluate(e, arrays, memo=memo, shape=k.out.shape)),
                  k.out.shape, d, o)
           for (d, e), o in zip(k.outputs, outs)]
    return tuple(res) if k.extra else res[0]


_REDUCE = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}


def run_reduction(k: ReduceKernel, arrays, out=None, extra_outs=None):
    """Reduction kernel ``k`` with NumPy (rows keep their reduced axes as size 1)."""
    arrays = [np.broadcast_to(a, k.shape) for a in arrays]
    memo: dict = {}
    axes = tuple(range(len(k.shape) - k.naxes, len(k.shape)))
    rows: list = []
    for st in k.stages:
        v = np.broadcast_to(evaluate(st.body, arrays, rows, memo, k.shape), k.shape)
        acc = np.float64 if st.dtype.is_floating_point else np.int64
        with np.errstate(all="ignore"):
            if v.size == 0 and st.kind in ("amax", "amin"):
                r = np.full(k.shape[:len(k.shape) - k.naxes] + (1,) * k.naxes,
                            -np.inf if st.kind == "amax" else np.inf)
            else:
                r = _REDUCE[st.kind](v, axis=axes, keepdims=True,
                                     **({"dtype": acc} if st.kind in ("sum", "mean") else {}))
        rows.append(np.asarray(r).astype(st.dtype.np))
    outer = k.shape[:len(k.shape) - k.naxes]
    outs = [out] + list(extra_outs or [None] * len(k.extra))
    res = []
    for (d, e, full), o in zip(k.outputs, outs):
        v = np.asarray(rows[-1] if e is None else evaluate(e, arrays, rows, memo, k.shape))
        if full:
            res.append(_store(v, k.shape, d, o))
        else:
            v = np.broadcast_to(v, k.shape)[(Ellipsis,) + (slice(0, 1),) * k.naxes]
            v = v.reshape(outer)
            res.append(_store(v, outer, d, o))
    return tuple(res) if k.extra else res[0]
