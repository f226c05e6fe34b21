"""The cuBLAS call of low-precision GEMMs on a GPU (``ember/codegen/cuda_gemm.py``), on the CPU.

A NumPy model of ``cublasGemmEx`` / ``cublasGemmStridedBatchedEx`` (column-major operands
read from raw memory with their leading dims, ops and batch strides; float32 sums) runs
each :func:`gemm_plan`, so the row-major to column-major mapping is checked for every
layout a graph hands ``matmul``: contiguous, transposed views (``weight.mT``), stacks,
broadcast right operands, leading dims that do not merge. On a GPU:
``tests/cuda/test_gpu_kernels.py::test_float16_gemm_accumulates_in_float32``.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_gemm as cg

BF16 = em.bfloat16.np


def _colmajor(a, op, ld, rows, cols, off):
    """op(M) (rows x cols) of the column-major matrix at element ``off`` of ``a``'s memory."""
    it = a.itemsize
    flat = np.lib.stride_tricks.as_strided(a, shape=(off + ld * max(rows, cols) + 1,),
                                           strides=(it,))
    if op == cg.OP_N:
        return np.lib.stride_tricks.as_strided(flat[off:], (rows, cols), (it, ld * it))
    return np.lib.stride_tricks.as_strided(flat[off:], (cols, rows), (it, ld * it)).T


def run_plan(p):
    """What cuBLAS would compute for plan ``p`` (float32 sums, rounded once into C)."""
    assert p["compute"] == cg.CUBLAS_COMPUTE_32F and p["type"] == cg.CUDA_TYPE[
        p["C"].dtype.name]
    m, n, k = p["m"], p["n"], p["k"]
    assert p["ldc"] >= max(m, 1) and (p["fn"] == "gemmEx") == (p["batch"] == 1)
    c = p["C"]
    it = c.itemsize
    cflat = np.lib.stride_tricks.as_strided(c, shape=(c.size,), strides=(it,))
    for b in range(p["batch"]):
        a = _colmajor(p["A"], p["transa"], p["lda"], m, k, b * p["strideA"])
        bb = _colmajor(p["B"], p["transb"], p["ldb"], k, n, b * p["strideB"])
        r = a.astype(np.float32) @ bb.astype(np.float32)
        view = np.lib.stride_tricks.as_strided(cflat[b * p["strideC"]:], (m, n),
                                               (it, p["ldc"] * it))
        view[...] = r.astype(c.dtype)
    return p["out"]


def _layouts(dtype):
    rng = np.random.default_rng(0)

    def r(*s):
        return rng.standard_normal(s).astype(dtype)
    w = r(48, 32)
    z = r(3, 4, 20, 9)
    return {
        "2d": (r(17, 32), r(32, 24)),
        "linear_weight_mT": (r(17, 32), w.T),                 # F.linear: x @ weight.mT
        "x_transposed": (r(32, 17).T, r(32, 24)),
        "stack_shared_weight": (r(5, 17, 32), r(32, 24)),
        "stack_both": (r(5, 17, 32), r(5, 32, 24)),
        "stack_of_transposed": (r(5, 32, 17).transpose(0, 2, 1), r(5, 32, 24)),
        "4d_merging": (r(2, 3, 7, 9), r(2, 3, 9, 5)),
        "4d_permuted": (z.transpose(1, 0, 2, 3), r(4, 3, 9, 6)),   # leading dims won't merge
        "row_and_column": (r(1, 32), r(32, 1)),
    }


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(_layouts(np.float16)))
def test_plan_computes_the_product_in_float32(dtype, name):
    x, y = _layouts(dtype)[name]
    assert cg.supported(x, y)
    got = run_plan(cg.gemm_plan(x, y))
    exact = x.astype(np.float64) @ y.astype(np.float64)
    assert got.shape == exact.shape and got.dtype == dtype
    # float32 sums in another order than NumPy's, rounded once: within one ulp of the dtype
    ulp = {np.dtype(np.float16): 2.0 ** -10, np.dtype(BF16): 2.0 ** -7}[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=ulp, atol=1e-3)


def test_plan_writes_into_a_given_buffer_and_takes_tf32_only_when_asked():
    x, y = _layouts(np.float32)["2d"]
    assert not cg.supported(x, y) and cg.supported(x, y, tf32=True)
    p = cg.gemm_plan(x, y, tf32=True)
    assert p["compute"] == cg.CUBLAS_COMPUTE_32F_FAST_TF32
    x16, y16 = _layouts(np.float16)["stack_both"]
    buf = np.empty((5, 17, 24), np.float16)
    assert run_plan(cg.gemm_plan(x16, y16, out=buf)) is buf


def test_unsupported_pairs_stay_with_cupy():
    a = np.ones((4, 3), np.float16)
    assert not cg.supported(a, np.ones((3, 2), np.float32))          # mixed dtypes
    assert not cg.supported(np.ones(3, np.float16), np.ones(3, np.float16))   # vectors
    assert not cg.supported(np.ones((2, 4, 3), np.float16), np.ones((5, 3, 2), np.float16))


def test_matmul_on_a_gpu_like_device_takes_the_gemm_ex_path(fake_cuda, monkeypatch):
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    calls = []

    def fake_matmul(xp, x, y, tf32=False, out=None):
        calls.append((x.shape, y.shape))
        return run_plan(cg.gemm_plan(x, y, xp, tf32, out))
    monkeypatch.setattr(cg, "matmul", fake_matmul)
    em.manual_seed(0)
    lin = em.nn.Linear(32, 24).to(em.float16)
    x = em.randn(5, 17, 32).to(em.float16)
    res = {}
    for dev in ("cpu", "cuda"):
        m = lin.to(dev)
        xi = x.detach().to(dev).requires_grad_()
        y = m(xi)
        y.float().square().sum().backward()
        res[dev] = [y.detach().float().cpu().numpy(), xi.grad.float().cpu().numpy(),
                    m.weight.grad.float().cpu().numpy()]
        m.zero_grad()
    assert len(calls) >= 3                 # forward, dx and dW products
    for a, b in zip(res["cuda"], res["cpu"]):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-2)
    n = len(calls)
    em.ones(4, 3, device="cuda") @ em.ones(3, 2, device="cuda")     # float32: CuPy's matmul
    assert len(calls) == n
