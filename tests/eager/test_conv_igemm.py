"""The implicit-GEMM float32 convolution (``ember/codegen/conv_igemm.py``).

Forward: bit for bit ``unfold`` + Ember's GEMM (``sgemm``: the same FMA chains, k block by
k block) + the bias add, for each variant this CPU runs (the generic one within float32
rounding: its compiler may not contract ``a * b + c``), any padding/dilation/kernel, output
rows that are not a multiple of the vector width, k above one GEMM block, NaN/inf, zero
sizes, non-contiguous inputs and 1 or 2 threads. Input gradient: ``fold(W^T @ dY)``
within float32 rounding of a float64 reference (it sums in another order).
"""
from __future__ import annotations

import numpy as np
import pytest

from ember.codegen import conv_igemm as ci
from ember.codegen import conv_kernels_bwd as kb
from ember.codegen import conv_kernels_fwd as kf
from ember.codegen import sgemm
from ember.codegen.toolchain import find_compiler
from ember.ops.conv import _fold_kernel, _unfold_kernel

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")
VARIANTS = [v for v in ("avx512", "avx2", "generic") if v in sgemm.runnable()]

# (x shape, out channels, kernel, dilation, ((top, bottom), (left, right)))
GEOMS = [
    ((3, 16, 16, 16), 64, (3, 3), (1, 1), ((1, 1), (1, 1))),     # W2's conv2, smaller
    ((2, 3, 32, 32), 32, (3, 3), (1, 1), ((1, 1), (1, 1))),      # W2's conv1
    ((3, 5, 9, 13), 7, (3, 2), (2, 1), ((1, 2), (0, 1))),        # ow 12, rows of 7
    ((2, 40, 6, 7), 9, (3, 3), (1, 1), ((1, 1), (1, 1))),        # k = 360: two k blocks
    ((2, 4, 5, 40), 6, (1, 5), (1, 3), ((0, 0), (2, 0))),        # ow 30: a short segment
    ((1, 2, 4, 4), 3, (4, 4), (1, 1), ((0, 0), (0, 0))),         # a 1 x 1 output
    ((2, 3, 5, 6), 8, (2, 2), (1, 1), ((2, 0), (0, 1))),         # pad > d*(k-1): no igrad
]


def _data(xs, co, k, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((co, xs[1] * k[0] * k[1])).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    return x, w, b


def _reference(x, w, b, k, d, p, pad_value=0.0):
    """unfold + Ember's GEMM per image (+ bias): what the forward reproduces bitwise."""
    cols = _unfold_kernel(np, x, k, d, p, (1, 1), pad_value)
    y = np.empty((x.shape[0], w.shape[0], cols.shape[2]), np.float32)
    if y.size and sgemm.gemm(np.broadcast_to(w, (x.shape[0],) + w.shape), cols, y) is None:
        pytest.skip("Ember's GEMM does not run here")
    return y, (y if b is None else y + b.reshape(-1, 1)), cols


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("geom", GEOMS)
def test_forward_is_unfold_gemm_bias_bitwise(geom, variant):
    xs, co, k, d, p = geom
    x, w, b, = _data(xs, co, k)
    y0, yb, cols = _reference(x, w, b, k, d, p)
    for bias, want in ((b, yb), (None, y0)):
        got_cols = ci.empty_columns(cols.shape) if bias is None else \
            np.full(cols.size + 1, np.nan, np.float32)[1:].reshape(cols.shape)  # unaligned
        got = ci.conv(x, w, bias, k, d, p, variant=variant, cols=got_cols)
        np.testing.assert_array_equal(got_cols, cols)
        assert got.dtype == np.float32 and got.shape[:2] == (xs[0], co)
        got = got.reshape(want.shape)
        if variant == "generic":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("variant", VARIANTS)
def test_pad_value_nan_inf_noncontiguous_and_threads(variant):
    xs, co, k, d, p = GEOMS[2]
    x, w, b = _data(xs, co, k, seed=1)
    x[0, 1, 2, 3], x[1, 0, 0, 0], x[2, 4, 8, 12] = np.nan, np.inf, -np.inf
    xt = np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)     # same values
    _, want, _ = _reference(x, w, b, k, d, p, pad_value=-1.5)
    got1 = ci.conv(xt, w, b, k, d, p, pad_value=-1.5, variant=variant).reshape(want.shape)
    np.testing.assert_array_equal(np.isnan(got1), np.isnan(want))
    assert np.isnan(want).any() and np.isinf(want).any()
    if variant != "generic":
        np.testing.assert_array_equal(got1, want)
    from ember.codegen import runtime
    prev = runtime.num_threads()
    try:
        import ember
        ember.set_num_threads(2)
        got2 = ci.conv(x, w, b, k, d, p, pad_value=-1.5, variant=variant)
    finally:
        ember.set_num_threads(prev)
    np.testing.assert_array_equal(got2.reshape(want.shape), got1)


@pytest.mark.parametrize("variant", VARIANTS)
def test_zero_sizes(variant):
    w = np.ones((4, 2 * 9), np.float32)
    assert ci.conv(np.ones((0, 2, 5, 5), np.float32), w, None, (3, 3), (1, 1),
                   ((1, 1), (1, 1)), variant=variant).shape == (0, 4, 5, 5)
    assert ci.conv(np.ones((2, 2, 1, 5), np.float32), w, None, (3, 3), (1, 1),
                   ((0, 0), (1, 1)), variant=variant).shape == (2, 4, 0, 5)
    y = ci.conv(np.ones((2, 0, 5, 5), np.float32), np.ones((4, 0), np.float32),
                np.arange(4, dtype=np.float32), (3, 3), (1, 1), ((1, 1), (1, 1)),
                variant=variant)
    np.testing.assert_array_equal(y, np.broadcast_to(np.arange(4.0).reshape(4, 1, 1),
                                                     (2, 4, 5, 5)))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("geom", GEOMS)
def test_input_grad_is_fold_of_the_products(geom, variant):
    xs, co, k, d, p = geom
    x, w, _ = _data(xs, co, k, seed=2)
    oh, ow = (xs[2 + i] + sum(p[i]) - d[i] * (k[i] - 1) for i in range(2))
    dy = np.random.default_rng(3).standard_normal((xs[0], co, oh, ow)).astype(np.float32)
    want = _fold_kernel(np, np.matmul(w.T.astype(np.float64),
                                      dy.reshape(xs[0], co, -1).astype(np.float64)),
                        xs[2:], k, d, p, (1, 1))
    got = ci.input_grad(w, dy, xs[2:], k, d, p, variant=variant)
    if any(max(p[i]) > d[i] * (k[i] - 1) for i in range(2)):
        assert got is None                  # the flipped convolution would crop
        return
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_callers_use_it_where_it_runs(monkeypatch):
    """The conv_fwd/conv_igrad kernels take this path (stride 1, float32, big enough) and
    keep their values; other strides go through unfold + GEMM."""
    if ci.variant_for() is None:
        pytest.skip("no variant runs by default here")
    calls = []
    real = ci.conv
    monkeypatch.setattr(ci, "conv", lambda *a, **k: calls.append(1) or real(*a, **k))
    xs, co, k, d, p = GEOMS[0]
    x, w, b = _data(xs, co, k)
    y, cols = kf.forward(x, w, b.reshape(-1, 1, 1), k, d, p, (1, 1))
    _, want, wcols = _reference(x, w, b, k, d, p)
    np.testing.assert_array_equal(y.reshape(want.shape), want)
    np.testing.assert_array_equal(cols, wcols)
    dy = np.random.default_rng(4).standard_normal((xs[0], co, 256)).astype(np.float32)
    dx = kb.input_grad(w.T, dy, xs[2:], k, d, p, (1, 1))
    assert len(calls) == 2
    kf.forward(x, w, None, k, d, p, (2, 2))
    assert len(calls) == 2
    ref = _fold_kernel(np, np.matmul(w.T.astype(np.float64), dy.astype(np.float64)),
                       xs[2:], k, d, p, (1, 1))
    np.testing.assert_allclose(dx, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_unknown_variant_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid: auto, off, generic, avx2, avx512"):
        ci.variant_for("sse9")


@pytest.mark.parametrize("variant", VARIANTS[:1])
def test_a_large_image_twice(variant):
    """A padded copy above the kept scratch size (4 MiB) is released and made again."""
    xs, co, k, d, p = (1, 17, 250, 250), 8, (3, 3), (1, 1), ((1, 1), (1, 1))
    x, w, b = _data(xs, co, k, seed=6)
    _, want, _ = _reference(x, w, b, k, d, p)
    for _ in range(2):
        got = ci.conv(x, w, b, k, d, p, variant=variant)
        np.testing.assert_array_equal(got.reshape(want.shape), want)
