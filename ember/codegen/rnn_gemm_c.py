"""C text of the float32 LSTM sequence kernels (:mod:`.rnn_gemm`): a register-tiled GEMM
micro-kernel in three variants and the two time loops built on it.

Each variant is the same template instantiated with one ISA's vector type and intrinsics
inside functions carrying ``__attribute__((target(...)))``, so one library holds all three
whatever ``-march`` says, and :c:func:`ember_rnn_gemm_isas` tells at run time (through
``__builtin_cpu_supports``, which also checks that the OS saves the wider registers) which
of them this CPU runs:

===========  ===============================  ==========  ====  ==========================
variant      vector (VL floats)               MR (tail)   NR    accumulators
===========  ===============================  ==========  ====  ==========================
``avx512``   ``__m512`` (16)                  6 (2)       64    24 zmm
``avx2``     ``__m256`` + FMA (8)             2           32    8 ymm
``generic``  GNU C ``vector_size(32)`` (8)    2           32    8 (SSE pairs on baseline)
===========  ===============================  ==========  ====  ==========================

The micro-kernel multiplies ``MR`` rows of A (addresses given per row, so A may be any
rows of any array with a unit column stride) by a packed ``K x NR`` panel of B (``NR`` =
four vectors) into registers: each output element is one FMA chain over ``k = 0, 1, ...,
K-1`` in order, the same chain whichever rows share its tile and however the rows are
split between threads. Rows left over past the last full block go through blocks of the
tail size; rows of a block past the last row repeat it (computed, never stored).

Entry points (``ember_<name>(char **ptrs, const int64_t *g, int64_t nthreads)``):

* ``lstm_seq_fwd_f32``: ``x`` (L, N, IN), ``h0``, ``c0`` (N, H), ``work`` (packing
  space, :func:`ember.codegen.rnn_gemm.work_size`), ``out`` (L, N, 6H) contiguous =
  ``[h | c | i f g o]``, ``w_ih`` (4H, IN), ``w_hh`` (4H, H), ``b`` (4H,) contiguous;
  ``g = [L, N, H, isa, sxt, sxn, sh0, sc0, IN]`` (strides in elements, unit last strides).
  The weights are packed ONCE per call, a panel holding the gates i, f, g, o of ``VL``
  hidden units (W_ih's panels over ``IN`` rows, then W_hh's over ``H``); per step and panel
  the micro-kernel computes the input projection ``x_t W_ihᵀ`` (into a scratch row of
  ``work``) then ``h_{t-1} W_hhᵀ``, and the sum, the bias, the gate nonlinearities and the
  state update are the second GEMM's epilogue on the registers (``ember_tanh_f32``'s
  operations on vectors; a partial panel's units go through the scalar ``lstm_epi``): no
  projection tensor outside.
* ``lstm_seq_bwd_f32``: ``gout`` (L, N, 6H), ``out`` (contiguous), ``c0``, ``work``
  -> ``dg`` (L, N, 4H) (the pre-activation gradients), scratch ``dhr`` (N, H),
  ``dc`` (N, H: out, dL/dc0), ``dh0`` (N, H); then ``w_ih``, ``w_hh``, ``dx`` (L, N, IN)
  contiguous; ``g = [L, N, H, isa, sgt, sgn, sc0, -, IN]``. Per step the local derivatives
  (the formulas of :mod:`.rnn_kernels`' ``lstm_bwd``), then ``dG_t W_hh`` and ``dG_t W_ih``
  by the micro-kernel over K blocks of ``KC`` (the blocks' partial sums added in block
  order). The weight and bias gradients (sums over all steps) are the caller's.

Batch rows never interact in an LSTM, so both loops split the rows between Ember's pool
threads for the whole sequence (no barrier per step); results do not depend on the split.
``isa``: 0 = the widest this CPU runs, else 1 generic, 2 avx2, 3 avx512 (the caller checks
:c:func:`ember_rnn_gemm_isas` first).
"""
from __future__ import annotations

from .prelude import prelude

#: lanes per vector, per isa code (1 generic, 2 avx2, 3 avx512); a packed panel is four
#: vectors wide (the forward's: the four gates of VL hidden units)
VL = {1: 8, 2: 8, 3: 16}
KC = 128

_HEAD = r"""
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#define EMBER_X86 1
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

enum { G_L, G_N, G_H, G_ISA, G_S0, G_S1, G_S2, G_S3, G_IN };
#define KC 128
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define TANH_C 7.99881172180175781f

static inline float sigf(float x) { return 0.5f * ember_tanh_f32(0.5f * x) + 0.5f; }

/* the forward's epilogue on one row of a partial panel (scalar): nu hidden units whose
   gate pre-activations are at tile[0, U, 2U, 3U]; x, cp, o start at the panel's first unit */
static void lstm_epi(const float *tile, int64_t U, int64_t nu, const float *x,
                     const float *cp, float *o, int64_t H) {
    for (int64_t u = 0; u < nu; u++) {
        const float i = sigf(tile[u] + x[u]), f = sigf(tile[U + u] + x[H + u]),
            gg = ember_tanh_f32(tile[2 * U + u] + x[2 * H + u]),
            og = sigf(tile[3 * U + u] + x[3 * H + u]);
        const float cn = f * cp[u] + i * gg;
        o[2 * H + u] = i; o[3 * H + u] = f; o[4 * H + u] = gg; o[5 * H + u] = og;
        o[H + u] = cn;
        o[u] = og * ember_tanh_f32(cn);
    }
}

/* the backward's local derivatives of one row, units [j0, H) (scalar; rnn_kernels'
   lstm_bwd; first = the last step, no recurrent gradient yet) */
static void lstm_dloc(const float *a, const float *cp, const float *ct, const float *gh,
                      const float *dhr, float *dc, float *dg, int64_t H, int first,
                      int64_t j0) {
    const float *gc = gh + H, *ga = gh + 2 * H;
    for (int64_t j = j0; j < H; j++) {
        const float i = a[j], f = a[H + j], gg = a[2 * H + j], o = a[3 * H + j],
            tc = ember_tanh_f32(ct[j]);
        const float dh = first ? gh[j] : gh[j] + dhr[j];
        const float dcv = (first ? gc[j] : gc[j] + dc[j]) + dh * o * (1.0f - tc * tc);
        dg[j] = (dcv * gg + ga[j]) * i * (1.0f - i);
        dg[H + j] = (dcv * cp[j] + ga[H + j]) * f * (1.0f - f);
        dg[2 * H + j] = (dcv * i + ga[2 * H + j]) * (1.0f - gg * gg);
        dg[3 * H + j] = (dh * tc + ga[3 * H + j]) * o * (1.0f - o);
        dc[j] = dcv * f;
    }
}

/* a weight W (4H, K) packed for the forward into rows [k0, k0 + K) of panels of KT rows
   and U units: panel p, row k0 + k, column q*U + u = W[q*H + p*U + u][k] (gate q of hidden
   unit p*U + u; zero past H). The forward packs W_ih's panels, then W_hh's. */
static void pack_fwd(const float *w, int64_t K, int64_t k0, int64_t KT, float *dst, int64_t H,
                     int64_t U) {
    const int64_t np = (H + U - 1) / U, NRv = 4 * U;
    for (int64_t p = 0; p < np; p++)
        for (int64_t c = 0; c < NRv; c++) {
            const int64_t q = c / U, j = p * U + c % U;
            float *d = dst + (p * KT + k0) * NRv + c;
            const float *src = w + (q * H + j) * K;
            for (int64_t k = 0; k < K; k++) d[k * NRv] = j < H ? src[k] : 0.0f;
        }
}

/* a weight W (K = 4H rows, C columns) packed for the backward (B = W), panels of NRv
   columns: panel p, row k, column c = W[k][p*NRv + c] (zero past C) */
static void pack_bwd(const float *w, int64_t K, int64_t C, float *dst, int64_t NRv) {
    const int64_t np = (C + NRv - 1) / NRv;
    for (int64_t p = 0; p < np; p++)
        for (int64_t k = 0; k < K; k++) {
            float *d = dst + (p * K + k) * NRv;
            const int64_t j0 = p * NRv, n = MIN(NRv, C - j0);
            memcpy(d, w + k * C + j0, (size_t)n * sizeof(float));
            for (int64_t c = n; c < NRv; c++) d[c] = 0.0f;
        }
}

/* float32 elements of one packed backward weight of C columns (K rows) */
static inline int64_t bwd_packed(int64_t K, int64_t C, int64_t NRv) {
    return (C + NRv - 1) / NRv * NRv * K;
}

int64_t ember_rnn_gemm_isas(void) {
    int64_t m = 1;
#ifdef EMBER_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) m |= 2;
    if (__builtin_cpu_supports("avx512f")) m |= 4;
#endif
    return m;
}

/* generic: GNU C vectors of 8 floats (SSE pairs on a baseline x86-64, AVX where the
   compiler targets it) */
typedef float v8g __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
static inline v8g ld_g(const float *p) { v8g v; memcpy(&v, p, sizeof v); return v; }
static inline void st_g(float *p, v8g v) { memcpy(p, &v, sizeof v); }
static inline v8g set1_g(float s) { return (v8g){s, s, s, s, s, s, s, s}; }
static inline v8g sel_g(v8i m, v8g a, v8g b) { return (v8g)((m & (v8i)a) | (~m & (v8i)b)); }
static inline v8g clamp_g(v8g x, float c) {     /* NaN passes through, as the scalar's */
    return sel_g(x > set1_g(c), set1_g(c), sel_g(x < set1_g(-c), set1_g(-c), x));
}
static inline v8g abslt_g(v8g x, v8g r, float t) {
    const v8g ax = (v8g)(((v8i)x & (v8i)set1_g(-0.0f)) ^ (v8i)x);
    return sel_g(ax < set1_g(t), x, r);
}
"""

# One copy per variant: @S@ names it; the macros before it (V, LD, ST, SET1, ADD, SUB, MUL,
# DIV, FMA(a, b, c) = a * b + c, CLAMP, ABSLT, ZERO, MRV, VLV, TGT) are its operations.
_VARIANT = r"""
#define NRV (4 * VLV)

/* ember_tanh_f32 (prelude) on a vector: the same operations in the same order */
TGT static inline V vtanh_@S@(V x) {
    const V xc = CLAMP(x, TANH_C), x2 = MUL(xc, xc);
    V p = SET1(-2.76076847742355e-16f);
    p = FMA(x2, p, SET1(2.00018790482477e-13f));
    p = FMA(x2, p, SET1(-8.60467152213735e-11f));
    p = FMA(x2, p, SET1(5.12229709037114e-08f));
    p = FMA(x2, p, SET1(1.48572235717979e-05f));
    p = FMA(x2, p, SET1(6.37261928875436e-04f));
    p = FMA(x2, p, SET1(4.89352455891786e-03f));
    V q = SET1(1.19825839466702e-06f);
    q = FMA(x2, q, SET1(1.18534705686654e-04f));
    q = FMA(x2, q, SET1(2.26843463243900e-03f));
    q = FMA(x2, q, SET1(4.89352518554385e-03f));
    return ABSLT(x, DIV(MUL(xc, p), q), 0.0004f);
}

TGT static inline V vsig_@S@(V x) {
    return FMA(SET1(0.5f), vtanh_@S@(MUL(SET1(0.5f), x)), SET1(0.5f));
}

/* acc[r][v] = sum over k of A[r][k] * B[k][v-th vector] for r < rows (a constant where it
   is inlined), one FMA chain per element in k order */
TGT static inline __attribute__((always_inline)) void mka_@S@(
        const int rows, const float *const *ar, const float *b, int64_t K, V acc[MRV][4]) {
    for (int64_t k = 0; k < K; k++) {
        const float *bk = b + k * NRV;
        V bv[4];
        for (int v = 0; v < 4; v++) bv[v] = LD(bk + v * VLV);
        for (int r = 0; r < rows; r++) {
            const V a = SET1(ar[r][k]);
            for (int v = 0; v < 4; v++) acc[r][v] = FMA(a, bv[v], acc[r][v]);
        }
    }
}

TGT static inline __attribute__((always_inline)) void mk_@S@(
        const int rows, const float *const *ar, const float *b, int64_t K, V acc[MRV][4]) {
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = ZERO;
    mka_@S@(rows, ar, b, K, acc);
}

/* rows [n0, n0 + rows) of A (row stride lda), the ones past hi repeating hi - 1 */
static inline __attribute__((always_inline)) void rows_@S@(
        const int rows, const float **ar, const float *a, int64_t lda, int64_t n0, int64_t hi) {
    for (int r = 0; r < rows; r++) ar[r] = a + (n0 + r < hi ? n0 + r : hi - 1) * lda;
}

/* the forward's geometry at one step and panel */
typedef struct {
    const float *hp, *cp, *xt, *b, *bi, *bias;
    float *ot, *tmp;
    int64_t sh, sc, sx, H, IN, u0, nu;
} fstep_@S@;

/* the input projection x_t W_ihᵀ of one block of `rows` batch rows at one step and panel,
   into the rows' NRV-float slots of tmp */
TGT static inline __attribute__((always_inline)) void xblock_@S@(
        const int rows, const fstep_@S@ *s, int64_t n0, int64_t hi) {
    const float *ar[MRV];
    V acc[MRV][4];
    rows_@S@(rows, ar, s->xt, s->sx, n0, hi);
    mk_@S@(rows, ar, s->bi, s->IN, acc);
    for (int r = 0; r < rows && n0 + r < hi; r++)
        for (int v = 0; v < 4; v++) ST(s->tmp + (n0 + r) * NRV + v * VLV, acc[r][v]);
}

/* one block of `rows` batch rows from n0 at one step and panel: h_{t-1} W_hhᵀ, then the
   gates of (that + the input projection) + b */
TGT static inline __attribute__((always_inline)) void fblock_@S@(
        const int rows, const fstep_@S@ *s, int64_t n0, int64_t hi) {
    const int64_t H = s->H, S = 6 * H;
    const float *ar[MRV];
    V acc[MRV][4];
    rows_@S@(rows, ar, s->hp, s->sh, n0, hi);
    mk_@S@(rows, ar, s->b, H, acc);
    for (int r = 0; r < rows && n0 + r < hi; r++) {
        const int64_t n = n0 + r;
        const float *xr = s->bias + s->u0, *cr = s->cp + n * s->sc + s->u0;
        float *o = s->ot + n * S + s->u0;
        if (s->IN)
            for (int v = 0; v < 4; v++) acc[r][v] = ADD(acc[r][v], LD(s->tmp + n * NRV + v * VLV));
        if (s->nu < VLV) {
            float tile[4 * VLV] __attribute__((aligned(64)));
            for (int v = 0; v < 4; v++) ST(tile + v * VLV, acc[r][v]);
            lstm_epi(tile, VLV, s->nu, xr, cr, o, H);
            continue;
        }
        const V i = vsig_@S@(ADD(acc[r][0], LD(xr))),
            f = vsig_@S@(ADD(acc[r][1], LD(xr + H))),
            gg = vtanh_@S@(ADD(acc[r][2], LD(xr + 2 * H))),
            og = vsig_@S@(ADD(acc[r][3], LD(xr + 3 * H)));
        const V cn = FMA(f, LD(cr), MUL(i, gg));
        ST(o + 2 * H, i); ST(o + 3 * H, f); ST(o + 4 * H, gg); ST(o + 5 * H, og);
        ST(o + H, cn);
        ST(o, MUL(og, vtanh_@S@(cn)));
    }
}

/* NOTE: per step and panel, first every row block's input projection (W_ih's panel, IN
   rows), then every row block's recurrent product (W_hh's panel, H rows) and gates: each
   loop's panel stays in L1 across the row blocks (one panel of IN + H rows did not: the
   projection ran at ~2/3 of the recurrent product's rate) */
TGT static void fwd_@S@(char **p, const int64_t *g, const int64_t *st, int64_t lo,
                        int64_t hi) {
    (void)st;
    const int64_t L = g[G_L], N = g[G_N], H = g[G_H], S = 6 * H, np = (H + VLV - 1) / VLV,
        IN = g[G_IN];
    const float *x = (const float *)p[0], *wp = (const float *)p[3];
    float *out = (float *)p[4];
    fstep_@S@ s;
    s.H = H;
    s.IN = IN;
    s.sx = g[G_S1];
    s.bias = (const float *)p[7];
    s.tmp = (float *)p[3] + np * (IN + H) * NRV;
    for (int64_t t = 0; t < L; t++) {
        s.hp = t ? out + (t - 1) * N * S : (const float *)p[1];
        s.cp = t ? s.hp + H : (const float *)p[2];
        s.sh = t ? S : g[G_S2];
        s.sc = t ? S : g[G_S3];
        s.xt = x + t * g[G_S0];
        s.ot = out + t * N * S;
        for (int64_t q = 0; q < np; q++) {
            s.u0 = q * VLV;
            s.nu = MIN(VLV, H - s.u0);
            s.bi = wp + q * IN * NRV;
            s.b = wp + np * IN * NRV + q * H * NRV;
            int64_t n0 = lo;
            if (IN) {
                for (; n0 + MRV <= hi; n0 += MRV) xblock_@S@(MRV, &s, n0, hi);
                for (; n0 < hi; n0 += MRT) xblock_@S@(MRT, &s, n0, hi);
            }
            for (n0 = lo; n0 + MRV <= hi; n0 += MRV) fblock_@S@(MRV, &s, n0, hi);
            for (; n0 < hi; n0 += MRT) fblock_@S@(MRT, &s, n0, hi);
        }
    }
}

/* one block of `rows` rows of C (+)= A @ B over one K block and panel */
TGT static inline __attribute__((always_inline)) void gblock_@S@(
        const int rows, const float *a, int64_t lda, const float *b, int64_t kc, int first,
        float *c, int64_t ldc, int64_t nj, int64_t n0, int64_t hi) {
    const float *ar[MRV];
    V acc[MRV][4];
    rows_@S@(rows, ar, a, lda, n0, hi);
    mk_@S@(rows, ar, b, kc, acc);
    for (int r = 0; r < rows && n0 + r < hi; r++) {
        float *cr = c + (n0 + r) * ldc;
        if (nj == NRV) {
            for (int v = 0; v < 4; v++)
                ST(cr + v * VLV, first ? acc[r][v] : ADD(LD(cr + v * VLV), acc[r][v]));
            continue;
        }
        float tile[4 * VLV] __attribute__((aligned(64)));
        for (int v = 0; v < 4; v++) ST(tile + v * VLV, acc[r][v]);
        for (int64_t j = 0; j < nj; j++) cr[j] = first ? tile[j] : cr[j] + tile[j];
    }
}

/* C[lo:hi, :H] = A[lo:hi, :K] @ B (packed), K in blocks of KC added in order */
TGT static void gemm_@S@(const float *a, int64_t lda, const float *bp, int64_t K,
                         int64_t H, float *c, int64_t lo, int64_t hi) {
    const int64_t np = (H + NRV - 1) / NRV;
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = MIN(KC, K - k0);
        for (int64_t q = 0; q < np; q++) {
            const int64_t j0 = q * NRV, nj = MIN(NRV, H - j0);
            const float *b = bp + (q * K + k0) * NRV;
            int64_t n0 = lo;
            for (; n0 + MRV <= hi; n0 += MRV)
                gblock_@S@(MRV, a + k0, lda, b, kc, k0 == 0, c + j0, H, nj, n0, hi);
            for (; n0 < hi; n0 += MRT)
                gblock_@S@(MRT, a + k0, lda, b, kc, k0 == 0, c + j0, H, nj, n0, hi);
        }
    }
}

/* the local derivatives of rows [lo, hi) at one step, full vectors then a scalar tail */
TGT static void dloc_@S@(const float *a, int64_t sa, const float *cp, int64_t scp,
                         const float *ct, const float *gh, int64_t sg, float *dhr, float *dc,
                         float *dg, int64_t H, int first, int64_t lo, int64_t hi) {
    const int64_t jv = H / VLV * VLV;
    const V one = SET1(1.0f);
    for (int64_t n = lo; n < hi; n++) {
        const float *ar = a + n * sa, *cr = cp + n * scp, *tr = ct + n * sa,
            *hr = gh + n * sg, *gc = hr + H, *ga = hr + 2 * H, *dhrr = dhr + n * H;
        float *dcr = dc + n * H, *dgr = dg + n * 4 * H;
        for (int64_t j = 0; j < jv; j += VLV) {
            const V i = LD(ar + j), f = LD(ar + H + j), gg = LD(ar + 2 * H + j),
                o = LD(ar + 3 * H + j), tc = vtanh_@S@(LD(tr + j));
            const V dh = first ? LD(hr + j) : ADD(LD(hr + j), LD(dhrr + j));
            V dcv = first ? LD(gc + j) : ADD(LD(gc + j), LD(dcr + j));
            dcv = FMA(MUL(dh, o), SUB(one, MUL(tc, tc)), dcv);
            ST(dgr + j, MUL(MUL(FMA(dcv, gg, LD(ga + j)), i), SUB(one, i)));
            ST(dgr + H + j, MUL(MUL(FMA(dcv, LD(cr + j), LD(ga + H + j)), f), SUB(one, f)));
            ST(dgr + 2 * H + j, MUL(FMA(dcv, i, LD(ga + 2 * H + j)), SUB(one, MUL(gg, gg))));
            ST(dgr + 3 * H + j, MUL(MUL(FMA(dh, tc, LD(ga + 3 * H + j)), o), SUB(one, o)));
            ST(dcr + j, MUL(dcv, f));
        }
        if (jv < H) lstm_dloc(ar, cr, tr, hr, dhrr, dcr, dgr, H, first, jv);
    }
}

TGT static void bwd_@S@(char **p, const int64_t *g, const int64_t *st, int64_t lo,
                        int64_t hi) {
    (void)st;
    const int64_t L = g[G_L], N = g[G_N], H = g[G_H], S = 6 * H, G = 4 * H, IN = g[G_IN];
    const float *gout = (const float *)p[0], *out = (const float *)p[1],
        *c0 = (const float *)p[2], *wp = (const float *)p[3],
        *wpi = wp + bwd_packed(G, H, NRV);
    float *dg = (float *)p[4], *dhr = (float *)p[5], *dc = (float *)p[6],
        *dh0 = (float *)p[7], *dx = (float *)p[10];
    for (int64_t t = L - 1; t >= 0; t--) {
        const float *ot = out + t * N * S;
        const float *cp = t ? ot - N * S + H : c0;
        dloc_@S@(ot + 2 * H, S, cp, t ? S : g[G_S2], ot + H, gout + t * g[G_S0], g[G_S1],
                 dhr, dc, dg + t * N * G, H, t == L - 1, lo, hi);
        gemm_@S@(dg + t * N * G, G, wp, G, H, t ? dhr : dh0, lo, hi);
        if (IN) gemm_@S@(dg + t * N * G, G, wpi, G, IN, dx + t * N * IN, lo, hi);
    }
}
#undef NRV
"""

_OPS = {
    "generic": dict(
        V="v8g", VLV="8", MRV="2", MRT="2", TGT="", LD="ld_g", ST="st_g", SET1="set1_g",
        ADD="(a) + (b)", SUB="(a) - (b)", MUL="(a) * (b)", DIV="(a) / (b)",
        FMA="(a) * (b) + (c)", CLAMP="clamp_g(x, c)", ABSLT="abslt_g(x, r, t)",
        ZERO="set1_g(0.0f)"),
    "avx2": dict(
        V="__m256", VLV="8", MRV="2", MRT="2", TGT='__attribute__((target("avx2,fma")))',
        LD="_mm256_loadu_ps", ST="_mm256_storeu_ps", SET1="_mm256_set1_ps",
        ADD="_mm256_add_ps(a, b)", SUB="_mm256_sub_ps(a, b)", MUL="_mm256_mul_ps(a, b)",
        DIV="_mm256_div_ps(a, b)", FMA="_mm256_fmadd_ps(a, b, c)",
        CLAMP="_mm256_max_ps(_mm256_set1_ps(-(c)), _mm256_min_ps(_mm256_set1_ps(c), x))",
        ABSLT="_mm256_blendv_ps(r, x, _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), "
              "x), _mm256_set1_ps(t), _CMP_LT_OQ))",
        ZERO="_mm256_setzero_ps()"),
    "avx512": dict(
        V="__m512", VLV="16", MRV="6", MRT="2", TGT='__attribute__((target("avx512f")))',
        LD="_mm512_loadu_ps", ST="_mm512_storeu_ps", SET1="_mm512_set1_ps",
        ADD="_mm512_add_ps(a, b)", SUB="_mm512_sub_ps(a, b)", MUL="_mm512_mul_ps(a, b)",
        DIV="_mm512_div_ps(a, b)", FMA="_mm512_fmadd_ps(a, b, c)",
        CLAMP="_mm512_max_ps(_mm512_set1_ps(-(c)), _mm512_min_ps(_mm512_set1_ps(c), x))",
        ABSLT="_mm512_mask_blend_ps(_mm512_cmp_ps_mask(_mm512_abs_ps(x), "
              "_mm512_set1_ps(t), _CMP_LT_OQ), r, x)",
        ZERO="_mm512_setzero_ps()"),
}
_ARGS = {"ADD": "(a, b)", "SUB": "(a, b)", "MUL": "(a, b)", "DIV": "(a, b)",
         "FMA": "(a, b, c)", "CLAMP": "(x, c)", "ABSLT": "(x, r, t)"}

_TAIL = r"""
#ifdef EMBER_X86
#define X86_ONLY(f) f
#else
#define X86_ONLY(f) 0
#endif
static const ember_run_fn FWD[4] = {0, fwd_generic, X86_ONLY(fwd_avx2), X86_ONLY(fwd_avx512)};
static const ember_run_fn BWD[4] = {0, bwd_generic, X86_ONLY(bwd_avx2), X86_ONLY(bwd_avx512)};
static const int64_t VLS[4] = {0, 8, 8, 16}, MRS[4] = {0, 2, 2, 6};

static int64_t pick(int64_t isa) {
    if (isa) return isa;
    const int64_t m = ember_rnn_gemm_isas();
    return (m & 4) && FWD[3] ? 3 : (m & 2) && FWD[2] ? 2 : 1;
}

static void launch(ember_run_fn run, char **p, const int64_t *g, int64_t nt, int64_t mr) {
    if (nt > 1 && g[G_N] > mr && ember_parallel_hook)
        ember_parallel_hook(run, p, g, g, g[G_N], mr, nt);
    else
        run(p, g, g, 0, g[G_N]);
}

void ember_lstm_seq_fwd_f32(char **p, const int64_t *g, int64_t nt) {
    const int64_t isa = pick(g[G_ISA]), H = g[G_H], IN = g[G_IN];
    const int64_t np = (H + VLS[isa] - 1) / VLS[isa];
    pack_fwd((const float *)p[5], IN, 0, IN, (float *)p[3], H, VLS[isa]);
    pack_fwd((const float *)p[6], H, 0, H, (float *)p[3] + np * IN * 4 * VLS[isa], H, VLS[isa]);
    launch(FWD[isa], p, g, nt, MRS[isa]);
}

void ember_lstm_seq_bwd_f32(char **p, const int64_t *g, int64_t nt) {
    const int64_t isa = pick(g[G_ISA]), H = g[G_H], IN = g[G_IN], NRv = 4 * VLS[isa];
    float *work = (float *)p[3];
    pack_bwd((const float *)p[9], 4 * H, H, work, NRv);
    if (IN) pack_bwd((const float *)p[8], 4 * H, IN, work + bwd_packed(4 * H, H, NRv), NRv);
    launch(BWD[isa], p, g, nt, MRS[isa]);
}
"""


def _variant(name: str) -> str:
    ops = _OPS[name]
    defs = "".join(f"#define {k}{_ARGS.get(k, '')} {v}\n" for k, v in ops.items())
    undefs = "".join(f"#undef {k}\n" for k in ops)
    text = defs + _VARIANT.replace("@S@", name) + undefs
    return text if name == "generic" else "#ifdef EMBER_X86\n" + text + "#endif\n"


def source() -> str:
    """The C source of the sequence kernels (all variants)."""
    return prelude() + _HEAD + "".join(_variant(n) for n in _OPS) + _TAIL
