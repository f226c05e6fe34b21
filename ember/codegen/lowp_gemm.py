"""A native bfloat16 GEMM on AVX512-BF16 (``vdpbf16ps``), float32 accumulation.

Ember's low-precision matmul otherwise converts both operands to float32, runs float32
BLAS and rounds the result (:mod:`.convert_kernels`): three extra passes over memory. On
a CPU with AVX512-BF16 this kernel multiplies the bfloat16 operands directly (C text and
layout in :mod:`.lowp_gemm_c`): operands packed into k-pairs, a 6 x 64 float32 register
tile over all of K, the result rounded once to bfloat16 (nearest even) or kept in float32.
Threads: Ember's pool (:mod:`.pool`), packing and compute each split over it.

Semantics against the reference (float32 BLAS on the exactly converted operands, rounded
once): a product of two bfloat16 values is exact in float32, so the only differences are

* summation order (pairs of products are added to the float32 accumulator in the
  instruction's order, over k ascending), bounded by the usual ``~K * eps32 * sum|a||b|``;
* denormals: ``vdpbf16ps`` treats denormal inputs as zero and flushes denormal results to
  zero (DAZ/FTZ regardless of MXCSR), as oneDNN's bfloat16 GEMM (PyTorch's) does.

inf and NaN propagate as in float32 arithmetic (``inf * 0`` is NaN). A CPU without the
instruction (checked at run time, and at build time through ``-march=native``), a compiler
without it, or ``EMBER_LOWP_GEMM=0`` / :data:`enabled` = False keep the conversion path;
:func:`matmul` returns None then and the caller falls back.

float16 is not served: this CPU's AVX512-FP16 accumulates in float16, and a float32 GEMM
converting while packing was not built (see bench/RESULTS.md, issue 16).
"""
from __future__ import annotations

import ctypes
import os

import ml_dtypes
import numpy as np

from .lowp_gemm_c import MR, NR, SOURCE
from .pool import load_kernels
from .runtime import num_threads

BF16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)

#: module switch: False forces the conversion path (tests, comparisons). The environment
#: variable ``EMBER_LOWP_GEMM=0`` sets it at import.
enabled = os.environ.get("EMBER_LOWP_GEMM", "1") != "0"

#: below this many multiply-adds (M*N*K) the conversion path's BLAS is as fast; the
#: native kernel's packing pays off from small sizes on, so this only keeps tiny products
#: (vectors, 1x1) off it.
MIN_FLOPS = 1

_state: dict = {}


def _load():
    if "fn" not in _state:
        loaded = load_kernels(SOURCE, ["bf16_gemm"])
        fn = None
        if loaded:
            lib, fns = loaded
            probe = lib.ember_bf16_native
            probe.restype, probe.argtypes = ctypes.c_int64, []
            if probe():
                fn = fns["bf16_gemm"]
            _state["lib"] = lib
        _state["fn"] = fn
    return _state["fn"]


def native_available() -> bool:
    """Whether this CPU and compiler run the AVX512-BF16 kernel (ignores :data:`enabled`)."""
    return _load() is not None


def _elem_strides(a):
    s = a.strides
    if any(v % 2 for v in s):
        return None
    return tuple(v // 2 for v in s)


def _as_batched(a, bshape):
    """``a`` broadcast to ``bshape`` batch dims and flattened to 3-D (a view when possible)."""
    a = np.broadcast_to(a, bshape + a.shape[-2:])
    bt = int(np.prod(bshape, dtype=np.int64)) if bshape else 1
    v = a.view()
    try:
        v.shape = (bt,) + a.shape[-2:]
    except AttributeError:
        v = np.ascontiguousarray(a).reshape((bt,) + a.shape[-2:])
    return v


def matmul(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None,
           out_dtype=None):
    """``x @ y`` for bfloat16 arrays on the native kernel, or None where it does not apply.

    Args:
        x: bfloat16, ``(..., M, K)``.
        y: bfloat16, ``(..., K, N)``; batch dims broadcast with ``x``'s (NumPy's matmul).
        out: optional array of the result's shape and dtype to write into.
        out_dtype: ``float32`` for the unrounded float32 result (internal uses); default
            bfloat16, rounded once to nearest even.

    Returns:
        The product, or None (not bfloat16, a 1-D operand, no AVX512-BF16 here, or
        :data:`enabled` is False): the caller takes the conversion path.

    Example:
        >>> r = matmul(a, b)            # a, b: bfloat16 ndarrays
        >>> r = r if r is not None else fallback(a, b)
    """
    if not enabled or x.dtype != BF16 or y.dtype != BF16 or x.ndim < 2 or y.ndim < 2:
        return None
    fn = _load()
    if fn is None:
        return None
    odt = F32 if out_dtype is not None and np.dtype(out_dtype) == F32 else BF16
    M, K = x.shape[-2:]
    N = y.shape[-1]
    if y.shape[-2] != K:
        return None
    bshape = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    if x.ndim > 2 and y.ndim == 2 and K:
        x2 = x.view()
        try:                                    # fold x's batch into rows: one 2-D GEMM
            x2.shape = (-1, K)
            x, bshape2 = x2, ()
        except AttributeError:
            bshape2 = bshape
    else:
        bshape2 = bshape
    shape = bshape + (M, N)
    if out is not None and not (out.shape == shape and out.dtype == odt
                                and out.flags.c_contiguous):
        return None
    res = out if out is not None else np.empty(shape, odt)
    if res.size == 0:
        return res
    if K == 0:
        res[...] = 0
        return res
    _run(fn, _as_batched(x, bshape2), _as_batched(y, bshape2), res, odt)
    return res


def _run(fn, a, b, res, odt):
    bt, M, K = a.shape
    N = b.shape[-1]
    sa, sb = _elem_strides(a), _elem_strides(b)
    if sa is None or sb is None:
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        sa, sb = _elem_strides(a), _elem_strides(b)
    kp, nmp, nnp = (K + 1) // 2, -(-M // MR), -(-N // NR)
    apack = np.empty(bt * nmp * kp * MR, np.uint32)
    bpack = np.empty(bt * nnp * kp * NR, np.uint32)
    g = (ctypes.c_int64 * 16)(bt, M, N, K, *sa, *sb, M * N, N, odt == F32, kp, nmp, nnp)
    ptrs = (ctypes.c_void_p * 5)(a.ctypes.data, b.ctypes.data, res.ctypes.data,
                                 apack.ctypes.data, bpack.ctypes.data)
    fn(ptrs, g, num_threads())
