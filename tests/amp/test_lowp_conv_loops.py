"""The 16-bit C loops of :mod:`ember.codegen.conv_kernels`: ``fold``, ``maxpool`` (with and
without the bias + relu prologue) and an overlapping ``maxpool_grad`` convert each
float16/bfloat16 element as they load it and round once as they store — bit for bit the
float32 loop on the exactly converted operand, rounded once (NumPy's/ml_dtypes' rounding,
NaN payloads included) — and never convert a whole operand.

Covers inf/NaN/denormal values (a NaN row of the 2x2 pool takes the exact path), the
"same"-convolution fold (one contiguous add per tap), channel-first layouts, blocks of
planes larger than one block, non-contiguous inputs and zero-size dims.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import conv_kernels as ck
from ember.codegen import convert_kernels
from tests.graph._kernels import needs_compiler

LOWP = [em.bfloat16, em.float16]
_need_compiler = needs_compiler("no conv kernels without a compiler")
# (kernel, dilation, padding, stride): 2x2 tiling, "same" 3x3 (EMBER_FLAT), overlapping
GEOMS = [((2, 2), (1, 1), ((0, 0), (0, 0)), (2, 2)),
         ((3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
         ((3, 2), (1, 2), ((1, 1), (0, 1)), (2, 1))]
SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -3e-39, 6e-8, 65504.0]


@pytest.fixture(autouse=True)
def _no_whole_operand_conversions(_need_compiler, monkeypatch):
    """The 16-bit loops convert as they load: a call into the conversion kernels fails."""
    assert ck.kernels() is not None

    def refuse(*a, **k):
        raise AssertionError("conv_kernels converted a whole operand")
    monkeypatch.setattr(convert_kernels, "convert", refuse)


def _x(shape, dt, seed=0, specials=True):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    a.flat[::7] = 0.25                                   # ties: the first maximum wins
    if specials and a.size:
        idx = np.random.default_rng(seed + 100).choice(a.size, min(a.size, 40), replace=False)
        a.flat[idx] = np.resize(np.array(SPECIALS, np.float32), idx.size)
    x = a.astype(dt.np)
    if a.size:                                           # a signalling-NaN payload
        x.view(np.uint16).flat[3] = 0x7F81 if dt is em.bfloat16 else 0x7C01
    return x


def _eq(got, want, nan_bits=True):
    """Bitwise; ``nan_bits=False``: a NaN only has to be a NaN (loops that copy bits keep
    a payload the float32 round trip quiets)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if not nan_bits:
        g32, w32 = got.astype(np.float32), want.astype(np.float32)
        np.testing.assert_array_equal(np.isnan(g32), np.isnan(w32))
        got, want = got[~np.isnan(w32)], want[~np.isnan(w32)]
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def _ref(fn, *arrays, dt):
    """The float32 loop on exactly converted operands, rounded once by NumPy."""
    with np.errstate(invalid="ignore", over="ignore"):
        r = fn(*[a.astype(np.float32) if a.dtype == dt.np else a for a in arrays])
        if isinstance(r, tuple):
            return (r[0].astype(dt.np),) + r[1:]
        return r.astype(dt.np)


@pytest.mark.parametrize("dt", LOWP)
@pytest.mark.parametrize("geom", GEOMS)
@pytest.mark.parametrize("cf", [False, True])
def test_fold_sums_in_float32_rounds_once(dt, geom, cf):
    n, c, h, w = 3, 5, 9, 8
    k = geom[0][0] * geom[0][1]
    oh = ck.blocks(h, geom[0][0], geom[1][0], geom[2][0], geom[3][0])
    ow = ck.blocks(w, geom[0][1], geom[1][1], geom[2][1], geom[3][1])
    shape = (c * k, n * oh * ow) if cf else (n, c * k, oh * ow)
    cols = _x(shape, dt, 1)
    fold = lambda a: ck.fold(a, (h, w), *geom, batch=n if cf else None)  # noqa: E731
    _eq(fold(cols), _ref(fold, cols, dt=dt))
    out = np.empty((n, c, h, w), dt.np)
    assert ck.fold(cols, (h, w), *geom, batch=n if cf else None, out=out) is out
    _eq(out, _ref(fold, cols, dt=dt))


@pytest.mark.parametrize("dt", LOWP)
@pytest.mark.parametrize("geom", GEOMS)
@pytest.mark.parametrize("cf", [False, True])
def test_maxpool_and_grad_equal_float32_with_nan_inf_denormals(dt, geom, cf):
    n, c, h, w = 2, 3, 10, 8
    planes = _x((n * c, 1, h, w), dt)
    chans = c if cf else None
    pool = lambda a: ck.maxpool(a, *geom, float("-inf"), channels=chans)  # noqa: E731
    vals, arg = pool(planes)
    v32, a32 = _ref(pool, planes, dt=dt)
    _eq(vals, v32)
    np.testing.assert_array_equal(arg, a32)
    g = _x(vals.shape, dt, 2)
    grad = lambda gg, aa: ck.maxpool_grad(gg, aa, (h, w), *geom, channels=chans)  # noqa: E731
    _eq(grad(g, arg), _ref(grad, g, arg, dt=dt), nan_bits=geom is not GEOMS[0])


@pytest.mark.parametrize("dt", LOWP)
@pytest.mark.parametrize("geom", GEOMS)
def test_bias_relu_prologue_with_nan_inf(dt, geom):
    n, c, h, w = 2, 3, 8, 8
    x = _x((n * c, 1, h, w), dt, 5)
    bias = np.array([2.0, -np.inf, 1e-40], dt.np)
    vals, arg = ck.maxpool(x, *geom, float("-inf"), bias=bias)
    x32 = x.astype(np.float32).reshape(n, c, h, w)
    with np.errstate(invalid="ignore"):
        act = (x32 + bias.astype(np.float32).reshape(1, c, 1, 1)).astype(dt.np)
    act = act.astype(np.float32)
    act = np.where(act < 0, 0, act) + 0                  # relu: NaN passes, -0 -> +0
    v32, a32 = ck.maxpool(act.reshape(n * c, 1, h, w), *geom, float("-inf"))
    _eq(vals, v32.astype(dt.np))
    np.testing.assert_array_equal(arg, a32)


@pytest.mark.parametrize("dt", LOWP)
def test_many_planes_span_blocks_and_threads(dt, monkeypatch):
    """Channel-first fold over more planes than one block (and the pool's threads)."""
    monkeypatch.setenv("EMBER_NUM_THREADS", "2")
    n, c, h, w = 16, 40, 16, 16
    geom = GEOMS[1]
    cols = _x((c * 9, n * h * w), dt, 3, specials=False)
    fold = lambda a: ck.fold(a, (h, w), *geom, batch=n)  # noqa: E731
    _eq(fold(cols), _ref(fold, cols, dt=dt))
    planes = _x((n * c, 1, 2 * h, 2 * w), dt, 4)
    pool = lambda a: ck.maxpool(a, *GEOMS[0], float("-inf"), channels=c)  # noqa: E731
    got, want = pool(planes), _ref(pool, planes, dt=dt)
    _eq(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("dt", LOWP)
def test_non_contiguous_and_zero_size(dt):
    view = _x((4, 6, 11, 9), dt, 6)[::2, 1::2, 1:, ::-1]          # (2, 3, 10, 9)
    assert not view.flags.c_contiguous
    pool = lambda a: ck.maxpool(a, *GEOMS[2], float("-inf"))  # noqa: E731
    vals, arg = pool(view)
    v32, a32 = _ref(pool, np.ascontiguousarray(view), dt=dt)
    _eq(vals, v32)
    np.testing.assert_array_equal(arg, a32)
    cols = _x((2, 24, 20), dt, 7)[:, ::2]                        # (2, 12, 20), strided
    fold = lambda a: ck.fold(a, (11, 9), *GEOMS[0])  # noqa: E731
    _eq(fold(cols), _ref(fold, np.ascontiguousarray(cols), dt=dt))
    for shape in [(0, 1, 6, 6), (3, 1, 0, 6)]:
        v, a = ck.maxpool(np.zeros(shape, dt.np), *GEOMS[0], float("-inf"))
        assert v.dtype == dt.np and v.size == 0 and a.size == 0
    z = ck.fold(np.zeros((0, 8, 9), dt.np), (6, 6), *GEOMS[0])
    assert z.shape == (0, 2, 6, 6) and z.dtype == dt.np
    g = ck.maxpool_grad(np.zeros((0, 1, 9), dt.np), np.zeros((0, 1, 9), np.int64), (6, 6),
                        *GEOMS[2])
    assert g.shape == (0, 1, 6, 6) and g.dtype == dt.np
