"""Compiled graphs' CUDA kernels and cuBLAS GEMMs on a real GPU (skip: "no CUDA GPU/CuPy").

Run on a GPU machine: ``python -m pytest -q tests/cuda/test_gpu_kernels.py``. The programs
of ``test_cuda_fusion.py`` (W1 MLP step, CNN step, transformer block) compiled on ``cuda``:
the ``fuse_cuda`` pass renders their groups to CUDA, NVRTC compiles them into the kernel
cache and cupy launches them; losses and gradients must match the CPU's. Also: a fused
GELU against eager, the PTX cache on a second compile, and float16 GEMMs (cuBLAS, float32
accumulation) against the CPU's float32-accumulated float16 matmul.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_cache
from test_cuda_fusion import _block_grads, _cnn_losses, _mlp_losses
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


def _fused_nodes(cf):
    return [n for g in cf.graphs() for n in g.nodes
            if type(n.op).__name__ == "CudaFusedOp"]


def test_gpu_backend_runs_the_cuda_fusion_pass(gpu):  # noqa: F811
    assert gpu.has("cuda_kernels") and not gpu.has("host_kernels")


def test_compiled_mlp_step_matches_cpu(gpu):  # noqa: F811
    want, _ = _mlp_losses("cpu")
    got, report = _mlp_losses("cuda")
    assert "fuse_cuda" in report and "kernels 0" not in report, report
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_compiled_cnn_step_matches_cpu(gpu):  # noqa: F811
    want, _ = _cnn_losses("cpu")
    got, report = _cnn_losses("cuda")
    assert "fuse_cuda" in report, report
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_compiled_transformer_block_matches_cpu(gpu):  # noqa: F811
    want_loss, want_grads, _ = _block_grads("cpu")
    loss, grads, report = _block_grads("cuda")
    assert "fuse_cuda" in report, report
    np.testing.assert_allclose(loss, want_loss, rtol=1e-4)
    for a, b in zip(grads, want_grads):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def test_fused_gelu_runs_as_one_cuda_kernel(gpu):  # noqa: F811
    x = em.randn(1 << 20, device="cuda")

    def f(x):
        return em.nn.functional.gelu(x * 2.0 + 1.0, approximate="tanh")
    cf = em.compile(f)
    cf(x)
    got = cf(x)
    assert len(_fused_nodes(cf)) >= 1
    want = f(x)
    np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), rtol=1e-5, atol=1e-6)


def test_second_compile_reads_the_ptx_cache(gpu):  # noqa: F811
    from ember.codegen import nvrtc
    if not nvrtc.available():
        pytest.skip("no NVRTC bindings: CuPy compiles the kernels (its own cache)")
    _mlp_losses("cuda")
    before = dict(cuda_cache.stats)
    cuda_cache._memo.clear()
    _mlp_losses("cuda")
    assert cuda_cache.stats["loaded"] > before["loaded"]
    assert cuda_cache.stats["compiled"] == before["compiled"]


@pytest.mark.parametrize("shape", [((512, 384), (384, 256)), ((4, 64, 96), (96, 128)),
                                   ((3, 33, 17), (3, 17, 65))])
def test_float16_gemm_accumulates_in_float32(gpu, shape):  # noqa: F811
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float16) for s in shape)
    got = (em.tensor(a, device="cuda") @ em.tensor(b, device="cuda")).cpu().numpy()
    want = (em.tensor(a) @ em.tensor(b)).numpy()       # CPU: float32 sums, rounded once
    exact = (a.astype(np.float64) @ b.astype(np.float64))
    # float16 sums of 384 products would be off by ~0.1; float32 ones round like the CPU
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
