"""Cross-entropy of a small classifier in one C call: loss, d(logits) and the bias gradient.

``ce_rows`` computes, for logits ``z`` of shape ``(N, C)`` (given, or made here as
``a @ b`` for a small ``C``; a bias row ``(C,)`` optionally added), integer targets ``t``
``(N,)`` and an ``ignore_index``:

* ``loss = sum over kept rows of log_softmax(z)[i, t_i] / -count`` (``count``: the kept
  rows; PyTorch's ``reduction='mean'`` without class weights),
* ``d = g_i * (onehot(t_i) - exp(log_softmax(z)))`` with ``g_i = seed / -count`` on kept
  rows and 0 on ignored ones (the loss's backward seeded with ``seed``), and optionally
* ``db = d.sum(0)`` (the bias gradient, summed in double, rounded once).

The same arithmetic, in the same order per element, as the graph the ``ce_rows`` pass
(:mod:`ember.graph.passes.ce_rows`) replaces: NumPy's log-softmax formula (shift by the
row max, ``(z - m) - log(sum(exp(z - m)))``), ``exp`` of the log-softmax for the softmax,
the loss's sum in double, its division in float32. Rows run 16 at a time, each class's
values in one vector of the 16 rows (libmvec's ``expf``/``logf`` where the compiler has
them); a product ``a @ b`` is summed in that layout (one FMA chain per logit, in ``k``
order: rounding differs from a BLAS call's). One library per class count ``C`` (a compile
constant).

With ``lr`` (the classifier of an MLP step under plain SGD, ``a`` the feature-major
layer input ``h.T`` read as ``(N, K)``, ``b = W.T``) the same call goes on once ``d`` is
complete (:c:func:`head`): the input gradient ``W.T @ d.T`` masked by relu's backward
(``h <= 0`` -> +0) with its row sums, the weight gradient ``d.T @ a`` (lanes summed
pairwise), and the SGD steps of ``W``, the bias and optionally the previous layer's bias
(one rounding each, ``fmaf``), into new arrays.

A target outside ``[0, C)`` that is not ``ignore_index`` raises
:class:`~ember.errors.EmberIndexError` (as the gather it replaces). Float32 only; without
a C compiler or fast launcher, :func:`ce_rows` computes the same in NumPy.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import EmberIndexError
from . import cache, launch
from .prelude import mvec_decls
from .toolchain import find_compiler

__all__ = ["ce_rows", "available", "MAX_CLASSES", "MAX_PRODUCT_CLASSES"]

#: most classes ``ce_rows`` takes (each block of 16 rows keeps ``C`` vectors on the stack).
MAX_CLASSES = 1024
#: most classes for which the logits' product is made here (``C`` vector accumulators).
MAX_PRODUCT_CLASSES = 16
_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)

_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define BI 16
#define RB BI
typedef float vf __attribute__((vector_size(64)));
static inline vf ldv(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }

/* zt[c][o + r] = sum over k of A[i0 + r][k] * B[k][c], r < rows (<= BI) */
static void product(const float *A, int64_t sa0, int64_t sa1, const float *B, int64_t sb0,
                    int64_t sb1, int64_t K, int64_t i0, int rows, float zt[][RB], int o) {
    if (sa0 == 1 && rows == BI && NC <= MAXP) {
        vf acc[NC];
        for (int c = 0; c < NC; c++) acc[c] = (vf){0};
        for (int64_t k = 0; k < K; k++) {
            const vf a = ldv(A + i0 + k * sa1);
            const float *bk = B + k * sb0;
#pragma GCC unroll 16
            for (int c = 0; c < NC; c++) acc[c] += a * bk[c * sb1];
        }
        for (int c = 0; c < NC; c++) memcpy(&zt[c][o], &acc[c], sizeof acc[c]);
        return;
    }
    for (int r = 0; r < rows; r++) {
        const float *ar = A + (i0 + r) * sa0;
        for (int c = 0; c < NC; c++) {
            const float *bc = B + c * sb1;
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s += ar[k * sa1] * bc[k * sb0];
            zt[c][o + r] = s;
        }
    }
}

/* the loss terms, d(logits) rows and bias-gradient terms of rows i0 + o + r, r < rows */
static void ce_block(float zt[][RB], int o, int rows, int64_t i0, const int64_t *t,
                     int64_t ts, int64_t ii, const float *bias, float r0, float *d,
                     double *lsum, double *dbs) {
    float m[BI], s[BI], ls[BI], gi[BI];
    int tr[BI];             /* the row's target, -1 when ignored (int: one vector) */
    for (int r = rows; r < BI; r++)
        for (int c = 0; c < NC; c++) zt[c][o + r] = 0.0f;
    if (bias)
        for (int c = 0; c < NC; c++) {
            const float bc = bias[c];
#pragma omp simd
            for (int r = 0; r < BI; r++) zt[c][o + r] += bc;
        }
    for (int r = 0; r < BI; r++) {
        const int64_t ti = r < rows ? t[(i0 + o + r) * ts] : ii;
        tr[r] = ti == ii ? -1 : (int)ti;
        gi[r] = ti == ii ? 0.0f : r0;
    }
#pragma omp simd
    for (int r = 0; r < BI; r++) m[r] = zt[0][o + r];
    for (int c = 1; c < NC; c++) {
#pragma omp simd
        for (int r = 0; r < BI; r++) {
            const float z = zt[c][o + r];
            m[r] = (z > m[r] || z != z) ? z : m[r];
        }
    }
#pragma omp simd
    for (int r = 0; r < BI; r++) s[r] = 0.0f;
    for (int c = 0; c < NC; c++) {
#pragma omp simd
        for (int r = 0; r < BI; r++) { zt[c][o + r] -= m[r]; s[r] += expf(zt[c][o + r]); }
    }
#pragma omp simd
    for (int r = 0; r < BI; r++) ls[r] = logf(s[r]);
    for (int c = 0; c < NC; c++) {
#pragma omp simd
        for (int r = 0; r < BI; r++) zt[c][o + r] -= ls[r];          /* log-softmax */
    }
    for (int r = 0; r < rows; r++)
        if (tr[r] >= 0) *lsum += (double)zt[tr[r]][o + r];
    for (int c = 0; c < NC; c++) {
#pragma omp simd
        for (int r = 0; r < BI; r++) {
            const float gg = tr[r] == c ? gi[r] : 0.0f;
            zt[c][o + r] = gg - expf(zt[c][o + r]) * gi[r];       /* d(logits) */
        }
    }
    for (int r = 0; r < rows; r++) {
        float *dr = d + (i0 + o + r) * NC;
        for (int c = 0; c < NC; c++) dr[c] = zt[c][o + r];
    }
    if (dbs)
        for (int c = 0; c < NC; c++)
            for (int r = 0; r < rows; r++) dbs[c] += (double)zt[c][o + r];
}

typedef int vi __attribute__((vector_size(64)));

typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

/* the sum of v's lanes, pairwise (halves, quarters...) */
static inline float hsum(vf v) {
    const v8f s = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)
                + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const v4f q = __builtin_shufflevector(s, s, 0, 1, 2, 3)
                + __builtin_shufflevector(s, s, 4, 5, 6, 7);
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* dx's next J vectors of row k (from v): J FMA chains over the classes, masked by y */
#define DX_BLOCK(J) {                                                                    \
        vf y[J], s[J];                                                                   \
        _Pragma("GCC unroll 8")                                                          \
        for (int j = 0; j < J; j++) { y[j] = ldv(yk + 16 * (v + j)); s[j] = (vf){0}; }   \
        const float *dv = dt + v * NC * 16;                                              \
        _Pragma("GCC unroll 16")                                                         \
        for (int c = 0; c < NC; c++) {                                                   \
            _Pragma("GCC unroll 8")                                                      \
            for (int j = 0; j < J; j++) s[j] += ldv(dv + 16 * (j * NC + c)) * w[c];     \
        }                                                                                \
        _Pragma("GCC unroll 8")                                                          \
        for (int j = 0; j < J; j++) {                                                    \
            const vi keep = (y[j] > 0) | (y[j] != y[j]);                                 \
            s[j] = (vf)((vi)s[j] & keep);                                                \
            rsum += s[j];                                                                \
        }                                                                                \
        _Pragma("GCC unroll 8")                                                          \
        for (int j = 0; j < J; j++) memcpy(dxk + 16 * (v + j), &s[j], sizeof s[j]);      \
    }

/* The classifier's backward once d is known, y[k][i] = A[i][k] (the layer's input, a relu
   output) and W[c][k] = B[k][c]: dx[k][i] = (y > 0 or NaN) ? sum_c W[c][k] d[i][c] : +0
   (relu's backward of the input gradient), rs[k] = sum_i dx[k][i] (float32), dw[c][k] =
   sum_i d[i][c] y[k][i], wn = W - lr dw and bn = b - lr db (one rounding each) */
static void head(const float *A, int64_t sa0, int64_t sa1, const float *B, int64_t sb0,
                 int64_t sb1, int64_t N, int64_t K, const float *d, const float *bias,
                 const float *db, float lr, float *dx, float *rs, float *dw, float *wn,
                 float *bn, float *dt) {
    /* dt: d by blocks of 16 rows, each class's 16 values one vector: dt[(v NC + c) 16 + r] */
    const int64_t nv = sa0 == 1 ? N / 16 : 0;
    for (int64_t v = 0; v < nv; v++)
        for (int c = 0; c < NC; c++)
            for (int r = 0; r < 16; r++) dt[(v * NC + c) * 16 + r] = d[(v * 16 + r) * NC + c];
    for (int64_t k = 0; k < K; k++) {
        float w[NC], dwc[NC];
        for (int c = 0; c < NC; c++) w[c] = B[k * sb0 + c * sb1];
        const float *yk = A + k * sa1;
        float *dxk = dx + k * N;
        vf rsum = (vf){0};
        int64_t v = 0;
        /* eight (then four) vectors at a time: that many FMA chains in flight, their rows'
           y loaded before any store (dx's rows may alias y's in the L1's 4 KiB address
           bits) */
        for (; v + 8 <= nv; v += 8) DX_BLOCK(8)
        for (; v + 4 <= nv; v += 4) DX_BLOCK(4)
        for (; v < nv; v++) {
            const vf y = ldv(yk + 16 * v);
            const float *dv = dt + v * NC * 16;
            vf s = (vf){0};
#pragma GCC unroll 16
            for (int c = 0; c < NC; c++) s += ldv(dv + 16 * c) * w[c];
            const vi keep = (y > 0) | (y != y);
            s = (vf)((vi)s & keep);
            memcpy(dxk + 16 * v, &s, sizeof s);
            rsum += s;
        }
        vf accw[NC];
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++) accw[c] = (vf){0};
        for (int64_t v = 0; v < nv; v++) {
            const vf y = ldv(yk + 16 * v);
            const float *dv = dt + v * NC * 16;
#pragma GCC unroll 16
            for (int c = 0; c < NC; c++) accw[c] += ldv(dv + 16 * c) * y;
        }
        float rsk = hsum(rsum);
#pragma GCC unroll 16
        for (int c = 0; c < NC; c++) dwc[c] = hsum(accw[c]);
        for (int64_t i = nv * 16; i < N; i++) {
            const float yv = yk[i * sa0];
            float s = 0.0f;
            for (int c = 0; c < NC; c++) {
                s += d[i * NC + c] * w[c];
                dwc[c] += d[i * NC + c] * yv;
            }
            s = (yv > 0 || yv != yv) ? s : 0.0f;
            dxk[i] = s;
            rsk += s;
        }
        rs[k] = rsk;
        for (int c = 0; c < NC; c++) dw[c * K + k] = dwc[c];
    }
    for (int c = 0; c < NC; c++)
        for (int64_t k = 0; k < K; k++)
            wn[c * K + k] = fmaf(-lr, dw[c * K + k], B[k * sb0 + c * sb1]);
    for (int c = 0; c < NC; c++) bn[c] = fmaf(-lr, db[c], bias[c]);
}

/* p: A (or z), B, bias, targets, scalars (seed, lr), loss (0-d), d (N, C), db (C), bad[1];
   with flag 8 (the classifier's backward, :c:func:`head`) dx (K, N), rs (K), dw (C, K),
   wn (C, K), bn (C); with flag 16 also b2 (K) and b2 - lr rs (K)
   g: N, K, flags (1 product, 2 bias, 4 db, 8 head, 16 bias2), ignore_index, sa0, sa1,
   sb0, sb1, target stride (elements) */
void ember_ce_rows(char **p, const int64_t *g, const int64_t *st, int64_t nt) {
    const float *A = (const float *)p[0], *B = (const float *)p[1];
    const int64_t *t = (const int64_t *)p[3];
    const float seed = ((const float *)p[4])[0];
    float *loss = (float *)p[5], *d = (float *)p[6], *db = (float *)p[7];
    int64_t *bad = (int64_t *)p[8];
    const int64_t N = g[0], K = g[1], fl = g[2], ii = g[3], sa0 = g[4], sa1 = g[5];
    const int64_t sb0 = g[6], sb1 = g[7], ts = g[8];
    const float *bias = (fl & 2) ? (const float *)p[2] : 0;
    (void)st; (void)nt;
    int64_t cnt = 0;
    bad[0] = -1;
    for (int64_t i = 0; i < N; i++) {
        const int64_t ti = t[i * ts];
        if (ti == ii) continue;
        if (ti < 0 || ti >= NC) { bad[0] = i; return; }
        cnt++;
    }
    const float nc = (float)(-cnt), r0 = seed / nc;
    double lsum = 0.0, dbs[NC];
    for (int c = 0; c < NC; c++) dbs[c] = 0.0;
    float zt[NC][RB];
    for (int64_t i0 = 0; i0 < N; i0 += RB) {
        const int rows = N - i0 < RB ? (int)(N - i0) : RB;
        for (int o = 0; o < rows; o += BI) {
            const int nr = rows - o < BI ? rows - o : BI;
            if (fl & 1) {
                product(A, sa0, sa1, B, sb0, sb1, K, i0 + o, nr, zt, o);
            } else {
                for (int r = 0; r < nr; r++)
                    for (int c = 0; c < NC; c++) zt[c][o + r] = A[(i0 + o + r) * sa0 + c * sa1];
            }
        }
        for (int o = 0; o < rows; o += BI)
            ce_block(zt, o, rows - o < BI ? rows - o : BI, i0, t, ts, ii, bias, r0, d, &lsum,
                     (fl & 4) ? dbs : 0);
    }
    loss[0] = (float)lsum / nc;
    if (fl & 4)
        for (int c = 0; c < NC; c++) db[c] = (float)dbs[c];
    if (fl & 8) {
        float *dt = malloc(sizeof(float) * NC * (N ? N : 1));
        if (!dt) { bad[0] = -2; return; }
        head(A, sa0, sa1, B, sb0, sb1, N, K, d, bias, db, ((const float *)p[4])[1],
             (float *)p[9], (float *)p[10], (float *)p[11], (float *)p[12], (float *)p[13], dt);
        free(dt);
        if (fl & 16) {              /* the previous layer's bias: b2 - lr * rs */
            const float lr = ((const float *)p[4])[1], *b2 = (const float *)p[14];
            const float *rs = (const float *)p[10];
            float *b2n = (float *)p[15];
            for (int64_t k = 0; k < K; k++) b2n[k] = fmaf(-lr, rs[k], b2[k]);
        }
    }
}
"""

_state: dict = {}


def _source(nc: int, mvec) -> str:
    want = {n: a for n, a in mvec if n in ("expf", "logf")}
    return ("#if defined(__GNUC__) && !defined(__clang__)\n"
            "#pragma GCC target(\"prefer-vector-width=512\")\n#endif\n"
            f"#include <math.h>\n#define NC {nc}\n#define MAXP {MAX_PRODUCT_CLASSES}\n"
            + mvec_decls(want) + _SOURCE)


def available() -> bool:
    """Whether the C kernels can run here (a C compiler and the fast launcher)."""
    if "ok" not in _state:
        _state["ok"] = find_compiler() is not None and launch.launcher() is not None
    return _state["ok"]


def _kernel(nc: int):
    """The kernel's address for ``nc`` classes (compiled or loaded once), or None."""
    fns = _state.setdefault("fns", {})
    if nc not in fns:
        fns[nc] = None
        if available():
            cc = find_compiler()
            lib = cache.load(_source(nc, cc.mvec), cc)
            _state.setdefault("libs", []).append(lib)      # NOTE: keeps it mapped
            fns[nc] = ctypes.cast(lib.ember_ce_rows, ctypes.c_void_p).value
    return fns[nc]


def _elems(a) -> tuple | None:
    """``a``'s strides in elements, or None when one is not a whole number of them."""
    it = a.itemsize
    if any(s % it for s in a.strides):
        return None
    return tuple(s // it for s in a.strides)


def _bad_target(targets, i, nc):
    t = int(targets.reshape(-1)[i])
    raise EmberIndexError(f"cross_entropy (compiled ce_rows): target {t} in row {i} is out "
                          f"of bounds: class indices must be in [0, {nc - 1}] for logits "
                          f"with {nc} classes (or equal ignore_index)")


def _plan(z_or_a, b, bias, t, ignore_index, want_db, head, bias2):
    """``(kernel address, geometry address, n, k, nc, launcher)`` for a call of this
    layout, or None (NumPy's path)."""
    n = z_or_a.shape[0]
    nc = (z_or_a if b is None else b).shape[1]
    fn = _kernel(nc) if nc <= MAX_CLASSES and n else None
    sa, ts = _elems(z_or_a), _elems(t)
    sb = (0, 0) if b is None else _elems(b)
    if fn is None or sa is None or sb is None or ts is None or z_or_a.dtype != _F32 or \
            t.dtype != _I64 or (b is not None and b.dtype != _F32) or \
            (bias is not None and (bias.dtype != _F32 or not bias.flags.c_contiguous)):
        return None
    k = 0 if b is None else z_or_a.shape[1]
    if bias2 is not None and (bias2.dtype != _F32 or not bias2.flags.c_contiguous or
                              bias2.shape != (z_or_a.shape[1],)):
        return None
    flags = (b is not None) | (bias is not None) << 1 | bool(want_db) << 2 | head << 3 | \
        (bias2 is not None) << 4
    geometry = launch.int64_address((n, k, flags, int(ignore_index), *sa, *sb, ts[0]))
    return fn, geometry, n, k, nc, launch.launcher()


_PLANS: dict = {}


def ce_rows(z_or_a, b, bias, targets, *, ignore_index=-100, seed=1.0, want_db=False,
            lr=None, bias2=None):
    """``(loss, d, db or None)`` for logits ``z_or_a`` (``b`` None) or ``z_or_a @ b`` (see
    the module docstring), float32 NumPy arrays; ``bias`` ``(C,)`` or None; ``targets``
    int64 ``(N,)`` or ``(N, 1)``.

    With ``lr`` (a product, a bias and ``want_db``: the classifier of an MLP step under SGD)
    also ``(dx, rs, dw, w_new, b_new)``: ``dx = (W.T @ d.T)`` masked where ``y = a.T`` is
    ``<= 0`` (relu's backward of the layer input's gradient), ``rs = dx.sum(1)`` (float32),
    ``dw = d.T @ a``, ``w_new = W - lr * dw`` and ``b_new = bias - lr * db`` (one rounding,
    ``lr`` in float32), with ``W = b.T``; with ``bias2`` (the previous layer's bias,
    ``(K,)``) also ``bias2 - lr * rs``."""
    head = lr is not None
    t = targets if targets.ndim == 1 else targets.reshape(z_or_a.shape[0])
    key = (z_or_a.shape, z_or_a.strides, z_or_a.dtype, t.strides, t.dtype, ignore_index,
           want_db, head, bias2 is None or (bias2.shape, bias2.dtype, bias2.flags.c_contiguous),
           None if b is None else (b.shape, b.strides, b.dtype),
           None if bias is None else (bias.dtype, bias.flags.c_contiguous))
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= 256:
            _PLANS.clear()
        plan = _PLANS[key] = _plan(z_or_a, b, bias, t, ignore_index, want_db, head,
                                   bias2) or False
    if plan is False:
        return _numpy(z_or_a, b, bias, t, ignore_index, seed, want_db, lr, bias2)
    fn, g, n, k, nc, run = plan
    loss = np.empty((), _F32)
    d = np.empty((n, nc), _F32)
    db = np.empty(nc, _F32) if want_db else d
    bad = np.empty(1, np.int64)
    x = z_or_a
    arrays = (x, x if b is None else b, x if bias is None else bias, t,
              np.array((seed, 0.0 if lr is None else lr), _F32), loss, d, db, bad)
    if head:
        extra = (np.empty((k, n), _F32), np.empty(k, _F32), np.empty((nc, k), _F32),
                 np.empty((nc, k), _F32), np.empty(nc, _F32))
        arrays += extra
        if bias2 is not None:
            b2n = np.empty(k, _F32)
            arrays += (bias2, b2n)
            extra += (b2n,)
    run(fn, arrays, g, g, 1)
    if bad[0] != -1:
        if bad[0] == -2:
            raise MemoryError("cross_entropy (compiled ce_rows): no memory for a "
                              f"({nc}, {n}) float32 scratch array")
        _bad_target(t, int(bad[0]), nc)
    out = (loss, d, db if want_db else None)
    return out + extra if head else out


def _numpy(a, b, bias, t, ignore_index, seed, want_db, lr=None, bias2=None):
    """:func:`ce_rows` in NumPy (any float dtype): the same formulas, NumPy's rounding."""
    z = a if b is None else np.matmul(a, b)
    if bias is not None:
        z = z + bias
    dt = z.dtype
    n, nc = z.shape
    keep = t != ignore_index
    if ((t < 0) | (t >= nc))[keep].any():
        _bad_target(t, int(np.flatnonzero(keep & ((t < 0) | (t >= nc)))[0]), nc)
    sh = z - z.max(axis=1, keepdims=True) if z.size else z
    lsm = sh - np.log(np.exp(sh).sum(axis=1, keepdims=True))
    idx = np.where(keep, t, 0)
    picked = np.where(keep, lsm[np.arange(n), idx] if n else lsm[:0, 0], 0)
    cnt = dt.type(-int(keep.sum()))
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.asarray(dt.type(picked.sum(dtype=np.float64)) / cnt, dt)
        gi = np.where(keep, dt.type(seed) / cnt, dt.type(0)).astype(dt)
    onehot = idx[:, None] == np.arange(nc)
    d = (np.where(onehot, gi[:, None], dt.type(0)) - np.exp(lsm) * gi[:, None]).astype(dt)
    db = d.sum(axis=0, dtype=np.float64).astype(dt) if want_db else None
    if lr is None:
        return loss, d, db
    y, w = a.T, b.T
    dx = (w.T @ d.T).astype(dt)
    dx[~((y > 0) | (y != y))] = 0
    dw = (d.T @ a).astype(dt)
    lr = np.float64(np.float32(lr))
    w_new = (w.astype(np.float64) - lr * dw).astype(dt)
    b_new = (bias.astype(np.float64) - lr * db).astype(dt)
    rs = dx.sum(axis=1, dtype=dt)
    out = (loss, d, db, dx, rs, dw, w_new, b_new)
    if bias2 is not None:
        out += ((bias2.astype(np.float64) - lr * rs).astype(dt),)
    return out
