"""The C loops of ``ember.codegen.conv_kernels`` against the NumPy primitives they replace.

``unfold`` copies and ``maxpool`` compares, so both must be bitwise equal to the NumPy path
(``unfold`` then ``argmax`` + ``take_along_dim``), NaN and -inf included. ``fold`` and
``maxpool_grad`` add at most ``kh*kw`` terms per pixel, possibly in another order: they
agree within ``kh*kw`` roundings.
"""
import numpy as np
import pytest

from ember.codegen import conv_kernels as ck
from ember.ops.conv import _fold_kernel, _unfold_kernel

# (n, c, h, w, kernel, dilation, ((top, bottom), (left, right)), stride)
CASES = [
    (2, 3, 7, 9, (3, 2), (1, 2), ((1, 0), (2, 1)), (2, 1)),
    (2, 3, 8, 8, (2, 2), (1, 1), ((0, 0), (0, 0)), (2, 2)),
    (1, 2, 5, 6, (3, 3), (2, 1), ((1, 1), (1, 1)), (1, 3)),
    (3, 1, 10, 7, (3, 3), (1, 1), ((1, -1), (1, 1)), (2, 2)),     # a cropped bottom
    (2, 4, 11, 13, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),      # a conv's im2col
    (1, 1, 1, 1, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1)),
    (2, 2, 9, 5, (2, 3), (2, 2), ((1, 2), (0, 1)), (3, 2)),
    (1, 3, 9, 7, (2, 2), (1, 1), ((0, 0), (0, 0)), (2, 2)),       # tiles, a row/col left
    (2, 2, 10, 11, (3, 2), (1, 1), ((0, 0), (0, 0)), (3, 2)),     # tiles, other kernel
    (2, 3, 6, 7, (3, 3), (2, 2), ((2, 2), (2, 2)), (1, 1)),        # "same", dilated
    (1, 2, 2, 3, (3, 3), (2, 2), ((2, 2), (2, 2)), (1, 1)),        # taps wholly outside
]


@pytest.fixture(autouse=True)
def _need(cc):
    assert ck.kernels() is not None


def _eps(dt):
    return np.finfo(dt).eps


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_unfold_and_fold_match_the_numpy_primitives(case, dt):
    n, c, h, w, k, d, p, s = case
    rng = np.random.default_rng(hash(case) % 2**32)
    x = rng.standard_normal((n, c, h, w)).astype(dt)
    want = _unfold_kernel(np, x, k, d, p, s, -7.5)
    got = ck.unfold(x, k, d, p, s, -7.5)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    # a non-contiguous input gives the same columns
    xt = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    np.testing.assert_array_equal(ck.unfold(xt, k, d, p, s, -7.5), want)
    cols = rng.standard_normal(want.shape).astype(dt)
    want = _fold_kernel(np, cols, (h, w), k, d, p, s)
    got = ck.fold(cols, (h, w), k, d, p, s)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=k[0] * k[1] * _eps(dt), atol=k[0] * k[1] *
                               _eps(dt) * np.abs(cols).max())
    out = np.full(want.shape, np.nan, dt)           # out= is written whole
    assert ck.fold(cols, (h, w), k, d, p, s, out=out) is out
    np.testing.assert_array_equal(out, got)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_maxpool_and_its_gradient_match_argmax_gather_scatter_fold(case, dt):
    n, c, h, w, k, d, p, s = case
    rng = np.random.default_rng(hash(case) % 2**32 + 1)
    x = rng.standard_normal((n * c, 1, h, w)).astype(dt)
    x[rng.random(x.shape) < 0.05] = np.nan
    x[rng.random(x.shape) < 0.05] = -np.inf
    x[rng.random(x.shape) < 0.2] = 0.5                  # ties: the first maximum wins
    win = _unfold_kernel(np, x, k, d, p, s, -np.inf)
    arg = win.argmax(axis=1)[:, None]
    vals = np.take_along_axis(win, arg, axis=1)
    got_v, got_a = ck.maxpool(x, k, d, p, s, -np.inf)
    np.testing.assert_array_equal(got_a, arg)
    np.testing.assert_array_equal(got_v, vals)
    g = rng.standard_normal(vals.shape).astype(dt)
    g.flat[::7] = np.inf                                 # never inf * 0 = NaN elsewhere
    sc = np.zeros(win.shape, dt)
    np.put_along_axis(sc, arg, g, axis=1)
    want = _fold_kernel(np, sc, (h, w), k, d, p, s)
    got = ck.maxpool_grad(g, got_a, (h, w), k, d, p, s)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    big = np.abs(g[np.isfinite(g)]).max(initial=1.0)
    np.testing.assert_allclose(got, want, rtol=k[0] * k[1] * _eps(dt),
                               atol=k[0] * k[1] * _eps(dt) * big)


def test_maxpool_gradient_drops_indices_outside_the_window():
    g = np.ones((1, 1, 4), np.float32)
    arg = np.array([[[0, 7, -1, 3]]], np.int64)          # 7 and -1: not a 2x2 position
    got = ck.maxpool_grad(g, arg, (4, 4), (2, 2), (1, 1), ((0, 0), (0, 0)), (2, 2))
    want = np.zeros((1, 1, 4, 4), np.float32)
    want[0, 0, 0, 0] = want[0, 0, 3, 3] = 1
    np.testing.assert_array_equal(got, want)


def test_the_kernels_are_unavailable_without_a_compiler(monkeypatch):
    monkeypatch.setattr(ck, "find_compiler", lambda: None)
    assert not ck.available()


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_maxpool_with_a_bias_relu_prologue_matches_relu_then_pool(case, dt):
    n, c, h, w, k, d, p, s = case
    rng = np.random.default_rng(hash(case) % 2**32 + 2)
    x = rng.standard_normal((n, c, h, w)).astype(dt)
    x.flat[::13] = np.nan
    b = rng.standard_normal(c).astype(dt)
    b[0] = -0.0
    x[:, 0].flat[::3] = -0.0                              # -0 + -0 = -0: relu makes it +0
    x[:, 0].flat[1::3] = -1.0
    y = np.maximum(x + b.reshape(c, 1, 1), 0).reshape(n * c, 1, h, w)   # add, then relu
    win = _unfold_kernel(np, y, k, d, p, s, -np.inf)
    arg = win.argmax(axis=1)[:, None]
    got_v, got_a = ck.maxpool(x.reshape(n * c, 1, h, w), k, d, p, s, -np.inf, bias=b)
    np.testing.assert_array_equal(got_a, arg)
    want_v = np.take_along_axis(win, arg, axis=1)
    np.testing.assert_array_equal(got_v, want_v)
    np.testing.assert_array_equal(np.signbit(got_v), np.signbit(want_v))   # relu(-0) = +0


def test_maxpool_bias_must_divide_the_planes():
    with pytest.raises(ValueError, match="maxpool: bias of 3 values"):
        ck.maxpool(np.zeros((4, 1, 2, 2), np.float32), (2, 2), (1, 1), ((0, 0), (0, 0)),
                   (2, 2), -np.inf, bias=np.zeros(3, np.float32))


def _cf(a, n, c):
    """(N*C, ...) planes in (n, c) order -> the same planes in (c, n) order."""
    return np.ascontiguousarray(a.reshape((n, c) + a.shape[1:]).swapaxes(0, 1)).reshape(a.shape)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES + [(0, 3, 5, 4, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))])
def test_channel_first_unfold_and_fold_match_the_numpy_primitives(case, dt):
    """Columns (C*K, N*L): the (N, C*K, L) primitive's with the batch moved inside."""
    n, c, h, w, k, d, p, s = case
    rng = np.random.default_rng(hash(case) % 2**32 + 3)
    x = rng.standard_normal((n, c, h, w)).astype(dt)
    ref = _unfold_kernel(np, x, k, d, p, s, -7.5)
    ck_, ll = ref.shape[1:]
    want = ref.transpose(1, 0, 2).reshape(ck_, n * ll)
    got = ck.unfold(x, k, d, p, s, -7.5, channel_first=True)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    out = np.full(want.shape, np.nan, dt)               # out= is written whole
    assert ck.unfold(x, k, d, p, s, -7.5, out=out, channel_first=True) is out
    np.testing.assert_array_equal(out, want)
    cols = rng.standard_normal(ref.shape).astype(dt)
    want = _fold_kernel(np, cols, (h, w), k, d, p, s)
    cols_t = np.ascontiguousarray(cols.transpose(1, 0, 2)).reshape(ck_, n * ll)
    got = ck.fold(cols_t, (h, w), k, d, p, s, batch=n)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=k[0] * k[1] * _eps(dt), atol=k[0] * k[1] *
                               _eps(dt) * np.abs(cols).max(initial=1.0))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_channel_first_maxpool_and_gradient_match_the_plane_order_kernels(case, dt, with_bias):
    """Reading (c, n)-ordered planes gives the (n, c)-ordered kernel's outputs bitwise;
    the gradient written channel-first is the (n, c)-ordered one, planes permuted."""
    n, c, h, w, k, d, p, s = case
    rng = np.random.default_rng(hash(case) % 2**32 + 4)
    x = rng.standard_normal((n * c, 1, h, w)).astype(dt)
    x[rng.random(x.shape) < 0.05] = np.nan               # the exact (NaN) row path too
    x[rng.random(x.shape) < 0.2] = 0.5
    b = rng.standard_normal(c).astype(dt) if with_bias else None
    want_v, want_a = ck.maxpool(x, k, d, p, s, -np.inf, bias=b)
    got_v, got_a = ck.maxpool(_cf(x, n, c), k, d, p, s, -np.inf, bias=b, channels=c)
    np.testing.assert_array_equal(got_a, want_a)
    np.testing.assert_array_equal(got_v, want_v)
    g = rng.standard_normal(want_v.shape).astype(dt)
    want = ck.maxpool_grad(g, want_a, (h, w), k, d, p, s)
    out = np.full(want.shape, np.nan, dt)
    got = ck.maxpool_grad(g, want_a, (h, w), k, d, p, s, out=out, channels=c)
    assert got is out
    np.testing.assert_array_equal(got, _cf(want, n, c))


def test_channel_first_kernels_check_the_channel_count():
    x = np.zeros((6, 1, 4, 4), np.float32)
    geo = ((2, 2), (1, 1), ((0, 0), (0, 0)), (2, 2))
    with pytest.raises(ValueError, match="maxpool: 4 channels do not divide the 6 planes"):
        ck.maxpool(x, *geo, -np.inf, channels=4)
    with pytest.raises(ValueError, match="maxpool: bias of 2 values for 3 channels"):
        ck.maxpool(x, *geo, -np.inf, bias=np.zeros(2, np.float32), channels=3)
    with pytest.raises(ValueError, match="maxpool_grad: 4 channels do not divide the 6"):
        ck.maxpool_grad(np.zeros((6, 1, 4), np.float32), np.zeros((6, 1, 4), np.int64),
                        (4, 4), *geo, channels=4)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("case", [
    (11, 12, 31, 31, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),   # blocks of 8 + 3 planes
    (8, 40, 20, 21, (3, 3), (2, 2), ((2, 2), (2, 2)), (1, 1)),    # dilated, odd row length
])
def test_big_channel_first_unfold_streams_the_same_columns(case, dt):
    """Columns of 4 MiB or more are built per block and written with streaming stores
    (whole 64-byte lines; the unaligned ends by memcpy): still exactly the primitive's."""
    n, c, h, w, k, d, p, s = case
    x = np.random.default_rng(5).standard_normal((n, c, h, w)).astype(dt)
    ref = _unfold_kernel(np, x, k, d, p, s, -7.5)
    assert ref.nbytes >= 4 << 20
    want = ref.transpose(1, 0, 2).reshape(ref.shape[1], -1)
    out = np.full(want.shape, np.nan, dt)
    assert ck.unfold(x, k, d, p, s, -7.5, out=out, channel_first=True) is out
    np.testing.assert_array_equal(out, want)
    # misaligned output (not on a 64-byte line): the same values
    buf = np.full(want.size + 3, np.nan, dt)
    mis = buf[3:].reshape(want.shape)
    ck.unfold(x, k, d, p, s, -7.5, out=mis, channel_first=True)
    np.testing.assert_array_equal(mis, want)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("channel_first", [False, True])
def test_fold_ignores_whatever_the_padding_columns_hold(dt, channel_first):
    """A "same" fold adds each tap as one contiguous run, the padding columns masked to +0:
    NaN and inf there must not reach the image (nor -0 turn a +0 sum negative)."""
    n, c, h, w = 3, 4, 9, 8
    geo = ((3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))
    rng = np.random.default_rng(6)
    inside = _unfold_kernel(np, np.ones((n, c, h, w), dt), *geo, 0.0) != 0
    cols = rng.standard_normal(inside.shape).astype(dt)
    clean = np.where(inside, cols, 0).astype(dt)
    cols[~inside] = np.array([np.nan, np.inf, -np.inf, -0.0], dt)[
        np.arange((~inside).sum()) % 4]
    want = _fold_kernel(np, clean, (h, w), *geo)
    if channel_first:
        flat = lambda a: np.ascontiguousarray(a.transpose(1, 0, 2)).reshape(a.shape[1], -1)
        got = ck.fold(flat(cols), (h, w), *geo, batch=n)
    else:
        got = ck.fold(cols, (h, w), *geo)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=9 * _eps(dt), atol=9 * _eps(dt) * 4)
