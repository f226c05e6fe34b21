"""The ``sum_rows`` pass: sums over every dim but the last become one GEMV (ones @ x)."""
import numpy as np
import pytest

import ember as em
from ember.graph.passes import DEFAULT_PASSES, EXACT_PASSES
from ember.graph.passes.matmul import _run_sum_rows


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
