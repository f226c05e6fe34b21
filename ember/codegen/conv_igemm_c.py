"""C text of the implicit-GEMM float32 convolution (:mod:`.conv_igemm`), stride 1.

``y[n, co, oh, ow] = sum_k w[co, k] * xp[n, koff[k] + oh*WR + ow]`` with ``k = (c, kh,
kw)`` in ``unfold``'s order and ``xp`` the image copied into planes of ``HP x WR`` (the
padding filled with the pad value): for stride 1 each row ``k`` of the im2col matrix is a
run of ``xp``, so the micro-kernel loads its vectors straight from the padded image
(``koff[k]`` + a segment's offset) instead of from packed columns. A segment is ``VL``
consecutive outputs of one output row (the last of a row may be short: its extra lanes
read the padding or the next row, and are never stored). Weights come packed as panels
of ``MR`` rows, ``k`` major (zero rows past ``Co``).

Summation order = :mod:`.sgemm_c`'s: one FMA chain per output over each ``KC`` block of
``k`` in order (``kc`` = the caller's block), the first block stored, later ones added
(``y + chain``), then ``y + bias`` rounded again: the same bits as ``unfold`` + Ember's GEMM
+ the bias add (the AVX2 and AVX-512 variants alike; the generic one may round
``a * b + c`` twice where the compiler does not contract it).

Images are independent: the pool splits them between threads (same bits for any count);
each thread fills its padded buffer's borders once per call and copies each image's
interior. Geometry ``q`` = the ``Q_*`` enum; pointers ``p = [x, packed w, bias or NULL, y,
koff (int64), pad value (float), columns or NULL]``: with columns, each image's im2col
matrix is also written from the padded copy while it is in cache (``unfold``'s values).
"""
from __future__ import annotations

from .prelude import C_HEAD
from .sgemm_c import SCRATCH_HEAD

#: per variant: (VL floats a vector, MR rows, NV vectors a tile). AVX-512: 8 x 3 zmm
#: (8 broadcasts + 3 loads per 24 FMAs; the loads are unaligned, most split over two cache
#: lines): W2's conv2 forward 4.0-4.2 ms vs 4.3-4.7 (12 x 2), 4.3-4.6 (6 x 4), 5.0-5.5
#: (4 x 6), 4.9-5.2 (16 x 1); AVX2: 4 x 3 ymm 6.2-6.6 ms vs 6.4-6.7 (6 x 2). One thread.
TILES = {"generic": (8, 4, 2), "avx2": (8, 4, 3), "avx512": (16, 8, 3)}

_HEAD = SCRATCH_HEAD + r"""
enum { Q_N, Q_C, Q_H, Q_W, Q_CO, Q_PT, Q_PL, Q_OH, Q_OW, Q_HP, Q_WR, Q_K, Q_KC, Q_NSEG,
       Q_LEN };

/* a padded copy above 4 MiB is not kept for the next call (the pool's threads live on) */
static void scratch_trim(void) {
    if (tls_cap > (1u << 20)) {
        free(tls_buf);
        tls_buf = 0;
        tls_cap = 0;
    }
}

/* image n's (C, H, W) interior into the padded planes (borders already hold the pad) */
static void copy_in(const float *x, const int64_t *q, float *xp) {
    const int64_t C = q[Q_C], H = q[Q_H], W = q[Q_W], HP = q[Q_HP], WR = q[Q_WR];
    for (int64_t c = 0; c < C; c++) {
        float *d = xp + c * HP * WR + q[Q_PT] * WR + q[Q_PL];
        const float *s = x + c * H * W;
        for (int64_t h = 0; h < H; h++) memcpy(d + h * WR, s + h * W, (size_t)W * sizeof(float));
    }
}

typedef float v8g __attribute__((vector_size(32)));
static inline v8g ld_g(const float *p) { v8g v; memcpy(&v, p, sizeof v); return v; }
static inline void st_g(float *p, v8g v) { memcpy(p, &v, sizeof v); }
static inline v8g set1_g(float s) { return (v8g){s, s, s, s, s, s, s, s}; }
"""

_VARIANT = r"""
/* acc[r][v] = one FMA chain over k < kc: w[k][r] * xp[koff[k] + so[v] ...] */
TGT static inline __attribute__((always_inline)) void mk_@S@(
        const int nv, const float *xp, const int64_t *so, const float *w,
        const int64_t *koff, int64_t kc, V acc[MRV][NV]) {
    const float *xs[NV];
    for (int v = 0; v < nv; v++) xs[v] = xp + so[v];
    for (int r = 0; r < MRV; r++)
        for (int v = 0; v < nv; v++) acc[r][v] = ZERO;
    for (int64_t k = 0; k < kc; k++) {
        const int64_t o = koff[k];
        V bv[NV];
        for (int v = 0; v < nv; v++) bv[v] = LD(xs[v] + o);
        for (int r = 0; r < MRV; r++) {
            const V a = SET1(w[k * MRV + r]);
            for (int v = 0; v < nv; v++) acc[r][v] = FMA(a, bv[v], acc[r][v]);
        }
    }
}

TGT static void mkd_@S@(int nv, const float *xp, const int64_t *so, const float *w,
                        const int64_t *koff, int64_t kc, V acc[MRV][NV]) {
    switch (nv) {       /* the vector count as a constant: registers, unrolled */
    case NV: mk_@S@(NV, xp, so, w, koff, kc, acc); break;
#if NV > 1
    case 1: mk_@S@(1, xp, so, w, koff, kc, acc); break;
#endif
#if NV > 2
    case 2: mk_@S@(2, xp, so, w, koff, kc, acc); break;
#endif
#if NV > 3
    case 3: mk_@S@(3, xp, so, w, koff, kc, acc); break;
#endif
    default: mk_@S@(NV, xp, so, w, koff, kc, acc);
    }
}

/* MR output channels (rows < rows stored) x nv segments from s0: every k block, then bias */
TGT static void tile_@S@(const float *xp, const int64_t *q, const int64_t *koff,
                         const float *w, const float *bias, float *yc, int64_t rows,
                         int64_t s0, int nv) {
    const int64_t K = q[Q_K], KC = q[Q_KC], OW = q[Q_OW], WR = q[Q_WR], NSEG = q[Q_NSEG],
        L = q[Q_OH] * OW;
    int64_t so[NV], yo[NV], vl[NV];
    for (int v = 0; v < nv; v++) {
        const int64_t s = s0 + v, oh = s / NSEG, j = s - oh * NSEG;
        so[v] = oh * WR + j * VLV;
        yo[v] = oh * OW + j * VLV;
        vl[v] = MIN(VLV, OW - j * VLV);
    }
    for (int64_t pc = 0; pc < K; pc += KC) {
        const int64_t kc = MIN(KC, K - pc);
        const int last = pc + kc >= K;
        V acc[MRV][NV];
        mkd_@S@(nv, xp, so, w + pc * MRV, koff + pc, kc, acc);
        for (int64_t r = 0; r < rows; r++) {
            float *yr = yc + r * L;
            const int add_b = bias && last;
            const V b = SET1(add_b ? bias[r] : 0.0f);
            for (int v = 0; v < nv; v++) {
                float tmp[VLV] __attribute__((aligned(64)));
                float *d = vl[v] == VLV ? yr + yo[v] : tmp;
                if (d == tmp && pc) memcpy(tmp, yr + yo[v], (size_t)vl[v] * sizeof(float));
                V t = pc ? ADD(LD(d), acc[r][v]) : acc[r][v];
                if (add_b) t = ADD(t, b);
                ST(d, t);
                if (d == tmp) memcpy(yr + yo[v], tmp, (size_t)vl[v] * sizeof(float));
            }
        }
    }
}

/* the image's im2col columns (K, OH*OW), as ``unfold`` writes them, from its padded copy:
   streaming stores where rows are whole aligned vectors (the columns are read only by the
   backward, much later: no read for ownership, no eviction of the image and weights) */
TGT static void unfold_@S@(const float *xp, const int64_t *q, const int64_t *koff,
                           float *cols) {
    const int64_t OH = q[Q_OH], OW = q[Q_OW], WR = q[Q_WR];
    const int nt = STREAMS && OW % VLV == 0 && ((uintptr_t)cols) % (VLV * 4) == 0;
    for (int64_t k = 0; k < q[Q_K]; k++)
        for (int64_t oh = 0; oh < OH; oh++) {
            float *d = cols + (k * OH + oh) * OW;
            const float *s = xp + koff[k] + oh * WR;
            int64_t j = 0;
            if (nt) {
                for (; j < OW; j += VLV) STREAM(d + j, LD(s + j));
                continue;
            }
            for (; j + VLV <= OW; j += VLV) ST(d + j, LD(s + j));
            for (; j < OW; j++) d[j] = s[j];
        }
    if (nt) FENCE;
}

/* images [lo, hi) */
TGT static void run_@S@(char **p, const int64_t *q, const int64_t *st, int64_t lo,
                        int64_t hi) {
    (void)st;
    const float *x = (const float *)p[0], *w = (const float *)p[1],
        *bias = (const float *)p[2];
    float *y = (float *)p[3];
    const int64_t *koff = (const int64_t *)p[4];
    const float pv = *(const float *)p[5];
    const int64_t C = q[Q_C], CO = q[Q_CO], K = q[Q_K], L = q[Q_OH] * q[Q_OW],
        S = q[Q_OH] * q[Q_NSEG], plane = q[Q_HP] * q[Q_WR];
    float *xp = scratch((size_t)(C * plane)), *cols = (float *)p[6];
    if (!xp) {          /* no memory for the padded copy: NaN, never stale values */
        for (int64_t i = lo * CO * L; i < hi * CO * L; i++) y[i] = NAN;
        for (int64_t i = lo * K * L; cols && i < hi * K * L; i++) cols[i] = NAN;
        return;
    }
    for (int64_t i = 0; i < C * plane; i++) xp[i] = pv;
    for (int64_t n = lo; n < hi; n++) {
        copy_in(x + n * C * q[Q_H] * q[Q_W], q, xp);
        if (cols) unfold_@S@(xp, q, koff, cols + n * K * L);
        float *yn = y + n * CO * L;
        /* segments outer: their rows of xp stay in L1 while the weights stream (MR*k
           floats a panel, in order); 2-4% faster than panels outer (W2's conv2) */
        for (int64_t s0 = 0; s0 < S; s0 += NV)
            for (int64_t co = 0; co < CO; co += MRV)
                tile_@S@(xp, q, koff, w + co * K, bias ? bias + co : 0, yn + co * L,
                         MIN(MRV, CO - co), s0, (int)MIN(NV, S - s0));
    }
    scratch_trim();
}

void ember_conv_igemm_@S@(char **p, const int64_t *q, int64_t nt) {
    if (nt > 1 && q[Q_N] > 1 && ember_parallel_hook)
        ember_parallel_hook(run_@S@, p, q, q, q[Q_N], 1, nt);
    else
        run_@S@(p, q, q, 0, q[Q_N]);
}
"""

_OPS = {
    "generic": dict(
        V="v8g", VLV="8", MRV="4", NV="2", TGT="", LD="ld_g", ST="st_g", SET1="set1_g",
        ADD="(a) + (b)", FMA="(a) * (b) + (c)", ZERO="set1_g(0.0f)", STREAMS="0",
        STREAM="st_g(p, v)", FENCE="(void)0"),
    "avx2": dict(
        V="__m256", VLV="8", MRV="4", NV="3", TGT='__attribute__((target("avx2,fma")))',
        LD="_mm256_loadu_ps", ST="_mm256_storeu_ps", SET1="_mm256_set1_ps",
        ADD="_mm256_add_ps(a, b)", FMA="_mm256_fmadd_ps(a, b, c)",
        ZERO="_mm256_setzero_ps()", STREAMS="1", STREAM="_mm256_stream_ps(p, v)",
        FENCE="_mm_sfence()"),
    "avx512": dict(
        V="__m512", VLV="16", MRV="8", NV="3", TGT='__attribute__((target("avx512f")))',
        LD="_mm512_loadu_ps", ST="_mm512_storeu_ps", SET1="_mm512_set1_ps",
        ADD="_mm512_add_ps(a, b)", FMA="_mm512_fmadd_ps(a, b, c)",
        ZERO="_mm512_setzero_ps()", STREAMS="1", STREAM="_mm512_stream_ps(p, v)",
        FENCE="_mm_sfence()"),
}
_ARGS = {"ADD": "(a, b)", "FMA": "(a, b, c)", "STREAM": "(p, v)"}


def source(name: str) -> str:
    """The C source of variant ``name`` (a library each: a first use builds only the one
    it runs); entry point ``ember_conv_igemm_<name>(char **p, const int64_t *q, int64_t
    nthreads)``."""
    ops = _OPS[name]
    assert (int(ops["VLV"]), int(ops["MRV"]), int(ops["NV"])) == TILES[name]
    defs = "".join(f"#define {k}{_ARGS.get(k, '')} {v}\n" for k, v in ops.items())
    body = defs + _VARIANT.replace("@S@", name)
    if name != "generic":
        body = "#ifdef EMBER_X86\n" + body + "#endif\n"
    return C_HEAD + _HEAD + body
