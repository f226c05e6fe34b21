"""A C loop for stacks of small matrix products (attention's ``(B, H, T, D)`` matmuls).

NumPy's stacked ``matmul`` calls BLAS once per matrix: for the W3 GPT's 64 products of
64x64 by 64x32 per call that is ~4 us of call and threading overhead around ~3 us of
work each (about 30 GFLOP/s on this machine's 2 cores, where one 2-D GEMM runs at 150).
Here one call does the whole stack, split over the batch on Ember's worker pool
(:mod:`.pool`): per matrix, the right operand is packed into a contiguous ``K x N`` tile
(any strides, so transposed and permuted views cost no copy), and each output row is
accumulated in registers — ``N`` is a compile-time constant (one variant per ``N``, built
on first use and cached on disk like every kernel), so the compiler unrolls the row into
vector registers.

Only for ``K <= 64`` and ``N`` a multiple of the vector length up to 8 vectors (float32:
8..64, float64: 4..32), so the packed tile stays in L1 and a row fits the registers.
Sums run in order over ``k`` with FMA: results agree with BLAS within rounding, not bitwise.
Geometry is one int64 array ``g = [nb, b1, M, N, K, as0, as1, am, ak, bs0, bs1, bk, bn]``:
the batch is ``nb`` matrices indexed ``(p // b1, p % b1)``; strides are in elements.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import cache
from . import pool as _pool
from .runtime import num_threads
from .toolchain import find_compiler

#: the largest N and K a product may have to run here.
MAX_N = MAX_K = 64

_HEAD = r"""#include <stdint.h>
typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);
void (*ember_parallel_hook)(ember_run_fn, char **, const int64_t *, const int64_t *,
                            int64_t, int64_t, int64_t) = 0;
"""

_BODY = r"""
typedef T ember_vec __attribute__((vector_size(32)));
typedef T ember_uvec __attribute__((vector_size(32), aligned(sizeof(T))));
#define VL ((int64_t)(32 / sizeof(T)))
#define NV (NN / VL)
/* accumulators are named scalars of vector type (not arrays): they stay in registers */
#define DECL(i) ember_vec c0_##i = {0}, c1_##i = {0}; (void)c1_##i;
#define STEP2(i) if (NV > i) { const ember_vec bv = *(const ember_vec *)(br + i * VL); \
                               c0_##i += x0 * bv; c1_##i += x1 * bv; }
#define STEP1(i) if (NV > i) { c0_##i += x0 * *(const ember_vec *)(br + i * VL); }
#define STORE0(i) if (NV > i) *(ember_uvec *)(c0 + i * VL) = c0_##i;
#define STORE1(i) if (NV > i) *(ember_uvec *)(c1 + i * VL) = c1_##i;
#define ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

static void ember_bmm_S_N_run(char **ptrs, const int64_t *g, const int64_t *st,
                              int64_t lo, int64_t hi) {
    (void)st;
    const int64_t B1 = g[1], M = g[2], K = g[4];
    const int64_t AS0 = g[5], AS1 = g[6], AM = g[7], AK = g[8];
    const int64_t BS0 = g[9], BS1 = g[10], BK = g[11], BN = g[12];
    const T *A = (const T *)ptrs[0], *B = (const T *)ptrs[1];
    T *C = (T *)ptrs[2];
    T bp[64 * NN] __attribute__((aligned(64)));
    for (int64_t p = lo; p < hi; p++) {
        const int64_t i0 = p / B1, i1 = p % B1;
        const T *a = A + i0 * AS0 + i1 * AS1;
        const T *b = B + i0 * BS0 + i1 * BS1;
        T *c = C + p * M * NN;
        if (BN == 1) {
            for (int64_t k = 0; k < K; k++)
                for (int64_t n = 0; n < NN; n++) bp[k * NN + n] = b[k * BK + n];
        } else {
            for (int64_t n = 0; n < NN; n++)
                for (int64_t k = 0; k < K; k++) bp[k * NN + n] = b[k * BK + n * BN];
        }
        int64_t m = 0;
        if (NV <= 4) {                         /* two rows share each packed row load */
            for (; m + 1 < M; m += 2) {
                ALL(DECL)
                const T *a0 = a + m * AM, *a1 = a0 + AM;
                for (int64_t k = 0; k < K; k++) {
                    const T x0 = a0[k * AK], x1 = a1[k * AK];
                    const T *br = bp + k * NN;
                    ALL(STEP2)
                }
                T *c0 = c + m * NN, *c1 = c0 + NN;
                ALL(STORE0) ALL(STORE1)
            }
        }
        for (; m < M; m++) {
            ALL(DECL)
            const T *a0 = a + m * AM;
            for (int64_t k = 0; k < K; k++) {
                const T x0 = a0[k * AK];
                const T *br = bp + k * NN;
                ALL(STEP1)
            }
            T *c0 = c + m * NN;
            ALL(STORE0)
        }
    }
}

void ember_bmm_S_N(char **ptrs, const int64_t *g, int64_t nthreads) {
    /* a thread per matrix only pays off once a matrix is some work */
    if (nthreads > 1 && g[0] > 1 && g[2] * NN * g[4] * g[0] >= 65536 && ember_parallel_hook)
        ember_parallel_hook(ember_bmm_S_N_run, ptrs, g, g, g[0], 1, nthreads);
    else
        ember_bmm_S_N_run(ptrs, g, g, 0, g[0]);
}
"""

DTYPES = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64")}
_fns: dict = {}


def source(dtype, n: int) -> str:
    """C source of the variant for ``dtype`` and ``N = n``."""
    ctype, suffix = DTYPES[np.dtype(dtype)]
    body = _BODY.replace("ember_bmm_S_N", f"ember_bmm_{suffix}_{n}")
    return _HEAD + f"#define T {ctype}\n#define NN {n}\n" + body


def _kernel(dtype, n: int):
    key = (np.dtype(dtype), n)
    fn = _fns.get(key)
    if fn is None:
        cc = find_compiler()
        lib = cache.load(source(dtype, n), cc)
        _pool.install(lib)
        fn = getattr(lib, f"ember_bmm_{DTYPES[key[0]][1]}_{n}")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
        _fns[key] = (lib, fn)
        return fn
    return fn[1]


def available() -> bool:
    """Whether the kernels can be built here (a working C compiler)."""
    return find_compiler() is not None


def fits(x_shape, y_shape, dtype) -> bool:
    """Whether ``x @ y`` (same batch dims, 1 or 2 of them) runs here."""
    if np.dtype(dtype) not in DTYPES or len(x_shape) not in (3, 4) or \
            len(y_shape) != len(x_shape) or tuple(x_shape[:-2]) != tuple(y_shape[:-2]):
        return False
    k, n = y_shape[-2], y_shape[-1]
    lanes = 32 // np.dtype(dtype).itemsize          # N: 1 to 8 whole 32-byte vectors
    return x_shape[-1] == k and 1 <= n <= MAX_N and n % lanes == 0 and n <= 8 * lanes \
        and 1 <= k <= MAX_K and x_shape[-2] >= 1


def bmm(x, y, out=None):
    """``x @ y`` for stacks ``(b0, [b1,] M, K) @ (b0, [b1,] K, N)`` that :func:`fits`."""
    dt = x.dtype
    if y.dtype != dt or not fits(x.shape, y.shape, dt):
        raise ValueError(f"bmm_kernels.bmm: unsupported operands {x.shape} {x.dtype} and "
                         f"{y.shape} {y.dtype}: need equal batch dims (1 or 2), "
                         f"N <= {MAX_N}, K <= {MAX_K}, float32/float64")
    m, k = x.shape[-2:]
    n = y.shape[-1]
    batch = x.shape[:-2]
    if out is None:
        out = np.empty(batch + (m, n), dt)
    if out.size == 0:
        return out
    if k == 0:
        out[...] = 0
        return out
    isz = dt.itemsize
    xs = [s // isz for s in x.strides]
    ys = [s // isz for s in y.strides]
    if len(batch) == 1:
        xs, ys = [0] + xs, [0] + ys
        b0, b1 = batch[0], 1
        xs[0], ys[0] = xs[1], ys[1]      # p // 1 = p indexes the one batch dim
        xs[1] = ys[1] = 0
    else:
        b0, b1 = batch
    g = np.array([b0 * b1, b1, m, n, k, xs[0], xs[1], xs[2], xs[3],
                  ys[0], ys[1], ys[2], ys[3]], np.int64)
    fn = _kernel(dt, n)
    ptrs = (ctypes.c_void_p * 3)(x.ctypes.data, y.ctypes.data, out.ctypes.data)
    fn(ptrs, g.ctypes.data, num_threads())
    return out
