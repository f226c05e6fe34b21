"""The C source of :mod:`.conv_kernels` (its loops and the notes on why they look so).

``_BODY`` is written once with ``T`` (the element type), ``U`` (the unsigned integer of
its size), ``A`` (the arithmetic type), ``LD``/``ST`` (T -> A on load, A -> T on store)
and the suffix ``S``; :data:`SOURCE` holds a float32, a float64, a bfloat16 and a float16
copy (16-bit values kept as bits: copies and masks move them, sums and compares convert
each element as it is loaded and round once as it is stored, never a whole operand).
``_BODY`` holds im2col/col2im; the max-pool loops are :mod:`.conv_pool_c`'s, appended.
"""
from __future__ import annotations

from .conv_pool_c import POOL_BODY
from .prelude import _BF16, _F16

#: float -> float16 bits as NumPy rounds (also :mod:`.lowp_reduce`'s; needs ``_F16``).
ST_F16 = r"""/* float -> float16 bits as NumPy rounds (convert_kernels' f2h_bits): nearest even, and a
   NaN keeps its sign and payload >> 13 (made nonzero), where ember_f32_to_f16 says 0x7e00 */
static inline uint16_t ember_st_f16(float f) {
    union { uint32_t u; float f; } v; v.f = f;
    const uint16_t q = (uint16_t)(0x7c00u | ((v.u & 0x7fffffu) >> 13));
    const uint16_t nan = (uint16_t)(((v.u >> 16) & 0x8000u) | (q == 0x7c00u ? 0x7c01u : q));
    return f != f ? nan : ember_f32_to_f16(f);
}
"""

_HEAD = r"""#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif
/* relu as NumPy's maximum(v, 0): NaN passes through, -0 becomes +0 (the "+ 0").
   One compare, so it can be a select (`v > 0 || v != v ? v : 0` is two). */
#define EMBER_RELU(v) (((v) < 0 ? 0 : (v)) + 0)
#define EMBER_FN static inline
""" + _BF16 + _F16 + r"""
""" + ST_F16 + r"""static inline float ember_round_f16_np(float f) { return ember_f16_to_f32(ember_st_f16(f)); }
typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);
void (*ember_parallel_hook)(ember_run_fn, char **, const int64_t *, const int64_t *,
                            int64_t, int64_t, int64_t) = 0;

#define GEOM const int64_t H = g[1], W = g[2], KH = g[3], KW = g[4], DH = g[5], DW = g[6], \
    SH = g[7], SW = g[8], PT = g[9], PL = g[10], OH = g[11], OW = g[12]; (void)st

/* [*lo, *hi): the output columns ox whose input column ox*SW - PL + j*DW is inside [0, W). */
static void ember_cols(int64_t W, int64_t SW, int64_t PL, int64_t j, int64_t DW, int64_t OW,
                       int64_t *lo, int64_t *hi) {
    const int64_t off = j * DW - PL;                 /* ix = ox*SW + off */
    int64_t a = off >= 0 ? 0 : (-off + SW - 1) / SW;
    int64_t b = W - 1 - off < 0 ? 0 : (W - 1 - off) / SW + 1;
    if (b > OW) b = OW;
    if (a > b) a = b;
    *lo = a; *hi = b;
}

/* The plane (image, channel) p = n*C + c (C = g[13]) is stored at this index: p itself,
   or, with g[14] set, c*N + n (channel-first: all images' planes of channel c together). */
static inline int64_t ember_plane(int64_t p, const int64_t *g) {
    return g[14] ? (p % g[13]) * (g[0] / g[13]) + p / g[13] : p;
}

/* The rows [*ya, *yb) of output rows oy whose input row oy*SH - PT + i*DH is inside [0, H). */
static void ember_rows(const int64_t *g, int64_t i, int64_t *ya, int64_t *yb) {
    const int64_t H = g[1], DH = g[5], SH = g[7], PT = g[9], OH = g[11];
    const int64_t off = i * DH - PT;                 /* iy = oy*SH + off */
    int64_t a = off >= 0 ? 0 : (-off + SH - 1) / SH;
    int64_t b = H - 1 - off < 0 ? 0 : (H - 1 - off) / SH + 1;
    if (b > OH) b = OH;
    if (a > b) a = b;
    *ya = a; *yb = b;
}

/* Stride 1 both ways and OW == W (a "same" convolution): a tap's L outputs are the plane
   shifted by one offset, so its in-range rows are ONE contiguous copy (or add) of
   ~L elements instead of OH short rows split at the padding (16 floats: one vector plus a
   scalar epilogue per row). */
#define EMBER_FLAT(g) ((g)[7] == 1 && (g)[8] == 1 && (g)[12] == (g)[2])

/* Planes handled together, tap by tap (channel-first: each tap's rows of a block are one
   contiguous run of the columns, so a thread writes/reads one sequential stream at a time
   instead of kh*kw interleaved 1 KiB pieces; the block's images stay in L1/L2 between
   taps). Blocks never straddle channels. 32 KiB of image planes. */
static int64_t ember_block(const int64_t *g, size_t elem) {
    const int64_t b = (int64_t)(32768 / ((size_t)(g[1] * g[2]) * elem + 1));
    return g[14] && b > 1 ? b : 1;
}

/* Columns at least this large are written with non-temporal stores (ember_stream): far
   bigger than L2, mostly evicted before the GEMM reads them anyway, and a cached store
   first reads each line it will wholly overwrite (an 18.9 MB unfold measured ~1.4x slower
   than with streaming stores). */
#define EMBER_STREAM_BYTES ((int64_t)4 << 20)

/* memcpy of n bytes whose whole 64-byte lines of dst are written with non-temporal stores
   (the caller ends with ember_fence()); the ragged ends with memcpy. */
static void ember_stream(void *dst, const void *src, size_t n) {
#if defined(__AVX__)
    char *d = (char *)dst;
    const char *s = (const char *)src;
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head; s += head; n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        _mm256_stream_si256((__m256i *)d, _mm256_loadu_si256((const __m256i *)s));
        _mm256_stream_si256((__m256i *)(d + 32), _mm256_loadu_si256((const __m256i *)(s + 32)));
    }
    memcpy(d, s, n);
#else
    memcpy(dst, src, n);
#endif
}

/* Orders this thread's non-temporal stores before whatever it does next (the pool's
   hand-back): their data is then visible to every thread. */
static void ember_fence(void) {
#if defined(__AVX__)
    _mm_sfence();
#endif
}

/* The plane (n*C + c) that the q-th stored plane holds: maxpool runs over the STORED
   order, so its big full-size input is read sequentially and only the small pooled
   outputs are scattered (channel-first 16x16 planes read in (n, c) order, 64 KiB apart:
   1.1-1.4x slower). NOTE: not maxpool_grad: there the scattered full-size planes are
   writes, which the store buffer hides (sequential writes measured 1.15x slower). */
static inline int64_t ember_logical(int64_t q, const int64_t *g) {
    return g[14] ? (q % (g[0] / g[13])) * g[13] + q / (g[0] / g[13]) : q;
}

static void ember_launch_planes(ember_run_fn run, char **ptrs, const int64_t *g,
                                int64_t nthreads) {
    if (nthreads > 1 && g[0] > 1 && ember_parallel_hook)
        ember_parallel_hook(run, ptrs, g, g, g[0], 1, nthreads);
    else
        run(ptrs, g, g, 0, g[0]);
}
"""

# One copy per dtype: T is the element type, U the unsigned integer of its size, S the
# suffix.
_BODY = r"""
/* Tap (i, j) of one plane xp into r[0, L): r[oy*OW + ox] = the pixel
   (oy*SH - PT + i*DH, ox*SW - PL + j*DW), or pad outside the image. */
static inline void ember_unfold_tap_S(const T *restrict xp, T *restrict r, const int64_t *g,
                                      int64_t i, int64_t j, T pad) {
    const int64_t *st = g;
    GEOM;
    int64_t a, b, ya, yb;
    ember_cols(W, SW, PL, j, DW, OW, &a, &b);
    ember_rows(g, i, &ya, &yb);
    const int64_t off = j * DW - PL;
    if (a >= b) yb = ya;                             /* no column inside: all padding */
    for (int64_t t = 0; t < ya * OW; t++) r[t] = pad;
    for (int64_t t = yb * OW; t < OH * OW; t++) r[t] = pad;
    if (ya >= yb) return;
    if (EMBER_FLAT(g)) {
        /* r[t] = xp[t + shift] over the in-range rows (indices >= 0: ya and a are the
           first in range), then the few padding columns of each row overwritten */
        const int64_t shift = (i * DH - PT) * W + off;
        for (int64_t t = ya * OW + a; t < (yb - 1) * OW + b; t++) r[t] = xp[t + shift];
        for (int64_t oy = ya; oy < yb; oy++) {
            for (int64_t ox = 0; ox < a; ox++) r[oy * OW + ox] = pad;
            for (int64_t ox = b; ox < OW; ox++) r[oy * OW + ox] = pad;
        }
        return;
    }
    for (int64_t oy = ya; oy < yb; oy++) {
        const T *xr = xp + (oy * SH - PT + i * DH) * W;
        T *ro = r + oy * OW;
        for (int64_t ox = 0; ox < a; ox++) ro[ox] = pad;
        if (SW == 1) {        /* NOTE: a loop, not memcpy: rows are short (2x) */
            const T *xs = xr + off;
            for (int64_t ox = a; ox < b; ox++) ro[ox] = xs[ox];
        } else {
            for (int64_t ox = a; ox < b; ox++) ro[ox] = xr[ox * SW + off];
        }
        for (int64_t ox = b; ox < OW; ox++) ro[ox] = pad;
    }
}

static void ember_unfold_S_run(char **ptrs, const int64_t *g, const int64_t *st,
                               int64_t lo, int64_t hi) {
    GEOM;
    const T *x = (const T *)ptrs[0];
    T *out = (T *)ptrs[1];
    const T pad = (T)(*(const double *)ptrs[2]);
    const int64_t L = OH * OW, C = g[13], NB = g[0] / C, B = ember_block(g, sizeof(T));
    /* columns (N, C*kh*kw, L), or with g[14] channel-first (C*kh*kw, N, L): one GEMM
       `weight @ cols` for the whole batch then. NOTE: channel-first, p runs over (c, n):
       consecutive planes then write consecutive rows of each tap (sequential write
       streams, not 1 KiB pieces scattered over the whole array: 1.5x slower) */
    const int64_t ts = g[14] ? NB * L : L;
    /* big channel-first columns: a block's run of each tap is built in `buf` (L1/L2),
       then streamed out whole */
    T *buf = g[14] && g[0] * KH * KW * L * (int64_t)sizeof(T) >= EMBER_STREAM_BYTES
        ? (T *)malloc((size_t)(B * L) * sizeof(T)) : 0;
    for (int64_t p0 = lo, p1; p0 < hi; p0 = p1) {
        p1 = p0 + B < hi ? p0 + B : hi;
        if (g[14] && p1 > (p0 / NB + 1) * NB) p1 = (p0 / NB + 1) * NB;
        for (int64_t i = 0; i < KH; i++)
        for (int64_t j = 0; j < KW; j++) {
            for (int64_t p = p0; p < p1; p++) {
                const T *xp = x + (g[14] ? (p % NB) * C + p / NB : p) * H * W;
                T *op = g[14] ? out + ((p / NB) * KH * KW * NB + p % NB) * L
                              : out + p * KH * KW * L;
                ember_unfold_tap_S(xp, buf ? buf + (p - p0) * L : op + (i * KW + j) * ts,
                                   g, i, j, pad);
            }
            if (buf)       /* planes p0..p1 of one channel: one contiguous run of the tap */
                ember_stream(out + ((p0 / NB) * KH * KW * NB + p0 % NB) * L
                             + (i * KW + j) * ts, buf, (size_t)((p1 - p0) * L) * sizeof(T));
        }
    }
    if (buf) ember_fence();
    free(buf);
}

void ember_unfold_S(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_launch_planes(ember_unfold_S_run, ptrs, g, nthreads);
}

/* Adds tap (i, j)'s r[0, L) into the plane op (unfold_tap's transpose). `mask`: with
   EMBER_FLAT, L values, 1 where the column of tap column j is inside the image. */
static inline void ember_fold_tap_S(const T *restrict r, A *restrict op, const int64_t *g,
                                    int64_t i, int64_t j, const A *restrict mask) {
    const int64_t *st = g;
    GEOM;
    int64_t a, b, ya, yb;
    ember_cols(W, SW, PL, j, DW, OW, &a, &b);
    ember_rows(g, i, &ya, &yb);
    const int64_t off = j * DW - PL;
    if (a >= b || ya >= yb) return;
    if (EMBER_FLAT(g)) {
        /* one contiguous add; the padding columns (which would land on the neighbouring
           row's edge pixel) add an exact +0 instead (`?:`, not `*`: inf * 0 is NaN).
           Adding +0 changes no sum: a pixel's sum starts at +0 and never becomes -0 */
        const int64_t shift = (i * DH - PT) * W + off;
        for (int64_t t = ya * OW + a; t < (yb - 1) * OW + b; t++)
            op[t + shift] += mask[t] != 0 ? LD(r[t]) : (A)0;
        return;
    }
    for (int64_t oy = ya; oy < yb; oy++) {
        A *orow = op + (oy * SH - PT + i * DH) * W;
        const T *ro = r + oy * OW;
        if (SW == 1) {
            A *o = orow + off;
            for (int64_t ox = a; ox < b; ox++) o[ox] += LD(ro[ox]);
        } else {
            for (int64_t ox = a; ox < b; ox++) orow[ox * SW + off] += LD(ro[ox]);
        }
    }
}

/* Taps are added in (i, j) order at every pixel, like the NumPy kernel's strided adds. */
static void ember_fold_S_run(char **ptrs, const int64_t *g, const int64_t *st,
                             int64_t lo, int64_t hi) {
    GEOM;
    const T *cols = (const T *)ptrs[0];
    T *out = (T *)ptrs[1];
    const int64_t L = OH * OW, C = g[13], NB = g[0] / C, B = ember_block(g, sizeof(A));
    const int64_t ts = g[14] ? NB * L : L;    /* channel-first columns: as in unfold */
    A *mask = 0;
    /* 16-bit: a block's planes are summed in float (`acc`, L1/L2) and rounded once into
       `out`; the columns are converted as they are loaded, never as a whole */
    A *acc = LOWP ? (A *)malloc((size_t)(B * H * W) * sizeof(A)) : 0;
    if (LOWP && !acc) return;
    if (EMBER_FLAT(g)) {
        mask = (A *)malloc((size_t)(KW * L) * sizeof(A));
        if (!mask) { free(acc); return; }
        for (int64_t j = 0; j < KW; j++) {
            int64_t a, b;
            ember_cols(W, SW, PL, j, DW, OW, &a, &b);
            for (int64_t t = 0; t < L; t++)
                mask[j * L + t] = (A)(t % OW >= a && t % OW < b);
        }
    }
#define FOLD_PLANE(p) (LOWP ? acc + ((p) - p0) * H * W \
                            : (A *)(out + (g[14] ? ((p) % NB) * C + (p) / NB : (p)) * H * W))
    for (int64_t p0 = lo, p1; p0 < hi; p0 = p1) {
        p1 = p0 + B < hi ? p0 + B : hi;
        if (g[14] && p1 > (p0 / NB + 1) * NB) p1 = (p0 / NB + 1) * NB;
        for (int64_t p = p0; p < p1; p++)
            memset(FOLD_PLANE(p), 0, (size_t)(H * W) * sizeof(A));
        for (int64_t k = 0; k < KH * KW; k++)
        for (int64_t p = p0; p < p1; p++) {
            A *op = FOLD_PLANE(p);
            const T *cp = g[14] ? cols + ((p / NB) * KH * KW * NB + p % NB) * L
                                : cols + p * KH * KW * L;
            /* NOTE: the next tap's run (or the next block's first) is prefetched while
               this one is added: a block's run is too short for the hardware prefetcher
               to ramp up on each new stream (1.3x slower without) */
            const int64_t pn = k + 1 < KH * KW ? p : p + (p1 - p0);
            if (pn < hi && (!g[14] || pn / NB == p / NB)) {
                const T *nx = k + 1 < KH * KW ? cp + (k + 1) * ts
                    : g[14] ? cp + (pn - p) * L
                            : cols + pn * KH * KW * L;
                for (int64_t t = 0; t < L; t += 64 / (int64_t)sizeof(T))
                    __builtin_prefetch(nx + t, 0, 0);
            }
            ember_fold_tap_S(cp + k * ts, op, g, k / KW, k % KW, mask ? mask + (k % KW) * L : 0);
        }
        for (int64_t p = p0; LOWP && p < p1; p++) {
            T *o = out + (g[14] ? (p % NB) * C + p / NB : p) * H * W;
            const A *s = FOLD_PLANE(p);
            for (int64_t t = 0; t < H * W; t++) o[t] = ST(s[t]);
        }
    }
#undef FOLD_PLANE
    free(mask);
    free(acc);
}

void ember_fold_S(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_launch_planes(ember_fold_S_run, ptrs, g, nthreads);
}

""" + POOL_BODY

#: (suffix, T, U, A, LD, ST, PRO) of each copy: T the stored element, U the unsigned
#: integer of its size, A the arithmetic type, LD/ST the conversions T -> A -> T, PRO
#: the max-pool prologue's rounding of ``x + bias`` to T (eager's add rounds it; NOTE: one
#: per copy, not chosen at run time: the vectorised prologue computed both roundings).
#: ``bf16``/``f16`` hold their values as bits (``unfold`` and a tiling ``maxpool_grad``
#: move or mask them) and compute in float, converting on load, rounding once on store.
COPIES = (("f32", "float", "uint32_t", "float", "", "", ""),
          ("f64", "double", "uint64_t", "double", "", "", ""),
          ("bf16", "uint16_t", "uint16_t", "float", "ember_bf16_to_f32", "ember_f32_to_bf16",
           "ember_round_bf16"),
          ("f16", "uint16_t", "uint16_t", "float", "ember_f16_to_f32", "ember_st_f16",
           "ember_round_f16_np"))

def source(suffixes=None) -> str:
    """The C text of the copies whose suffix is in ``suffixes`` (default: every copy)."""
    return _HEAD + "".join(
        f"#define T {t}\n#define U {u}\n#define A {a}\n#define PRO(v) {pro}(v)\n"
        f"#define LD(v) {ld}(v)\n#define ST(v) {st}(v)\n#define LOWP {int(bool(ld))}\n"
        + _BODY.replace("_S_run", f"_{s}_run").replace("_S(", f"_{s}(")
        + "#undef T\n#undef U\n#undef A\n#undef PRO\n#undef LD\n#undef ST\n#undef LOWP\n"
        for s, t, u, a, ld, st, pro in COPIES if suffixes is None or s in suffixes)


SOURCE = source()
