"""The tensor-core building blocks (:mod:`ember.codegen.cuda_mma`) on a real GPU (skip: "no
CUDA GPU/CuPy"): the kernels of ``test_cuda_mma_emu.py`` through CuPy against NumPy, which
pins the emulator's fragment layouts to the hardware's. Run on a GPU machine:
``python -m pytest -q tests/cuda/test_gpu_mma.py``.
"""
import numpy as np
import pytest

import mma_kernels
from ember.codegen import cuda_cache
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


@pytest.mark.parametrize("ty", ["f16", "bf16"])
@pytest.mark.parametrize("seed", [0, 1])
def test_mma_ldmatrix_pack_on_the_gpu(gpu, ty, seed):  # noqa: F811
    import cupy
    mod = cuda_cache.load_module(mma_kernels.source(ty), f"ember_mma_test_{ty}")
    (a, b, ct), vals = mma_kernels.inputs(ty, seed)
    ab = cupy.zeros((16, 16), cupy.float32)
    d = cupy.zeros((16, 8), cupy.float32)
    args = tuple(cupy.asarray(x) for x in (a, b, ct)) + (ab, d)
    mod.get_function(f"ember_mma_test_{ty}")((1,), (32,), args)
    want_ab, want_d = mma_kernels.reference(ty, *vals)
    np.testing.assert_allclose(cupy.asnumpy(ab), want_ab, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(cupy.asnumpy(d), want_d, rtol=1e-4, atol=1e-3)
