"""Fused softmax / log_softmax on rows with ``-inf`` (masked attention) and far-apart values.

The fused kernels clamp exp's argument at ``max - 87`` (libmvec's fast range) and zero the
clamped lanes (``fuse_lower._shifted_exp``): results must match eager everywhere, masked
entries must be exactly 0 (softmax) / ``-inf`` (log_softmax), and NaN/inf rows must give
NaN where eager does. Only values under exp(-87) ~ 1.6e-38 may differ (flushed to 0).
"""
import numpy as np
import pytest

import ember as em
from ember import codegen

FUSED = ["simplify", "fold", "cse", "fuse", "dce"]
EPS32 = float(np.finfo(np.float32).eps)
TINY = 1.7e-38          # exp(-87): below it the fused softmax may flush to 0


@pytest.fixture(autouse=True)
def _need_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "kernels"))
    if not codegen.available():
        pytest.skip("no C compiler: the fuse pass leaves graphs unchanged")


def _compiled(f, *args):
    cf = em.compile(f, passes=FUSED)
    cf(*args)
    assert "fused_reduce" in [n.op.name for n in cf.graph.nodes], cf.graph
    return cf


def _causal(s):
    t = s.shape[-1]
    mask = em.tensor(np.triu(np.ones((t, t), bool), 1))
    return s.masked_fill(mask, float("-inf"))


def test_causal_masked_softmax_is_exactly_zero_where_masked():
    s = em.randn(3, 2, 40, 40) * 3
    f = lambda s: em.softmax(_causal(s), -1)      # noqa: E731
    got, want = _compiled(f, s)(s).numpy(), f(s).numpy()
    masked = np.triu(np.ones((40, 40), bool), 1)
    assert np.all(got[..., masked] == 0.0)
    np.testing.assert_allclose(got, want, rtol=10 * EPS32, atol=10 * EPS32)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=40 * EPS32)


def test_causal_masked_log_softmax_is_minus_inf_where_masked():
    s = em.randn(2, 33, 33)
    f = lambda s: em.log_softmax(_causal(s), -1)  # noqa: E731
    got, want = _compiled(f, s)(s).numpy(), f(s).numpy()
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=10 * EPS32, atol=10 * EPS32)


@pytest.mark.parametrize("offset", [0.0, 1e3, -1e3, 1e9])
def test_far_apart_values_agree_down_to_flt_min(offset):
    # gaps of 0..120 below the row max: exp spans 1 .. 1e-52, across the clamp at -87
    gaps = np.linspace(0.0, 120.0, 97, dtype=np.float32)
    rows = np.stack([-gaps, -gaps[::-1], -gaps * 0.5]) + np.float32(offset)
    x = em.tensor(rows.astype(np.float32))
    for f in (lambda x: em.softmax(x, -1), lambda x: em.log_softmax(x, -1)):
        got, want = _compiled(f, x)(x).numpy(), f(x).numpy()
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=10 * EPS32, atol=TINY)


def test_nan_and_inf_rows_give_nan_like_eager():
    rows = np.array([[0.0, np.nan, 1.0, -np.inf],
                     [-np.inf, -np.inf, -np.inf, -np.inf],
                     [np.inf, 0.0, -np.inf, 1.0],
                     [1.0, -np.inf, -np.inf, 2.0]], np.float32)
    x = em.tensor(rows)
    for f in (lambda x: em.softmax(x, -1), lambda x: em.log_softmax(x, -1)):
        got, want = _compiled(f, x)(x).numpy(), f(x).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        fin = np.isfinite(want)
        np.testing.assert_array_equal(np.isfinite(got), fin)
        np.testing.assert_allclose(got[fin], want[fin], rtol=10 * EPS32)


def test_float64_softmax_keeps_exact_subnormal_tail():
    # float64 takes the plain exp: values far below float32's FLT_MIN are kept
    x = em.tensor(np.array([[0.0, -100.0, -700.0, -np.inf]]))
    f = lambda x: em.softmax(x, -1)               # noqa: E731
    got, want = _compiled(f, x)(x).numpy(), f(x).numpy()
    assert got[0, 2] > 0 and got[0, 3] == 0
    np.testing.assert_allclose(got, want, rtol=1e-14)
