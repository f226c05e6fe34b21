"""The kernel IR evaluated with NumPy: the fallback without a C compiler, and the reference.

Each :class:`~ember.codegen.ir.Apply` runs its registry kernel (the very function eager
mode runs) on arguments cast to the node's compute dtype, so a fused kernel computed
here equals the unfused eager ops it came from.
"""
from __future__ import annotations

import numpy as np

from ..ops.registry import REGISTRY
from .ir import Apply, Const, Kernel, Load, ReduceKernel, Row


def evaluate(e, arrays, rows=(), memo=None):
    """``e`` over NumPy ``arrays`` (broadcast against each other) and per-row ``rows``."""
    memo = {} if memo is None else memo
    if e in memo:
        return memo[e]
    if isinstance(e, Load):
        r = arrays[e.index]
    elif isinstance(e, Row):
        r = rows[e.index]
    elif isinstance(e, Const):
        r = e.value if e.dtype is None else np.asarray(e.value, e.dtype.np)
    elif isinstance(e, Apply):
        args = []
        for k, a in enumerate(e.args):
            v = evaluate(a, arrays, rows, memo)
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


def run_elementwise(k: Kernel, arrays, out=None):
    """Elementwise kernel ``k`` on ``arrays`` with NumPy (broadcast to the output shape)."""
    arrays = [np.broadcast_to(a, k.out.shape) for a in arrays]
    r = np.broadcast_to(evaluate(k.body, arrays), k.out.shape)
    if out is None:
        return np.array(r, dtype=k.out.dtype.np)
    out[...] = r
    return out


_REDUCE = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}


def run_reduction(k: ReduceKernel, arrays, out=None):
    """Reduction kernel ``k`` with NumPy (rows keep their reduced axes as size 1)."""
    arrays = [np.broadcast_to(a, k.shape) for a in arrays]
    axes = tuple(range(len(k.shape) - k.naxes, len(k.shape)))
    rows: list = []
    for st in k.stages:
        v = np.broadcast_to(evaluate(st.body, arrays, rows), k.shape)
        acc = np.float64 if st.dtype.is_floating_point else np.int64
        with np.errstate(all="ignore"):
            if v.size == 0 and st.kind in ("amax", "amin"):
                r = np.full(k.shape[:len(k.shape) - k.naxes] + (1,) * k.naxes,
                            -np.inf if st.kind == "amax" else np.inf)
            else:
                r = _REDUCE[st.kind](v, axis=axes, keepdims=True,
                                     **({"dtype": acc} if st.kind in ("sum", "mean") else {}))
        rows.append(np.asarray(r).astype(st.dtype.np))
    if k.epilogue is None:
        res = rows[-1]
    else:
        res = evaluate(k.epilogue, arrays, rows)
    res = np.broadcast_to(res, k.shape if k.full else rows[-1].shape)
    res = res.reshape(k.out.shape)
    if out is None:
        return np.array(res, dtype=k.out.dtype.np)
    out[...] = res
    return out
