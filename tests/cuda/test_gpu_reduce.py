"""Eager sums over leading/trailing dims through the generated kernels on a real GPU (skip:
"no CUDA GPU/CuPy"); ``test_cuda_reduce_emu.py`` runs the same kernels on the emulator at
tiny sizes. Here at the GPT step's sizes (bias gradients of (8, 1024, 768|3072), rows of
768 and of the 50257-wide vocabulary), with the same order-insensitive bound.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_reduce
from test_cuda_reduce_emu import _check, _sample
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape,dims", [((8, 1024, 768), (0, 1)), ((8192, 3072), (0,)),
                                        ((4000, 37), (0,)), ((5, 300, 1001), (0, 1))])
def test_gpu_column_sums(gpu, dtype, shape, dims):  # noqa: F811
    a = _sample(shape, dtype)
    before = cuda_reduce.stats["colsum"]
    _check(em.tensor(a, device="cuda").sum(dims), a, dims)
    assert cuda_reduce.stats["colsum"] == before + 1


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("shape", [(8192, 768), (512, 50257), (4, 64, 1000)])
def test_gpu_row_sums(gpu, dtype, shape, monkeypatch):  # noqa: F811
    monkeypatch.setattr(cuda_reduce, "ROW_SUMS", True)   # off by default (measured)
    a = _sample(shape, dtype)
    before = cuda_reduce.stats["rowsum"]
    _check(em.tensor(a, device="cuda").sum(-1, keepdim=True), a, -1, True)
    assert cuda_reduce.stats["rowsum"] == before + 1


def test_gpu_bias_gradient_and_small_sums(gpu):  # noqa: F811
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((8, 1024, 64)).astype(np.float32)
    ga = rng.standard_normal((8, 1024, 768)).astype(np.float32)
    lin = em.nn.Linear(64, 768).to("cuda")
    before = dict(cuda_reduce.stats)
    lin(em.tensor(xa, device="cuda")).backward(em.tensor(ga, device="cuda"))
    assert cuda_reduce.stats["colsum"] > before["colsum"]
    _check(lin.bias.grad, ga, (0, 1))
    small = rng.standard_normal((100, 30)).astype(np.float32)
    before = dict(cuda_reduce.stats)
    np.testing.assert_allclose(em.tensor(small, device="cuda").sum(0).cpu().numpy(),
                               small.sum(0), rtol=1e-5, atol=1e-5)
    assert cuda_reduce.stats == before
