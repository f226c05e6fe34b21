"""The C source of :mod:`.attention_kernels` (the loops and the notes on why they look so).

:data:`HEAD` is shared (with the x86 helpers of :mod:`.attention_x86_c`); :data:`BODY`
(helpers) and :data:`FWD` (the forward kernel; the backward is :mod:`.attention_grad_c`),
one copy per dtype, are written with ``T`` (element type), ``EXP`` (its ``exp``) and suffix
``{S}``, instantiated by :func:`.attention_kernels.source`.
Every output is written through its own pointer and strides (``g[23:35]``), so a graph can
have the results land in the layout their readers want (:mod:`ember.graph.passes.sdpa_layout`).
"""
from __future__ import annotations

from .attention_x86_c import X86

HEAD = r"""#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);
void (*ember_parallel_hook)(ember_run_fn, char **, const int64_t *, const int64_t *,
                            int64_t, int64_t, int64_t) = 0;

/* g: see attention_kernels.py (dims, then the operands' and the outputs' strides) */
#define GEOM const int64_t B1 = g[1], TQ = g[2], TK = g[3], D = g[4], DV = g[5], \
    CAUSAL = g[6]; (void)st

""" + X86 + r"""
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

BODY = r"""
typedef T ember_v{S} __attribute__((vector_size(32)));
#define VT ember_v{S}
typedef __typeof__((VT){0} > (VT){0}) ember_vi{S};
#define VI ember_vi{S}
typedef T ember_u{S} __attribute__((vector_size(32), aligned(sizeof(T))));
#define VU ember_u{S}
#define VL ((int64_t)(32 / sizeof(T)))
#define PADW (2 * VL)          /* tile rows are padded (with zeros) to a multiple of this */
/* NOTE: an empty asm that "changes" a vector: GCC otherwise folds the B loads into every
   FMA (12 loads per 8 FMAs: load-bound); this keeps each B vector in a register */
#define KEEP(x) __asm__("" : "+x"(x))

/* A 4-row block of C = A B: row r of A is a_r[k * ak] (a_r = a + min(r, nr - 1) * ar),
   B has rows b + k * ldb (nc columns, nc a multiple of VL), C rows c + r * ldc (4 rows
   are written, rows past nr are scratch). Row r sums over its own k range [lo_r, hi_r),
   in increasing k, all in registers (8 accumulators, a 4 x 16 float32 block): the range
   all rows share unconditionally, the few k around it (a causal block's rows differ by
   one key each) with a test per row, so a row never touches a k outside its range (not
   even as 0 * NaN: a masked key's NaN must not reach the rows that do not see it).
   NOTE: those k were axpys on C in memory after the block (~6% of the backward).
   Row r of C is stored as acc * mul[r] + add (mul = 0: acc + add; add = -0.0 then
   folds away), unaligned: C may be a kernel output (no round trip through a tile). */
static inline __attribute__((always_inline))
void ember_blk_{S}(const T *a, int64_t ar, int64_t ak, int64_t nr, const int64_t *lo,
                   const int64_t *hi, const T *restrict b, int64_t ldb, int64_t nc,
                   T *restrict c, int64_t ldc, const T *mul, T add) {
    const T *ap[4];
    int64_t k0 = lo[0], k1 = hi[0], kl = lo[0], kh = hi[0], l4[4], h4[4];
    for (int64_t r = 0; r < 4; r++) {
        const int64_t rr = r < nr ? r : nr - 1;
        ap[r] = a + rr * ar;
        l4[r] = lo[rr]; h4[r] = hi[rr];
        k0 = l4[r] > k0 ? l4[r] : k0;
        k1 = h4[r] < k1 ? h4[r] : k1;
        kl = l4[r] < kl ? l4[r] : kl;
        kh = h4[r] > kh ? h4[r] : kh;
    }
    if (k1 < k0) k1 = k0;
    const T *a0 = ap[0], *a1 = ap[1], *a2 = ap[2], *a3 = ap[3];
#define EMBER_ST(p, v, r) (*(VU *)(p) = mul ? (v) * mul[r] + add : (v) + add)
#define EMBER_IN(r, k) (l4[r] <= (k) && (k) < h4[r])
#define EMBER_EDGE2(from, to)                                                           \
    for (int64_t k = from; k < to; k++) {                                               \
        const T *bk = b + k * ldb + j;                                                  \
        const VT b0 = *(const VU *)bk, b1 = *(const VU *)(bk + VL);                     \
        if (EMBER_IN(0, k)) { const T x = a0[k * ak]; c0 += x * b0; e0 += x * b1; }      \
        if (EMBER_IN(1, k)) { const T x = a1[k * ak]; c1 += x * b0; e1 += x * b1; }      \
        if (EMBER_IN(2, k)) { const T x = a2[k * ak]; c2 += x * b0; e2 += x * b1; }      \
        if (EMBER_IN(3, k)) { const T x = a3[k * ak]; c3 += x * b0; e3 += x * b1; }      \
    }
#define EMBER_EDGE1(from, to)                                                           \
    for (int64_t k = from; k < to; k++) {                                               \
        const VT b0 = *(const VU *)(b + k * ldb + j);                                   \
        if (EMBER_IN(0, k)) c0 += a0[k * ak] * b0;                                      \
        if (EMBER_IN(1, k)) c1 += a1[k * ak] * b0;                                      \
        if (EMBER_IN(2, k)) c2 += a2[k * ak] * b0;                                      \
        if (EMBER_IN(3, k)) c3 += a3[k * ak] * b0;                                      \
    }
    int64_t j = 0;
    for (; j + PADW <= nc; j += PADW) {
        VT c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, e0 = {0}, e1 = {0}, e2 = {0}, e3 = {0};
        EMBER_EDGE2(kl, k0)
        const T *bk = b + k0 * ldb + j;
        for (int64_t k = k0; k < k1; k++, bk += ldb) {
            VT b0 = *(const VU *)bk, b1 = *(const VU *)(bk + VL);
            KEEP(b0); KEEP(b1);
            const T x0 = a0[k * ak], x1 = a1[k * ak], x2 = a2[k * ak], x3 = a3[k * ak];
            c0 += x0 * b0; e0 += x0 * b1;
            c1 += x1 * b0; e1 += x1 * b1;
            c2 += x2 * b0; e2 += x2 * b1;
            c3 += x3 * b0; e3 += x3 * b1;
        }
        EMBER_EDGE2(k1, kh)
        EMBER_ST(c + j, c0, 0); EMBER_ST(c + j + VL, e0, 0);
        EMBER_ST(c + ldc + j, c1, 1); EMBER_ST(c + ldc + j + VL, e1, 1);
        EMBER_ST(c + 2 * ldc + j, c2, 2); EMBER_ST(c + 2 * ldc + j + VL, e2, 2);
        EMBER_ST(c + 3 * ldc + j, c3, 3); EMBER_ST(c + 3 * ldc + j + VL, e3, 3);
    }
    /* one vector left: a causal block's scores end at a multiple of VL, not of PADW
       (rounding up to PADW computed ~8 wasted columns per row: ~4% of the W3 forward) */
    if (j < nc) {
        VT c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
        EMBER_EDGE1(kl, k0)
        const T *bk = b + k0 * ldb + j;
        for (int64_t k = k0; k < k1; k++, bk += ldb) {
            VT b0 = *(const VU *)bk;
            KEEP(b0);
            c0 += a0[k * ak] * b0; c1 += a1[k * ak] * b0;
            c2 += a2[k * ak] * b0; c3 += a3[k * ak] * b0;
        }
        EMBER_EDGE1(k1, kh)
        EMBER_ST(c + j, c0, 0); EMBER_ST(c + ldc + j, c1, 1);
        EMBER_ST(c + 2 * ldc + j, c2, 2); EMBER_ST(c + 3 * ldc + j, c3, 3);
    }
#undef EMBER_IN
#undef EMBER_ST
#undef EMBER_EDGE2
#undef EMBER_EDGE1
}

/* ember_blk out of line, one copy: for the paths through a row buffer (a head's last
   rows when T is no multiple of 4, D no multiple of PADW). NOTE: every inlined copy is
   ~0.1 s of the compiler's time (the backward had 8; GCC also clones a plain noinline
   function per constant argument set, hence noclone); the hot calls stay inlined. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((noinline, noclone))
#else
__attribute__((noinline))
#endif
static void ember_blkx_{S}(const T *a, int64_t ar, int64_t ak, int64_t nr,
                           const int64_t *lo, const int64_t *hi, const T *restrict b,
                           int64_t ldb, int64_t nc, T *restrict c, int64_t ldc,
                           const T *mul, T add) {
    ember_blk_{S}(a, ar, ak, nr, lo, hi, b, ldb, nc, c, ldc, mul, add);
}

/* the sum of a vector's lanes: AVX halving adds (a lane-by-lane loop spilled the vector
   to the stack, ~3% of the backward per reduction; GCC does not fold a generic shuffle's
   mask built in a loop) */
static inline T ember_hsum_{S}(VT v) {
#if defined(__AVX__)
    if (sizeof(T) == 4) {
        const __m256 x = (__m256)v;
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        return (T)_mm_cvtss_f32(h);
    } else {
        const __m256d x = (__m256d)v;
        __m128d h = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
        h = _mm_add_sd(h, _mm_unpackhi_pd(h, h));
        return (T)_mm_cvtsd_f64(h);
    }
#else
    T l = 0;
    for (int64_t t = 0; t < VL; t++) l += v[t];
    return l;
#endif
}

/* One row's n scores s_j (unscaled dots) -> exp(scale s_j - max), zeros up to the next
   multiple of VL; returns their sum. */
static inline T ember_softmax_row_{S}(T *restrict s, int64_t n, T scale) {
    /* NOTE: how a NaN enters the max does not matter: s_j - max is NaN for a NaN s_j (or
       everywhere for a NaN max), so the sum and then the whole row are NaN, as in NumPy */
    /* the max in a vector (a scalar reduction spills to the stack once per row and
       stalls on the store forward), the leftover lanes apart */
    T m = s[0] * scale;
    VT mv = {0};
    mv += m;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        const VT x = *(const VT *)(s + j) * scale;
        *(VT *)(s + j) = x;
        const VI gt = x > mv;
        mv = (VT)((gt & (VI)x) | (~gt & (VI)mv));
    }
    for (int64_t t = 0; t < VL; t++) m = mv[t] > m ? mv[t] : m;
    for (; j < n; j++) {
        s[j] *= scale;
        m = s[j] > m ? s[j] : m;
    }
    /* exp runs on whole vectors only (a scalar expf per leftover lane costs more than the
       vector); the padding lanes get exp(0), not exp(-inf): libmvec takes a slow scalar
       path for lanes far below 0 */
    const int64_t nv = (n + VL - 1) / VL * VL;
    for (int64_t j = n; j < nv; j++) s[j] = m;
    for (int64_t j = 0; j < nv; j += VL) {
        VT x;
#if defined(__AVX2__) && defined(__FMA__)
        if (sizeof(T) == 4) {
            x = (VT)ember_exp8((__m256)(*(const VT *)(s + j) - m));
        } else
#endif
        {
#pragma omp simd
            for (int64_t t = 0; t < VL; t++) x[t] = EXP(s[j + t] - m);
        }
        *(VT *)(s + j) = x;
    }
    for (int64_t j = n; j < nv; j++) s[j] = 0;
    VT lv = {0};
    for (int64_t j = 0; j < nv; j += VL) lv += *(const VT *)(s + j);
    return ember_hsum_{S}(lv);
}

/* The backward's row: scores s (n scaled dots, computed up to the next multiple of VL)
   and dP = dO vT in dp -> P = softmax(s) in s and dS = P (dP - sum_j P_j dP_j) in dp, on
   whole vectors (the lanes past n are 0 in P: a masked column's dP, maybe a NaN value's,
   takes no part). Three passes (max; e = exp(s - max) with sum e and sum e dP; P and
   dS), no scalar prologue/epilogue per loop: the old five row loops were ~13%. */
static inline void ember_grad_row_{S}(T *restrict s, T *restrict dp, int64_t n) {
    const int64_t nv = (n + VL - 1) / VL * VL;
    VT lane;
    for (int64_t t = 0; t < VL; t++) lane[t] = (T)t;
    /* lanes of the last vector that are in the row */
    const VI last = lane < (VT){0} + (T)(n - (nv - VL));
    VT mv = {0};
    mv += s[0];
    for (int64_t j = 0; j < nv; j += VL) {
        VT x = *(const VT *)(s + j);
        if (j + VL == nv) x = (VT)((last & (VI)x) | (~last & (VI)mv));
        const VI gt = x > mv;
        mv = (VT)((gt & (VI)x) | (~gt & (VI)mv));
    }
    T m = s[0];
    for (int64_t t = 0; t < VL; t++) m = mv[t] > m ? mv[t] : m;
    /* NOTE: the padding lanes take exp(0), not that of a masked score: libmvec takes a
       slow scalar path for lanes out of range (or NaN) */
    VT lv = {0}, dv = {0};
    for (int64_t j = 0; j < nv; j += VL) {
        VT x = *(const VT *)(s + j) - m, d = *(const VT *)(dp + j);
        if (j + VL == nv) {
            x = (VT)(last & (VI)x);
            d = (VT)(last & (VI)d);
            *(VT *)(dp + j) = d;
        }
#if defined(__AVX2__) && defined(__FMA__)
        if (sizeof(T) == 4) {
            x = (VT)ember_exp8((__m256)x);
        } else
#endif
        {
            *(VT *)(s + j) = x;
#pragma omp simd
            for (int64_t t = 0; t < VL; t++) x[t] = EXP(s[j + t]);
        }
        if (j + VL == nv) x = (VT)(last & (VI)x);
        *(VT *)(s + j) = x;
        lv += x;
        dv += x * d;
    }
    const T il = 1 / ember_hsum_{S}(lv), di = ember_hsum_{S}(dv) * il;
    for (int64_t j = 0; j < nv; j += VL) {
        const VT p = *(const VT *)(s + j) * il;
        *(VT *)(s + j) = p;
        *(VT *)(dp + j) = p * (*(const VT *)(dp + j) - di);
    }
}

/* t[d * ldt + j] = x[j, d] (a head's rows x cols operand transposed): float32 rows with
   unit stride go by 8 x 8 blocks transposed in AVX registers (a scalar transpose was ~10%
   of the kernel), the rest element by element */
static void ember_tr_{S}(const T *x, const int64_t *xs, int64_t rows, int64_t cols,
                         T *restrict t, int64_t ldt) {
    int64_t r8 = 0, c8 = 0;
#if defined(__AVX__)
    if (sizeof(T) == 4 && xs[3] == 1) {
        r8 = rows / 8 * 8; c8 = cols / 8 * 8;
        for (int64_t j = 0; j < r8; j += 8)
            for (int64_t d = 0; d < c8; d += 8) {
                const float *src = (const float *)(x + j * xs[2] + d);
                float *dst = (float *)(t + d * ldt + j);
                ember_tr8(src, xs[2], dst, ldt);
            }
    }
#endif
    for (int64_t j = 0; j < rows; j++)
        for (int64_t d = (j < r8 ? c8 : 0); d < cols; d++)
            t[d * ldt + j] = x[j * xs[2] + d * xs[3]];
}

/* c[j * ldc + d] = x[j, d] (padding columns untouched: zeroed once). NOTE: GCC turns
   the row loop into a memmove call per 128-byte row (~5% of the backward): not here */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
static void ember_cp_{S}(const T *x, const int64_t *xs, int64_t rows, int64_t cols,
                         T *restrict c, int64_t ldc) {
    if (xs[3] == 1) {         /* inline, not memcpy: a call per 128-byte row was ~10% */
        for (int64_t j = 0; j < rows; j++) {
            const T *restrict xr = x + j * xs[2];
            T *restrict cr = c + j * ldc;
#pragma omp simd
            for (int64_t d = 0; d < cols; d++) cr[d] = xr[d];
        }
        return;
    }
    for (int64_t j = 0; j < rows; j++)
        for (int64_t d = 0; d < cols; d++) c[j * ldc + d] = x[j * xs[2] + d * xs[3]];
}

/* A head's rows x cols operand as rows ldc apart (cols padded to ldc): x itself when it
   is such a C-ordered block, else copied into c. NOTE: a GPT's heads are rows 1536
   bytes apart in the packed qkv: read in place they share a few L1 sets, and the
   products were ~5% slower than from the copy. */
static const T *ember_rows_{S}(const T *x, const int64_t *xs, int64_t rows, int64_t cols,
                               T *restrict c, int64_t ldc) {
    if (xs[3] == 1 && cols == ldc && xs[2] == ldc) return x;
    ember_cp_{S}(x, xs, rows, cols, c, ldc);
    return c;
}

static int64_t ember_pad_{S}(int64_t n) { return (n + PADW - 1) / PADW * PADW; }

/* Prefetch for writing rows [r0, r0 + n) (cols values, ld apart) of the next head's
   output (none: 0). NOTE: a head's rows in a wider layout (512 bytes apart in a GPT's
   (B, T, H, D)) are no stream the hardware prefetcher follows: each row's store missed
   (+15% time). A head ahead is early enough; a block ahead was not. */
static inline void ember_pfw_{S}(T *next, int64_t ld, int64_t r0, int64_t n, int64_t cols) {
    if (!next) return;
    for (int64_t r = r0; r < r0 + n; r++) {
        for (int64_t c = 0; c < cols; c += 64 / (int64_t)sizeof(T))
            __builtin_prefetch(next + r * ld + c, 1, 3);
        __builtin_prefetch(next + r * ld + cols - 1, 1, 3);
    }
}

/* Prefetch for reading rows [r0, r0 + n) of x[(b0, b1)] (xs: its strides) of head p + 1
   when it is this thread's. NOTE: a head's rows in a GPT's packed qkv are 1536 bytes
   apart, no stream the hardware prefetcher follows: the copies into the tiles missed on
   every row (~10% of the backward). */
static inline void ember_pfr_{S}(const T *x, const int64_t *xs, int64_t cols, int64_t p,
                                 int64_t hi, int64_t b1, int64_t r0, int64_t n,
                                 int64_t rows) {
    if (p + 1 >= hi) return;
    const T *h = x + (p + 1) / b1 * xs[0] + (p + 1) % b1 * xs[1];
    const int64_t e = r0 + n < rows ? r0 + n : rows;
    for (int64_t r = r0; r < e; r++) {
        const T *row = h + r * xs[2];
        for (int64_t c = 0; c < cols; c += 64 / (int64_t)sizeof(T))
            __builtin_prefetch(row + c * xs[3], 0, 3);
        __builtin_prefetch(row + (cols - 1) * xs[3], 0, 3);
    }
}

/* The output of head p + 1 when it is this thread's and strided (else 0): os = its
   (b0, b1, row) strides. */
static inline T *ember_next_{S}(T *base, const int64_t *os, int64_t cols, int64_t p,
                                int64_t hi, int64_t b1) {
    if (p + 1 >= hi || os[2] == cols) return 0;
    return base + (p + 1) / b1 * os[0] + (p + 1) % b1 * os[1];
}

/* the number of keys query row i sees (causal: j <= i) */
static inline int64_t ember_seen_{S}(int64_t i, int64_t TK, int64_t causal) {
    return causal ? (i + 1 < TK ? i + 1 : TK) : TK;
}

static T *ember_scratch_{S}(int64_t n) {
    void *p = 0;
    if (posix_memalign(&p, 64, sizeof(T) * (size_t)n) != 0) return 0;
    memset(p, 0, sizeof(T) * (size_t)n);
    return (T *)p;
}

"""

#: the forward kernel (``sdpa``), one copy per dtype, after :data:`BODY`
FWD = r"""
static void ember_sdpa_{S}_run(char **ptrs, const int64_t *g, const int64_t *st,
                               int64_t lo, int64_t hi) {
    GEOM;
    const T *Q = (const T *)ptrs[0], *K = (const T *)ptrs[1], *V = (const T *)ptrs[2];
    T *O = (T *)ptrs[3];
    const T scale = (T)(*(const double *)ptrs[4]);
    const int64_t *qs = g + 7, *ks = g + 11, *vs = g + 15, *os = g + 23;
    const int64_t TKp = ember_pad_{S}(TK), DVp = ember_pad_{S}(DV);
    T *buf = ember_scratch_{S}(D * TKp + TK * DVp + 4 * TKp + 4 * DVp);
    if (!buf) { *(volatile int *)ptrs[5] = 1; return; }
    T *kt = buf, *vc = kt + D * TKp, *s = vc + TK * DVp, *ob = s + 4 * TKp;
    const int64_t zero[4] = {0, 0, 0, 0}, dd[4] = {D, D, D, D};
    for (int64_t p = lo; p < hi; p++) {
        const int64_t b0 = p / B1, b1 = p % B1;
        const T *q = Q + b0 * qs[0] + b1 * qs[1];
        ember_tr_{S}(K + b0 * ks[0] + b1 * ks[1], ks, TK, D, kt, TKp);
        ember_cp_{S}(V + b0 * vs[0] + b1 * vs[1], vs, TK, DV, vc, DVp);
        T *out = O + b0 * os[0] + b1 * os[1], *nx = ember_next_{S}(O, os, DV, p, hi, B1);
        for (int64_t i0 = 0; i0 < TQ; i0 += 4) {
            const int64_t nr = TQ - i0 < 4 ? TQ - i0 : 4;
            int64_t n[4];
            for (int64_t r = 0; r < nr; r++) n[r] = ember_seen_{S}(i0 + r, TK, CAUSAL);
            ember_pfw_{S}(nx, os[2], i0, nr, DV);
            /* the scores: all columns a row of the block sees (the rest is ignored) */
            ember_blk_{S}(q + i0 * qs[2], qs[2], qs[3], nr, zero, dd, kt, TKp,
                          (n[nr - 1] + VL - 1) / VL * VL, s, TKp, 0, -(T)0);
            T l[4];
            for (int64_t r = 0; r < nr; r++)
                l[r] = ember_softmax_row_{S}(s + r * TKp, n[r], scale);
            if (nr == 4 && DV == DVp) {       /* O = e v / l, straight into the output */
                const T il[4] = {1 / l[0], 1 / l[1], 1 / l[2], 1 / l[3]};
                ember_blk_{S}(s, TKp, 1, nr, zero, n, vc, DVp, DVp, out + i0 * os[2], os[2],
                              il, -(T)0);
                continue;
            }
            /* O = e v */
            ember_blkx_{S}(s, TKp, 1, nr, zero, n, vc, DVp, DVp, ob, DVp, 0, -(T)0);
            for (int64_t r = 0; r < nr; r++) {
                T *restrict orow = out + (i0 + r) * os[2];
                const T *restrict obr = ob + r * DVp;
                const T lr = 1 / l[r];
#pragma omp simd
                for (int64_t c = 0; c < DV; c++) orow[c] = obr[c] * lr;
            }
        }
    }
    free(buf);
}

void ember_sdpa_{S}(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_sdpa_launch(ember_sdpa_{S}_run, ptrs, g, nthreads);
}

/* the same through ember_launch (codegen/launch.py): ptrs = q k v O scale err g */
void ember_sdpa_{S}_fast(char **ptrs, const int64_t *shape, const int64_t *st,
                         int64_t nthreads) {
    (void)shape; (void)st;
    ember_sdpa_launch(ember_sdpa_{S}_run, ptrs, (const int64_t *)ptrs[6], nthreads);
}
"""

#: what follows a dtype's kernels
TAIL = r"""
#undef VT
#undef VI
#undef VU
#undef VL
#undef PADW
#undef KEEP
"""
