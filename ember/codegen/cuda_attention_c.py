"""CUDA C text of the FlashAttention-style ``sdpa`` kernels (:mod:`.cuda_attention`).

One template per kernel over the storage type ``T`` (float, __half, __nv_bfloat16; every
sum in float), ``DQP``/``DVP`` (q/k and v head dims in 32-wide lane slices: D <= 32*DQP)
and ``ROWS`` (rows a warp owns; a block is 4 warps). Heads are ``p = blockIdx.y``, read at
``(p / b1) * s0 + (p % b1) * s1 + t * s2 + d`` (element strides; unit last stride).

* ``fwd``: a warp owns ROWS query rows; keys go by tiles of 32 (one per lane) staged in
  shared memory as float. Per row and tile: the lane's score, the tile's max and sum by
  warp shuffles, the online softmax update (running max ``m``, sum ``l``, accumulator
  rescaled by ``exp(m - m')``), and ``acc += p_j v_j`` with ``p_j`` broadcast by shuffles
  (each lane owns Dv/32 output columns). Writes ``O = acc / l`` and ``lse = m + log l``
  (float32, one per row: all the backward needs besides q, k, v, dO).
* ``delta``: ``delta_i = dO_i . O_i`` (a warp per row).
* ``dkdv``: a warp owns ROWS keys; query rows go by tiles of 32 (one per lane):
  ``p = exp(s - lse_i)``, ``ds = p (dO_i . v_j - delta_i)``, ``dv_j += p dO_i``,
  ``dk_j += ds q_i`` (scaled at the end). No atomics: each key is one warp's.
* ``dq``: a warp owns ROWS query rows; keys by tiles of 32: ``dq_i += ds k_j``.

Masking: a key ``j`` takes part in row ``i`` iff ``j < Tk`` and (not causal or ``j <= i``)
(PyTorch's top-left causal mask); a masked key never enters a sum, not even as ``0 * NaN``
(its lane's bit is off in the ballot the accumulation loops over). A NaN score poisons its
row (the max propagates NaN), as the CPU kernels do. Causal blocks skip the key tiles
(query tiles, in ``dkdv``) that no row of theirs sees.
"""
from __future__ import annotations

HEAD = r"""#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#define FULL 0xffffffffu
#define WARPS 4
__device__ __forceinline__ float ember_ld(float x) { return x; }
__device__ __forceinline__ float ember_ld(__half x) { return __half2float(x); }
__device__ __forceinline__ float ember_ld(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void ember_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void ember_st(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void ember_st(__nv_bfloat16 *p, float v) {
    *p = __float2bfloat16_rn(v); }
/* max that propagates NaN (a NaN score poisons its row, as on the CPU) */
__device__ __forceinline__ float ember_nmax(float a, float b) {
    return (b > a || b != b) ? b : a; }
__device__ __forceinline__ float ember_wmax(float v) {
    for (int o = 16; o > 0; o >>= 1) v = ember_nmax(v, __shfl_xor_sync(FULL, v, o));
    return v; }
__device__ __forceinline__ float ember_wsum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v; }
__device__ __forceinline__ long long ember_head(int p, int b1, long long s0, long long s1) {
    return (long long)(p / b1) * s0 + (long long)(p % b1) * s1; }

/* rows [r0, r0 + n) of a (T, D) head into sh[n][ld] as float; zero past T and D */
template <typename T>
__device__ void ember_stage(float *sh, int ld, const T *x, long long base, long long st,
                            int r0, int n, int T_, int D, int width) {
    for (int e = threadIdx.x; e < n * width; e += blockDim.x) {
        const int r = e / width, d = e % width, t = r0 + r;
        sh[r * ld + d] = (t < T_ && d < D) ? ember_ld(x[base + (long long)t * st + d]) : 0.f;
    }
}
"""

FWD = r"""
template <typename T, int DQP, int DVP, int ROWS>
__device__ void ember_flash_fwd(const T *q, const T *k, const T *v, T *o, float *lse,
        int b1, int Tq, int Tk, int D, int Dv, int causal, float scale,
        long long qs0, long long qs1, long long qs2, long long ks0, long long ks1,
        long long ks2, long long vs0, long long vs1, long long vs2, long long os0,
        long long os1, long long os2) {
    constexpr int DQ = DQP * 32, DV = DVP * 32, BM = WARPS * ROWS;
    __shared__ float qsh[BM * DQ];
    __shared__ float ksh[32 * (DQ + 1)];
    __shared__ float vsh[32 * DV];
    const int p = blockIdx.y, i0 = blockIdx.x * BM;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long qb = ember_head(p, b1, qs0, qs1), kb = ember_head(p, b1, ks0, ks1);
    const long long vb = ember_head(p, b1, vs0, vs1), ob = ember_head(p, b1, os0, os1);
    ember_stage(qsh, DQ, q, qb, qs2, i0, BM, Tq, D, DQ);
    float m[ROWS], l[ROWS], acc[ROWS][DVP];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        m[r] = -INFINITY; l[r] = 0.f;
#pragma unroll
        for (int c = 0; c < DVP; c++) acc[r][c] = 0.f;
    }
    const int kend = causal ? min(Tk, i0 + BM) : Tk;
    for (int j0 = 0; j0 < kend; j0 += 32) {
        __syncthreads();
        ember_stage(ksh, DQ + 1, k, kb, ks2, j0, 32, Tk, D, DQ);
        ember_stage(vsh, DV, v, vb, vs2, j0, 32, Tk, Dv, DV);
        __syncthreads();
        const int j = j0 + lane;
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int il = warp * ROWS + r, i = i0 + il;
            if (i >= Tq) break;                       /* warp-uniform */
            float s = 0.f;
            for (int d = 0; d < DQ; d++) s += qsh[il * DQ + d] * ksh[lane * (DQ + 1) + d];
            s *= scale;
            const bool ok = j < Tk && (!causal || j <= i);
            if (!ok) s = -INFINITY;
            const float mnew = ember_nmax(m[r], ember_wmax(s));
            const float pj = ok ? expf(s - mnew) : 0.f;
            const float alpha = m[r] == -INFINITY ? 0.f : expf(m[r] - mnew);
            l[r] = l[r] * alpha + ember_wsum(pj);
            m[r] = mnew;
#pragma unroll
            for (int c = 0; c < DVP; c++) acc[r][c] *= alpha;
            const unsigned okm = __ballot_sync(FULL, ok);
#pragma unroll 4   /* NOTE: fully unrolled, ptxas fails to allocate (C7600) */
            for (int jj = 0; jj < 32; jj++) {
                const float pb = __shfl_sync(FULL, pj, jj);
                if ((okm >> jj) & 1u) {
#pragma unroll
                    for (int c = 0; c < DVP; c++) acc[r][c] += pb * vsh[jj * DV + c * 32 + lane];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int i = i0 + warp * ROWS + r;
        if (i >= Tq) break;
        const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;   /* Tk == 0: zeros */
#pragma unroll
        for (int c = 0; c < DVP; c++) {
            const int d = c * 32 + lane;
            if (d < Dv) ember_st(o + ob + (long long)i * os2 + d, acc[r][c] * inv);
        }
        if (lane == 0) lse[(long long)p * Tq + i] = m[r] + logf(l[r]);
    }
}
"""

DELTA = r"""
template <typename T, int DVP, int ROWS>
__device__ void ember_flash_delta(const T *g, const T *o, float *delta, int b1, int Tq,
        int Dv, long long gs0, long long gs1, long long gs2, long long os0, long long os1,
        long long os2) {
    const int p = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long gb = ember_head(p, b1, gs0, gs1), ob = ember_head(p, b1, os0, os1);
    for (int r = 0; r < ROWS; r++) {
        const int i = blockIdx.x * WARPS * ROWS + warp * ROWS + r;
        if (i >= Tq) break;
        float s = 0.f;
        for (int d = lane; d < Dv; d += 32)
            s += ember_ld(g[gb + (long long)i * gs2 + d]) *
                 ember_ld(o[ob + (long long)i * os2 + d]);
        s = ember_wsum(s);
        if (lane == 0) delta[(long long)p * Tq + i] = s;
    }
}
"""

DKDV = r"""
template <typename T, int DQP, int DVP, int ROWS>
__device__ void ember_flash_dkdv(const T *q, const T *k, const T *v, const T *g,
        const float *lse, const float *delta, T *dk, T *dv, int b1, int Tq, int Tk, int D,
        int Dv, int causal, float scale, const long long *st) {
    /* st: q, k, v, g, dk, dv strides (s0, s1, s2 each) */
    constexpr int DQ = DQP * 32, DV = DVP * 32, BM = WARPS * ROWS;
    __shared__ float ksh[BM * DQ];
    __shared__ float vsh[BM * DV];
    __shared__ float qsh[32 * (DQ + 1)];
    __shared__ float gsh[32 * (DV + 1)];
    __shared__ float lsh[32], dsh[32];
    const int p = blockIdx.y, j0 = blockIdx.x * BM;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long base[6];
#pragma unroll
    for (int a = 0; a < 6; a++) base[a] = ember_head(p, b1, st[3 * a], st[3 * a + 1]);
    ember_stage(ksh, DQ, k, base[1], st[5], j0, BM, Tk, D, DQ);
    ember_stage(vsh, DV, v, base[2], st[8], j0, BM, Tk, Dv, DV);
    float dka[ROWS][DQP], dva[ROWS][DVP];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
#pragma unroll
        for (int c = 0; c < DQP; c++) dka[r][c] = 0.f;
#pragma unroll
        for (int c = 0; c < DVP; c++) dva[r][c] = 0.f;
    }
    const int istart = causal ? (j0 / 32) * 32 : 0;
    for (int i0 = istart; i0 < Tq; i0 += 32) {
        __syncthreads();
        ember_stage(qsh, DQ + 1, q, base[0], st[2], i0, 32, Tq, D, DQ);
        ember_stage(gsh, DV + 1, g, base[3], st[11], i0, 32, Tq, Dv, DV);
        if (threadIdx.x < 32) {
            const int i = i0 + threadIdx.x;
            lsh[threadIdx.x] = i < Tq ? lse[(long long)p * Tq + i] : 0.f;
            dsh[threadIdx.x] = i < Tq ? delta[(long long)p * Tq + i] : 0.f;
        }
        __syncthreads();
        const int i = i0 + lane;
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int jl = warp * ROWS + r, j = j0 + jl;
            if (j >= Tk) break;                       /* warp-uniform */
            float s = 0.f, dp = 0.f;
            for (int d = 0; d < DQ; d++) s += qsh[lane * (DQ + 1) + d] * ksh[jl * DQ + d];
            for (int d = 0; d < DV; d++) dp += gsh[lane * (DV + 1) + d] * vsh[jl * DV + d];
            const bool ok = i < Tq && (!causal || j <= i);
            const float pr = ok ? expf(s * scale - lsh[lane]) : 0.f;
            const float ds = ok ? pr * (dp - dsh[lane]) : 0.f;
            const unsigned okm = __ballot_sync(FULL, ok);
#pragma unroll 4   /* NOTE: fully unrolled, ptxas fails to allocate (C7600) */
            for (int ii = 0; ii < 32; ii++) {
                const float pb = __shfl_sync(FULL, pr, ii), db = __shfl_sync(FULL, ds, ii);
                if ((okm >> ii) & 1u) {
#pragma unroll
                    for (int c = 0; c < DVP; c++)
                        dva[r][c] += pb * gsh[ii * (DV + 1) + c * 32 + lane];
#pragma unroll
                    for (int c = 0; c < DQP; c++)
                        dka[r][c] += db * qsh[ii * (DQ + 1) + c * 32 + lane];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int j = j0 + warp * ROWS + r;
        if (j >= Tk) break;
#pragma unroll
        for (int c = 0; c < DQP; c++) {
            const int d = c * 32 + lane;
            if (d < D) ember_st(dk + base[4] + (long long)j * st[14] + d, dka[r][c] * scale);
        }
#pragma unroll
        for (int c = 0; c < DVP; c++) {
            const int d = c * 32 + lane;
            if (d < Dv) ember_st(dv + base[5] + (long long)j * st[17] + d, dva[r][c]);
        }
    }
}
"""

DQ_KERNEL = r"""
template <typename T, int DQP, int DVP, int ROWS>
__device__ void ember_flash_dq(const T *q, const T *k, const T *v, const T *g,
        const float *lse, const float *delta, T *dq, int b1, int Tq, int Tk, int D, int Dv,
        int causal, float scale, const long long *st) {
    /* st: q, k, v, g, dq strides (s0, s1, s2 each) */
    constexpr int DQ = DQP * 32, DV = DVP * 32, BM = WARPS * ROWS;
    __shared__ float qsh[BM * DQ];
    __shared__ float gsh[BM * DV];
    __shared__ float ksh[32 * (DQ + 1)];
    __shared__ float vsh[32 * (DV + 1)];
    const int p = blockIdx.y, i0 = blockIdx.x * BM;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long base[5];
#pragma unroll
    for (int a = 0; a < 5; a++) base[a] = ember_head(p, b1, st[3 * a], st[3 * a + 1]);
    ember_stage(qsh, DQ, q, base[0], st[2], i0, BM, Tq, D, DQ);
    ember_stage(gsh, DV, g, base[3], st[11], i0, BM, Tq, Dv, DV);
    float acc[ROWS][DQP], lr[ROWS], dr[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int i = i0 + warp * ROWS + r;
        lr[r] = i < Tq ? lse[(long long)p * Tq + i] : 0.f;
        dr[r] = i < Tq ? delta[(long long)p * Tq + i] : 0.f;
#pragma unroll
        for (int c = 0; c < DQP; c++) acc[r][c] = 0.f;
    }
    const int kend = causal ? min(Tk, i0 + BM) : Tk;
    for (int j0 = 0; j0 < kend; j0 += 32) {
        __syncthreads();
        ember_stage(ksh, DQ + 1, k, base[1], st[5], j0, 32, Tk, D, DQ);
        ember_stage(vsh, DV + 1, v, base[2], st[8], j0, 32, Tk, Dv, DV);
        __syncthreads();
        const int j = j0 + lane;
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int il = warp * ROWS + r, i = i0 + il;
            if (i >= Tq) break;                       /* warp-uniform */
            float s = 0.f, dp = 0.f;
            for (int d = 0; d < DQ; d++) s += qsh[il * DQ + d] * ksh[lane * (DQ + 1) + d];
            for (int d = 0; d < DV; d++) dp += gsh[il * DV + d] * vsh[lane * (DV + 1) + d];
            const bool ok = j < Tk && (!causal || j <= i);
            const float pr = ok ? expf(s * scale - lr[r]) : 0.f;
            const float ds = ok ? pr * (dp - dr[r]) : 0.f;
            const unsigned okm = __ballot_sync(FULL, ok);
#pragma unroll 4   /* NOTE: fully unrolled, ptxas fails to allocate (C7600) */
            for (int jj = 0; jj < 32; jj++) {
                const float db = __shfl_sync(FULL, ds, jj);
                if ((okm >> jj) & 1u) {
#pragma unroll
                    for (int c = 0; c < DQP; c++)
                        acc[r][c] += db * ksh[jj * (DQ + 1) + c * 32 + lane];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int i = i0 + warp * ROWS + r;
        if (i >= Tq) break;
#pragma unroll
        for (int c = 0; c < DQP; c++) {
            const int d = c * 32 + lane;
            if (d < D) ember_st(dq + base[4] + (long long)i * st[14] + d, acc[r][c] * scale);
        }
    }
}
"""

#: the extern "C" entry points of one variant ({S}: suffix, {T}: storage type).
ENTRIES = r"""
extern "C" __global__ void ember_flash_fwd_{S}(const {T} *q,
        const {T} *k, const {T} *v, {T} *o, float *lse, int b1, int Tq, int Tk, int D,
        int Dv, int causal, float scale, long long qs0, long long qs1, long long qs2,
        long long ks0, long long ks1, long long ks2, long long vs0, long long vs1,
        long long vs2, long long os0, long long os1, long long os2) {
    ember_flash_fwd<{T}, {DQP}, {DVP}, {ROWS}>(q, k, v, o, lse, b1, Tq, Tk, D, Dv, causal,
        scale, qs0, qs1, qs2, ks0, ks1, ks2, vs0, vs1, vs2, os0, os1, os2);
}
extern "C" __global__ void ember_flash_delta_{S}(const {T} *g,
        const {T} *o, float *delta, int b1, int Tq, int Dv, long long gs0, long long gs1,
        long long gs2, long long os0, long long os1, long long os2) {
    ember_flash_delta<{T}, {DVP}, {ROWS}>(g, o, delta, b1, Tq, Dv, gs0, gs1, gs2, os0, os1,
        os2);
}
extern "C" __global__ void ember_flash_dkdv_{S}(const {T} *q,
        const {T} *k, const {T} *v, const {T} *g, const float *lse, const float *delta,
        {T} *dk, {T} *dv, int b1, int Tq, int Tk, int D, int Dv, int causal, float scale,
        const long long *st) {
    ember_flash_dkdv<{T}, {DQP}, {DVP}, {ROWS}>(q, k, v, g, lse, delta, dk, dv, b1, Tq, Tk,
        D, Dv, causal, scale, st);
}
extern "C" __global__ void ember_flash_dq_{S}(const {T} *q,
        const {T} *k, const {T} *v, const {T} *g, const float *lse, const float *delta,
        {T} *dq, int b1, int Tq, int Tk, int D, int Dv, int causal, float scale,
        const long long *st) {
    ember_flash_dq<{T}, {DQP}, {DVP}, {ROWS}>(q, k, v, g, lse, delta, dq, b1, Tq, Tk, D,
        Dv, causal, scale, st);
}
"""
