"""A native bfloat16 GEMM: AMX tiles (``tdpbf16ps``) or AVX512-BF16 (``vdpbf16ps``).

Ember's low-precision matmul otherwise converts both operands to float32, runs float32
BLAS and rounds the result (:mod:`.convert_kernels`): three extra passes over memory, and
float32's FLOP rate at best. This kernel multiplies the bfloat16 operands directly (C text
and layouts in :mod:`.lowp_gemm_c`): operands packed into k-pairs (B) and rows (A), float32
accumulation over all of K, the result rounded once to bfloat16 (nearest even) or kept in
float32. Packing and compute are each split over Ember's pool (:mod:`.pool`).

Two kernels, chosen at run time:

* AMX (Sapphire Rapids and later; Linux grants the tile state per process through
  ``arch_prctl(ARCH_REQ_XCOMP_PERM)``): 32 x 32 output blocks of four 16 x 16 tiles;
  measured 3-4x float32 BLAS on one core. The default wherever it runs.
* AVX512-BF16: a 6 x 64 zmm register tile. Correct but *slower* than the conversion path
  here (``vdpbf16ps`` issues about 0.6 per cycle on this CPU against two float32 FMAs, so
  its FLOP rate is ~0.6x float32's), so ``mode = "auto"`` does not use it; ``"avx512"``
  does (tests, comparisons; a CPU where it issues faster could flip that).

Semantics against the reference (float32 BLAS on the exactly converted operands, rounded
once): a product of two bfloat16 values is exact in float32, so the only differences are

* summation order (the instructions add pairs, or a tile's 32 products, to the float32
  accumulator in their own order), bounded by ``~K * eps32 * sum_k |a_mk||b_kn|``;
* denormals: both instructions treat denormal inputs as zero and flush denormal results
  to zero (DAZ/FTZ whatever MXCSR says), as oneDNN's bfloat16 GEMM (PyTorch's) does.

inf and NaN propagate as in float32 arithmetic (``inf * 0`` is NaN). Without the
instructions (checked at run time, and at build time through ``-march=native``), or under
``EMBER_LOWP_GEMM=off``, :func:`matmul` returns None and the caller converts as before.

float16 is not served: AVX512-FP16 accumulates in float16, AMX-FP16 is a later CPU, and a
float32 GEMM converting while packing was not built (bench/RESULTS.md, issue 16).
"""
from __future__ import annotations

import ctypes
import os
import threading

import ml_dtypes
import numpy as np

from .lowp_gemm_c import AMX_ROWS, MR, NR, SOURCE
from .pool import load_kernels
from .runtime import num_threads

BF16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)

#: which kernel :func:`matmul` runs: ``"auto"`` = AMX where it runs, else None (the
#: conversion path: the AVX512-BF16 kernel measured slower than it, see below); ``"avx512"``
#: = the AVX512-BF16 kernel even where AMX runs (tests, comparisons); ``"off"`` = None
#: always. ``EMBER_LOWP_GEMM`` (``auto``/``avx512``/``off``, ``0`` = off) sets it at import.
mode = {"0": "off"}.get(os.environ.get("EMBER_LOWP_GEMM", "auto"),
                        os.environ.get("EMBER_LOWP_GEMM", "auto"))

#: packing buffers up to this many 32-bit words (16 MiB: a 2048² product's) stay
#: allocated per thread between calls; larger ones are freed after the call.
SCRATCH_KEEP = 1 << 22

#: per-matrix multiply-adds (M*N*K) below which the conversion path runs instead: a stack
#: of attention-sized products (32 x 16x64 @ 64x16) took 65 us native against 36 us
#: converted (tiles padded to 32 rows and 32 k; 2026-11-25, loaded machine), 8 x 64³
#: 46 against 55 us, 64x256 @ 256x256 44 against 102 us.
MIN_MACS = 1 << 15

#: multiply-adds (all matrices) from which packing and compute use the pool's threads.
PARALLEL_MIN = 1 << 25

_state: dict = {}
_local = threading.local()


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
                amx = lib.ember_bf16_amx
                amx.restype, amx.argtypes = ctypes.c_int64, []
                _state["amx"] = bool(amx())
            _state["lib"] = lib
        _state["fn"] = fn
    return _state["fn"]


def amx_available() -> bool:
    """Whether the AMX tiles (``tdpbf16ps``) run here: CPU, compiler and Linux's permission."""
    return _load() is not None and _state.get("amx", False)


def native_available() -> bool:
    """Whether this CPU and compiler run the AVX512-BF16 kernel (whatever :data:`mode` says)."""
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
        The product, or None (not bfloat16, a 1-D operand, no AMX here under
        :data:`mode` ``"auto"``, no AVX512-BF16, or ``"off"``): the caller takes the
        conversion path.

    Example:
        >>> r = matmul(a, b)            # a, b: bfloat16 ndarrays
        >>> r = r if r is not None else fallback(a, b)
    """
    if mode not in ("auto", "avx512") or x.dtype != BF16 or y.dtype != BF16 or x.ndim < 2 or y.ndim < 2:
        return None
    fn = _load()
    if fn is None or (mode == "auto" and not _state.get("amx", False)):
        return None
    odt = F32 if out_dtype is not None and np.dtype(out_dtype) == F32 else BF16
    M, K = x.shape[-2:]
    N = y.shape[-1]
    if y.shape[-2] != K:
        return None
    if x.ndim == 2 and y.ndim == 2:             # the common case: no broadcasting to plan
        return _matmul2d(fn, x, y, out, odt, M, K, N)
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
    if 0 < x.shape[-2] * N * K < MIN_MACS and mode == "auto":
        return None                             # tiny matrices: converting is faster
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


def _matmul2d(fn, x, y, out, odt, M, K, N):
    """:func:`matmul` for two 2-D operands (Linear layers, their gradients): the same
    checks without the batch planning, whose NumPy calls cost more than a small GEMM."""
    if 0 < M * N * K < MIN_MACS and mode == "auto":
        return None
    if out is not None and not (out.shape == (M, N) and out.dtype == odt
                                and out.flags.c_contiguous):
        return None
    res = out if out is not None else np.empty((M, N), odt)
    if M and N:
        if K == 0:
            res[...] = 0
        else:
            _run(fn, x[None], y[None], res, odt)
    return res


def matmul_cast_b(x: np.ndarray, w: np.ndarray, out: np.ndarray | None = None):
    """``x @ w.astype(bfloat16)`` for bfloat16 ``x`` (``(..., M, K)``, its rows one matrix)
    and 2-D float32 ``w`` (any strides, ``w.mT`` included) without the bfloat16 copy of ``w``: the kernel rounds each value of
    ``w`` as it packs it, exactly as the cast would (nearest even, NaN -> 0x7FC0 with its
    sign), so the result is bit for bit the cast-then-:func:`matmul` one.

    Returns None wherever :func:`matmul` would not run the AMX kernel on the cast operand
    (no AMX, another :data:`mode`, tiny products, other dtypes or ranks, an unusable
    ``out``): the caller casts and multiplies as before.

    Example:
        >>> r = matmul_cast_b(h, w32.T)      # h: (128, 512) bfloat16, w32: (512, 512)
    """
    if mode != "auto" or x.dtype != BF16 or w.dtype != F32 or x.ndim < 2 or w.ndim != 2:
        return None
    fn = _load()
    if fn is None or not _state.get("amx", False):
        return None
    K, N = w.shape
    shape = x.shape[:-1] + (N,)
    if x.ndim > 2:                      # (..., M, K): its rows as one matrix, if a view
        x2 = x.view()
        try:
            x2.shape = (-1, K)
        except AttributeError:
            return None
        x = x2
    M = x.shape[0]
    if x.shape[1] != K or (0 < M * N * K < MIN_MACS) or _elem_strides(x) is None \
            or any(v % 4 for v in w.strides):
        return None
    if out is not None and not (out.shape == shape and out.dtype == BF16
                                and out.flags.c_contiguous):
        return None
    res = out if out is not None else np.empty(shape, BF16)
    if M and N:
        r2 = res.reshape(M, N)
        if K == 0:
            r2[...] = 0
        else:
            _run(fn, x[None], w[None], r2, BF16, b_f32=True)
    return res


def _scratch(nwords: int) -> tuple:
    """This thread's packing buffer of at least ``nwords`` 32-bit words and its address,
    64-byte aligned (kept between calls: a fresh large ``np.empty`` is a new mmap whose
    pages fault in on every call).

    NOTE: aligned because each 64-byte row of a tile that straddles two cache lines costs
    two L1 reads; NumPy's buffers are only 16-byte aligned (a page + malloc's 16-byte
    header), and the same product then ran 1.4-1.7x slower (W1's 128x784x512 compute
    128 -> 77 us, 512^3 374 -> 235 us, one thread)."""
    kept = getattr(_local, "buf", None)
    if kept is not None and kept[0].size >= nwords:
        return kept
    buf = np.empty(max(nwords, 1 << 16) + 16, np.uint32)
    off = (-_addr(buf) % 64) // 4
    buf = buf[off:off + buf.size - 16]
    kept = (buf, _addr(buf))
    if nwords <= SCRATCH_KEEP:
        _local.buf = kept
    return kept


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


_GEOM, _PTRS = ctypes.c_int64 * 18, ctypes.c_void_p * 5


def _run(fn, a, b, res, odt, b_f32=False):
    bt, M, K = a.shape
    N = b.shape[-1]
    sa = _elem_strides(a)
    sb = tuple(v // 4 for v in b.strides) if b_f32 else _elem_strides(b)
    if sa is None:
        a = np.ascontiguousarray(a)
        sa = _elem_strides(a)
    if sb is None:
        b = np.ascontiguousarray(b)
        sb = _elem_strides(b)
    amx = mode == "auto" and _state.get("amx", False)
    mr = AMX_ROWS if amx else MR
    kp = -(-K // 32) * 16 if amx else (K + 1) // 2
    nmp, nnp = -(-M // mr), -(-N // NR)
    na = bt * nmp * kp * mr
    buf, at = _scratch(na + bt * nnp * kp * NR)
    g = _GEOM(bt, M, N, K, *sa, *sb, M * N, N, odt == F32, kp, nmp, nnp, amx, b_f32)
    ptrs = _PTRS(_addr(a), _addr(b), _addr(res), at, at + 4 * na)
    fn(ptrs, g, num_threads() if bt * M * N * K >= PARALLEL_MIN else 1)
