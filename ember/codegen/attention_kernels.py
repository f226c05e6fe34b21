"""Hand-written C loops for the ``sdpa`` / ``sdpa_grad`` primitives (fused attention).

Composed of Ember ops, causal attention on the W3 GPT's ``(16, 4, 64, 32)`` heads is two
batched matmuls, a mask, a softmax and their backward: NumPy runs every stacked matmul
as one BLAS call per 64x64 matrix (~4 us of call overhead around ~3 us of work) and each
step between them is a full-size pass over the ``T x T`` scores. Here one call does all
of it, one ``(batch, head)`` at a time, parallel over the heads on Ember's worker pool
(:mod:`.pool`); the scores never leave a row buffer in L1:

* ``sdpa(q, k, v) -> O``: per query row ``i``, ``s_j = scale * q_i . k_j`` over the keys
  it sees (all, or ``j <= i`` when causal: masked columns are skipped, not computed),
  ``e_j = exp(s_j - max s)``, ``O_i = sum_j e_j v_j / sum_j e_j``;
* ``sdpa_grad(dO, q, k, v) -> dq|dk|dv`` (one flat array): per row, ``P`` is recomputed,
  ``dP_j = dO_i . v_j``, ``dS_j = P_j (dP_j - sum_j P_j dP_j)``, then
  ``dq_i = scale * sum_j dS_j k_j`` and ``dk_j += dS_j q_i``, ``dv_j += P_j dO_i``
  (``dk`` is scaled once at the end, like the reference's ``(dSᵀ q) * scale``).

Each head's ``k`` (and ``v`` / ``vᵀ``) is first copied into a small contiguous tile (any
input strides: the GPT's permuted views cost no ``ascontiguousarray``), laid out so every
inner loop is a contiguous, vectorisable ``axpy``; ``exp`` is libmvec's SIMD variant.
Sums run in the dtype (float32 for float32), in another order than BLAS: results agree
with the NumPy kernel within rounding, not bitwise. NaN/Inf propagate like the NumPy
kernel (``ember.ops.attention``): a NaN/Inf score poisons its row; masked positions take
no part in any sum (a NaN in a key or value row only reaches the rows that see it).

Geometry is one int64 array ``g = [nb, b1, Tq, Tk, D, Dv, causal, q strides (4), k
strides (4), v strides (4), dO strides (4)]``: the batch is ``nb`` heads indexed
``(p // b1, p % b1)``; strides are in elements, for the ``(b0, b1, T, D)`` views.
float32 and float64 only; :func:`kernels` returns None without a C compiler, and the
primitives' ``"cpu"`` kernels then run their NumPy kernels.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from . import cache
from . import pool as _pool
from .prelude import mvec_decls
from .runtime import num_threads
from .toolchain import find_compiler

_HEAD = r"""#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);
void (*ember_parallel_hook)(ember_run_fn, char **, const int64_t *, const int64_t *,
                            int64_t, int64_t, int64_t) = 0;

#define GEOM const int64_t B1 = g[1], TQ = g[2], TK = g[3], D = g[4], DV = g[5], \
    CAUSAL = g[6]; (void)st

static void ember_sdpa_launch(ember_run_fn run, char **ptrs, const int64_t *g,
                              int64_t nthreads) {
    /* a thread per head only pays off once the heads are some work */
    const int64_t work = g[0] * g[2] * g[3] * (g[4] + g[5]);
    if (nthreads > 1 && g[0] > 1 && work >= 65536 && ember_parallel_hook)
        ember_parallel_hook(run, ptrs, g, g, g[0], 1, nthreads);
    else
        run(ptrs, g, g, 0, g[0]);
}
"""

# One copy per dtype: T is the element type, EXP its exp, {S} the suffix. Loops run over
# blocks of 4 query rows: each tile row loaded (a key, a value) feeds 4 rows' FMAs.
_BODY = r"""
typedef T ember_v{S} __attribute__((vector_size(32)));
#define VT ember_v{S}
#define VL ((int64_t)(32 / sizeof(T)))
#define PADW (2 * VL)          /* tile rows are padded (with zeros) to a multiple of this */

/* c_r[0..nc) = sum_{k<K} a_r[k*ak] * b[k][0..nc) for 4 rows a_r (nc rounded up to PADW;
   b has row stride ldb, c row stride ldc). Eight accumulators in registers. */
static inline void ember_mm4_{S}(const T *a0, const T *a1, const T *a2, const T *a3,
                                 int64_t ak, int64_t K, const T *restrict b, int64_t ldb,
                                 int64_t nc, T *restrict c, int64_t ldc) {
    for (int64_t j = 0; j < nc; j += PADW) {
        VT c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, e0 = {0}, e1 = {0}, e2 = {0}, e3 = {0};
        for (int64_t k = 0; k < K; k++) {
            const VT b0 = *(const VT *)(b + k * ldb + j), b1 = *(const VT *)(b + k * ldb + j + VL);
            const T x0 = a0[k * ak], x1 = a1[k * ak], x2 = a2[k * ak], x3 = a3[k * ak];
            c0 += x0 * b0; e0 += x0 * b1;
            c1 += x1 * b0; e1 += x1 * b1;
            c2 += x2 * b0; e2 += x2 * b1;
            c3 += x3 * b0; e3 += x3 * b1;
        }
        *(VT *)(c + j) = c0; *(VT *)(c + j + VL) = e0;
        *(VT *)(c + ldc + j) = c1; *(VT *)(c + ldc + j + VL) = e1;
        *(VT *)(c + 2 * ldc + j) = c2; *(VT *)(c + 2 * ldc + j + VL) = e2;
        *(VT *)(c + 3 * ldc + j) = c3; *(VT *)(c + 3 * ldc + j + VL) = e3;
    }
}

/* c[0..nc) += x * b[0..nc) (nc a multiple of PADW, both 64-byte aligned) */
static inline void ember_axpy_{S}(T *restrict c, T x, const T *restrict b, int64_t nc) {
    for (int64_t j = 0; j < nc; j += VL) *(VT *)(c + j) += x * *(const VT *)(b + j);
}

/* One row's n scores s_j (unscaled dots) -> exp(scale s_j - max); returns their sum. */
static inline T ember_softmax_row_{S}(T *restrict s, int64_t n, T scale) {
    /* NOTE: how a NaN enters the max does not matter: s_j - max is NaN for a NaN s_j (or
       everywhere for a NaN max), so the sum and then the whole row are NaN, as in NumPy */
    T m = s[0] * scale;
#pragma omp simd reduction(max:m)
    for (int64_t j = 0; j < n; j++) {
        s[j] *= scale;
        m = s[j] > m ? s[j] : m;
    }
    T l = 0;
#pragma omp simd reduction(+:l)
    for (int64_t j = 0; j < n; j++) {
        const T e = EXP(s[j] - m);
        s[j] = e;
        l += e;
    }
    return l;
}

/* a head's (rows x cols) operand as a transposed (cols x ldt) tile t and/or a (rows x ldc)
   tile c; the padding was zeroed once */
static void ember_tiles_{S}(const T *x, const int64_t *xs, int64_t rows, int64_t cols,
                            T *t, int64_t ldt, T *c, int64_t ldc) {
    for (int64_t j = 0; j < rows; j++)
        for (int64_t d = 0; d < cols; d++) {
            const T v = x[j * xs[2] + d * xs[3]];
            if (t) t[d * ldt + j] = v;
            if (c) c[j * ldc + d] = v;
        }
}

static int64_t ember_pad_{S}(int64_t n) { return (n + PADW - 1) / PADW * PADW; }

/* keys row i0 + r sees (causal: j <= i); rows past the end repeat the last one */
static void ember_block_{S}(int64_t i0, int64_t TQ, int64_t TK, int64_t causal, int64_t *nr,
                            int64_t n[4]) {
    *nr = TQ - i0 < 4 ? TQ - i0 : 4;
    for (int64_t r = 0; r < 4; r++) {
        const int64_t i = i0 + (r < *nr ? r : *nr - 1);
        n[r] = causal ? (i + 1 < TK ? i + 1 : TK) : TK;
    }
}

static T *ember_scratch_{S}(int64_t n) {
    void *p = 0;
    if (posix_memalign(&p, 64, sizeof(T) * (size_t)n) != 0) return 0;
    memset(p, 0, sizeof(T) * (size_t)n);
    return (T *)p;
}

static void ember_sdpa_{S}_run(char **ptrs, const int64_t *g, const int64_t *st,
                               int64_t lo, int64_t hi) {
    GEOM;
    const T *Q = (const T *)ptrs[0], *K = (const T *)ptrs[1], *V = (const T *)ptrs[2];
    T *O = (T *)ptrs[3];
    const T scale = (T)(*(const double *)ptrs[4]);
    const int64_t *qs = g + 7, *ks = g + 11, *vs = g + 15;
    const int64_t TKp = ember_pad_{S}(TK), DVp = ember_pad_{S}(DV);
    T *buf = ember_scratch_{S}(D * TKp + TK * DVp + 4 * TKp + 4 * DVp);
    if (!buf) { *(volatile int *)ptrs[5] = 1; return; }
    T *kt = buf, *vc = kt + D * TKp, *s = vc + TK * DVp, *ob = s + 4 * TKp;
    for (int64_t p = lo; p < hi; p++) {
        const int64_t b0 = p / B1, b1 = p % B1;
        const T *q = Q + b0 * qs[0] + b1 * qs[1];
        ember_tiles_{S}(K + b0 * ks[0] + b1 * ks[1], ks, TK, D, kt, TKp, 0, 0);
        ember_tiles_{S}(V + b0 * vs[0] + b1 * vs[1], vs, TK, DV, 0, 0, vc, DVp);
        T *out = O + p * TQ * DV;
        for (int64_t i0 = 0; i0 < TQ; i0 += 4) {
            int64_t nr, n[4];
            ember_block_{S}(i0, TQ, TK, CAUSAL, &nr, n);
            const T *a[4];
            for (int64_t r = 0; r < 4; r++) a[r] = q + (i0 + (r < nr ? r : nr - 1)) * qs[2];
            ember_mm4_{S}(a[0], a[1], a[2], a[3], qs[3], D, kt, TKp, n[3], s, TKp);
            T l[4];
            for (int64_t r = 0; r < nr; r++) l[r] = ember_softmax_row_{S}(s + r * TKp, n[r], scale);
            /* O = e v over the keys all 4 rows see; each row's last few keys apart (a
               masked key must not reach a row, not even as 0 * NaN) */
            ember_mm4_{S}(s, s + TKp, s + 2 * TKp, s + 3 * TKp, 1, n[0], vc, DVp, DV, ob, DVp);
            for (int64_t r = 0; r < nr; r++) {
                for (int64_t j = n[0]; j < n[r]; j++)
                    ember_axpy_{S}(ob + r * DVp, s[r * TKp + j], vc + j * DVp, DVp);
                T *restrict orow = out + (i0 + r) * DV;
                const T *restrict obr = ob + r * DVp;
                const T lr = l[r];
#pragma omp simd
                for (int64_t c = 0; c < DV; c++) orow[c] = obr[c] / lr;
            }
        }
    }
    free(buf);
}

void ember_sdpa_{S}(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_sdpa_launch(ember_sdpa_{S}_run, ptrs, g, nthreads);
}

/* acc[j][0..nc) += sum_r x_r[j] * y_r[0..nc) for the rows r that see key j (in row
   order): dK += dSᵀ q and dV += Pᵀ dO for one block of rows */
static void ember_rank4_{S}(T *restrict acc, int64_t lda, const T *x, int64_t ldx,
                            const T *y, int64_t ldy, int64_t nc, int64_t nr,
                            const int64_t n[4]) {
    int64_t j0 = 0;
    if (nr == 4) {
        for (int64_t cv = 0; cv < nc; cv += VL) {
            const VT y0 = *(const VT *)(y + cv), y1 = *(const VT *)(y + ldy + cv),
                y2 = *(const VT *)(y + 2 * ldy + cv), y3 = *(const VT *)(y + 3 * ldy + cv);
            for (int64_t j = 0; j < n[0]; j++) {
                VT v = *(VT *)(acc + j * lda + cv);
                v += x[j] * y0;
                v += x[ldx + j] * y1;
                v += x[2 * ldx + j] * y2;
                v += x[3 * ldx + j] * y3;
                *(VT *)(acc + j * lda + cv) = v;
            }
        }
        j0 = n[0];
    }
    for (int64_t j = j0; j < n[nr - 1]; j++)
        for (int64_t r = 0; r < nr; r++)
            if (j < n[r]) ember_axpy_{S}(acc + j * lda, x[r * ldx + j], y + r * ldy, nc);
}

static void ember_sdpa_grad_{S}_run(char **ptrs, const int64_t *g, const int64_t *st,
                                    int64_t lo, int64_t hi) {
    GEOM;
    const int64_t NB = g[0];
    const T *DO = (const T *)ptrs[0], *Q = (const T *)ptrs[1], *K = (const T *)ptrs[2],
        *V = (const T *)ptrs[3];
    T *OUT = (T *)ptrs[4];
    const T scale = (T)(*(const double *)ptrs[5]);
    const int64_t *qs = g + 7, *ks = g + 11, *vs = g + 15, *gs = g + 19;
    const int64_t TKp = ember_pad_{S}(TK), Dp = ember_pad_{S}(D), DVp = ember_pad_{S}(DV);
    T *buf = ember_scratch_{S}(D * TKp + TK * Dp + DV * TKp + TK * Dp + TK * DVp
                               + 4 * (Dp + DVp + 2 * TKp + Dp));
    if (!buf) { *(volatile int *)ptrs[6] = 1; return; }
    T *kt = buf, *kc = kt + D * TKp, *vt = kc + TK * Dp, *dk = vt + DV * TKp,
        *dv = dk + TK * Dp, *qc = dv + TK * DVp, *gc = qc + 4 * Dp, *s = gc + 4 * DVp,
        *dp = s + 4 * TKp, *dqb = dp + 4 * TKp;
    T *dQ = OUT, *dK = OUT + NB * TQ * D, *dV = dK + NB * TK * D;
    for (int64_t p = lo; p < hi; p++) {
        const int64_t b0 = p / B1, b1 = p % B1;
        const T *q = Q + b0 * qs[0] + b1 * qs[1], *go = DO + b0 * gs[0] + b1 * gs[1];
        ember_tiles_{S}(K + b0 * ks[0] + b1 * ks[1], ks, TK, D, kt, TKp, kc, Dp);
        ember_tiles_{S}(V + b0 * vs[0] + b1 * vs[1], vs, TK, DV, vt, TKp, 0, 0);
        memset(dk, 0, sizeof(T) * (size_t)(TK * Dp));
        memset(dv, 0, sizeof(T) * (size_t)(TK * DVp));
        T *dqo = dQ + p * TQ * D;
        for (int64_t i0 = 0; i0 < TQ; i0 += 4) {
            int64_t nr, n[4];
            ember_block_{S}(i0, TQ, TK, CAUSAL, &nr, n);
            for (int64_t r = 0; r < 4; r++) {
                const int64_t i = i0 + (r < nr ? r : nr - 1);
                for (int64_t d = 0; d < D; d++) qc[r * Dp + d] = q[i * qs[2] + d * qs[3]];
                for (int64_t c = 0; c < DV; c++) gc[r * DVp + c] = go[i * gs[2] + c * gs[3]];
            }
            ember_mm4_{S}(qc, qc + Dp, qc + 2 * Dp, qc + 3 * Dp, 1, D, kt, TKp, n[3], s, TKp);
            ember_mm4_{S}(gc, gc + DVp, gc + 2 * DVp, gc + 3 * DVp, 1, DV, vt, TKp, n[3], dp,
                          TKp);                                      /* dP = dO vT */
            for (int64_t r = 0; r < nr; r++) {
                T *restrict sr = s + r * TKp, *restrict dpr = dp + r * TKp;
                const int64_t nn = n[r];
                const T l = ember_softmax_row_{S}(sr, nn, scale);
#pragma omp simd
                for (int64_t j = 0; j < nn; j++) sr[j] = sr[j] / l;           /* P */
                T di = 0;
#pragma omp simd reduction(+:di)
                for (int64_t j = 0; j < nn; j++) di += sr[j] * dpr[j];
#pragma omp simd
                for (int64_t j = 0; j < nn; j++) dpr[j] = sr[j] * (dpr[j] - di);  /* dS */
            }
            ember_mm4_{S}(dp, dp + TKp, dp + 2 * TKp, dp + 3 * TKp, 1, n[0], kc, Dp, D, dqb,
                          Dp);                                       /* dQ = dS k */
            for (int64_t r = 0; r < nr; r++) {
                for (int64_t j = n[0]; j < n[r]; j++)
                    ember_axpy_{S}(dqb + r * Dp, dp[r * TKp + j], kc + j * Dp, Dp);
                T *restrict dqr = dqo + (i0 + r) * D;
                const T *restrict db = dqb + r * Dp;
#pragma omp simd
                for (int64_t d = 0; d < D; d++) dqr[d] = db[d] * scale;
            }
            ember_rank4_{S}(dk, Dp, dp, TKp, qc, Dp, Dp, nr, n);
            ember_rank4_{S}(dv, DVp, s, TKp, gc, DVp, DVp, nr, n);
        }
        T *dko = dK + p * TK * D, *dvo = dV + p * TK * DV;
        for (int64_t j = 0; j < TK; j++) {
#pragma omp simd
            for (int64_t d = 0; d < D; d++) dko[j * D + d] = dk[j * Dp + d] * scale;
#pragma omp simd
            for (int64_t c = 0; c < DV; c++) dvo[j * DV + c] = dv[j * DVp + c];
        }
    }
    free(buf);
}

void ember_sdpa_grad_{S}(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_sdpa_launch(ember_sdpa_grad_{S}_run, ptrs, g, nthreads);
}
#undef VT
#undef VL
#undef PADW
"""

#: dtypes with a kernel: (C type, exp function, suffix).
DTYPES = {np.dtype(np.float32): ("float", "expf", "f32"),
          np.dtype(np.float64): ("double", "exp", "f64")}
_state: dict = {}


def source(mvec=()) -> str:
    """The C source of both kernels for both dtypes (``mvec``: the compiler's libmvec)."""
    want = {name: arity for name, arity in mvec if name in ("exp", "expf")}
    body = "".join(
        f"#define T {t}\n#define EXP {e}\n"
        + _BODY.replace("{S}", s)
        + "#undef T\n#undef EXP\n" for t, e, s in DTYPES.values())
    return _HEAD + mvec_decls(want) + body


def kernels():
    """``{"sdpa_f32": fn, ...}``: the compiled library's entry points, or None (no compiler)."""
    if "fns" not in _state:
        cc = find_compiler()
        if cc is None:
            return None
        lib = cache.load(source(cc.mvec), cc)
        _pool.install(lib)
        fns = {}
        for op in ("sdpa", "sdpa_grad"):
            for _, _, s in DTYPES.values():
                f = getattr(lib, f"ember_{op}_{s}")
                f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
                f.restype = None
                fns[f"{op}_{s}"] = f
        _state["lib"], _state["fns"] = lib, fns
    return _state["fns"]


def available() -> bool:
    """Whether the kernels can be built here (a working C compiler)."""
    return find_compiler() is not None


def fits(*arrays) -> bool:
    """Whether the kernels take these operands: one float32/float64 dtype, no empty dim."""
    dt = arrays[0].dtype
    return dt in DTYPES and all(a.dtype == dt and a.size for a in arrays)


def _heads(a: np.ndarray, b0: int, b1: int) -> np.ndarray:
    """``a`` as ``(b0, b1, T, D)``: a view when its strides allow, else a contiguous copy."""
    shape = (b0, b1) + a.shape[-2:]
    try:
        return np.reshape(a, shape, copy=False)
    except ValueError:
        return np.ascontiguousarray(a).reshape(shape)


def _geometry(batch, arrays):
    """(g, 4-D views) for operands with the leading ``batch`` dims (collapsed into two)."""
    b1 = batch[-1] if batch else 1
    b0 = math.prod(batch[:-1]) if batch else 1
    views = [_heads(a, b0, b1) for a in arrays]
    q, k, v = views[-3:]
    causal = 0
    geo = [b0 * b1, b1, q.shape[2], k.shape[2], q.shape[3], v.shape[3], causal]
    for a in views[-3:] + (views[:1] if len(views) == 4 else [views[-1]]):
        geo.extend(s // a.itemsize for s in a.strides)
    return np.array(geo, np.int64), views


def _run(name, dtype, views, out, g, scale):
    fn = _state["fns"][f"{name}_{DTYPES[dtype][2]}"]
    err = ctypes.c_int(0)
    sc = ctypes.c_double(scale)
    ptrs = [a.ctypes.data for a in views] + [out.ctypes.data, ctypes.addressof(sc),
                                             ctypes.addressof(err)]
    fn((ctypes.c_void_p * len(ptrs))(*ptrs), g.ctypes.data, num_threads())
    if err.value:
        raise MemoryError(f"attention_kernels.{name}: out of memory for a head's scratch")


def sdpa(q, k, v, scale: float, is_causal: bool) -> np.ndarray:
    """``softmax(q kᵀ * scale [causal]) v`` for operands that :func:`fits`."""
    batch = q.shape[:-2]
    g, views = _geometry(batch, (q, k, v))
    g[6] = int(bool(is_causal))
    out = np.empty(batch + (q.shape[-2], v.shape[-1]), q.dtype)
    _run("sdpa", q.dtype, views, out, g, scale)
    return out


def sdpa_grad(grad, q, k, v, scale: float, is_causal: bool) -> np.ndarray:
    """The flat ``dq | dk | dv`` (each C-ordered) of :func:`sdpa` for output gradient ``grad``."""
    batch = q.shape[:-2]
    g, views = _geometry(batch, (grad, q, k, v))
    g[6] = int(bool(is_causal))
    n = math.prod(batch) * (q.shape[-2] * q.shape[-1] + k.shape[-2] * k.shape[-1]
                            + v.shape[-2] * v.shape[-1])
    out = np.empty(n, q.dtype)
    _run("sdpa_grad", q.dtype, views, out, g, scale)
    return out
