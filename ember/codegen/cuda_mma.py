"""Tensor-core building blocks for hand-written CUDA kernels (FlashAttention's matmuls).

:data:`MMA` is CUDA C text to place after a kernel source's ``cuda_fp16.h``/``cuda_bf16.h``
includes. Every function but the cp.async ones is warp-collective: the 32 lanes of a warp
call it together.

* ``ember_mma_f16(float c[4], const unsigned a[4], const unsigned b[2])`` (and
  ``ember_mma_bf16``): ``C += A B`` on a tensor core, PTX ``mma.sync.aligned.m16n8k16
  .row.col.f32.{f16,bf16}.{f16,bf16}.f32``: A is 16x16, B is 16x8 (k x n), C is 16x8
  float32. With ``g = lane >> 2`` and ``t = lane & 3`` (PTX ISA, "Matrix fragments for
  mma.m16n8k16 with floating point type"), each register holding two 16-bit values with
  the lower column (row, for B) in its low half:

  - ``a[0] = A[g][2t:2t+2]``, ``a[1] = A[g+8][2t:2t+2]``, ``a[2] = A[g][2t+8:2t+10]``,
    ``a[3] = A[g+8][2t+8:2t+10]``;
  - ``b[0] = B[2t:2t+2][g]``, ``b[1] = B[2t+8:2t+10][g]``;
  - ``c[0:2] = C[g][2t:2t+2]``, ``c[2:4] = C[g+8][2t:2t+2]``.

  So the C fragments of two adjacent 16x8 tiles, packed pairwise (:func:`ember_pack_*`),
  are the A fragment of their 16x16 concatenation: an attention kernel's ``P = softmax(S)``
  goes from the ``S = Q K^T`` accumulators into ``P V`` without leaving registers.
* ``ember_ldsm_x4(unsigned r[4], const void *row)`` / ``ember_ldsm_x4_t`` (PTX ``ldmatrix
  .sync.aligned.m8n8.x4[.trans].shared.b16``): four 8x8 matrices of 16-bit values from
  shared memory; lane ``L`` passes the address of row ``L & 7`` of matrix ``L >> 3`` (16
  bytes, 16-byte aligned). Without ``.trans`` ``r[j] = M_j[g][2t:2t+2]``; with it ``r[j]``
  holds ``M_j[2t][g], M_j[2t+1][g]``. ``ember_ldsm_x2``/``_x2_t``: matrices 0 and 1 (the
  addresses of lanes 0-15 are used; every lane passes a valid shared address).
  For A = rows ``[r0, r0+16)`` x cols ``[c0, c0+16)`` of a row-major tile: lane ``L``
  passes row ``r0 + (L & 15)``, column ``c0 + 8 (L >> 4)``. For B = ``X^T`` with X
  row-major ``(n, k)`` (keys as rows: ``Q K^T``): ``ember_ldsm_x2`` of X's rows
  ``n0 + (L & 7)``, columns ``k0 + 8 ((L >> 3) & 1)``. For B = X with X row-major
  ``(k, n)`` (``P V``): ``ember_ldsm_x2_t`` of rows ``k0 + (L & 15)``, columns ``n0``.
* ``unsigned ember_pack_f16(float lo, float hi)`` / ``ember_pack_bf16``: two floats rounded
  to nearest-even into one register, ``lo`` in the low half.
* ``ember_cp16(void *dst, const void *src)``, ``ember_cp_commit()``,
  ``ember_cp_wait<N>()`` (PTX ``cp.async.cg`` / ``commit_group`` / ``wait_group N``, sm_80+):
  16 bytes from global to shared memory without registers, one group per commit, waiting
  until at most ``N`` groups are in flight — the double-buffered tiles of the attention
  kernels. Per thread, not warp-collective; the emulator copies at once.

Under the CPU emulator of the tests (``tests/cuda/_cuda_emu.py``, ``EMBER_EMU`` defined)
the emulator supplies these functions from the fragment layouts above, so a kernel's
index arithmetic and fragment bookkeeping run on the CPU; the GPU tests
(``tests/cuda/test_gpu_mma.py``) check that the same kernels give the same numbers on a
real tensor core, which pins the layouts above to the hardware's.
"""
from __future__ import annotations

__all__ = ["MMA"]

MMA = r"""
#ifndef EMBER_EMU
__device__ __forceinline__ unsigned ember_smem(const void *p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
__device__ __forceinline__ void ember_mma_f16(float *c, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ember_mma_bf16(float *c, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ember_ldsm_x4(unsigned *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ember_smem(row)));
}
__device__ __forceinline__ void ember_ldsm_x4_t(unsigned *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ember_smem(row)));
}
__device__ __forceinline__ void ember_ldsm_x2(unsigned *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(ember_smem(row)));
}
__device__ __forceinline__ void ember_ldsm_x2_t(unsigned *r, const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(ember_smem(row)));
}
__device__ __forceinline__ unsigned ember_pack_f16(float lo, float hi) {
    return (unsigned)__half_as_ushort(__float2half_rn(lo)) |
           ((unsigned)__half_as_ushort(__float2half_rn(hi)) << 16);
}
__device__ __forceinline__ unsigned ember_pack_bf16(float lo, float hi) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}
#endif
/* cp.async (sm_80+): 16 bytes global -> shared without registers; a commit closes a group;
   ember_cp_wait<N> waits until at most N groups are in flight (the emulator: a copy now) */
__device__ __forceinline__ void ember_cp16(void *dst, const void *src) {
#ifdef EMBER_EMU
    std::memcpy(dst, src, 16);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"(ember_smem(dst)), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void ember_cp_commit() {
#ifndef EMBER_EMU
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void ember_cp_wait() {
#ifndef EMBER_EMU
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
#endif
}
"""
