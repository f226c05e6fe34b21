"""The ``sum_rows`` pass: sums over every dim but the last become one column sum (a C loop
or a GEMV ``ones @ x``); a product read only by such a sum is summed without storing it."""
import numpy as np
import pytest

import ember as em
from ember import codegen
from ember.codegen import reduce_kernels
from ember.graph.passes import DEFAULT_PASSES, EXACT_PASSES
from ember.graph.passes import matmul as matmul_pass
from ember.graph.passes.matmul import _run_sum_rows, _run_sum_rows_mul, _use_c


def _names(cf) -> list:
    return [n.op.name for n in cf.graph.nodes]


@pytest.mark.parametrize("dtype", [em.float32, em.float64])
def test_row_sums_are_rewritten_and_agree(dtype):
    em.manual_seed(0)
    x = em.randn(4, 16, 24, dtype=dtype)

    def f(x):
        return (x * 2).sum((0, 1)), x.sum((-3, -2)), x.sum(0)      # the last: not all rows
    cf = em.compile(f)
    cf(x)
    names = _names(cf)
    assert names.count("sum_rows") == 2 and "sum" in names, names
    eps = float(np.finfo(dtype.np).eps)
    for got, want in zip(cf(x), f(x)):
        a = np.abs(want.numpy()).max()
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=64 * eps * a * 2)
    assert "sum_rows" in DEFAULT_PASSES and "sum_rows" not in EXACT_PASSES


def test_keepdim_dtype_and_int_sums_stay():
    x = em.randn(3, 5, 7)
    xi = em.tensor(np.arange(105).reshape(3, 5, 7))

    def f(x, xi):
        return x.sum((0, 1), keepdim=True), x.sum((0, 1), dtype=em.float64), xi.sum((0, 1))
    cf = em.compile(f)
    cf(x, xi)
    assert "sum_rows" not in _names(cf), _names(cf)


def test_runner_handles_non_contiguous_input_and_out():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5, 8)).astype(np.float32)
    want = x.astype(np.float64).sum((0, 1))
    np.testing.assert_allclose(_run_sum_rows(np, x), want, rtol=1e-5)
    xt = np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2)   # not C-contiguous
    assert not xt.flags.c_contiguous
    np.testing.assert_allclose(_run_sum_rows(np, xt), want, rtol=1e-5)
    out = np.full(8, np.nan, np.float32)
    assert _run_sum_rows(np, x, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-5)


# ------------------------------------------------------------------ the C column sums
@pytest.fixture
def cc(tmp_path, monkeypatch):
    """A private kernel cache; skip (only) when this machine has no C compiler."""
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "kernels"))
    if not codegen.available():
        pytest.skip("no C compiler: the C column sums cannot run here")


@pytest.fixture
def no_compiler(monkeypatch):
    monkeypatch.setattr(reduce_kernels, "find_compiler", lambda: None)
    monkeypatch.setattr(reduce_kernels, "_state", {})
    monkeypatch.setattr(matmul_pass, "_RUNS", {})


def _within_rows_roundings(got, terms, dtype):
    """|got - sum| <= (rows + 1) eps sum|terms| per column (float64 sums of ``terms``)."""
    terms = terms.reshape(-1, terms.shape[-1]).astype(np.float64)
    bound = (terms.shape[0] + 1) * float(np.finfo(dtype).eps) * np.abs(terms).sum(0)
    err = np.abs(np.asarray(got, np.float64) - terms.sum(0))
    assert np.all(err <= bound), (err.max(), bound.min())


@pytest.mark.parametrize("path", ["c", "no compiler"])
@pytest.mark.parametrize("dtype", [em.float32, em.float64])
def test_a_product_read_once_is_summed_without_storing_it(dtype, path, request):
    request.getfixturevalue("cc" if path == "c" else "no_compiler")
    em.manual_seed(1)
    a, b, c = (em.randn(4, 16, 24, dtype=dtype) for _ in range(3))
    w = em.randn(24, dtype=dtype)

    def f(a, b, c):
        # the first: a LayerNorm weight's gradient; the second multiplies by a broadcast
        # w and the third's product is read twice: those two products stay
        p = a * c
        return (a * b).sum((0, 1)), (a * w).sum((0, 1)), p.sum((0, 1)), p * 2
    cf = em.compile(f)
    cf(a, b, c)
    names = _names(cf)
    assert names.count("sum_rows_mul") == 1 and names.count("sum_rows") == 2 and \
        names.count("mul") == 3, names
    got = cf(a, b, c)
    an, bn, cn, wn = a.numpy(), b.numpy(), c.numpy(), w.numpy()
    for g, terms in zip(got[:3], (an * bn, an * wn, an * cn)):
        _within_rows_roundings(g.numpy(), terms.astype(np.float64), dtype.np)
    np.testing.assert_array_equal(got[3].numpy(), f(a, b, c)[3].numpy())


def test_the_c_column_sums_agree_with_the_gemv(cc):
    rng = np.random.default_rng(2)
    for shape in [(16, 64, 128), (8, 3, 40), (1024, 512), (1100, 1000)]:    # C, C, C, GEMV
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(shape).astype(np.float32)
        _within_rows_roundings(_run_sum_rows(np, x), x, np.float32)
        _within_rows_roundings(_run_sum_rows_mul(np, x, y), x.astype(np.float64) * y,
                               np.float32)
        out = np.full(shape[-1], np.nan, np.float32)
        assert _run_sum_rows_mul(np, x, y, out=out) is out
        _within_rows_roundings(out, x.astype(np.float64) * y, np.float32)
        rows = int(np.prod(shape[:-1]))
        assert _use_c(rows, shape[-1], x) == (rows * shape[-1] < matmul_pass._GEMV_FROM)
    yt = np.ascontiguousarray(y.transpose(1, 0)).transpose(1, 0)           # not contiguous
    _within_rows_roundings(_run_sum_rows_mul(np, x, yt), x.astype(np.float64) * y, np.float32)


def test_without_a_compiler_the_runners_use_numpy(no_compiler):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 64, 128)).astype(np.float32)
    y = rng.standard_normal((16, 64, 128)).astype(np.float32)
    assert not _use_c(1024, 128, x)
    _within_rows_roundings(_run_sum_rows(np, x), x, np.float32)
    _within_rows_roundings(_run_sum_rows_mul(np, x, y), x.astype(np.float64) * y, np.float32)
