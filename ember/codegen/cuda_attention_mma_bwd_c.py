"""CUDA C text of the tensor-core FlashAttention-2 backward (:mod:`.cuda_attention_mma_bwd`).

float16/bfloat16 storage, q/k head dim ``DQ`` and v head dim ``DV`` in {32, 64} (real dims
``D``/``Dv`` <= them, zero-padded), a block of 4 warps, products on ``mma.sync`` m16n8k16
with float32 accumulators (:mod:`.cuda_mma`). The source defines ``EMBER_MMA`` /
``EMBER_PACK`` (the dtype's ``ember_mma_*`` / ``ember_pack_*``) and ``EMBER_EXP16`` (its
exponent mask, for the Inf/NaN test). Tiles are staged in shared memory as raw 16-bit
values, rows padded to ``W + 8`` elements (16-byte aligned, ldmatrix without bank
conflicts), by 16-byte vector loads where the head's address and row stride allow.

* ``dkdv``: a block owns 64 keys, warp ``w`` keys ``16w..16w+15`` (its K and V rows kept
  as A fragments in registers). Per query tile of 64 (Q, dO, lse, delta staged):
  ``S^T = K Q^T`` and ``dP^T = V dO^T`` (B = Q^T, dO^T: ldmatrix of their rows),
  ``P^T = exp(S^T * scale - lse)``, ``dS^T = P^T (dP^T - delta)``; then ``dV += P^T dO``
  and ``dK += dS^T Q`` with P^T, dS^T packed straight from the accumulators into A
  fragments (no shared-memory transpose: the warp computed the transposed scores) and
  dO, Q as B by ldmatrix ``.trans``. dK is scaled once at the end.
* ``dq``: a block owns 64 query rows, warp ``w`` rows ``16w..16w+15`` (Q and dO rows as A
  fragments in registers); per key tile of 64: ``S = Q K^T``, ``dP = dO V^T``, P, dS as
  above, ``dQ += dS K`` (K by ldmatrix ``.trans``). Blocks run the longest causal rows
  first (block x owns rows of tile ``gridDim.x - 1 - x``).

Templates: ``SUB`` (16/32/64) is how many score columns (queries for dk/dv, keys for dq)
a warp holds at once — the tile's S/dP/P/dS and its products go chunk by chunk (16: 168
registers for dk/dv at d=64, three blocks a SM; 64: ~240); ``ASYNC`` stages the next
tile by ``cp.async`` into a second buffer during this tile's math (one commit group a
tile, ``wait_group 1`` before the barrier) instead of between two barriers.

Whole tiles (FlashAttention-2's split of the tile loop; ``FT``, on by default:
``cuda_attention_mma_bwd.FULL_TILES``): a tile whose every (query, key) pair is visible —
no ``Tq`` (dk/dv) or ``Tk`` (dq) tail, not the causal diagonal tile — runs an unguarded
copy of the tile code (one block-uniform branch a tile): no per-element masks, no
diagonal tests, no Inf/NaN ballots, so the unrolled products are straight-line code NVCC
can schedule across (the next chunk's ``ldmatrix`` above this one's ``mma``); the other
tiles run the general code unchanged. Same operations in the same order: bitwise the old
kernels' gradients (emulator tests). ptxas -v, sm_90, float16, d=64, SUB 16 + ASYNC: dk/dv
168 registers, dq 142, as before (dk/dv's whole path fully unrolled took 182, two blocks
a SM: its query chunks go two at a time). Unmeasured on a GPU (``bench/cuda_attention_bwd.py
--quick``'s ``-old`` column is the old path: ``scripts/gpu_check.sh``).

Masking is the scalar kernels' (:mod:`.cuda_attention_c`): key ``j`` takes part in row
``i`` iff ``j < Tk`` and (not causal or ``j <= i``); P and dS of a masked pair are exactly
0, and such a pair never enters a sum, not even as ``0 * NaN``: rows past ``Tq``/``Tk`` are
zero-filled, causal tiles no row sees are skipped, and so are the 16x16 sub-blocks of a
diagonal tile that lie wholly above the diagonal; the one mixed 16x16 block per warp on
the diagonal goes through the tensor core unless its B rows (K for dq; Q, dO for dk/dv)
hold an Inf or NaN, in which case a scalar loop sums only the visible pairs. A NaN score
poisons its row through the saved lse, as in the scalar kernels.
"""
from __future__ import annotations

BWD = r"""
#define LDW(W) ((W) + 8)
#define EMBER_LOG2E 1.4426950408889634f
__device__ __forceinline__ bool ember_bad2(unsigned x) {
    return (x & EMBER_EXP16) == EMBER_EXP16 || ((x >> 16) & EMBER_EXP16) == EMBER_EXP16; }


/* rows [r0, r0 + 64) of a (T_, D) head of 16-bit values (x: the head's base) into
   sh[64][W + 8]; zero past T_ and D. 16-byte loads when x and the row stride allow, by
   cp.async when ASYNC (the caller commits and waits). */
template <int W, bool ASYNC>
__device__ void ember_stage16(unsigned short *sh, const unsigned short *x, long long st,
                              int r0, int T_, int D) {
    constexpr int C = W / 8;
    const bool vec = (((unsigned long long)x & 15ull) == 0) && (st & 7) == 0;
    for (int e = threadIdx.x; e < 64 * C; e += blockDim.x) {
        const int r = e / C, c = (e % C) * 8, t = r0 + r;
        uint4 u;
        u.x = 0u; u.y = 0u; u.z = 0u; u.w = 0u;
        if (t < T_) {
            const unsigned short *src = x + (long long)t * st + c;
            if (vec && c + 8 <= D) {
                if (ASYNC) {
                    ember_cp16(sh + r * LDW(W) + c, src);
                    continue;
                }
                u = *reinterpret_cast<const uint4 *>(src);
            } else {
                unsigned h[8];
                for (int z = 0; z < 8; z++) h[z] = c + z < D ? (unsigned)src[z] : 0u;
                u.x = h[0] | (h[1] << 16); u.y = h[2] | (h[3] << 16);
                u.z = h[4] | (h[5] << 16); u.w = h[6] | (h[7] << 16);
            }
        }
        *reinterpret_cast<uint4 *>(sh + r * LDW(W) + c) = u;
    }
}

/* whether rows [r0, r0 + 16) of a staged tile hold an Inf or NaN (warp-collective) */
template <int W>
__device__ __forceinline__ bool ember_bad16(const unsigned short *sh, int r0) {
    constexpr int C = W / 8;
    bool bad = false;
    for (int e = (threadIdx.x & 31); e < 16 * C; e += 32) {
        const uint4 u = *reinterpret_cast<const uint4 *>(sh + (r0 + e / C) * LDW(W) + (e % C) * 8);
        bad = bad || ember_bad2(u.x) || ember_bad2(u.y) || ember_bad2(u.z) || ember_bad2(u.w);
    }
    return __ballot_sync(FULL, bad) != 0u;
}

/* A fragment: rows [r0, r0 + 16) x cols [c0, c0 + 16) of a row-major tile */
__device__ __forceinline__ void ember_lda(unsigned *a, const unsigned short *sh, int ld,
                                          int r0, int c0) {
    const int l = threadIdx.x & 31;
    ember_ldsm_x4(a, sh + (r0 + (l & 15)) * ld + c0 + 8 * (l >> 4));
}
/* B fragments of two n-tiles, B = X^T for X row-major (n, k): X rows [n0, n0 + 16),
   cols [k0, k0 + 16); b[0..1]: n-tile n0, b[2..3]: n-tile n0 + 8 */
__device__ __forceinline__ void ember_ldb(unsigned *b, const unsigned short *sh, int ld,
                                          int n0, int k0) {
    const int l = threadIdx.x & 31;
    ember_ldsm_x4(b, sh + (n0 + (l & 7) + 8 * (l >> 4)) * ld + k0 + 8 * ((l >> 3) & 1));
}
/* B fragments of two n-tiles, B = X for X row-major (k, n): rows [k0, k0 + 16),
   cols [n0, n0 + 16); b[0..1]: n-tile n0, b[2..3]: n-tile n0 + 8 */
__device__ __forceinline__ void ember_ldbt(unsigned *b, const unsigned short *sh, int ld,
                                           int k0, int n0) {
    const int l = threadIdx.x & 31;
    ember_ldsm_x4_t(b, sh + (k0 + (l & 15)) * ld + n0 + 8 * (l >> 4));
}
/* the A fragment of k-step u from the C fragments of n-tiles 2u, 2u + 1 */
__device__ __forceinline__ void ember_c2a(unsigned *a, const float *c0, const float *c1) {
    a[0] = EMBER_PACK(c0[0], c0[1]); a[1] = EMBER_PACK(c0[2], c0[3]);
    a[2] = EMBER_PACK(c1[0], c1[1]); a[3] = EMBER_PACK(c1[2], c1[3]);
}
/* acc (this lane's rows ra = r0 + g, rb = ra + 8 of a 16-row block; W columns) += X B over
   the 16 k of one diagonal block, X given by its C fragments x0 (k 0..7), x1 (k 8..15), B
   the staged rows [kr, kr + 16): only visible pairs, row ``r`` sees k index ``kx = k0 + k``
   iff kx < kend and (ROWKEY ? r <= kx : kx <= r). For Inf/NaN B rows (scalar, rare). */
template <typename T, int W, bool ROWKEY>
__device__ __forceinline__ void ember_mixed(float (*acc)[4], const float *x0, const float *x1,
        const unsigned short *sh, int kr, int ra, int k0, int kend) {
    const int lane = threadIdx.x & 31, tc = lane & 3, rb = ra + 8;
#pragma unroll
    for (int k = 0; k < 16; k++) {
        const float *x = k < 8 ? x0 : x1;
        const int from = (lane & ~3) | ((k & 7) >> 1);
        const float va = __shfl_sync(FULL, x[k & 1], from);
        const float vb = __shfl_sync(FULL, x[2 + (k & 1)], from);
        const int kx = k0 + k;
        const bool oka = kx < kend && (ROWKEY ? ra <= kx : kx <= ra);
        const bool okb = kx < kend && (ROWKEY ? rb <= kx : kx <= rb);
        const T *row = reinterpret_cast<const T *>(sh + (kr + k) * LDW(W));
#pragma unroll
        for (int nt = 0; nt < W / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float bv = ember_ld(row[nt * 8 + 2 * tc + e]);
                if (oka) acc[nt][e] += va * bv;
                if (okb) acc[nt][2 + e] += vb * bv;
            }
        }
    }
}
/* acc[W/8][4] += A(k-step) B, B from a staged (k, n) tile's rows [k0, k0 + 16) */
template <int W>
__device__ __forceinline__ void ember_mma_rows(float (*acc)[4], const unsigned *a,
        const unsigned short *sh, int k0) {
#pragma unroll
    for (int n2 = 0; n2 < W / 16; n2++) {
        unsigned b[4];
        ember_ldbt(b, sh, LDW(W), k0, 16 * n2);
        EMBER_MMA(acc[2 * n2], a, b);
        EMBER_MMA(acc[2 * n2 + 1], a, b + 2);
    }
}
/* s[2 n2 .. 2 n2 + 1] += A X^T over W columns, A as W/16 fragments, X staged rows [n0, +16) */
template <int W>
__device__ __forceinline__ void ember_mma_xt(float (*s)[4], const unsigned (*a)[4],
        const unsigned short *sh, int n0) {
#pragma unroll
    for (int kk = 0; kk < W / 16; kk++) {
        unsigned b[4];
        ember_ldb(b, sh, LDW(W), n0, 16 * kk);
        EMBER_MMA(s[0], a[kk], b);
        EMBER_MMA(s[1], a[kk], b + 2);
    }
}
"""

DKDV = r"""
/* query tile [i0, i0 + 64) for dk/dv into buffer sm (Q rows, then dO rows), its lse (times
   log2 e) and delta into lsh, dsh; with ASYNC Q/dO by cp.async (the caller commits) */
template <int DQ, int DV, bool ASYNC>
__device__ __forceinline__ void ember_dkdv_tile(unsigned short *sm, float *lsh, float *dsh,
        const unsigned short *qh, const unsigned short *gh, const float *lse,
        const float *delta, const long long *st, int p, int i0, int Tq, int D, int Dv) {
    ember_stage16<DQ, ASYNC>(sm, qh, st[2], i0, Tq, D);
    ember_stage16<DV, ASYNC>(sm + 64 * LDW(DQ), gh, st[11], i0, Tq, Dv);
    if (threadIdx.x < 64) {
        const int i = i0 + threadIdx.x;
        lsh[threadIdx.x] = i < Tq ? lse[(long long)p * Tq + i] * EMBER_LOG2E : 0.f;
        dsh[threadIdx.x] = i < Tq ? delta[(long long)p * Tq + i] : 0.f;
    }
}

/* one query tile's products for warp w's 16 keys (ja, jb = ja + 8: this lane's; the tile
   staged in xs (Q), gs (dO), lsh_ (lse log2 e), dsh_ (delta)): dV += P^T dO, dK += dS^T Q.
   WHOLE: every (key, query) pair of the tile visible (no Tq tail, not the causal diagonal):
   no masks, no skipped blocks, no Inf/NaN test — the general path's operations on such a
   tile, straight-line. Otherwise: diag is the causal diagonal tile (query blocks u < w all
   masked, u == w mixed) and masked pairs are exact zeros (module docstring). */
template <typename T, int DQ, int DV, int SUB, bool WHOLE>
__device__ __forceinline__ void ember_dkdv_math(float (&dka)[DQ / 8][4],
        float (&dva)[DV / 8][4], const unsigned (&ka)[DQ / 16][4],
        const unsigned (&va)[DV / 16][4], const unsigned short *xs, const unsigned short *gs,
        const float *lsh_, const float *dsh_, int i0, bool diag, int w, int ja, int jb,
        int Tq, int causal, float sl2) {
    const int tc = threadIdx.x & 3;
    const bool badg = !WHOLE && diag && ember_bad16<DV>(gs, 16 * w);
    const bool badq = !WHOLE && diag && ember_bad16<DQ>(xs, 16 * w);
    /* the unguarded path's query chunks two at a time at SUB=16 (ptxas -v, sm_90, float16,
       d=64: all four unrolled take 182 registers, two blocks a SM; two, 168: three) */
#pragma unroll (WHOLE && SUB == 16 ? 2 : 64 / SUB)
    for (int h = 0; h < 64 / SUB; h++) {      /* queries [h SUB, (h + 1) SUB) */
        if (!WHOLE && diag && (h + 1) * (SUB / 16) <= w) continue;
        float s[SUB / 8][4], dp[SUB / 8][4];
#pragma unroll
        for (int n = 0; n < SUB / 8; n++) {
#pragma unroll
            for (int c = 0; c < 4; c++) { s[n][c] = 0.f; dp[n][c] = 0.f; }
        }
#pragma unroll
        for (int uu = 0; uu < SUB / 16; uu++) {
            const int u = h * (SUB / 16) + uu;
            if (!WHOLE && diag && u < w) continue;
            ember_mma_xt<DQ>(s + 2 * uu, ka, xs, 16 * u);
            ember_mma_xt<DV>(dp + 2 * uu, va, gs, 16 * u);
        }
#pragma unroll
        for (int n = 0; n < SUB / 8; n++) {
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int il = h * SUB + n * 8 + 2 * tc + (c & 1), i = i0 + il;
                const bool ok = WHOLE || (i < Tq && (!causal || (c < 2 ? ja : jb) <= i));
                const float pr = ok ? exp2f(s[n][c] * sl2 - lsh_[il]) : 0.f;
                dp[n][c] = ok ? pr * (dp[n][c] - dsh_[il]) : 0.f;
                s[n][c] = pr;
            }
        }
#pragma unroll
        for (int uu = 0; uu < SUB / 16; uu++) {
            const int u = h * (SUB / 16) + uu;
            if (!WHOLE && diag && u < w) continue;
            const bool mixed = !WHOLE && diag && u == w;
            unsigned a[4];
            if (mixed && badg) {
                ember_mixed<T, DV, true>(dva, s[2 * uu], s[2 * uu + 1], gs, 16 * u, ja,
                                         i0 + 16 * u, Tq);
            } else {
                ember_c2a(a, s[2 * uu], s[2 * uu + 1]);
                ember_mma_rows<DV>(dva, a, gs, 16 * u);
            }
            if (mixed && badq) {
                ember_mixed<T, DQ, true>(dka, dp[2 * uu], dp[2 * uu + 1], xs, 16 * u, ja,
                                         i0 + 16 * u, Tq);
            } else {
                ember_c2a(a, dp[2 * uu], dp[2 * uu + 1]);
                ember_mma_rows<DQ>(dka, a, xs, 16 * u);
            }
        }
    }
}

template <typename T, int DQ, int DV, int SUB, bool ASYNC, bool FT>
__device__ void ember_mma_dkdv(const T *q, const T *k, const T *v, const T *g,
        const float *lse, const float *delta, T *dk, T *dv, int b1, int Tq, int Tk, int D,
        int Dv, int causal, float scale, const long long *st) {
    /* st: q, k, v, g, dk, dv strides (s0, s1, s2 each) */
    constexpr int TILE = 64 * (LDW(DQ) + LDW(DV));
    __shared__ __align__(16) unsigned short sm[(1 + ASYNC) * TILE];
    __shared__ float lsh[1 + ASYNC][64], dsh[1 + ASYNC][64];
    const int p = blockIdx.y, j0 = blockIdx.x * 64, istart = causal ? j0 : 0;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, tc = lane & 3;
    long long base[6];
#pragma unroll
    for (int a = 0; a < 6; a++) base[a] = ember_head(p, b1, st[3 * a], st[3 * a + 1]);
    const unsigned short *qh = reinterpret_cast<const unsigned short *>(q) + base[0];
    const unsigned short *gh = reinterpret_cast<const unsigned short *>(g) + base[3];
    /* K, V into the last buffer; with ASYNC the first query tile into buffer 0 meanwhile */
    unsigned short *xs = sm + ASYNC * TILE, *gs = xs + 64 * LDW(DQ);
    ember_stage16<DQ, false>(xs, reinterpret_cast<const unsigned short *>(k) + base[1], st[5],
                             j0, Tk, D);
    ember_stage16<DV, false>(gs, reinterpret_cast<const unsigned short *>(v) + base[2], st[8],
                             j0, Tk, Dv);
    if (ASYNC) {
        ember_dkdv_tile<DQ, DV, ASYNC>(sm, lsh[0], dsh[0], qh, gh, lse, delta, st, p, istart,
                                       Tq, D, Dv);
        ember_cp_commit();
    }
    __syncthreads();
    unsigned ka[DQ / 16][4], va[DV / 16][4];
#pragma unroll
    for (int kk = 0; kk < DQ / 16; kk++) ember_lda(ka[kk], xs, LDW(DQ), 16 * w, 16 * kk);
#pragma unroll
    for (int kk = 0; kk < DV / 16; kk++) ember_lda(va[kk], gs, LDW(DV), 16 * w, 16 * kk);
    float dka[DQ / 8][4], dva[DV / 8][4];
#pragma unroll
    for (int c = 0; c < 4; c++) {
#pragma unroll
        for (int n = 0; n < DQ / 8; n++) dka[n][c] = 0.f;
#pragma unroll
        for (int n = 0; n < DV / 8; n++) dva[n][c] = 0.f;
    }
    const int ja = j0 + 16 * w + (lane >> 2), jb = ja + 8;
    const bool live = j0 + 16 * w < Tk;              /* warp-uniform */
    const float sl2 = scale * EMBER_LOG2E;   /* exp(s scale - lse) = 2^(s sl2 - lse log2 e) */
    for (int i0 = istart; i0 < Tq; i0 += 64) {
        const int b = ASYNC ? ((i0 - istart) >> 6) & 1 : 0;   /* this tile's buffer */
        __syncthreads();              /* nobody reads the buffer about to be written */
        if (i0 + 64 < Tq || !ASYNC)   /* ASYNC: the next tile into the other buffer */
            ember_dkdv_tile<DQ, DV, ASYNC>(sm + (ASYNC ? b ^ 1 : 0) * TILE, lsh[ASYNC ? b ^ 1 : 0],
                                          dsh[ASYNC ? b ^ 1 : 0], qh, gh, lse, delta, st, p,
                                          ASYNC ? i0 + 64 : i0, Tq, D, Dv);
        if (ASYNC) {                  /* a group a tile (maybe empty): this one's landed */
            ember_cp_commit();
            ember_cp_wait<1>();
        }
        __syncthreads();
        if (!live) continue;
        const unsigned short *xs = sm + b * TILE, *gs = xs + 64 * LDW(DQ);
        const float *lsh_ = lsh[b], *dsh_ = dsh[b];
        const bool diag = causal && i0 == j0;     /* query blocks u < w: all masked */
        if (FT && i0 + 64 <= Tq && !diag)         /* every pair visible: unguarded */
            ember_dkdv_math<T, DQ, DV, SUB, true>(dka, dva, ka, va, xs, gs, lsh_, dsh_, i0,
                                                  false, w, ja, jb, Tq, causal, sl2);
        else
            ember_dkdv_math<T, DQ, DV, SUB, false>(dka, dva, ka, va, xs, gs, lsh_, dsh_, i0,
                                                   diag, w, ja, jb, Tq, causal, sl2);
    }
    if (!live) return;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int j = c < 2 ? ja : jb;
        if (j >= Tk) continue;
#pragma unroll
        for (int n = 0; n < DQ / 8; n++) {
            const int d = n * 8 + 2 * tc + (c & 1);
            if (d < D) ember_st(dk + base[4] + (long long)j * st[14] + d, dka[n][c] * scale);
        }
#pragma unroll
        for (int n = 0; n < DV / 8; n++) {
            const int d = n * 8 + 2 * tc + (c & 1);
            if (d < Dv) ember_st(dv + base[5] + (long long)j * st[17] + d, dva[n][c]);
        }
    }
}
"""

DQ_KERNEL = r"""
/* key tile [j0, j0 + 64) for dq into buffer sm (K rows, then V rows); with ASYNC by
   cp.async (the caller commits) */
template <int DQ, int DV, bool ASYNC>
__device__ __forceinline__ void ember_dq_tile(unsigned short *sm, const unsigned short *kh,
        const unsigned short *vh, const long long *st, int j0, int Tk, int D, int Dv) {
    ember_stage16<DQ, ASYNC>(sm, kh, st[5], j0, Tk, D);
    ember_stage16<DV, ASYNC>(sm + 64 * LDW(DQ), vh, st[8], j0, Tk, Dv);
}

/* one key tile's products for warp w's 16 query rows (ia, ib = ia + 8: this lane's, their
   lse log2 e la, lb and delta da, db; the tile staged in xs (K), ys (V)): dQ += dS K.
   WHOLE: every (query, key) pair of the tile visible (no Tk tail, not the causal
   diagonal): no masks, no skipped blocks, no Inf/NaN test — the general path's operations
   on such a tile, straight-line. Otherwise: diag is the causal diagonal tile (key blocks
   u > w all masked, u == w mixed) and masked pairs are exact zeros (module docstring). */
template <typename T, int DQ, int DV, int SUB, bool WHOLE>
__device__ __forceinline__ void ember_dq_math(float (&acc)[DQ / 8][4],
        const unsigned (&qa)[DQ / 16][4], const unsigned (&ga)[DV / 16][4],
        const unsigned short *xs, const unsigned short *ys, int j0, bool diag, int w, int ia,
        int ib, float la, float lb, float da, float db, int Tk, int causal, float sl2) {
    const int tc = threadIdx.x & 3;
    const bool badk = !WHOLE && diag && ember_bad16<DQ>(xs, 16 * w);
#pragma unroll
    for (int h = 0; h < 64 / SUB; h++) {      /* keys [h SUB, (h + 1) SUB) */
        if (!WHOLE && diag && h * (SUB / 16) > w) continue;
        float s[SUB / 8][4], dp[SUB / 8][4];
#pragma unroll
        for (int n = 0; n < SUB / 8; n++) {
#pragma unroll
            for (int c = 0; c < 4; c++) { s[n][c] = 0.f; dp[n][c] = 0.f; }
        }
#pragma unroll
        for (int uu = 0; uu < SUB / 16; uu++) {
            const int u = h * (SUB / 16) + uu;
            if (!WHOLE && diag && u > w) continue;
            ember_mma_xt<DQ>(s + 2 * uu, qa, xs, 16 * u);
            ember_mma_xt<DV>(dp + 2 * uu, ga, ys, 16 * u);
        }
#pragma unroll
        for (int n = 0; n < SUB / 8; n++) {
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = j0 + h * SUB + n * 8 + 2 * tc + (c & 1), i = c < 2 ? ia : ib;
                const bool ok = WHOLE || (j < Tk && (!causal || j <= i));
                const float pr = ok ? exp2f(s[n][c] * sl2 - (c < 2 ? la : lb)) : 0.f;
                s[n][c] = ok ? pr * (dp[n][c] - (c < 2 ? da : db)) : 0.f;
            }
        }
#pragma unroll
        for (int uu = 0; uu < SUB / 16; uu++) {
            const int u = h * (SUB / 16) + uu;
            if (!WHOLE && diag && u > w) continue;
            if (!WHOLE && diag && u == w && badk) {
                ember_mixed<T, DQ, false>(acc, s[2 * uu], s[2 * uu + 1], xs, 16 * u, ia,
                                          j0 + 16 * u, Tk);
            } else {
                unsigned a[4];
                ember_c2a(a, s[2 * uu], s[2 * uu + 1]);
                ember_mma_rows<DQ>(acc, a, xs, 16 * u);
            }
        }
    }
}

template <typename T, int DQ, int DV, int SUB, bool ASYNC, bool FT>
__device__ void ember_mma_dq(const T *q, const T *k, const T *v, const T *g,
        const float *lse, const float *delta, T *dq, int b1, int Tq, int Tk, int D, int Dv,
        int causal, float scale, const long long *st) {
    /* st: q, k, v, g, dq strides (s0, s1, s2 each) */
    constexpr int TILE = 64 * (LDW(DQ) + LDW(DV));
    __shared__ __align__(16) unsigned short sm[(1 + ASYNC) * TILE];
    /* the longest causal rows first (blocks start in x order): a shorter tail */
    const int p = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * 64;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, tc = lane & 3;
    long long base[5];
#pragma unroll
    for (int a = 0; a < 5; a++) base[a] = ember_head(p, b1, st[3 * a], st[3 * a + 1]);
    const unsigned short *kh = reinterpret_cast<const unsigned short *>(k) + base[1];
    const unsigned short *vh = reinterpret_cast<const unsigned short *>(v) + base[2];
    /* Q, dO into the last buffer; with ASYNC the first key tile into buffer 0 meanwhile */
    unsigned short *xs = sm + ASYNC * TILE, *ys = xs + 64 * LDW(DQ);
    ember_stage16<DQ, false>(xs, reinterpret_cast<const unsigned short *>(q) + base[0], st[2],
                             i0, Tq, D);
    ember_stage16<DV, false>(ys, reinterpret_cast<const unsigned short *>(g) + base[3],
                             st[11], i0, Tq, Dv);
    if (ASYNC) {
        ember_dq_tile<DQ, DV, ASYNC>(sm, kh, vh, st, 0, Tk, D, Dv);
        ember_cp_commit();
    }
    __syncthreads();
    unsigned qa[DQ / 16][4], ga[DV / 16][4];
#pragma unroll
    for (int kk = 0; kk < DQ / 16; kk++) ember_lda(qa[kk], xs, LDW(DQ), 16 * w, 16 * kk);
#pragma unroll
    for (int kk = 0; kk < DV / 16; kk++) ember_lda(ga[kk], ys, LDW(DV), 16 * w, 16 * kk);
    const int ia = i0 + 16 * w + (lane >> 2), ib = ia + 8;
    const float la = ia < Tq ? lse[(long long)p * Tq + ia] * EMBER_LOG2E : 0.f;
    const float lb = ib < Tq ? lse[(long long)p * Tq + ib] * EMBER_LOG2E : 0.f;
    const float da = ia < Tq ? delta[(long long)p * Tq + ia] : 0.f;
    const float db = ib < Tq ? delta[(long long)p * Tq + ib] : 0.f;
    float acc[DQ / 8][4];
#pragma unroll
    for (int n = 0; n < DQ / 8; n++) {
#pragma unroll
        for (int c = 0; c < 4; c++) acc[n][c] = 0.f;
    }
    const bool live = i0 + 16 * w < Tq;              /* warp-uniform */
    const float sl2 = scale * EMBER_LOG2E;   /* exp(s scale - lse) = 2^(s sl2 - lse log2 e) */
    const int kend = causal ? min(Tk, i0 + 64) : Tk;
    for (int j0 = 0; j0 < kend; j0 += 64) {
        const int b = ASYNC ? (j0 >> 6) & 1 : 0;   /* this tile's buffer */
        __syncthreads();              /* nobody reads the buffer about to be written */
        if (j0 + 64 < kend || !ASYNC)   /* ASYNC: the next tile into the other buffer */
            ember_dq_tile<DQ, DV, ASYNC>(sm + (ASYNC ? b ^ 1 : 0) * TILE, kh, vh, st,
                                         ASYNC ? j0 + 64 : j0, Tk, D, Dv);
        if (ASYNC) {                  /* a group a tile (maybe empty): this one's landed */
            ember_cp_commit();
            ember_cp_wait<1>();
        }
        __syncthreads();
        if (!live) continue;
        const unsigned short *xs = sm + b * TILE, *ys = xs + 64 * LDW(DQ);
        const bool diag = causal && j0 == i0;     /* key blocks u > w: all masked */
        if (FT && j0 + 64 <= Tk && !diag)         /* every pair visible: unguarded */
            ember_dq_math<T, DQ, DV, SUB, true>(acc, qa, ga, xs, ys, j0, false, w, ia, ib, la,
                                                lb, da, db, Tk, causal, sl2);
        else
            ember_dq_math<T, DQ, DV, SUB, false>(acc, qa, ga, xs, ys, j0, diag, w, ia, ib, la,
                                                 lb, da, db, Tk, causal, sl2);
    }
    if (!live) return;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int i = c < 2 ? ia : ib;
        if (i >= Tq) continue;
#pragma unroll
        for (int n = 0; n < DQ / 8; n++) {
            const int d = n * 8 + 2 * tc + (c & 1);
            if (d < D) ember_st(dq + base[4] + (long long)i * st[14] + d, acc[n][c] * scale);
        }
    }
}
"""

#: the extern "C" entry points of one variant ({S}: suffix, {T}: storage type); the
#: arguments are the scalar kernels' (``cuda_attention_c.ENTRIES``).
ENTRIES = r"""
extern "C" __global__ void ember_flash_dkdv_mma_{S}(const {T} *q,
        const {T} *k, const {T} *v, const {T} *g, const float *lse, const float *delta,
        {T} *dk, {T} *dv, int b1, int Tq, int Tk, int D, int Dv, int causal, float scale,
        const long long *st) {
    ember_mma_dkdv<{T}, {DQ}, {DV}, {SUB}, {ASYNC}, {FT}>(q, k, v, g, lse, delta, dk, dv, b1, Tq,
        Tk, D, Dv, causal, scale, st);
}
extern "C" __global__ void ember_flash_dq_mma_{S}(const {T} *q,
        const {T} *k, const {T} *v, const {T} *g, const float *lse, const float *delta,
        {T} *dq, int b1, int Tq, int Tk, int D, int Dv, int causal, float scale,
        const long long *st) {
    ember_mma_dq<{T}, {DQ}, {DV}, {SUB}, {ASYNC}, {FT}>(q, k, v, g, lse, delta, dq, b1, Tq, Tk,
        D, Dv, causal, scale, st);
}
"""
