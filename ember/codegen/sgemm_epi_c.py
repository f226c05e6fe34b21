"""C text of Ember's float32 GEMM's epilogues (:mod:`.sgemm_c` includes it): the struct
the last k block's tile stores read, the SGD update over finished blocks of rows, and each
variant's helpers for relu, relu's backward mask and the row sums (the generic ones here,
the AVX ones as intrinsics in :mod:`.sgemm_c`'s operation tables)."""
from __future__ import annotations

#: after the geometry enum: the epilogue struct, ``sgd_rows``, the AVX2 lane sum
EPI_HEAD = r"""
/* the last k block's epilogues: bias (a row of N, or with brow a column of M), relu and
   relu's backward mask (y laid out as C: C kept where y > 0 or NaN, else +0) in the tile
   stores (tile_*), each row's sum of the finished C added into rsum[row] (rsum at the
   tile's first row; the caller splits threads by rows), the SGD update of w into wo with
   learning rate lr over each finished block of rows (sgd_rows) */
typedef struct {
    const float *bias;
    int64_t brow, relu;
    const float *w;
    float *wo;
    float lr;
    const float *y;
    float *rsum;
} epi_t;

/* the SGD epilogue over a finished block of C (rows < mc, columns < nc, row stride ldc):
   wo = w - lr * c, one FMA rounding (fmaf: vfnmadd where the CPU has FMA, else glibc's
   correctly rounded one). Once the block's tiles are stored, while it is in L2, as one
   pass whose w and wo rows stream in order: measured faster than the same step in each
   tile's stores (w read 6 rows x 256 bytes at a time) */
static void sgd_rows(const float *c, const float *w, float *wo, int64_t ldc, int64_t mc,
                     int64_t nc, float lr) {
    for (int64_t i = 0; i < mc; i++) {
        const float *cr = c + i * ldc, *wr = w + i * ldc;
        float *wor = wo + i * ldc;
        for (int64_t j = 0; j < nc; j++) wor[j] = fmaf(-cr[j], lr, wr[j]);
    }
}

#ifdef EMBER_X86
/* the 8 lanes' sum: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) */
__attribute__((target("avx2"))) static inline float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#endif

"""

#: after the generic variant's vector type ``v8g``: its relu, mask and lane sum
EPI_GENERIC = r"""
/* relu as the fused kernels' template: x if x > 0 or NaN, else +0 */
static inline v8g relu_g(v8g a) {
    v8g r;
    for (int i = 0; i < 8; i++) r[i] = a[i] > 0 || a[i] != a[i] ? a[i] : 0.0f;
    return r;
}
/* the 8 lanes' sum, in lane order */
static inline float hsum_g(v8g a) {
    float s = 0.0f;
    for (int i = 0; i < 8; i++) s += a[i];
    return s;
}
/* relu's backward as threshold_backward's template: y <= 0 ? 0 : a */
static inline v8g keep_g(v8g a, v8g y) {
    v8g r;
    for (int i = 0; i < 8; i++) r[i] = y[i] <= 0 ? 0.0f : a[i];
    return r;
}
"""
