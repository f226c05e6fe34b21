"""Matmul-shaped work in compiled graphs: small stacked products and row sums.

``small_bmm``: stacks of small matrix products run as one C loop, not NumPy's matmul.

NumPy's stacked ``matmul`` calls BLAS once per matrix; for attention's ``(B, H, T, D)``
products (the W3 GPT: 64 matrices of 64x64 by 64x32 per call, 24 calls a step) each call
is too small for BLAS's threads, and permuted/transposed operands are fine for BLAS but
not free. :mod:`ember.codegen.bmm_kernels` does the whole stack in one call, split over
the batch on Ember's worker pool, reading any strides directly.

A ``matmul`` node is rewritten when both operands have the same 1 or 2 batch dims, one
float dtype (no casts), and ``N``/``K`` fit the kernel (:func:`bmm_kernels.fits`). Sums
run in another order than BLAS's: float results differ in the last bits. Opt-in
(``passes=[..., "small_bmm", ...]``), not default: the kernel alone is ~35% faster than
NumPy's per-matrix BLAS calls on two threads (0.17 vs 0.27 ms for a
(16, 4, 64, 64) @ (16, 4, 64, 32) product), but whole W3 steps measured the same with and
without it (82.9 / 82.5 ms best of 30, interleaved, on a loaded 2-core machine):
re-measure on a quiet one before making it default. Without a C compiler it changes
nothing.

``sum_rows``: ``x.sum(all dims but the last)`` (a bias's or a LayerNorm weight's gradient
over ``B*T`` rows) becomes ``ones(rows) @ x.reshape(rows, n)``, one BLAS GEMV: 14 us
instead of NumPy's 40 us for the W3 GPT's (16, 64, 128) gradients, 27 of them a step.
Also not bitwise (another summation order; BLAS's is no less accurate than NumPy's
row-by-row accumulation over leading axes), so the default pipeline has it and
``EXACT_PASSES`` does not. A non-contiguous
input falls back to NumPy's sum at run time (reshaping it would copy).
"""
from __future__ import annotations

import math

import numpy as np

from ...codegen import bmm_kernels
from ..ir import BufferOp, Graph, Var
from ._util import Rewrite


def _run_small_bmm(xp, x, y, out=None):
    return bmm_kernels.bmm(x, y, out=out)


SMALL_BMM = BufferOp("small_bmm", _run_small_bmm)


def _fits(n) -> bool:
    if n.op.name != "matmul" or hasattr(n.op, "run") or len(n.outs) != 1:
        return False
    x, y = n.inputs
    o = n.out
    if x.__class__ is not Var or y.__class__ is not Var or not (x.dtype is y.dtype is o.dtype):
        return False
    if n.ct not in (None, o.dtype) or o.device.type != "cpu":
        return False
    return bmm_kernels.fits(x.shape, y.shape, o.dtype.np)


def small_bmm(graph: Graph):
    """Rewrite fitting batched matmuls; returns ``(graph, {"small_bmm": nodes})``."""
    if not any(_fits(n) for n in graph.nodes):
        return graph, {"small_bmm": 0}
    if not bmm_kernels.available():
        return graph, {"small_bmm": 0}
    count = 0

    def rule(rw, n, ins):
        nonlocal count
        if not _fits(n):
            return None
        count += 1
        o = n.out
        return rw.b.add(SMALL_BMM, ins, {}, [(o.shape, o.dtype, o.device)], None)

    new = Rewrite(graph).run(rule)
    return new, {"small_bmm": count}


_ONES: dict = {}


def _ones(rows: int, dtype):
    key = (rows, np.dtype(dtype))
    v = _ONES.get(key)
    if v is None:
        v = _ONES[key] = np.ones(rows, dtype)
        v.flags.writeable = False
    return v


def _run_sum_rows(xp, x, out=None):
    n = x.shape[-1]
    if not x.flags.c_contiguous or xp is not np:
        return xp.sum(x, axis=tuple(range(x.ndim - 1)), out=out)
    rows = math.prod(x.shape[:-1])
    return np.matmul(_ones(rows, x.dtype), x.reshape(rows, n), out=out)


SUM_ROWS = BufferOp("sum_rows", _run_sum_rows)


def _is_row_sum(n) -> bool:
    if n.op.name != "sum" or hasattr(n.op, "run") or len(n.outs) != 1 or not n.inputs:
        return False
    x, o = n.inputs[0], n.out
    if x.__class__ is not Var or x.ndim < 2 or x.dtype is not o.dtype or \
            o.dtype.np not in (np.dtype(np.float32), np.dtype(np.float64)):
        return False
    p = n.params
    dims = p.get("dim")
    if dims is None or p.get("keepdim") or p.get("dtype") is not None:
        return False
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if sorted(d % x.ndim for d in dims) != list(range(x.ndim - 1)):
        return False
    return n.ct in (None, o.dtype) and tuple(o.shape) == (x.shape[-1],) and \
        o.device.type == "cpu" and x.numel() > 0


def sum_rows(graph: Graph):
    """Rewrite sums over all leading dims as GEMVs; returns ``(graph, {"sum_rows": n})``."""
    if not any(_is_row_sum(n) for n in graph.nodes):
        return graph, {"sum_rows": 0}
    count = 0

    def rule(rw, n, ins):
        nonlocal count
        if not _is_row_sum(n):
            return None
        count += 1
        o = n.out
        return rw.b.add(SUM_ROWS, ins[:1], {}, [(o.shape, o.dtype, o.device)], None)

    return Rewrite(graph).run(rule), {"sum_rows": count}
