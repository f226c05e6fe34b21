"""C text of Ember's float32 GEMM (:mod:`.sgemm`): ``C = alpha * A @ B + beta * C``.

GotoBLAS/BLIS structure, row-major view: for each ``NC`` block of columns, each ``KC``
block of ``k``, B's block is packed into panels ``KC x NR`` (``NR`` = ``NV`` vectors, zero
past ``N``); for each ``MC`` block of rows a micro-kernel multiplies ``MR`` rows of A
(broadcast one element at a time) by a packed panel of B (vector loads) into ``MR x NV``
vector registers, then adds the tile into C. A with a unit ``k`` stride (row-major, the
common case) is read in place through ``MR`` row pointers, no copy; so is one with a unit
row stride (a transposed view: W3's ``x.T @ g``) when the caller says so (``G_COLS``: past
one k block, where it measured faster than packing); any other A is packed into
``KC x MR`` panels (``k`` major). B's packing reads any strides: rows
(``memcpy`` in memory order), columns (8 x 8 AVX transposes on x86, ``k`` outer so each
packed row is written whole; a scalar loop elsewhere) or general. Edge tiles: one or two
rows left run a 2-row tile, a last panel narrower than ``NR`` multiplies only the vectors
it covers (then stores through a copy).

Summation order: each element of C is ``alpha * (one FMA chain over k in order within a
KC block) + beta * C`` for the first block, then ``C + alpha * chain`` for each further
block, in block order. Threads split the columns (or rows) in whole panels and every
panel boundary is the same for any split, so results are bitwise the same for any thread
count (tile edges go through the same vector operations on a copy).

Variants, a library each (functions carry ``__attribute__((target(...)))``, so any
``-march`` builds them), picked at run time by :data:`PROBE`'s ``ember_sgemm_isas``
(``__builtin_cpu_supports``):

===========  ==========================  ====  ====================  ======================
variant      vector (VL floats)          MR    NR (NV vectors)       accumulators
===========  ==========================  ====  ====================  ======================
``avx512``   ``__m512`` (16)             6     64 (4)                24 zmm
``avx2``     ``__m256`` + FMA (8)        6     16 (2)                12 ymm
``generic``  GNU C ``vector_size(32)``   4     16 (2)                8 (SSE pairs baseline)
===========  ==========================  ====  ====================  ======================

Entry point ``ember_sgemm_f32(char **p, const int64_t *g, int64_t nthreads)``: ``p = [A,
B, C, ab, bias, W, W_out, Y]`` (``ab``: ``float[2] = {alpha, beta}``, ``float[3]`` with the
learning rate third where ``G_UPD`` is 1; ``bias`` read only where ``G_BIAS`` is set,
``W`` and ``W_out`` only where ``G_UPD`` is), ``g`` as the ``G_*`` enum below (strides in
elements; C's column stride is 1; ``split`` 1 = threads split N, 0 = M; ``G_ISA`` only
records the variant, each library holding one; ``G_RED`` 1: C is the sum of the batch's
products, added in batch order, :func:`.sgemm.gemm_sum`). Epilogues, in the last k
block's tile stores, each step rounded on its own, in this order: ``G_BIAS`` 1, a
contiguous ``bias[N]`` added to every row of the finished C (``(alpha * A @ B + beta *
C) + bias``: the addmm epilogue), 2, a contiguous ``bias[M]`` added to every column (a
feature-major layer's bias column); ``G_RELU`` 1: relu (the fused kernels' template: NaN
kept, ``-0`` to ``+0``); ``G_MASK`` 1: relu's backward, C kept where ``Y > 0`` or NaN,
else ``+0`` (``Y = p[7]`` laid out as C: ``threshold_backward(C, Y, 0)``); ``G_UPD`` 1:
the SGD epilogue, ``W_out = W - lr * C`` for the finished C, one FMA rounding, W and
W_out laid out as C and ``W_out`` possibly ``W`` (a weight gradient's GEMM that also
updates the weight: over each block of ``MC`` rows once its tiles are stored, while it
is in L2). ``beta == 0`` never reads C (NaN there does not propagate), as BLAS.
"""
from __future__ import annotations

from .prelude import C_HEAD
from .sgemm_epi_c import EPI_GENERIC, EPI_HEAD

#: per isa code (1 generic, 2 avx2, 3 avx512): (MR, NR)
TILES = {1: (4, 16), 2: (6, 16), 3: (6, 64)}
#: cache blocking (elements): KC rows of k per packed block, MC rows of A, NC columns of B;
#: KC_T for an A read in place through its columns (a transposed view), whose rows miss L1
#: anyway: a ``KC_T x NR`` panel of B (32 KiB) then stays in L1 (W1's ``g.T @ x`` and W3's
#: ``x.T @ g``: 3-8% faster than with KC; the others within 1%)
KC, KC_T, MC, NC = 256, 128, 96, 1024
#: a ``k`` up to KC_ONE runs as one block rather than KC and a short rest: W2 conv2's forward
#: (64x288 @ 288x256 per image) 466-473 vs 503 us for 7 images (bench/gemm.py, one thread)
KC_ONE = 320

#: includes, MIN and this thread's packing space: the head of the GEMM's and the
#: implicit-GEMM convolution's (``conv_igemm_c``) sources
SCRATCH_HEAD = r"""
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#define EMBER_X86 1
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* this thread's packing space (64-byte aligned, kept: the pool's threads live on) */
static __thread float *tls_buf = 0;
static __thread size_t tls_cap = 0;
static float *scratch(size_t n) {
    if (n > tls_cap) {
        free(tls_buf);
        tls_buf = 0;
        tls_cap = 0;
        void *p = 0;
        if (posix_memalign(&p, 64, n * sizeof(float)) != 0) return 0;
        tls_buf = (float *)p;
        tls_cap = n;
    }
    return tls_buf;
}
"""

_HEAD = SCRATCH_HEAD + r"""
enum { G_M, G_N, G_K, G_BT, G_ISA, G_SPLIT, G_SAB, G_SAM, G_SAK, G_SBB, G_SBK, G_SBN,
       G_SCB, G_SCM, G_KC, G_MC, G_NC, G_COLS, G_RED, G_BIAS, G_UPD, G_RELU, G_MASK,
       G_RSUM };

""" + EPI_HEAD + r"""
/* A[m0 + r, k0 + k] for r < mc, k < kc into panels of MR rows: panel i, k, r at
   dst[(i * kc + k) * MR + r]; zero past mc (MR a constant where it is inlined) */
static inline __attribute__((always_inline)) void pack_a(
        const float *a, int64_t sam, int64_t sak, int64_t mc, int64_t kc, const int MR,
        float *dst) {
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {
        const int64_t nr = MIN(MR, mc - i0);
        float *d = dst + i0 * kc;
        const float *s = a + i0 * sam;
        if (sam == 1 && nr == MR) {
            for (int64_t k = 0; k < kc; k++)
                for (int r = 0; r < MR; r++) d[k * MR + r] = s[k * sak + r];
        } else {
            for (int64_t r = 0; r < MR; r++)
                for (int64_t k = 0; k < kc; k++)
                    d[k * MR + r] = r < nr ? s[r * sam + k * sak] : 0.0f;
        }
    }
}

/* scalar transposing copy: dst[k * NR + j] = b[j * sbn + k * sbk] for j < nj, k < kc */
static void pack_b_gen(const float *b, int64_t sbk, int64_t sbn, int64_t kc, int64_t j0,
                       int64_t nj, int64_t NR, float *dst) {
    for (int64_t j = j0; j < nj; j++)
        for (int64_t k = 0; k < kc; k++) dst[k * NR + j] = b[j * sbn + k * sbk];
}

#ifdef EMBER_X86
/* b's columns j0..j0+8 (unit k stride, column stride sbn), k0..k0+8 -> 8 rows of dst */
__attribute__((target("avx2"))) static inline void tr8(const float *b, int64_t sbn,
                                                       float *dst, int64_t NR) {
    __m256 r0 = _mm256_loadu_ps(b), r1 = _mm256_loadu_ps(b + sbn),
        r2 = _mm256_loadu_ps(b + 2 * sbn), r3 = _mm256_loadu_ps(b + 3 * sbn),
        r4 = _mm256_loadu_ps(b + 4 * sbn), r5 = _mm256_loadu_ps(b + 5 * sbn),
        r6 = _mm256_loadu_ps(b + 6 * sbn), r7 = _mm256_loadu_ps(b + 7 * sbn);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
        t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
        t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
        t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
        u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
        u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
        u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst + 0 * NR, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + 1 * NR, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * NR, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * NR, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * NR, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * NR, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * NR, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * NR, _mm256_permute2f128_ps(u3, u7, 0x31));
}

__attribute__((target("avx2"))) static void pack_b_cols(const float *b, int64_t sbn,
        int64_t kc, int64_t nj, int64_t NR, float *dst) {
    const int64_t j8 = nj / 8 * 8, k8 = kc / 8 * 8;
    for (int64_t k = 0; k < k8; k += 8)     /* k outer: whole rows of dst written at once */
        for (int64_t j = 0; j < j8; j += 8) tr8(b + j * sbn + k, sbn, dst + k * NR + j, NR);
    if (k8 < kc) pack_b_gen(b + k8, 1, sbn, kc - k8, 0, j8, NR, dst + k8 * NR);
    pack_b_gen(b, 1, sbn, kc, j8, nj, NR, dst);
}
#endif

/* B[k0 + k, n0 + j] for k < kc, j < nc into panels of NR columns: panel p, k, j at
   dst[(p * kc + k) * NR + j]; zero past nc. x86: whether the 8x8 transposes may run. */
static inline __attribute__((always_inline)) void pack_b(
        const float *b, int64_t sbk, int64_t sbn, int64_t kc, int64_t nc, const int NR,
        int x86, float *dst) {
    if (sbn == 1) {         /* rows: read each row of the block once, in memory order */
        const int64_t nfull = nc / NR * NR;
        for (int64_t k = 0; k < kc; k++) {
            const float *s = b + k * sbk;
            for (int64_t j0 = 0; j0 < nfull; j0 += NR)
                memcpy(dst + j0 * kc + k * NR, s + j0, (size_t)NR * sizeof(float));
        }
        if (nfull == nc) return;
        b += nfull;
        dst += nfull * kc;
        nc -= nfull;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += NR) {
        const int64_t nj = MIN(NR, nc - j0);
        float *d = dst + j0 * kc;
        const float *s = b + j0 * sbn;
        if (sbn == 1) {
            for (int64_t k = 0; k < kc; k++) memcpy(d + k * NR, s + k * sbk,
                                                    (size_t)nj * sizeof(float));
        } else {
#ifdef EMBER_X86
            if (x86 && sbk == 1) pack_b_cols(s, sbn, kc, nj, NR, d);
            else
#endif
            pack_b_gen(s, sbk, sbn, kc, 0, nj, NR, d);
        }
        if (nj < NR)
            for (int64_t k = 0; k < kc; k++)
                for (int64_t j = nj; j < NR; j++) d[k * NR + j] = 0.0f;
    }
    (void)x86;
}

/* generic: GNU C vectors of 8 floats */
typedef float v8g __attribute__((vector_size(32)));
static inline v8g ld_g(const float *p) { v8g v; memcpy(&v, p, sizeof v); return v; }
static inline void st_g(float *p, v8g v) { memcpy(p, &v, sizeof v); }
static inline v8g set1_g(float s) { return (v8g){s, s, s, s, s, s, s, s}; }
""" + EPI_GENERIC

# One copy per variant: @S@ names it; the macros before it are its operations.
_VARIANT = r"""
#define NRV (NV * VLV)

/* one k step of the tile: acc[r][v] += A[r][k] * B[k][v-th vector] */
TGT static inline __attribute__((always_inline)) void mks_@S@(
        const int rows, const int nv, const float *const *ar, const int64_t ska,
        const float *bk, int64_t k, V acc[MRV][NV]) {
    V bv[NV];
    for (int v = 0; v < nv; v++) bv[v] = LD(bk + v * VLV);
    for (int r = 0; r < rows; r++) {
        const V a = SET1(ar[r][k * ska]);
        for (int v = 0; v < nv; v++) acc[r][v] = FMA(a, bv[v], acc[r][v]);
    }
}

/* acc[r][v] = sum over k < kc of A[r][k] * B[k][v-th vector], one FMA chain per element
   in k order; A's row r at ar[r], its k-th element at ar[r][k * ska] */
TGT static inline __attribute__((always_inline)) void mk_@S@(
        const int rows, const int nv, const float *const *ar, const int64_t ska,
        const float *b, int64_t kc, V acc[MRV][NV]) {
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = ZERO;
    if (rows == MRV && nv == NV) {
        /* NOTE: full tiles' loop unrolled 4x (each FMA chain unchanged: same bits): W1's
           products 3-4 % faster in a cold-cache bench (6 alternating pairs; 8x slower);
           the edge tiles' loops stay rolled (gcc time of the library: +0.1 s if all are) */
#pragma GCC unroll 4
        for (int64_t k = 0; k < kc; k++) mks_@S@(rows, nv, ar, ska, b + k * NRV, k, acc);
    } else {
        for (int64_t k = 0; k < kc; k++) mks_@S@(rows, nv, ar, ska, b + k * NRV, k, acc);
    }
}

/* the tile's products: rows and vectors (nv) as constants per case */
TGT static void mkd_@S@(const float *const *ar, int64_t ska, const float *b, int64_t kc,
                        int64_t mr, int nv, V acc[MRV][NV]) {
    if (nv == NV) {
        if (mr <= 2) mk_@S@(2, NV, ar, ska, b, kc, acc);    /* a tail of one or two rows */
        else if (ska == 1) mk_@S@(MRV, NV, ar, 1, b, kc, acc);
        else if (ska == MRV) mk_@S@(MRV, NV, ar, MRV, b, kc, acc);
        else mk_@S@(MRV, NV, ar, ska, b, kc, acc);
        return;
    }
    switch (nv) {       /* a tail of columns: only the vectors it covers */
    case 1: mk_@S@(MRV, 1, ar, ska, b, kc, acc); break;
#if NV > 2
    case 2: mk_@S@(MRV, 2, ar, ska, b, kc, acc); break;
    case 3: mk_@S@(MRV, 3, ar, ska, b, kc, acc); break;
#endif
    default: mk_@S@(MRV, NV, ar, ska, b, kc, acc);
    }
}

/* c[v] = alpha * acc + beta * c (mode 0: alpha * acc; 1: c + alpha * acc) */
TGT static inline __attribute__((always_inline)) V upd_@S@(V acc, const float *c, int mode,
                                                           int unit, V al, V be) {
    const V t = unit ? acc : MUL(al, acc);
    return mode == 0 ? t : mode == 1 ? ADD(LD(c), t) : ADD(MUL(be, LD(c)), t);
}

/* one MR x NR tile into C (rows < mr, columns < nr stored). e (the last k block's tiles
   when the call has a bias or relu, else NULL), each step rounded on its own, in order:
   bias (e->bias at the tile's first column, or with e->brow its first row: bias[j] or
   bias[r] added, the bits of a separate ``C + bias`` pass), relu (e->relu: NaN kept, -0
   to +0, the fused kernel's relu), relu's backward (e->y at the tile's offset, C's row
   stride: C where y > 0 or y is NaN, else +0: threshold_backward's ``y <= 0 ? 0 : g``),
   row sums (e->rsum: each row's stored values summed in float32 — the tile's vectors
   added in order, then across lanes — and added to rsum[r]) */
TGT static void tile_@S@(const float *const *ar, int64_t ska, const float *b, int64_t kc,
                         float *c, int64_t ldc, int64_t mr, int64_t nr, float alpha,
                         float beta, int mode, const epi_t *e) {
    V acc[MRV][NV];
    const int nv = nr == NRV ? NV : (int)((nr + VLV - 1) / VLV);
    const float *bias = e ? e->bias : 0, *y = e ? e->y : 0;
    float *rsum = e ? e->rsum : 0;
    const int brow = e && e->brow, relu = e && e->relu;
    mkd_@S@(ar, ska, b, kc, mr, nv, acc);
    const V al = SET1(alpha), be = SET1(beta);
    const int unit = alpha == 1.0f;
    float bt[NRV] __attribute__((aligned(64))) = {0};
    if (bias && !brow) memcpy(bt, bias, (size_t)nr * sizeof(float));
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        const V br = SET1(bias && brow ? bias[r] : 0.0f);
        V rs = ZERO;
        if (nr == NRV) {
            for (int v = 0; v < NV; v++) {
                V t = upd_@S@(acc[r][v], cr + v * VLV, mode, unit, al, be);
                if (bias) t = ADD(t, brow ? br : LD(bt + v * VLV));
                if (relu) t = RELU(t);
                if (y) t = KEEP(t, LD(y + r * ldc + v * VLV));
                ST(cr + v * VLV, t);
                rs = ADD(rs, t);
            }
            if (rsum) rsum[r] += HSUM(rs);
            continue;
        }
        float tile[NRV] __attribute__((aligned(64))) = {0};
        float yt[NRV] __attribute__((aligned(64))) = {0};
        if (mode) memcpy(tile, cr, (size_t)nr * sizeof(float));
        if (y) memcpy(yt, y + r * ldc, (size_t)nr * sizeof(float));
        for (int v = 0; v < nv; v++) {
            V t = upd_@S@(acc[r][v], tile + v * VLV, mode, unit, al, be);
            if (bias) t = ADD(t, brow ? br : LD(bt + v * VLV));
            if (relu) t = RELU(t);
            if (y) t = KEEP(t, LD(yt + v * VLV));
            ST(tile + v * VLV, t);
        }
        memcpy(cr, tile, (size_t)nr * sizeof(float));
        if (rsum) {
            float sr = 0.0f;
            for (int64_t j = 0; j < nr; j++) sr += tile[j];
            rsum[r] += sr;
        }
    }
}

TGT static void packa_@S@(const float *a, int64_t sam, int64_t sak, int64_t mc,
                          int64_t kc, float *ap) {
    pack_a(a, sam, sak, mc, kc, MRV, ap);
}

TGT static void packb_@S@(const float *b, int64_t sbk, int64_t sbn, int64_t kc,
                          int64_t nc, float *bp) {
    pack_b(b, sbk, sbn, kc, nc, NRV, X86, bp);
}

/* C[m0:m1, n0:n1] of one matrix of the batch, or (g[G_RED]) of the sum over the batch:
   the matrices' products added into C one after another, k block by k block */
TGT static void range_@S@(const float *a, const float *b, float *c, const int64_t *g,
                          int64_t m0, int64_t m1, int64_t n0, int64_t n1, float alpha,
                          float beta, float *bp, float *ap, const epi_t *ep) {
    const int64_t nt = g[G_RED] ? g[G_BT] : 1;
    const float *a0 = a, *b0 = b;
    const int64_t K = g[G_K], sam = g[G_SAM], sak = g[G_SAK], sbk = g[G_SBK],
        sbn = g[G_SBN], ldc = g[G_SCM], KCb = g[G_KC], MCb = g[G_MC], NCb = g[G_NC];
    /* A read in place: rows (unit k stride) or, if g[G_COLS], columns (unit row stride) */
    const int direct = sak == 1 || (g[G_COLS] && sam == 1);
    const int64_t ska = sak == 1 ? 1 : direct ? sak : MRV;
    for (int64_t jc = n0; jc < n1; jc += NCb) {
        const int64_t nc = MIN(NCb, n1 - jc);
        for (int64_t t = 0; t < nt; t++)
        for (int64_t pc = 0; pc < K; pc += KCb) {
            const int64_t kc = MIN(KCb, K - pc);
            const int mode = pc || t ? 1 : beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
            const int last = ep && pc + kc == K && t == nt - 1;
            const int tiled = last && (ep->bias || ep->relu || ep->y || ep->rsum);
            a = a0 + t * g[G_SAB];
            b = b0 + t * g[G_SBB];
            packb_@S@(b + pc * sbk + jc * sbn, sbk, sbn, kc, nc, bp);
            for (int64_t ic = m0; ic < m1; ic += MCb) {
                const int64_t mc = MIN(MCb, m1 - ic);
                if (!direct) packa_@S@(a + ic * sam + pc * sak, sam, sak, mc, kc, ap);
                for (int64_t jr = 0; jr < nc; jr += NRV) {
                    const int64_t nr = MIN(NRV, nc - jr);
                    for (int64_t ir = 0; ir < mc; ir += MRV) {
                        const int64_t mr = MIN(MRV, mc - ir);
                        const float *ar[MRV];
                        for (int r = 0; r < MRV; r++) {
                            const int64_t rr = r < mr ? r : mr - 1;   /* repeat, unstored */
                            ar[r] = direct ? a + (ic + ir + rr) * sam + pc * sak
                                           : ap + ir * kc + r;
                        }
                        const int64_t off = (ic + ir) * ldc + jc + jr;
                        epi_t et;
                        if (tiled) {
                            et = *ep;
                            if (et.bias) et.bias += et.brow ? ic + ir : jc + jr;
                            if (et.y) et.y += off;
                            if (et.rsum) et.rsum += ic + ir;
                        }
                        tile_@S@(ar, ska, bp + jr * kc, kc, c + off, ldc, mr, nr, alpha,
                                 beta, mode, tiled ? &et : 0);
                    }
                }
                if (last && ep->w)
                    sgd_rows(c + ic * ldc + jc, ep->w + ic * ldc + jc,
                             ep->wo + ic * ldc + jc, ldc, mc, nc, ep->lr);
            }
        }
    }
}

/* the pool's chunk [lo, hi) of panels (of NR columns, or MR rows) over all matrices */
TGT static void run_@S@(char **p, const int64_t *g, const int64_t *st, int64_t lo,
                        int64_t hi) {
    (void)st;
    const int64_t M = g[G_M], N = g[G_N], split = g[G_SPLIT];
    const float *ab = (const float *)p[3];
    const int64_t m0 = split ? 0 : lo * MRV, m1 = split ? M : MIN(hi * MRV, M),
        n0 = split ? lo * NRV : 0, n1 = split ? MIN(hi * NRV, N) : N;
    const int64_t nb = (MIN(g[G_NC], N) + NRV - 1) / NRV * NRV * g[G_KC];
    float *bp = scratch((size_t)(nb + g[G_MC] * g[G_KC] + MRV * g[G_KC]));
    if (!bp) {          /* no memory for the packing space: NaN, never stale values */
        for (int64_t t = 0; t < (g[G_RED] ? 1 : g[G_BT]); t++)
            for (int64_t m = m0; m < m1; m++)
                for (int64_t n = n0; n < n1; n++)
                    ((float *)p[2])[t * g[G_SCB] + m * g[G_SCM] + n] = NAN;
        return;
    }
    const int any = g[G_BIAS] || g[G_UPD] || g[G_RELU] || g[G_MASK] || g[G_RSUM];
    if (g[G_RSUM])          /* this chunk's rows (threads split rows: G_SPLIT 0) */
        for (int64_t m = m0; m < m1; m++) ((float *)p[8])[m] = 0.0f;
    for (int64_t t = 0; t < (g[G_RED] ? 1 : g[G_BT]); t++) {
        epi_t ep = {g[G_BIAS] ? (const float *)p[4] : 0, g[G_BIAS] == 2, g[G_RELU],
                    g[G_UPD] ? (const float *)p[5] + t * g[G_SCB] : 0,
                    g[G_UPD] ? (float *)p[6] + t * g[G_SCB] : 0, g[G_UPD] ? ab[2] : 0.0f,
                    g[G_MASK] ? (const float *)p[7] + t * g[G_SCB] : 0,
                    g[G_RSUM] ? (float *)p[8] : 0};
        range_@S@((const float *)p[0] + t * g[G_SAB], (const float *)p[1] + t * g[G_SBB],
                  (float *)p[2] + t * g[G_SCB], g, m0, m1, n0, n1, ab[0], ab[1], bp,
                  bp + nb, any ? &ep : 0);
    }
}
#undef NRV
"""

_OPS = {
    "generic": dict(
        V="v8g", VLV="8", MRV="4", NV="2", TGT="", X86="0", LD="ld_g", ST="st_g",
        SET1="set1_g", ADD="(a) + (b)", MUL="(a) * (b)", FMA="(a) * (b) + (c)",
        RELU="relu_g(a)", KEEP="keep_g(a, b)", HSUM="hsum_g(a)", ZERO="set1_g(0.0f)"),
    "avx2": dict(
        V="__m256", VLV="8", MRV="6", NV="2", TGT='__attribute__((target("avx2,fma")))',
        X86="1", LD="_mm256_loadu_ps", ST="_mm256_storeu_ps", SET1="_mm256_set1_ps",
        ADD="_mm256_add_ps(a, b)", MUL="_mm256_mul_ps(a, b)",
        FMA="_mm256_fmadd_ps(a, b, c)",
        RELU="_mm256_and_ps(_mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_NLE_UQ), a)",
        KEEP="_mm256_and_ps(_mm256_cmp_ps(b, _mm256_setzero_ps(), _CMP_NLE_UQ), a)",
        HSUM="hsum8(a)",
        ZERO="_mm256_setzero_ps()"),
    "avx512": dict(
        V="__m512", VLV="16", MRV="6", NV="4", TGT='__attribute__((target("avx512f")))',
        X86="1", LD="_mm512_loadu_ps", ST="_mm512_storeu_ps", SET1="_mm512_set1_ps",
        ADD="_mm512_add_ps(a, b)", MUL="_mm512_mul_ps(a, b)",
        FMA="_mm512_fmadd_ps(a, b, c)",
        RELU="_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_NLE_UQ), a)",
        KEEP="_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(b, _mm512_setzero_ps(), _CMP_NLE_UQ), a)",
        HSUM="_mm512_reduce_add_ps(a)",
        ZERO="_mm512_setzero_ps()"),
}
_ARGS = {"ADD": "(a, b)", "MUL": "(a, b)", "FMA": "(a, b, c)", "RELU": "(a)",
         "KEEP": "(a, b)", "HSUM": "(a)"}

_TAIL = r"""
void ember_sgemm_f32(char **p, const int64_t *g, int64_t nt) {
    const int64_t work = g[G_SPLIT] ? (g[G_N] + @NR@ - 1) / @NR@ : (g[G_M] + @MR@ - 1) / @MR@;
    if (nt > 1 && work > 1 && ember_parallel_hook)
        ember_parallel_hook(run_@S@, p, g, g, work, 1, nt);
    else
        run_@S@(p, g, g, 0, work);
}

/* the same through codegen/launch.py's one-call launcher */
void ember_sgemm_f32_fast(char **p, const int64_t *g, const int64_t *st, int64_t nt) {
    (void)st;
    ember_sgemm_f32(p, g, nt);
}
"""

#: the run-time check (its own small library, built before any variant): bit 0 generic,
#: bit 1 AVX2 + FMA, bit 2 AVX-512F (``__builtin_cpu_supports`` also checks that the OS
#: saves the wider registers)
PROBE = r"""
#include <stdint.h>
int64_t ember_sgemm_isas(void) {
    int64_t m = 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) m |= 2;
    if (__builtin_cpu_supports("avx512f")) m |= 4;
#endif
    return m;
}
"""
#: variant name -> isa code (the probe's bit + 1, the index of :data:`TILES`)
CODES = {"generic": 1, "avx2": 2, "avx512": 3}


def _variant(name: str) -> str:
    ops = _OPS[name]
    defs = "".join(f"#define {k}{_ARGS.get(k, '')} {v}\n" for k, v in ops.items())
    undefs = "".join(f"#undef {k}\n" for k in ops)
    text = defs + _VARIANT.replace("@S@", name) + undefs
    return text if name == "generic" else "#ifdef EMBER_X86\n" + text + "#endif\n"


def source(name: str) -> str:
    """The C source of the GEMM's ``name`` variant: a library each, so a first use builds
    only the one it runs (``gcc -O3`` CPU here: avx512 0.57 s + the probe 0.03 s, against
    1.2 s for one library of all three variants)."""
    mr, nr = TILES[CODES[name]]
    tail = _TAIL.replace("@S@", name).replace("@MR@", str(mr)).replace("@NR@", str(nr))
    return C_HEAD + _HEAD + _variant(name) + tail
