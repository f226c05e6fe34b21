"""float32 <-> float16 / bfloat16 conversion at memory speed (C kernels).

NumPy converts float16 one element at a time through its scalar bit routines, and
``ml_dtypes`` does the same for bfloat16: 4-20 ns an element, where a copy of the bytes
costs well under one. These kernels convert a contiguous buffer in SIMD and split it over
Ember's worker pool (:mod:`.pool`). Results are bit-identical to what eager Ember did
before (``ndarray.astype``), NaN payloads included:

* float16 uses the F16C instructions (``vcvtph2ps`` / ``vcvtps2ph``, round to nearest
  even) when ``-march=native`` has them, else NumPy's own bit algorithm (``halffloat.c``);
  the hardware quiets a signalling NaN where NumPy keeps its payload bits, so a block of 8
  with a NaN in it is redone by the scalar routine.
* bfloat16 -> float32 is a 16-bit shift; float32 -> bfloat16 rounds to nearest even on the
  bits, and every NaN becomes ``0x7FC0`` with its sign, like ``ml_dtypes`` (Eigen's
  ``float_to_bfloat16_rtne``). AVX512-BF16's ``vcvtneps2bf16`` is not used: it flushes
  float32 denormals to zero.

Only float32 and C-contiguous buffers are converted here (callers fall back to
``astype``); :func:`convert` is the entry point.
"""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np

from .pool import load_kernels
from .runtime import num_threads

F16, BF16, F32 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)

#: (from, to) -> kernel name.
PAIRS = {(F16, F32): "f16_f32", (F32, F16): "f32_f16", (BF16, F32): "bf16_f32",
         (F32, BF16): "f32_bf16"}

#: elements below which one thread converts. NOTE: first measured on the 2-core machine
#: under load (6-11): one thread converted 256K / 1M / 4M float16 -> float32 elements in
#: 0.034 / 0.25 / 0.99 ms, the pool's two in 0.043 / 0.27 / 3.0 ms (the second competed with
#: OpenBLAS's spinning threads), so the limit was 16M. Re-measured quieter (load ~2,
#: 2026-11-25 18:00, inside a GEMM loop where the operands come from L3, not L2): at 4M
#: elements two threads convert in 1.2-1.3 ms against 1.6 (round 1.3 against 1.8), at 1M in
#: 0.31-0.33 against 0.36-0.46; at 256K (a 512² operand) the pool's wake-up still costs more
#: than it saves (0.10 against 0.07-0.09), but a 512² GEMM's two operands converted in one
#: call (:func:`to_float32_pair`, 512K elements, one wake-up) took 0.19-0.20 ms pooled against
#: 0.21-0.24 on one thread (4 runs, medians of 300, load 2-4). So threads from 512K elements.
PARALLEL_MIN = 1 << 19

_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define EMBER_F16C 1
#endif
typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);
void (*ember_parallel_hook)(ember_run_fn, char **, const int64_t *, const int64_t *,
                            int64_t, int64_t, int64_t) = 0;

/* NumPy's npy_halfbits_to_floatbits: exact; NaN payloads kept (a signalling NaN too). */
static inline uint32_t h2f_bits(uint16_t h) {
    const uint32_t sgn = (uint32_t)(h & 0x8000u) << 16, e = h & 0x7c00u, m = h & 0x3ffu;
    if (e == 0x7c00u) return sgn | 0x7f800000u | (m << 13);
    if (e != 0) return sgn | (((uint32_t)(h & 0x7fffu) + 0x1c000u) << 13);
    float f = (float)m * 5.9604644775390625e-08f;       /* subnormal: m * 2^-24, exact */
    uint32_t u; memcpy(&u, &f, 4);
    return sgn | u;
}

/* NumPy's npy_floatbits_to_halfbits: round to nearest even; NaN -> 0x7c00 + payload>>13
   (made nonzero); overflow -> inf. */
static inline uint16_t f2h_bits(uint32_t f) {
    const uint16_t sgn = (uint16_t)((f >> 16) & 0x8000u);
    uint32_t e = f & 0x7f800000u, sig;
    if (e >= 0x47800000u) {
        if (e == 0x7f800000u && (f & 0x7fffffu)) {
            uint16_t r = (uint16_t)(0x7c00u + ((f & 0x7fffffu) >> 13));
            return (uint16_t)(sgn + (r == 0x7c00u ? r + 1 : r));
        }
        return (uint16_t)(sgn | 0x7c00u);
    }
    if (e <= 0x38000000u) {                      /* a subnormal half, or zero */
        if (e < 0x33000000u) return sgn;
        e >>= 23;
        sig = 0x00800000u + (f & 0x7fffffu);
        sig >>= (113 - e);
        if (((sig & 0x3fffu) != 0x1000u) || (f & 0x7ffu)) sig += 0x1000u;
        return (uint16_t)(sgn + (sig >> 13));
    }
    sig = f & 0x7fffffu;
    if ((sig & 0x3fffu) != 0x1000u) sig += 0x1000u;
    return (uint16_t)(sgn + ((e - 0x38000000u) >> 13) + (sig >> 13));
}

static void f16_f32_scalar(const uint16_t *in, uint32_t *out, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) out[i] = h2f_bits(in[i]);
}

static void f32_f16_scalar(const uint32_t *in, uint16_t *out, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) out[i] = f2h_bits(in[i]);
}

static void f16_f32_run(char **p, const int64_t *g, const int64_t *st, int64_t lo, int64_t hi) {
    const uint16_t *in = (const uint16_t *)p[0];
    uint32_t *out = (uint32_t *)p[1];
    (void)g; (void)st;
#ifdef EMBER_F16C
    const __m128i mag = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    for (; lo + 8 <= hi; lo += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(in + lo));
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, mag), inf)))
            f16_f32_scalar(in, out, lo, lo + 8);            /* a NaN: keep its payload */
        else
            _mm256_storeu_ps((float *)(out + lo), _mm256_cvtph_ps(h));
    }
#endif
    f16_f32_scalar(in, out, lo, hi);
}

static void f32_f16_run(char **p, const int64_t *g, const int64_t *st, int64_t lo, int64_t hi) {
    const uint32_t *in = (const uint32_t *)p[0];
    uint16_t *out = (uint16_t *)p[1];
    (void)g; (void)st;
#ifdef EMBER_F16C
    for (; lo + 8 <= hi; lo += 8) {
        const __m256 v = _mm256_loadu_ps((const float *)(in + lo));
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
            f32_f16_scalar(in, out, lo, lo + 8);
        else
            _mm_storeu_si128((__m128i *)(out + lo),
                             _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#endif
    f32_f16_scalar(in, out, lo, hi);
}

static void bf16_f32_run(char **p, const int64_t *g, const int64_t *st, int64_t lo, int64_t hi) {
    const uint16_t *restrict in = (const uint16_t *)p[0];
    uint32_t *restrict out = (uint32_t *)p[1];
    (void)g; (void)st;
    for (int64_t i = lo; i < hi; i++) out[i] = (uint32_t)in[i] << 16;
}

static void f32_bf16_run(char **p, const int64_t *g, const int64_t *st, int64_t lo, int64_t hi) {
    const uint32_t *restrict in = (const uint32_t *)p[0];
    uint16_t *restrict out = (uint16_t *)p[1];
    (void)g; (void)st;
    for (int64_t i = lo; i < hi; i++) {
        const uint32_t u = in[i];
        const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
        out[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
    }
}

/* g = [n, parallel_min]; ptrs = [in, out] */
#define EMBER_ENTRY(name)                                                              \
void ember_##name(char **ptrs, const int64_t *g, int64_t nthreads) {                  \
    if (nthreads > 1 && g[0] >= g[1] && ember_parallel_hook)                          \
        ember_parallel_hook(name##_run, ptrs, g, g, g[0], 64, nthreads);              \
    else                                                                              \
        name##_run(ptrs, g, g, 0, g[0]);                                              \
}
EMBER_ENTRY(f16_f32)
EMBER_ENTRY(f32_f16)
EMBER_ENTRY(bf16_f32)
EMBER_ENTRY(f32_bf16)

/* two buffers in one call (a GEMM's two operands): g = [n0, n1, parallel_min];
   ptrs = [in0, out0, in1, out1]; one range [0, n0 + n1) spans both, so the pool splits
   the pair like one buffer. */
#define EMBER_PAIR(name)                                                               \
static void name##_pair_run(char **p, const int64_t *g, const int64_t *st, int64_t lo,  \
                            int64_t hi) {                                              \
    const int64_t n0 = g[0];                                                           \
    if (lo < n0) name##_run(p, g, st, lo, hi < n0 ? hi : n0);                          \
    if (hi > n0) name##_run(p + 2, g, st, (lo > n0 ? lo : n0) - n0, hi - n0);          \
}                                                                                      \
void ember_##name##_pair(char **ptrs, const int64_t *g, int64_t nthreads) {           \
    const int64_t n = g[0] + g[1];                                                     \
    if (nthreads > 1 && n >= g[2] && ember_parallel_hook)                              \
        ember_parallel_hook(name##_pair_run, ptrs, g, g, n, 64, nthreads);             \
    else                                                                               \
        name##_pair_run(ptrs, g, g, 0, n);                                             \
}
EMBER_PAIR(f16_f32)
EMBER_PAIR(bf16_f32)

/* the portable routines alone (tests: the path a CPU without F16C takes) */
void ember_f16_f32_portable(char **ptrs, const int64_t *g, int64_t nthreads) {
    (void)nthreads; f16_f32_scalar((const uint16_t *)ptrs[0], (uint32_t *)ptrs[1], 0, g[0]);
}
void ember_f32_f16_portable(char **ptrs, const int64_t *g, int64_t nthreads) {
    (void)nthreads; f32_f16_scalar((const uint32_t *)ptrs[0], (uint16_t *)ptrs[1], 0, g[0]);
}
"""

_state: dict = {}


def _fns():
    fns = _state.get("fns")
    if fns is None:
        loaded = load_kernels(_SOURCE, list(PAIRS.values()) +
                              ["f16_f32_portable", "f32_f16_portable", "f16_f32_pair",
                               "bf16_f32_pair"])
        fns = _state["fns"] = loaded[1] if loaded else {}
        _state["lib"] = loaded[0] if loaded else None
    return fns


def available() -> bool:
    """Whether the conversion kernels can be built here (a working C compiler)."""
    return bool(_fns())


def supports(src, dst) -> bool:
    """Whether ``src -> dst`` (NumPy dtypes) is one of the converted pairs."""
    return (np.dtype(src), np.dtype(dst)) in PAIRS


def convert(x: np.ndarray, dtype, out: np.ndarray | None = None, portable: bool = False):
    """``x.astype(dtype)`` through a kernel, or None when this pair/layout is not handled.

    Args:
        x: the array; C-contiguous, or a permutation of a C-contiguous array's axes (a
            transposed matrix): the result then has the same strides pattern.
        dtype: the target NumPy dtype (float32 from float16/bfloat16, or back).
        out: a C-contiguous array of ``x``'s shape and ``dtype`` to write into.
        portable: the scalar routines only, without F16C (tests).

    Example:
        >>> y = convert(np.ones((4, 4), np.float32), np.float16)
    """
    dtype = np.dtype(dtype)
    name = PAIRS.get((x.dtype, dtype))
    if name is None:
        return None
    perm = None
    if not x.flags.c_contiguous:
        perm = _contiguous_perm(x)
        if perm is None or out is not None:
            return None
        x = x.transpose(perm)
    fn = _fns().get(name + ("_portable" if portable else ""))
    if fn is None:
        return None
    if out is None:
        out = np.empty(x.shape, dtype)
    elif out.shape != x.shape or out.dtype != dtype or not out.flags.c_contiguous:
        return None
    if x.size:
        fn((ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data),
           (ctypes.c_int64 * 2)(x.size, PARALLEL_MIN), num_threads())
    return out if perm is None else out.transpose(np.argsort(perm))


def _contiguous_perm(x):
    """An axis order in which ``x`` is C-contiguous (a transposed view), or None."""
    perm = sorted(range(x.ndim), key=lambda d: -abs(x.strides[d]) if x.shape[d] > 1 else 0)
    t = x.transpose(perm)
    return perm if t.flags.c_contiguous else None


def to_float32(x: np.ndarray) -> np.ndarray:
    """``x`` as float32: the kernel for float16/bfloat16 where it applies, else ``astype``."""
    if x.dtype == F32:
        return x
    r = convert(x, F32)
    return r if r is not None else x.astype(F32)


def to_float32_pair(x: np.ndarray, y: np.ndarray):
    """``(x, y)`` as float32 (a GEMM's operands): both in one kernel call.

    Both arrays must share one dtype (float16 or bfloat16) and each be C-contiguous or a
    permutation of a C-contiguous array's axes (a transposed matrix: the result keeps that
    strides pattern, like :func:`convert`); any other pair (another dtype or layout, no
    compiler) converts one by one through :func:`to_float32`. Results are bit-identical to
    ``astype``.

    Args:
        x: the first operand.
        y: the second operand, of ``x``'s dtype.

    Returns:
        A tuple of two float32 arrays of ``x``'s and ``y``'s shapes.

    Example:
        >>> a, b = to_float32_pair(np.ones(3, np.float16), np.ones(2, np.float16))
    """
    name = _PAIR_KERNELS.get(x.dtype)
    fn = _fns().get(name) if name is not None and y.dtype == x.dtype else None
    px, py = _layout(x), _layout(y)
    if fn is None or px is None or py is None:
        return to_float32(x), to_float32(y)
    # NOTE: a transposed operand (``weight.mT`` in a Linear) converts as its contiguous
    # buffer; the result is transposed back, so it keeps the operand's strides pattern.
    xc, yc = (x if px is True else x.transpose(px)), (y if py is True else y.transpose(py))
    xf, yf = np.empty(xc.shape, F32), np.empty(yc.shape, F32)
    fn((ctypes.c_void_p * 4)(xc.ctypes.data, xf.ctypes.data, yc.ctypes.data, yf.ctypes.data),
       (ctypes.c_int64 * 3)(x.size, y.size, PARALLEL_MIN), num_threads())
    return (xf if px is True else xf.transpose(np.argsort(px)),
            yf if py is True else yf.transpose(np.argsort(py)))


def _layout(x):
    """True for a C-contiguous ``x``, else the axis order making it C-contiguous, or None."""
    return True if x.flags.c_contiguous else _contiguous_perm(x)


_PAIR_KERNELS = {F16: "f16_f32_pair", BF16: "bf16_f32_pair"}


def from_float32(x: np.ndarray, dtype, out: np.ndarray | None = None) -> np.ndarray:
    """float32 ``x`` rounded once to ``dtype`` (into ``out`` when given)."""
    x = np.asarray(x)
    r = convert(x, dtype, out=out)
    if r is not None:
        return r
    if out is None:
        return x.astype(dtype)
    out[...] = x
    return out
