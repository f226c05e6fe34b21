"""CUDA C text of the tensor-core flash-attention forward's per-step device functions.

The pieces :mod:`.cuda_attention_mma_c`'s kernel is built from, each one step of a 64-key
tile for one warp: the dtype's ``mma``/pack/exponent helpers, the K/V/Q tile loads into
shared memory (16-byte vectors or ``cp.async``), ``S = Q K^T`` over 1 or 2 m-tiles
(``ember_fwd_scores``), the online softmax of a tile (``ember_fwd_softmax``, masked or not),
``acc += P V`` on the tensor cores (``ember_fwd_pv``) or by scalar FMAs over the visible
keys (``ember_fwd_pv_exact``, a diagonal step with a non-finite V) and the final store of
``O`` and the log-sum-exp (``ember_fwd_store``). The tile loop, the staging pipelines and
the kernel itself, and the design they implement, are in :mod:`.cuda_attention_mma_c`.
"""
from __future__ import annotations

FWD_PARTS = r"""
__device__ __forceinline__ void ember_mma(const __half *, float *c, const unsigned *a,
                                          const unsigned *b) { ember_mma_f16(c, a, b); }
__device__ __forceinline__ void ember_mma(const __nv_bfloat16 *, float *c, const unsigned *a,
                                          const unsigned *b) { ember_mma_bf16(c, a, b); }
__device__ __forceinline__ unsigned ember_pack(const __half *, float lo, float hi) {
    return ember_pack_f16(lo, hi); }
__device__ __forceinline__ unsigned ember_pack(const __nv_bfloat16 *, float lo, float hi) {
    return ember_pack_bf16(lo, hi); }
/* 2^x by the MUFU alone (flushes subnormal results to 0: a p below 2^-126 of the row's
   max, far under the 16-bit P's resolution); the emulator: exp2f */
__device__ __forceinline__ float ember_ex2(float x) {
#ifdef EMBER_EMU
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}
/* the exponent bits of a 16-bit float: all set = Inf or NaN */
__device__ __forceinline__ unsigned ember_expmask(const __half *) { return 0x7c00u; }
__device__ __forceinline__ unsigned ember_expmask(const __nv_bfloat16 *) { return 0x7f80u; }

/* N 16-byte chunks a thread loads of rows [r0, r0 + 64) of a (T, C * 8) head, zero past T */
template <int C, int N>
__device__ __forceinline__ void ember_tile_ld(uint4 *r, const unsigned short *x,
        long long base, long long st, int r0, int T_, int vec) {
#pragma unroll
    for (int n = 0; n < N; n++) {
        const int c = threadIdx.x + n * 128, row = c / C, col = (c % C) * 8, t = r0 + row;
        uint4 z = {0u, 0u, 0u, 0u};
        if (t < T_) {
            const unsigned short *s = x + base + (long long)t * st + col;
            if (vec) {
                z = *(const uint4 *)s;
            } else {
                z.x = s[0] | ((unsigned)s[1] << 16); z.y = s[2] | ((unsigned)s[3] << 16);
                z.z = s[4] | ((unsigned)s[5] << 16); z.w = s[6] | ((unsigned)s[7] << 16);
            }
        }
        r[n] = z;
    }
}
/* ... and into shared rows of L elements */
template <int C, int L, int N>
__device__ __forceinline__ void ember_tile_st(unsigned short *sh, const uint4 *r) {
#pragma unroll
    for (int n = 0; n < N; n++) {
        const int c = threadIdx.x + n * 128;
        *(uint4 *)&sh[(c / C) * L + (c % C) * 8] = r[n];
    }
}

/* rows [r0, r0 + 64) of a head into shared rows of L elements by cp.async (vec), else by
   element loads; zero rows past T */
template <int C, int L, int N>
__device__ __forceinline__ void ember_tile_async(unsigned short *sh, const unsigned short *x,
        long long base, long long st, int r0, int T_, int vec) {
    if (!vec) {
        uint4 r[N];
        ember_tile_ld<C, N>(r, x, base, st, r0, T_, 0);
        ember_tile_st<C, L, N>(sh, r);
        return;
    }
#pragma unroll
    for (int n = 0; n < N; n++) {
        const int c = threadIdx.x + n * 128, row = c / C, col = (c % C) * 8, t = r0 + row;
        unsigned short *d = &sh[row * L + col];
        if (t < T_) {
            ember_cp16(d, x + base + (long long)t * st + col);
        } else {
            const uint4 z = {0u, 0u, 0u, 0u};
            *(uint4 *)d = z;
        }
    }
}

/* one 16-row A fragment per lane's warp: the rows of a row-major tile */
#define EMBER_ROW16(r0, c0, L) (((r0) + (lane & 15)) * (L) + (c0) + 8 * (lane >> 4))

/* S (MT m-tiles of 16 x 64: 8 C fragments each) = Q K^T over the first nk[mt] 16-key
   steps of m-tile mt (the last m-tile sees the most); K rows as B, each K fragment loaded
   once for every m-tile. WHOLE: all 4 steps, no tests */
template <typename T, int DQ, int MT, bool WHOLE>
__device__ __forceinline__ void ember_fwd_scores(float (&s)[MT][8][4],
        const unsigned (&qf)[MT][DQ / 16][4], const unsigned short *kt, const int (&nk)[MT],
        int lane) {
    constexpr int LQ = DQ + 8;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
    }
#pragma unroll
    for (int np = 0; np < 4; np++) {
        if (WHOLE || np < nk[MT - 1]) {
#pragma unroll
            for (int kk = 0; kk < DQ / 16; kk++) {
                unsigned b[4];
                ember_ldsm_x4(b, &kt[(np * 16 + 8 * (lane >> 4) + (lane & 7)) * LQ +
                                     kk * 16 + 8 * ((lane >> 3) & 1)]);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (WHOLE || np < nk[mt]) {
                        ember_mma((const T *)0, s[mt][2 * np], qf[mt][kk], b);
                        ember_mma((const T *)0, s[mt][2 * np + 1], qf[mt][kk], b + 2);
                    }
                }
            }
        }
    }
}

/* the online softmax of one tile for this lane's rows ia (C regs 0-1) and ib = ia + 8 (2-3):
   S -> P = exp2(S scale log2(e) - m'), masked keys 0; m, l updated; returns the rescale
   factors of the old accumulator in a[0..1]. MASK false: every key visible (no tests) */
template <bool MASK>
__device__ __forceinline__ void ember_fwd_softmax(float (&s)[8][4], float (&m)[2],
        float (&l)[2], float (&a)[2], float sl2, int j0, int ia, int t, int Tk, int causal) {
    float x[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = j0 + n * 8 + 2 * t + (e & 1), i = ia + 8 * (e >> 1);
            const bool ok = !MASK || (j < Tk && (!causal || j <= i));
            s[n][e] = ok ? s[n][e] * sl2 : -INFINITY;
        }
        /* NOTE: fmaxf drops a NaN score from the max; its p = exp2(NaN - m) is NaN, so
           the row's l, acc, O and lse are NaN all the same (one instruction, not 4) */
        x[0] = fmaxf(x[0], fmaxf(s[n][0], s[n][1]));
        x[1] = fmaxf(x[1], fmaxf(s[n][2], s[n][3]));
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        x[h] = fmaxf(x[h], __shfl_xor_sync(FULL, x[h], 1));
        x[h] = fmaxf(x[h], __shfl_xor_sync(FULL, x[h], 2));
        const float mn = fmaxf(m[h], x[h]);
        a[h] = m[h] == -INFINITY ? 0.f : ember_ex2(m[h] - mn);
        m[h] = mn;
        l[h] *= a[h];
    }
#pragma unroll
    for (int n = 0; n < 8; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = j0 + n * 8 + 2 * t + (e & 1), i = ia + 8 * (e >> 1);
            const bool ok = !MASK || (j < Tk && (!causal || j <= i));
            s[n][e] = ok ? ember_ex2(s[n][e] - m[e >> 1]) : 0.f;
        }
        l[0] += s[n][0] + s[n][1];
        l[1] += s[n][2] + s[n][3];
    }
}

/* whether any V value of keys [16 kk, 16 kk + 16) of the tile is Inf/NaN (warp ballot) */
template <typename T, int DV>
__device__ __forceinline__ bool ember_fwd_v_nonfinite(const unsigned short *vt, int kk,
                                                      int lane) {
    const unsigned em = ember_expmask((const T *)0), em2 = em << 16;
    bool bad = false;
#pragma unroll
    for (int e = lane; e < 2 * DV; e += 32) {          /* 16 rows of DV / 8 16-byte chunks */
        const uint4 w = *(const uint4 *)&vt[(kk * 16 + e / (DV / 8)) * (DV + 8) +
                                            (e % (DV / 8)) * 8];
        const unsigned x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int h = 0; h < 4; h++) bad |= (x[h] & em) == em || (x[h] & em2) == em2;
    }
    return __ballot_sync(FULL, bad) != 0u;
}

/* acc[mt] += P V over 16-key step kk on the tensor cores for the m-tiles with on[mt]: P's
   C fragments packed as A; each V fragment loaded once for every m-tile */
template <typename T, int DV, int MT>
__device__ __forceinline__ void ember_fwd_pv(float (&acc)[MT][DV / 8][4],
        const float (&s)[MT][8][4], const unsigned short *vt, int kk, int lane,
        const bool (&on)[MT]) {
    unsigned a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        a[mt][0] = ember_pack((const T *)0, s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = ember_pack((const T *)0, s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = ember_pack((const T *)0, s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = ember_pack((const T *)0, s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int nd = 0; nd < DV / 16; nd++) {
        unsigned b[4];
        ember_ldsm_x4_t(b, &vt[EMBER_ROW16(kk * 16, nd * 16, DV + 8)]);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            if (on[mt]) {
                ember_mma((const T *)0, acc[mt][2 * nd], a[mt], b);
                ember_mma((const T *)0, acc[mt][2 * nd + 1], a[mt], b + 2);
            }
        }
    }
}

/* ... by scalar FMAs over the visible keys only (a masked key's Inf/NaN V stays out); P
   broadcast from the row's 4 lanes by shuffles (selects, not indexing: no local memory) */
template <typename T, int DV>
__device__ __forceinline__ void ember_fwd_pv_exact(float (&acc)[DV / 8][4],
        const float (&s)[8][4], const unsigned short *vt, int kk, int j0, int ia, int lane,
        int Tk) {
    const int t = lane & 3, ib = ia + 8;
#pragma unroll 1
    for (int c = 0; c < 16; c++) {
        const int src = (lane & ~3) | ((c & 7) >> 1), j = j0 + kk * 16 + c;
        const bool hi = c >> 3, odd = c & 1;
        const float ea = hi ? (odd ? s[2 * kk + 1][1] : s[2 * kk + 1][0])
                            : (odd ? s[2 * kk][1] : s[2 * kk][0]);
        const float eb = hi ? (odd ? s[2 * kk + 1][3] : s[2 * kk + 1][2])
                            : (odd ? s[2 * kk][3] : s[2 * kk][2]);
        const float pa = __shfl_sync(FULL, ea, src), pb = __shfl_sync(FULL, eb, src);
        const T *vr = (const T *)&vt[(kk * 16 + c) * (DV + 8)];
#pragma unroll
        for (int n = 0; n < DV / 8; n++) {
            const float v0 = ember_ld(vr[n * 8 + 2 * t]), v1 = ember_ld(vr[n * 8 + 2 * t + 1]);
            if (j < Tk && j <= ia) { acc[n][0] += pa * v0; acc[n][1] += pa * v1; }
            if (j < Tk && j <= ib) { acc[n][2] += pb * v0; acc[n][3] += pb * v1; }
        }
    }
}

/* O = acc / l (rounded once) and lse = m ln 2 + log l of this lane's rows below Tq */
template <typename T, int DV>
__device__ __forceinline__ void ember_fwd_store(float (&acc)[DV / 8][4], float (&m)[2],
        float (&l)[2], T *o, float *lse, long long ob, long long os, int p, int ia, int Tq,
        int lane, int vec) {
    const int t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(FULL, l[h], 1);
        l[h] += __shfl_xor_sync(FULL, l[h], 2);
        const int i = ia + 8 * h;
        const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;     /* Tk == 0: zeros */
        if (i < Tq) {
            T *orow = o + ob + (long long)i * os;
#pragma unroll
            for (int n = 0; n < DV / 8; n++) {
                const float y0 = acc[n][2 * h] * inv, y1 = acc[n][2 * h + 1] * inv;
                if (vec) {
                    *(unsigned *)&orow[n * 8 + 2 * t] = ember_pack((const T *)0, y0, y1);
                } else {
                    ember_st(&orow[n * 8 + 2 * t], y0);
                    ember_st(&orow[n * 8 + 2 * t + 1], y1);
                }
            }
            if (t == 0) lse[(long long)p * Tq + i] = m[h] * 0.6931471805599453f + logf(l[h]);
        }
    }
}
"""
