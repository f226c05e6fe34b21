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
over ``B*T`` rows) becomes one column sum of ``x`` viewed as ``(rows, n)``: the C loop of
:func:`ember.codegen.reduce_kernels.colsum` (fixed blocks of rows, the same bits on any
number of threads), or for huge arrays and without a C compiler the GEMV
``ones(rows) @ x`` (NumPy's own sum over leading axes was 40 us against the GEMV's 14 us
for the W3 GPT's (16, 64, 128) gradients). ``sum(mul(a, b))`` whose product nobody else
reads (a LayerNorm weight's gradient: 9 a W3 step) becomes one ``sum_rows_mul``
(:func:`~ember.codegen.reduce_kernels.colsum_mul`): the product is never stored, nor
written by a NumPy ``multiply`` of its own. Neither is bitwise (another summation order,
no less accurate than NumPy's row-by-row accumulation; the product may fuse into an FMA),
so the default pipeline has it and ``EXACT_PASSES`` does not. A non-contiguous input
falls back to NumPy at run time (reshaping it would copy).
"""
from __future__ import annotations

import math

import numpy as np

from ...codegen import bmm_kernels, reduce_kernels
from ...ops._util import f32_to_lowp, is_lowp, lowp_to_f32
from ..ir import BufferOp, Graph, Var
from ._util import Rewrite, swap_nodes
from .dce import dce


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
    return swap_nodes(graph, "small_bmm", _fits, SMALL_BMM,
                      available=bmm_kernels.available)


_ONES: dict = {}


def _ones(rows: int, dtype):
    key = (rows, np.dtype(dtype))
    v = _ONES.get(key)
    if v is None:
        v = _ONES[key] = np.ones(rows, dtype)
        v.flags.writeable = False
    return v


def _use_c(rows: int, n: int, x) -> bool:
    """Whether a column sum of this shape runs as :func:`reduce_kernels.colsum`, not a GEMV.

    NOTE: measured on the 2-core machine, float32, medians (us) of interleaved runs, C / GEMV:

    * alone, 2000 calls each, hot caches: (64, 10) 1.7 / 1.5, (128, 512) 5.7 / 5.6,
      (1024, 128) 9.9 / 11.3, (1024, 384) 28.0 / 26.2, (1024, 512) 42.0 / 31.6,
      (4096, 512) 175 / 157; with the graph runners' Python (plan cached per shape) a
      (8, 16) sum costs 2.1 / 2.5 in all.
    * inside compiled steps (``ember.compile``, 100-150 interleaved W3 steps, per step):
      17 x (16, 64, 128) 0.449 / 0.458 ms, 4 x (16, 64, 384) 0.252 / 0.249 ms (one run),
      4 x (16, 64, 512) 0.319 / 0.375 ms (another); W1's three 0.038 / 0.044. While other jobs
      loaded the machine, the (16, 64, 512) GEMVs took 10-28 ms a step (their OpenBLAS
      threads wait for a core) against the C loop's 0.5 ms.
    * the product: (1024, 128) ``multiply`` + GEMV 33.2 / ``colsum_mul`` 21.1 alone;
      in W3, 9 ``mul`` nodes (0.32-0.39 ms) plus their sums against 0.45-0.50 ms.

    So one C thread from the smallest sums up to the W3 sizes; from ``PARALLEL_MIN``
    elements (1M: (2048, 512) measured 70 us on one thread, more on the pool while
    OpenBLAS's threads spin, against the GEMV's 50) OpenBLAS's threads do better.
    """
    return rows * n < _GEMV_FROM and x.dtype in reduce_kernels.DTYPES and \
        reduce_kernels.kernels() is not None


#: elements from which a plain column sum is a GEMV (see :func:`_use_c`).
_GEMV_FROM = reduce_kernels.PARALLEL_MIN
#: (rows, n, dtype, mul) -> the C column sum, or None (a GEMV; NumPy for the product).
_RUNS: dict = {}


def _colsum_fn(rows, n, x, mul):
    key = (rows, n, x.dtype, mul)
    try:
        return _RUNS[key]
    except KeyError:
        fn = None
        if mul or _use_c(rows, n, x):
            fn = reduce_kernels.colsum_fn(rows, n, x.dtype, mul)
        if len(_RUNS) >= 1024:
            _RUNS.clear()
        _RUNS[key] = fn
        return fn


def _run_sum_rows(xp, x, out=None):
    n = x.shape[-1]
    if is_lowp(x):          # NOTE: float32 sums (one GEMV), rounded once
        return f32_to_lowp(_run_sum_rows(xp, lowp_to_f32(x)), x.dtype, out=out)
    if not x.flags.c_contiguous or xp is not np:
        return xp.sum(x, axis=tuple(range(x.ndim - 1)), out=out)
    rows = math.prod(x.shape[:-1])
    fn = _colsum_fn(rows, n, x, False)
    if fn is not None:
        return fn(x, x, out)
    return np.matmul(_ones(rows, x.dtype), x.reshape(rows, n), out=out)


def _run_sum_rows_mul(xp, a, b, out=None):
    if xp is np and a.flags.c_contiguous and b.flags.c_contiguous:
        fn = _colsum_fn(math.prod(a.shape[:-1]), a.shape[-1], a, True)
        if fn is not None:
            return fn(a, b, out)
    return _run_sum_rows(xp, xp.multiply(a, b), out=out)


SUM_ROWS = BufferOp("sum_rows", _run_sum_rows)
SUM_ROWS_MUL = BufferOp("sum_rows_mul", _run_sum_rows_mul)


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


def _is_plain_mul(n, readers: dict, outputs: set) -> bool:
    """``n`` is ``mul(a, b)`` of two equally shaped values of its own dtype, read once."""
    if n is None or n.op.name != "mul" or hasattr(n.op, "run") or len(n.outs) != 1:
        return False
    o = n.out
    return (len(n.inputs) == 2 and all(v.__class__ is Var and v.shape == o.shape and
                                       v.dtype is o.dtype for v in n.inputs)
            and n.ct in (None, o.dtype) and readers.get(o.id, 0) == 1 and o.id not in outputs)


def sum_rows(graph: Graph):
    """Rewrite sums over all leading dims as column sums; ``sum(mul(a, b))`` whose product
    nobody else reads becomes one ``sum_rows_mul`` (the product is never stored). Returns
    ``(graph, {"sum_rows": n, "sum_rows_mul": m})``."""
    if not any(_is_row_sum(n) for n in graph.nodes):
        return graph, {"sum_rows": 0, "sum_rows_mul": 0}
    prod, readers = {}, {}
    for n in graph.nodes:
        for o in n.outs:
            prod[o.id] = n
        for v in n.inputs:
            if v.__class__ is Var:
                readers[v.id] = readers.get(v.id, 0) + 1
    outputs = {v.id for v in graph.outputs}
    count = {"sum_rows": 0, "sum_rows_mul": 0}

    def rule(rw, n, ins):
        if not _is_row_sum(n):
            return None
        o = n.out
        if _is_plain_mul(prod.get(n.inputs[0].id), readers, outputs):
            count["sum_rows_mul"] += 1
            mul = rw.producer(ins[0])
            return rw.b.add(SUM_ROWS_MUL, mul.inputs, {}, [(o.shape, o.dtype, o.device)], None)
        count["sum_rows"] += 1
        return rw.b.add(SUM_ROWS, ins[:1], {}, [(o.shape, o.dtype, o.device)], None)

    new = Rewrite(graph).run(rule)
    if count["sum_rows_mul"]:
        new, _ = dce(new)           # the absorbed products, read by nobody now
    return new, count
