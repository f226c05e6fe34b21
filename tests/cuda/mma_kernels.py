"""Test kernels of the tensor-core building blocks (:mod:`ember.codegen.cuda_mma`), shared by
the emulator tests (``test_cuda_mma_emu.py``) and the real-GPU tests (``test_gpu_mma.py``):
the same text must give the same numbers on both, which pins the emulator's fragment
layouts to the hardware's.

``ember_mma_test_<ty>``: one warp computes ``D = f(A B) C`` for A (16 x 32), B (32 x 16)
row-major and C either (16 x 8) row-major or, transposed, (8 x 16): A by ``ldmatrix.x4``,
B by ``ldmatrix.x2.trans`` (B stored k x n), the float32 accumulators of ``A B`` packed
into A fragments (``ember_pack_*``) for the second product, C by ``ldmatrix.x2`` of its
(8 x 16) rows (C^T stored n x k: how an attention kernel reads K for ``Q K^T``). Writes
``AB`` (float32, 16 x 16) and ``D`` (float32, 16 x 8).
"""
import numpy as np

from ember.codegen.cuda_mma import MMA

HEAD = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"

BODY = r"""
extern "C" __global__ void ember_mma_test_TY(const unsigned short *a, const unsigned short *b,
        const unsigned short *ct, float *ab, float *d) {
    __shared__ __align__(16) unsigned short as[16 * 32];
    __shared__ __align__(16) unsigned short bs[32 * 16];
    __shared__ __align__(16) unsigned short cs[8 * 16];
    const int lane = threadIdx.x;
    for (int e = lane; e < 16 * 32; e += 32) { as[e] = a[e]; bs[e] = b[e]; }
    for (int e = lane; e < 8 * 16; e += 32) cs[e] = ct[e];
    __syncthreads();
    const int g = lane >> 2, t = lane & 3;
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    for (int k0 = 0; k0 < 32; k0 += 16) {
        unsigned fa[4];
        ember_ldsm_x4(fa, &as[(lane & 15) * 32 + k0 + 8 * (lane >> 4)]);
        for (int n = 0; n < 2; n++) {
            unsigned fb[2];
            ember_ldsm_x2_t(fb, &bs[(k0 + (lane & 15)) * 16 + 8 * n]);
            ember_mma_TY(acc[n], fa, fb);
        }
    }
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 4; i++)
            ab[(g + 8 * (i >> 1)) * 16 + 8 * n + 2 * t + (i & 1)] = acc[n][i];
    unsigned p[4] = {ember_pack_TY(acc[0][0], acc[0][1]), ember_pack_TY(acc[0][2], acc[0][3]),
                     ember_pack_TY(acc[1][0], acc[1][1]), ember_pack_TY(acc[1][2], acc[1][3])};
    unsigned fc[2];
    ember_ldsm_x2(fc, &cs[(lane & 7) * 16 + 8 * ((lane >> 3) & 1)]);
    float out[4] = {0.f, 0.f, 0.f, 0.f};
    ember_mma_TY(out, p, fc);
    for (int i = 0; i < 4; i++) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = out[i];
}
"""


def source(ty: str) -> str:
    """The kernel text for ``ty`` in ``("f16", "bf16")``."""
    return HEAD + MMA + BODY.replace("TY", ty)


def inputs(ty: str, seed: int = 0):
    """``(a, b, ct)`` as 16-bit storage (uint16) and their float64 values."""
    rng = np.random.default_rng(seed)
    vals = [rng.standard_normal(s) for s in ((16, 32), (32, 16), (8, 16))]
    if ty == "f16":
        lows = [v.astype(np.float16) for v in vals]
        return [x.view(np.uint16) for x in lows], [x.astype(np.float64) for x in lows]
    import ml_dtypes
    lows = [v.astype(ml_dtypes.bfloat16) for v in vals]
    return [x.view(np.uint16) for x in lows], [x.astype(np.float64) for x in lows]


def reference(ty: str, a, b, ct):
    """``(AB, D)`` in float64 from the float64 values, with ``AB`` rounded to ``ty`` before
    the second product as the kernel's packing does."""
    ab = a @ b
    if ty == "f16":
        low = ab.astype(np.float16).astype(np.float64)
    else:
        import ml_dtypes
        low = ab.astype(ml_dtypes.bfloat16).astype(np.float64)
    return ab, low @ ct.T
