"""Epilogues of Ember's float32 GEMM (``sgemm.gemm``'s ``bias_rows``, ``relu`` and
``update``): each is bitwise the product followed by the separate NumPy step it replaces
(bias add, the fused kernels' relu, SGD's ``w - lr * g`` rounded once), for every variant
this CPU runs, on edge tiles, several k blocks, transposed operands and batches."""
import numpy as np
import pytest

from ember.codegen import sgemm
from ember.codegen.sgemm_c import KC

VARIANTS = ["generic", "avx2", "avx512"]
# (M, K, N): full and edge tiles, one and several k blocks, W1's weight-gradient shapes
SHAPES = [(1, 1, 1), (7, 5, 3), (13, 31, 70), (6, KC + 3, 64), (512, 128, 784)]


def _variant(name):
    if name not in sgemm.runnable():
        pytest.skip(f"this CPU does not run the {name} variant (runs {sgemm.runnable()})")
    return name


def _operands(M, K, N, ta, tb, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((K, M) if ta else (M, K), dtype=np.float32)
    b = rng.standard_normal((N, K) if tb else (K, N), dtype=np.float32)
    return (a.T if ta else a), (b.T if tb else b), rng


def _relu(x):
    return np.where((x > 0) | np.isnan(x), x, np.float32(0))


def _sgd(w, g, lr):
    """``w - lr * g`` rounded once (float64 holds the product exactly; the subtraction's
    one rounding to float64 then float32 is the FMA's but for ties, absent here)."""
    return (w.astype(np.float64) - g.astype(np.float64) * np.float64(np.float32(lr))
            ).astype(np.float32)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("M,K,N", SHAPES)
@pytest.mark.parametrize("rows,relu", [(False, True), (True, False), (True, True)])
def test_bias_and_relu_are_the_separate_steps_bitwise(variant, M, K, N, rows, relu):
    v = _variant(variant)
    a, b, rng = _operands(M, K, N, ta=M % 2 == 1, tb=N % 2 == 0)
    bias = rng.standard_normal(M if rows else N, dtype=np.float32)
    c0 = sgemm.gemm(a, b, variant=v)
    want = c0 + (bias[:, None] if rows else bias)
    want = _relu(want) if relu else want
    got = sgemm.gemm(a, b, variant=v, bias=bias, bias_rows=rows, relu=relu)
    np.testing.assert_array_equal(got, want)
    if relu and got.size > 100:
        assert (got == 0).any() and (got > 0).any()    # relu did cut something off
    again = sgemm.gemm(a, b, variant=v, bias=bias, bias_rows=rows, relu=relu)  # cached plan
    np.testing.assert_array_equal(again, want)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("M,K,N", SHAPES)
def test_sgd_update_is_the_separate_step_bitwise(variant, M, K, N):
    v = _variant(variant)
    a, b, rng = _operands(M, K, N, ta=True, tb=False)
    w = rng.standard_normal((M, N), dtype=np.float32)
    g0 = sgemm.gemm(a, b, variant=v)
    want = _sgd(w, g0, 0.01)
    fresh = np.empty_like(w)
    g = sgemm.gemm(a, b, variant=v, update=(w, fresh, 0.01))
    np.testing.assert_array_equal(g, g0)          # the gradient is the plain product
    np.testing.assert_array_equal(fresh, want)
    inplace = w.copy()
    g = sgemm.gemm(a, b, variant=v, update=(inplace, inplace, 0.01))
    np.testing.assert_array_equal(inplace, want)
    np.testing.assert_array_equal(g, g0)


def test_sgd_update_rounds_once():
    """A case where ``w - lr * g`` rounded twice (product, then difference) differs: the
    epilogue gives the single rounding, the fused ``mul,sub`` kernel's bits."""
    v = sgemm.runnable()[-1] if sgemm.runnable() else pytest.skip("no C compiler")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 32), dtype=np.float32)
    b = rng.standard_normal((32, 64), dtype=np.float32)
    w = rng.standard_normal((64, 64), dtype=np.float32)
    g = sgemm.gemm(a, b, variant=v)
    twice = w - g * np.float32(0.01)
    out = np.empty_like(w)
    sgemm.gemm(a, b, variant=v, update=(w, out, 0.01))
    np.testing.assert_array_equal(out, _sgd(w, g, 0.01))
    assert (out != twice).any()


@pytest.mark.parametrize("variant", VARIANTS)
def test_relu_keeps_nan_and_makes_negative_zero_positive(variant):
    v = _variant(variant)
    a = np.zeros((7, 3), np.float32)
    a[0, 0] = np.nan
    b = np.ones((3, 20), np.float32)
    bias = np.full(7, -0.0, np.float32)
    c = sgemm.gemm(a, b, variant=v, bias=bias, bias_rows=True, relu=True)
    assert np.isnan(c[0]).all()
    assert not np.signbit(c[1:]).any() and (c[1:] == 0).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_epilogues_on_a_batch(variant):
    v = _variant(variant)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 9, 20), dtype=np.float32)
    b = rng.standard_normal((3, 20, 33), dtype=np.float32)
    w = rng.standard_normal((3, 9, 33), dtype=np.float32)
    bias = rng.standard_normal(9, dtype=np.float32)
    g0 = sgemm.gemm(a, b, variant=v)
    out = np.empty_like(w)
    g = sgemm.gemm(a, b, variant=v, bias=bias, bias_rows=True, relu=True,
                   update=(w, out, 0.5))
    want = _relu(g0 + bias[:, None])
    np.testing.assert_array_equal(g, want)
    np.testing.assert_array_equal(out, _sgd(w, want, 0.5))


def test_two_threads_bitwise():
    v = sgemm.runnable()[-1] if sgemm.runnable() else pytest.skip("no C compiler")
    a, b, rng = _operands(300, 64, 260, ta=False, tb=True)
    w = rng.standard_normal((300, 260), dtype=np.float32)
    bias = rng.standard_normal(300, dtype=np.float32)
    outs = []
    for nt in (1, 2):
        wo = np.empty_like(w)
        g = sgemm.gemm(a, b, variant=v, nthreads=nt, bias=bias, bias_rows=True, relu=True,
                       update=(w, wo, 0.1))
        outs.append((g, wo))
    for x, y in zip(*outs):
        np.testing.assert_array_equal(x, y)


def test_unusable_update_arrays_run_nothing():
    v = sgemm.runnable()[-1] if sgemm.runnable() else pytest.skip("no C compiler")
    a, b, rng = _operands(8, 4, 16, False, False)
    w = rng.standard_normal((8, 16), dtype=np.float32)
    assert sgemm.gemm(a, b, variant=v, update=(w.astype(np.float64), w, 0.1)) is None
    assert sgemm.gemm(a, b, variant=v, update=(w[:, ::2], w[:, ::2], 0.1)) is None
    big = rng.standard_normal((8, 32), dtype=np.float32)
    assert sgemm.gemm(a, b, variant=v, update=(big[:, :16], big[:, 1:17], 0.1)) is None
    assert sgemm.gemm(a, b, variant=v, bias=np.ones(3, np.float32), bias_rows=True) is None


# --------------------------------------------------------------- k in one block
@pytest.mark.parametrize("M,K,N,one", [(512, 784, 128, True), (512, 512, 128, True),
                                       (128, 784, 512, False), (64, 1025, 16, False)])
def test_whole_k_in_one_block_only_with_an_epilogue_and_b_in_l2(M, K, N, one):
    a, b, _ = _operands(M, K, N, False, False)
    c = np.empty((M, N), np.float32)
    assert sgemm._one_block(K, N) == one
    assert sgemm._plan(3, a, b, c, M, N, K, 1, relu=True, whole=True)[14] == \
        (K if one else sgemm.KC)                      # G_KC
    assert sgemm._plan(3, a, b, c, M, N, K, 1)[14] == sgemm.KC   # plain calls: as before


@pytest.mark.parametrize("variant", VARIANTS)
def test_one_block_products_match_float64(variant):
    v = _variant(variant)
    a, b, rng = _operands(40, 784, 128, False, True)
    bias = rng.standard_normal(40, dtype=np.float32)
    c = sgemm.gemm(a, b, variant=v, bias=bias, bias_rows=True)
    ref = a.astype(np.float64) @ b.astype(np.float64) + bias[:, None]
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(bias[:, None])
    assert (np.abs(c - ref) <= (784 + 3) * np.finfo(np.float32).eps * mag).all()


# --------------------------------------------------------------- relu's backward, row sums
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("M,K,N", SHAPES)
def test_mask_is_threshold_backward_bitwise_and_row_sums_follow(variant, M, K, N):
    v = _variant(variant)
    a, b, rng = _operands(M, K, N, ta=True, tb=N % 2 == 1)
    y = np.maximum(rng.standard_normal((M, N), dtype=np.float32), 0)
    y.flat[::7] = np.nan                               # y NaN: the gradient passes
    g0 = sgemm.gemm(a, b, variant=v)
    want = np.where(y <= 0, np.float32(0), g0)         # threshold_backward(g, y, 0)
    np.testing.assert_array_equal(sgemm.gemm(a, b, variant=v, mask=y), want)
    sums = np.full(M, np.nan, np.float32)
    got = sgemm.gemm(a, b, variant=v, mask=y, row_sums=sums)
    np.testing.assert_array_equal(got, want)
    ref = want.astype(np.float64).sum(1)
    mag = np.abs(want.astype(np.float64)).sum(1)
    assert (np.abs(sums - ref) <= (N + 2) * np.finfo(np.float32).eps * mag + 1e-30).all()


def test_row_sums_split_rows_between_threads_bitwise():
    v = sgemm.runnable()[-1] if sgemm.runnable() else pytest.skip("no C compiler")
    a, b, rng = _operands(300, 64, 260, ta=True, tb=False)
    y = rng.standard_normal((300, 260), dtype=np.float32)
    runs = []
    for nt in (1, 2):
        sums = np.empty(300, np.float32)
        runs.append((sgemm.gemm(a, b, variant=v, nthreads=nt, mask=y, row_sums=sums), sums))
    for x, z in zip(*runs):
        np.testing.assert_array_equal(x, z)
    assert sgemm._plan(3, a, b, runs[0][0], 300, 260, 64, 1, rsum=True)[5] == 0   # G_SPLIT


def test_unusable_mask_or_row_sums_run_nothing():
    v = sgemm.runnable()[-1] if sgemm.runnable() else pytest.skip("no C compiler")
    a, b, rng = _operands(8, 4, 16, False, False)
    y = rng.standard_normal((8, 32), dtype=np.float32)
    assert sgemm.gemm(a, b, variant=v, mask=y[:, ::2]) is None           # not C's layout
    assert sgemm.gemm(a, b, variant=v, row_sums=np.empty(7, np.float32)) is None
    a3 = np.stack([a, a])
    b3 = np.stack([b, b])
    assert sgemm.gemm(a3, b3, variant=v, row_sums=np.empty(8, np.float32)) is None
