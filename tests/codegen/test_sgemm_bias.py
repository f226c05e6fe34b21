"""Ember's float32 GEMM with a bias row added in its tile stores (``sgemm.gemm(...,
bias=)``, ``sgemm.addmm``): the bits of the product followed by ``+ bias``, for every
variant, operand layout, tile/block edge and thread count."""
import numpy as np
import pytest

from ember.codegen import sgemm

from test_sgemm import LAYOUTS, SHAPES, VARIANTS, _pair, _variant


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bias_gives_the_bits_of_a_separate_add(variant, layout):
    _variant(variant)
    for M, K, N in SHAPES:
        a, b = _pair(M, K, N, layout, seed=M + K + N)
        bias = np.random.default_rng(N).standard_normal(N, dtype=np.float32)
        ref = sgemm.gemm(a, b, variant=variant) + bias
        for _ in range(2):          # a new plan, then the cached one
            got = sgemm.gemm(a, b, variant=variant, bias=bias)
            np.testing.assert_array_equal(got, ref, err_msg=f"{(M, K, N)}")


@pytest.mark.parametrize("variant", VARIANTS)
def test_bias_with_beta_and_threads(variant):
    _variant(variant)
    rng = np.random.default_rng(3)
    for M, K, N in [(128, 784, 512), (97, 300, 10), (256, 64, 200)]:
        a, b = _pair(M, K, N, "nt", seed=K)
        bias = rng.standard_normal(N, dtype=np.float32)
        c0 = rng.standard_normal((M, N), dtype=np.float32)
        ref = sgemm.gemm(a, b, c0.copy(), beta=1.0, variant=variant) + bias
        for nt in (1, 2):
            got = sgemm.gemm(a, b, c0.copy(), beta=1.0, variant=variant, nthreads=nt,
                             bias=bias)
            np.testing.assert_array_equal(got, ref)


def test_non_contiguous_bias_and_empty_k():
    if not sgemm.runnable():
        pytest.skip("no C compiler: matmul runs OpenBLAS")
    rng = np.random.default_rng(4)
    a, b = _pair(40, 70, 90, "nn")
    bias = rng.standard_normal(180, dtype=np.float32)[::2]
    np.testing.assert_array_equal(sgemm.gemm(a, b, bias=bias), sgemm.gemm(a, b) + bias)
    e = sgemm.gemm(np.ones((3, 0), np.float32), np.ones((0, 90), np.float32), bias=bias)
    np.testing.assert_array_equal(e, np.broadcast_to(bias, (3, 90)))
    assert sgemm.gemm(a, b, bias=bias[:5]) is None          # wrong length: not run


def test_addmm_follows_the_size_rule():
    if not sgemm.runnable():
        pytest.skip("no C compiler: matmul runs OpenBLAS")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((128, 784), dtype=np.float32)
    w = rng.standard_normal((512, 784), dtype=np.float32)
    bias = rng.standard_normal(512, dtype=np.float32)
    got = sgemm.addmm(bias, x, w.T)
    if sgemm.worth(128, 784, 512) and sgemm.mode != "off" and "avx512" in sgemm.runnable():
        np.testing.assert_array_equal(got, sgemm.matmul(x, w.T) + bias)
    assert sgemm.addmm(bias[:10], x, w[:10].T) is None     # N = 10: OpenBLAS's
    assert sgemm.addmm(bias.astype(np.float64), x, w.T) is None
