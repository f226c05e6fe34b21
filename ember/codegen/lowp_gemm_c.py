"""C text of the native bfloat16 GEMM (:mod:`.lowp_gemm` builds and calls it).

Layout (what ``vdpbf16ps`` wants): each 32-bit word holds a *pair* of bfloat16 values
along K, low half = the even k. ``C[m, n] += A[m, 2p] B[2p, n] + A[m, 2p+1] B[2p+1, n]``
for a broadcast A word and sixteen B words per instruction (float32 lanes).

* A is packed in panels of ``MR`` rows: ``Ap[panel][p][MR]`` words (rows past M and the
  odd K's last high half are zeros);
* B in panels of ``NR`` columns: ``Bp[panel][p][NR]`` words (columns past N zeros);
* the micro-kernel keeps an ``MR x NR`` float32 tile in 24 zmm registers over all of K and
  stores it once: float32, or rounded to bfloat16 on the bits (nearest even; every NaN
  becomes ``0x7FC0`` with its sign, as :mod:`.convert_kernels`);
* two pool calls: pack (A's and B's panels, split by rows/columns so threads get equal
  bytes) then compute (row panels split over threads; each walks N in blocks whose
  packed B stays in L2).

Compiled only where ``-march=native`` has AVX512-BF16 (plus BW/VL); ``ember_bf16_native``
also asks the CPU at run time. Geometry ``g`` (int64): batch, M, N, K; A's batch/row/col
strides; B's batch/row/col strides; C's batch/row strides (columns contiguous); float32
output flag; KP = ceil(K / 2); A panels; B panels. ``ptrs``: A, B, C, packed A, packed B.
"""

from .lowp_gemm_pack_c import PACK

MR, NR, AMX_ROWS = 6, 64, 32

SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);
void (*ember_parallel_hook)(ember_run_fn, char **, const int64_t *, const int64_t *,
                            int64_t, int64_t, int64_t) = 0;

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define EMBER_BF16_DP 1
#include <immintrin.h>
#endif

#if defined(EMBER_BF16_DP) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define EMBER_AMX 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define MR 6
#define NR 64
#define MA 32                /* AMX: rows per A panel (two 16-row tiles) */
enum { G_B, G_M, G_N, G_K, G_SAB, G_SAM, G_SAK, G_SBB, G_SBK, G_SBN, G_SCB, G_SCM,
       G_F32, G_KP, G_NMP, G_NNP, G_AMX, G_BF32 };

/* AMX-BF16 on this CPU and the kernel's permission to use its tile data (Linux asks
   each process to request it: ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA) */
int64_t ember_bf16_amx(void) {
#ifdef EMBER_AMX
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 22) & 1) || !((d >> 24) & 1))
        return 0;
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

int64_t ember_bf16_native(void) {
#ifdef EMBER_BF16_DP
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

#ifdef EMBER_BF16_DP
""" + PACK + r"""static inline __m256i round_bf16(__m512 v) { return _mm512_cvtepi32_epi16(rne16(v)); }

#define DP(i)                                                                          \
    { const __m512bh ai = (__m512bh)_mm512_set1_epi32((int32_t)a[i]);                  \
      c##i##0 = _mm512_dpbf16_ps(c##i##0, ai, b0);                                    \
      c##i##1 = _mm512_dpbf16_ps(c##i##1, ai, b1);                                    \
      c##i##2 = _mm512_dpbf16_ps(c##i##2, ai, b2);                                    \
      c##i##3 = _mm512_dpbf16_ps(c##i##3, ai, b3); }
#define ZERO(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = c##i##0, c##i##2 = c##i##0, \
                       c##i##3 = c##i##0;
#define STORE(i)                                                                       \
    if (i < mr) { store_row(c, i * scm, f32, mk, c##i##0, c##i##1, c##i##2, c##i##3); }

static inline void store_row(char *c, int64_t off, int f32, const __mmask16 *mk,
                             __m512 v0, __m512 v1, __m512 v2, __m512 v3) {
    const __m512 v[4] = {v0, v1, v2, v3};
    for (int j = 0; j < 4; j++) {
        if (!mk[j]) return;
        if (f32) _mm512_mask_storeu_ps((float *)c + off + 16 * j, mk[j], v[j]);
        else _mm256_mask_storeu_epi16((uint16_t *)c + off + 16 * j, mk[j], round_bf16(v[j]));
    }
}

/* one MR x NR tile over all of K; c points at its top-left element */
static void tile(const uint32_t *restrict a, const uint32_t *restrict bp, int64_t KP,
                 char *c, int64_t scm, int f32, int64_t mr, int64_t nv) {
    ZERO(0) ZERO(1) ZERO(2) ZERO(3) ZERO(4) ZERO(5)
    for (int64_t p = 0; p < KP; p++, a += MR, bp += NR) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
        const __m512bh b2 = (__m512bh)_mm512_loadu_si512(bp + 32);
        const __m512bh b3 = (__m512bh)_mm512_loadu_si512(bp + 48);
        DP(0) DP(1) DP(2) DP(3) DP(4) DP(5)
    }
    __mmask16 mk[4];
    for (int j = 0; j < 4; j++) {
        const int64_t left = nv - 16 * j;
        mk[j] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    }
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
}

/* compute range: row panels [0, B * nmp) */
static void gemm_run(char **ptrs, const int64_t *g, const int64_t *st, int64_t lo,
                     int64_t hi) {
    (void)st;
    const int64_t M = g[G_M], N = g[G_N], KP = g[G_KP], nmp = g[G_NMP], nnp = g[G_NNP];
    const int64_t scm = g[G_SCM], isz = g[G_F32] ? 4 : 2;
    /* N panels per block: their packed B (KP * NR words each) within ~512 KiB of L2 */
    int64_t nb = (512 * 1024) / (KP * NR * 4 > 0 ? KP * NR * 4 : 1);
    if (nb < 1) nb = 1;
    while (lo < hi) {
        const int64_t b = lo / nmp, end = (b + 1) * nmp < hi ? (b + 1) * nmp : hi;
        const uint32_t *ap = (const uint32_t *)ptrs[3] + b * nmp * KP * MR;
        const uint32_t *bp = (const uint32_t *)ptrs[4] + b * nnp * KP * NR;
        char *cb = ptrs[2] + b * g[G_SCB] * isz;
        for (int64_t j0 = 0; j0 < nnp; j0 += nb)
            for (int64_t ip = lo - b * nmp; ip < end - b * nmp; ip++)
                for (int64_t jp = j0; jp < j0 + nb && jp < nnp; jp++) {
                    const int64_t m0 = ip * MR, n0 = jp * NR;
                    tile(ap + ip * KP * MR, bp + jp * KP * NR, KP,
                         cb + (m0 * scm + n0) * isz, scm, (int)g[G_F32],
                         M - m0 < MR ? M - m0 : MR, N - n0);
                }
        lo = end;
    }
}

#ifdef EMBER_AMX
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* AMX: 32 x 32 output blocks as four 16 x 16 float32 tiles; A tiles 16 rows x 32 k,
   B tiles 16 pairs x 16 columns read from the packed B panel (row stride NR words).
   Pairs [k0, k1) of one block: the tiles start at zero (`cin` null) or from `cin`, and
   end in `cout` (row strides `ldi`/`ldo` floats). Spilling a block to float32 memory
   between K chunks and loading it back is exact: the sums are the unchunked ones. */
static void amx_block(const char *A, const char *B, int64_t KP, int64_t k0, int64_t k1,
                      const float *cin, int64_t ldi, float *cout, int64_t ldo) {
    if (cin) {
        _tile_loadd(0, cin, ldi * 4); _tile_loadd(1, cin + 16, ldi * 4);
        _tile_loadd(2, cin + 16 * ldi, ldi * 4); _tile_loadd(3, cin + 16 * ldi + 16, ldi * 4);
    } else {
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    }
    for (int64_t kb = k0; kb < k1; kb += 16) {
        /* the next step's 64 rows into L1: tiles are not renamed, so a tileloadd that
           misses L1 stalls the next products (W1-sized 128 x 784 x 512: 270 -> 210 us,
           512^3 610 -> 480 us, one thread; bench/RESULTS.md, issue 16) */
        if (kb + 16 < k1)
            for (int r = 0; r < 16; r++) {
                _mm_prefetch(A + (kb + 16 + r * KP) * 4, _MM_HINT_T0);
                _mm_prefetch(A + (16 * KP + kb + 16 + r * KP) * 4, _MM_HINT_T0);
                _mm_prefetch(B + (kb + 16 + r) * NR * 4, _MM_HINT_T0);
                _mm_prefetch(B + (kb + 16 + r) * NR * 4 + 64, _MM_HINT_T0);
            }
        _tile_loadd(4, A + kb * 4, KP * 4);
        _tile_loadd(5, A + 16 * KP * 4 + kb * 4, KP * 4);
        _tile_loadd(6, B + kb * NR * 4, NR * 4);
        _tile_loadd(7, B + kb * NR * 4 + 64, NR * 4);
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, cout, ldo * 4); _tile_stored(1, cout + 16, ldo * 4);
    _tile_stored(2, cout + 16 * ldo, ldo * 4); _tile_stored(3, cout + 16 * ldo + 16, ldo * 4);
}

/* K chunk (pairs) whose 32-row A slice (KC * 128 bytes, 16 KiB) stays in L1 while every
   column block of the row panel runs over it: the blocks' B slices stream from L2, and
   the partial sums wait in `cs` (a row panel's columns of the N group, float32). NOTE:
   over all of K at once, a 32 x 32 block read its A and B panels (51 KiB each at
   K = 784) from L2 at every step: 4 KiB per 4 products, more than L2 delivers. */
#define AMX_KC 128

static void gemm_run_amx(char **ptrs, const int64_t *g, const int64_t *st, int64_t lo,
                         int64_t hi) {
    (void)st;
    const int64_t M = g[G_M], N = g[G_N], KP = g[G_KP], nmp = g[G_NMP], nnp = g[G_NNP];
    const int64_t scm = g[G_SCM], f32 = g[G_F32], isz = f32 ? 4 : 2;
    float buf[32 * 32] __attribute__((aligned(64)));
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    _tile_loadconfig(&cfg);
    int64_t nb = (512 * 1024) / (KP * NR * 4);
    if (nb < 1) nb = 1;
    if (nb > nnp) nb = nnp;
    int64_t nck = (KP + AMX_KC - 1) / AMX_KC;
    const int64_t ldc = nb * NR;
    float *cs = nck > 1 ? (float *)aligned_alloc(64, (size_t)(32 * ldc) * sizeof(float)) : 0;
    if (!cs) nck = 1;
    const int64_t kc = (KP / 16 + nck - 1) / nck * 16;    /* equal chunks, whole steps */
    while (lo < hi) {
        const int64_t b = lo / nmp, end = (b + 1) * nmp < hi ? (b + 1) * nmp : hi;
        const uint32_t *ap = (const uint32_t *)ptrs[3] + b * nmp * KP * MA;
        const uint32_t *bp = (const uint32_t *)ptrs[4] + b * nnp * KP * NR;
        char *cb = ptrs[2] + b * g[G_SCB] * isz;
        for (int64_t j0 = 0; j0 < nnp; j0 += nb)
            for (int64_t ip = lo - b * nmp; ip < end - b * nmp; ip++)
                for (int64_t k0 = 0; k0 < KP; k0 += kc) {
                    const int64_t k1 = k0 + kc < KP ? k0 + kc : KP, last = k1 == KP;
                    for (int64_t jp = j0; jp < j0 + nb && jp < nnp; jp++)
                        for (int64_t h = 0; h < 2 && jp * NR + 32 * h < N; h++) {
                            const int64_t m0 = ip * MA, n0 = jp * NR + 32 * h;
                            float *part = cs ? cs + (jp - j0) * NR + 32 * h : 0;
                            amx_block((const char *)(ap + ip * KP * MA),
                                      (const char *)(bp + jp * KP * NR + 32 * h), KP, k0, k1,
                                      k0 ? part : 0, ldc, last ? buf : part, last ? 32 : ldc);
                            if (!last) continue;
                            __mmask16 mk[4] = {0, 0, 0, 0};
                            for (int j = 0; j < 2; j++) {
                                const int64_t left = N - n0 - 16 * j;
                                mk[j] = left >= 16 ? (__mmask16)0xffff
                                      : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
                            }
                            for (int64_t i = 0; i < 32 && m0 + i < M; i++)
                                store_row(cb + (m0 + i) * scm * isz, n0, (int)f32, mk,
                                          _mm512_load_ps(buf + 32 * i),
                                          _mm512_load_ps(buf + 32 * i + 16),
                                          _mm512_setzero_ps(), _mm512_setzero_ps());
                        }
                }
        lo = end;
    }
    free(cs);
    _tile_release();
}
#endif
#endif

/* g as above; ptrs = [A, B, C, packed A, packed B]; nthreads: the pool's */
void ember_bf16_gemm(char **ptrs, const int64_t *g, int64_t nthreads) {
#ifdef EMBER_BF16_DP
    const int64_t mr = g[G_AMX] ? MA : MR;
    const int64_t units = g[G_B] * (g[G_NMP] * mr + g[G_NNP] * NR), rows = g[G_B] * g[G_NMP];
#ifdef EMBER_AMX
    const ember_run_fn run = g[G_AMX] ? gemm_run_amx : gemm_run;
#else
    const ember_run_fn run = gemm_run;
#endif
    if (nthreads > 1 && ember_parallel_hook) {
        ember_parallel_hook(pack_run, ptrs, g, g, units, MR * NR, nthreads);
        ember_parallel_hook(run, ptrs, g, g, rows, 1, nthreads);
    } else {
        pack_run(ptrs, g, g, 0, units);
        run(ptrs, g, g, 0, rows);
    }
#else
    (void)ptrs; (void)g; (void)nthreads;
#endif
}
"""
