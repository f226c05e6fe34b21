"""C text of the native bfloat16 GEMM's packing (:mod:`.lowp_gemm_c` includes it inside
its ``EMBER_BF16_DP`` section; layouts there).

* ``pack_a`` (6-row panels, AVX512-BF16) and ``pack_a_amx`` (32-row panels, K padded to a
  multiple of 32; a transposed A by 16x16 in-register word transposes);
* ``pack_b`` (k-pair words in 64-column panels: a row-major B interleaves two rows, a
  transposed one is a 32-bit transpose), ``pack_b_rows`` (a row-major B's full panels in
  one pass per row pair), ``pack_b_f32`` (a float32 B rounded to bfloat16 as a ``cast``
  rounds it: :mod:`ember.graph.passes.cast_gemm`);
* ``pack_run``: the pool's range over A's and B's panels.
"""

PACK = r"""/* float -> bfloat16 bits, nearest even, every NaN 0x7FC0 with its sign: convert_kernels'
   rounding (what a `cast` node makes), so a B packed from float32 holds the cast's bits */
static inline uint32_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (f != f) return ((u >> 16) & 0x8000u) | 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

static inline __m512i rne16(__m512 v) {         /* bf16_of in each lane's low half */
    const __m512i u = _mm512_castps_si512(v);
    const __m512i top = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                 _mm512_and_si512(top, _mm512_set1_epi32(1)));
    r = _mm512_srli_epi32(r, 16);
    const __m512i nan = _mm512_or_si512(_mm512_and_si512(top, _mm512_set1_epi32(0x8000)),
                                        _mm512_set1_epi32(0x7fc0));
    return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan);
}

static inline uint32_t pair_at_f(const float *x, int64_t s, int64_t k, int64_t K) {
    if (k >= K) return 0;
    const uint32_t lo = bf16_of(x[k * s]);
    return k + 1 < K ? lo | bf16_of(x[(k + 1) * s]) << 16 : lo;
}

static inline uint32_t pair_at(const uint16_t *x, int64_t s, int64_t k, int64_t K) {
    if (k >= K) return 0;               /* AMX pads K to a multiple of 32 */
    const uint32_t lo = x[k * s];
    return k + 1 < K ? lo | (uint32_t)x[(k + 1) * s] << 16 : lo;
}

/* 16 x 16 transpose of 32-bit words in registers: r[j] word i <- r[i] word j */
static inline void tr16(__m512i r[16]) {
    __m512i t[16], u[16], v[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm512_shuffle_i32x4(u[i], u[4 + i], 0x88);
        v[4 + i] = _mm512_shuffle_i32x4(u[i], u[4 + i], 0xdd);
        v[8 + i] = _mm512_shuffle_i32x4(u[8 + i], u[12 + i], 0x88);
        v[12 + i] = _mm512_shuffle_i32x4(u[8 + i], u[12 + i], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(v[i], v[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_i32x4(v[i], v[8 + i], 0xdd);
    }
}

static void pack_a(const int64_t *g, const uint16_t *a, uint32_t *dst, int64_t m0) {
    const int64_t M = g[G_M], K = g[G_K], KP = g[G_KP], sm = g[G_SAM], sk = g[G_SAK];
    for (int64_t i = 0; i < MR; i++) {
        const int64_t m = m0 + i;
        uint32_t *d = dst + i;
        if (m >= M) {
            for (int64_t p = 0; p < KP; p++) d[p * MR] = 0;
            continue;
        }
        const uint16_t *row = a + m * sm;
        int64_t p = 0;
        if (sk == 1)
            for (; 2 * p + 1 < K; p++) { uint32_t w; memcpy(&w, row + 2 * p, 4); d[p * MR] = w; }
        for (; p < KP; p++) d[p * MR] = pair_at(row, sk, 2 * p, K);
    }
}

/* AMX: 32 rows of A as they are, K padded with zeros to 2 * KP (row stride 4 * KP bytes) */
static void pack_a_amx(const int64_t *g, const uint16_t *a, uint32_t *dst, int64_t m0) {
    const int64_t M = g[G_M], K = g[G_K], KP = g[G_KP], sm = g[G_SAM], sk = g[G_SAK];
    if (sm == 1 && m0 + MA <= M) {
        /* transposed (g.mT @ x), a full panel: the words of 16 pairs (two rows of g
           interleaved) for 16 columns m, transposed in registers to 16 rows of A. NOTE:
           the scatters below store ~1 word a cycle (W1's 512x128 @ 128x784: pack 3x) */
        int64_t p = 0;
        for (; 2 * (p + 16) <= K; p += 16)
            for (int h = 0; h < 2; h++) {
                const uint16_t *col = a + m0 + 16 * h;
                __m512i r[16];
                for (int i = 0; i < 16; i++)
                    r[i] = _mm512_or_si512(
                        _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                            (const __m256i *)(col + 2 * (p + i) * sk))),
                        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                            (const __m256i *)(col + (2 * (p + i) + 1) * sk))), 16));
                tr16(r);
                for (int i = 0; i < 16; i++)
                    _mm512_storeu_si512(dst + (16 * h + i) * KP + p, r[i]);
            }
        for (int64_t i = 0; i < MA; i++) {
            const uint16_t *col = a + m0 + i;
            for (int64_t q = p; q < KP; q++) dst[i * KP + q] = pair_at(col, sk, 2 * q, K);
        }
        return;
    }
    if (sm == 1 && KP * MA < (1LL << 31)) {     /* transposed (g.mT @ x): scatter pairs */
        const __m512i idx = _mm512_mullo_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_set1_epi32((int32_t)KP));
        for (int h = 0; h < 2; h++) {
            const int64_t left = M - m0 - 16 * h;
            const __mmask16 mk = left >= 16 ? (__mmask16)0xffff
                               : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
            const uint16_t *col = a + m0 + 16 * h;
            for (int64_t p = 0; p < KP; p++) {
                __m512i w = _mm512_setzero_si512();
                if (2 * p < K) w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, col + 2 * p * sk));
                if (2 * p + 1 < K)
                    w = _mm512_or_si512(w, _mm512_slli_epi32(_mm512_cvtepu16_epi32(
                        _mm256_maskz_loadu_epi16(mk, col + (2 * p + 1) * sk)), 16));
                _mm512_i32scatter_epi32(dst + 16 * h * KP + p, idx, w, 4);
            }
        }
        return;
    }
    for (int64_t i = 0; i < MA; i++) {
        uint16_t *d = (uint16_t *)(dst + i * KP);
        int64_t k = 0;
        if (m0 + i < M) {
            const uint16_t *row = a + (m0 + i) * sm;
            if (sk == 1) { memcpy(d, row, 2 * K); k = K; }
            else for (; k < K; k++) d[k] = row[k * sk];
        }
        memset(d + k, 0, 2 * (2 * KP - k));
    }
}

/* pairs [p, KP) of B's panel at column n0: the odd K's last half pair and K's padding */
static void pack_b_tail(const int64_t *g, const uint16_t *b, uint32_t *dst, int64_t n0,
                        int64_t p) {
    const int64_t N = g[G_N], K = g[G_K], KP = g[G_KP], sk = g[G_SBK], sn = g[G_SBN];
    const int64_t nv = N - n0 < NR ? N - n0 : NR;
    for (; p < KP; p++) {
        uint32_t *d = dst + p * NR;
        int64_t j = 0;
        for (; j < nv && 2 * p < K; j++) d[j] = pair_at(b + (n0 + j) * sn, sk, 2 * p, K);
        for (; j < NR; j++) d[j] = 0;
    }
}

/* row-major B, the full panels [j0, j1) at once: each pair of rows is read as one run
   across them. NOTE: a panel at a time read 128 bytes of each row, rows 2 * N bytes apart
   (W2's 288 x 16384 columns: 32 KiB), one short stream per row that the prefetchers and
   the TLB lose track of */
static void pack_b_rows(const int64_t *g, const uint16_t *b, uint32_t *dst, int64_t j0,
                        int64_t j1) {
    const int64_t K = g[G_K], KP = g[G_KP], sk = g[G_SBK];
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10,
        41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    int64_t p = 0;
    for (; 2 * p + 1 < K; p++) {
        const uint16_t *r0 = b + 2 * p * sk, *r1 = r0 + sk;
        for (int64_t j = j0; j < j1; j++) {
            uint32_t *d = dst + (j - j0) * KP * NR + p * NR;
            for (int h = 0; h < 2; h++) {
                const __m512i x0 = _mm512_loadu_si512(r0 + j * NR + 32 * h);
                const __m512i x1 = _mm512_loadu_si512(r1 + j * NR + 32 * h);
                _mm512_storeu_si512(d + 32 * h, _mm512_permutex2var_epi16(x0, lo, x1));
                _mm512_storeu_si512(d + 32 * h + 16, _mm512_permutex2var_epi16(x0, hi, x1));
            }
        }
    }
    for (int64_t j = j0; j < j1; j++) pack_b_tail(g, b, dst + (j - j0) * KP * NR, j * NR, p);
}

static void pack_b(const int64_t *g, const uint16_t *b, uint32_t *dst, int64_t n0) {
    const int64_t N = g[G_N], K = g[G_K], sk = g[G_SBK], sn = g[G_SBN];
    const int64_t nv = N - n0 < NR ? N - n0 : NR;
    int64_t p = 0;
    if (sn == 1 && nv == NR) {          /* rows: interleave two rows' 64 columns */
        const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10,
            41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
        const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
        for (; 2 * p + 1 < K; p++) {
            const uint16_t *r0 = b + 2 * p * sk + n0, *r1 = r0 + sk;
            uint32_t *d = dst + p * NR;
            for (int h = 0; h < 2; h++) {
                const __m512i x0 = _mm512_loadu_si512(r0 + 32 * h);
                const __m512i x1 = _mm512_loadu_si512(r1 + 32 * h);
                _mm512_storeu_si512(d + 32 * h, _mm512_permutex2var_epi16(x0, lo, x1));
                _mm512_storeu_si512(d + 32 * h + 16, _mm512_permutex2var_epi16(x0, hi, x1));
            }
        }
    } else if (sk == 1 && nv == NR && 63 * (sn < 0 ? -sn : sn) < (1LL << 30)) {
        /* transposed (x @ w.mT): a pair is one 32-bit word of a row of w; gather 16 */
        const __m512i idx = _mm512_mullo_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_set1_epi32((int32_t)sn));
        /* 16 x 16 blocks of words transposed in registers (NOTE: the gathers below load
           ~1 word a cycle: x @ w.mT at W1's 128x784x512 packed 3x slower) */
        for (; 2 * (p + 16) <= K; p += 16)
            for (int v = 0; v < 4; v++) {
                __m512i r[16];
                for (int i = 0; i < 16; i++)
                    r[i] = _mm512_loadu_si512((const void *)(b + (n0 + 16 * v + i) * sn + 2 * p));
                tr16(r);
                for (int i = 0; i < 16; i++)
                    _mm512_storeu_si512(dst + (p + i) * NR + 16 * v, r[i]);
            }
        for (; 2 * p + 1 < K; p++)
            for (int v = 0; v < 4; v++)
                _mm512_storeu_si512(dst + p * NR + 16 * v, _mm512_i32gather_epi32(
                    idx, (const void *)(b + (n0 + 16 * v) * sn + 2 * p), 2));
    }
    pack_b_tail(g, b, dst, n0, p);
}

/* pack_b of a float32 B (g[G_BF32]: a `cast` to bfloat16 folded into the product, see
   ember/graph/passes/cast_gemm.py), each value rounded as the cast rounds it */
static void pack_b_f32(const int64_t *g, const float *b, uint32_t *dst, int64_t n0) {
    const int64_t N = g[G_N], K = g[G_K], KP = g[G_KP], sk = g[G_SBK], sn = g[G_SBN];
    const int64_t nv = N - n0 < NR ? N - n0 : NR;
    int64_t p = 0;
    if (sn == 1 && nv == NR) {          /* rows: two rows' 16 columns -> 16 pair words */
        for (; 2 * p + 1 < K; p++) {
            const float *r0 = b + 2 * p * sk + n0, *r1 = r0 + sk;
            for (int v = 0; v < 4; v++)
                _mm512_storeu_si512(dst + p * NR + 16 * v, _mm512_or_si512(
                    rne16(_mm512_loadu_ps(r0 + 16 * v)),
                    _mm512_slli_epi32(rne16(_mm512_loadu_ps(r1 + 16 * v)), 16)));
        }
    } else if (sk == 1 && nv == NR) {   /* transposed (x @ w.mT): 32 floats of a row of w
                                           are its 16 pair words, then 16 x 16 transposes */
        for (; 2 * (p + 16) <= K; p += 16)
            for (int v = 0; v < 4; v++) {
                __m512i r[16];
                for (int i = 0; i < 16; i++) {
                    const float *row = b + (n0 + 16 * v + i) * sn + 2 * p;
                    r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(
                        _mm512_cvtepi32_epi16(rne16(_mm512_loadu_ps(row)))),
                        _mm512_cvtepi32_epi16(rne16(_mm512_loadu_ps(row + 16))), 1);
                }
                tr16(r);
                for (int i = 0; i < 16; i++)
                    _mm512_storeu_si512(dst + (p + i) * NR + 16 * v, r[i]);
            }
    }
    for (; p < KP; p++) {
        uint32_t *d = dst + p * NR;
        int64_t j = 0;
        for (; j < nv && 2 * p < K; j++) d[j] = pair_at_f(b + (n0 + j) * sn, sk, 2 * p, K);
        for (; j < NR; j++) d[j] = 0;
    }
}

/* pack range: units [0, B * (nmp*MR + nnp*NR)); a panel belongs to the chunk holding its
   first unit */
static void pack_run(char **ptrs, const int64_t *g, const int64_t *st, int64_t lo,
                     int64_t hi) {
    (void)st;
    const int64_t KP = g[G_KP], mr = g[G_AMX] ? MA : MR;
    const int64_t ma = g[G_NMP] * mr, per = ma + g[G_NNP] * NR;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t b = u / per, r = u % per;
        if (r < ma) {
            if (r % mr) continue;
            (g[G_AMX] ? pack_a_amx : pack_a)(g, (const uint16_t *)ptrs[0] + b * g[G_SAB],
                   (uint32_t *)ptrs[3] + (b * g[G_NMP] + r / mr) * KP * mr, r);
        } else {
            const int64_t n0 = r - ma;
            if (n0 % NR) continue;
            uint32_t *d = (uint32_t *)ptrs[4] + (b * g[G_NNP] + n0 / NR) * KP * NR;
            if (g[G_BF32]) {
                pack_b_f32(g, (const float *)ptrs[1] + b * g[G_SBB], d, n0);
            } else if (g[G_SBN] == 1 && n0 + NR <= g[G_N]) {
                /* row-major: the run of full panels whose first units are in [u, hi) */
                int64_t n1 = n0 + NR;
                while (n1 + NR <= g[G_N] && u + (n1 - n0) < hi) n1 += NR;
                pack_b_rows(g, (const uint16_t *)ptrs[1] + b * g[G_SBB], d, n0 / NR, n1 / NR);
                u += n1 - n0 - 1;
            } else {
                pack_b(g, (const uint16_t *)ptrs[1] + b * g[G_SBB], d, n0);
            }
        }
    }
}

"""
