"""Issue 17 nn breadth: Upsample/interpolate, padding modules, PixelShuffle, Fold/Unfold,
distances, ChannelShuffle, LocalResponseNorm, RReLU — forward vs PyTorch (when installed),
float64 gradcheck, and clear errors."""
import numpy as np
import pytest

import ember as em
import ember.nn as nn
import ember.nn.functional as F
from ember.autograd import gradcheck

RNG = np.random.default_rng(17)


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def _arr(*shape):
    return RNG.standard_normal(shape)


def _pair(torch, a, grad=False):
    return (em.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad))


def _same(got, want, rtol=1e-10, atol=1e-12):
    want = want.detach().numpy()
    got = got.detach().numpy()
    assert got.shape == want.shape, f"shape {got.shape} vs {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _module_parity(torch, name, args, kwargs, *arrays):
    ours = getattr(nn, name)(*args, **kwargs)
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    xs = [em.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = ours(*xs), theirs(*ts)
    _same(out, ref)
    g = RNG.standard_normal(tuple(ref.shape))
    out.backward(em.tensor(g))
    ref.backward(torch.tensor(g))
    for x, t in zip(xs, ts):
        _same(x.grad, t.grad)


# ------------------------------------------------------------------ interpolate / Upsample
UPSAMPLE_CASES = [
    ("Upsample", (), dict(scale_factor=2, mode="nearest"), (2, 3, 5)),
    ("Upsample", (), dict(scale_factor=1.7, mode="nearest"), (1, 2, 3, 4)),
    ("Upsample", (), dict(size=(5, 7), mode="nearest-exact"), (1, 2, 3, 4)),
    ("Upsample", (), dict(scale_factor=0.6, mode="nearest-exact"), (1, 2, 7, 6)),
    ("Upsample", (), dict(scale_factor=2.5, mode="linear"), (2, 3, 4)),
    ("Upsample", (), dict(size=7, mode="linear", align_corners=True), (2, 3, 4)),
    ("Upsample", (), dict(scale_factor=(1.5, 2.2), mode="bilinear"), (1, 2, 3, 4)),
    ("Upsample", (), dict(scale_factor=(1.5, 2.2), mode="bilinear",
                          recompute_scale_factor=True), (1, 2, 3, 4)),
    ("Upsample", (), dict(size=(2, 3), mode="bilinear", align_corners=True), (1, 2, 5, 6)),
    ("Upsample", (), dict(scale_factor=(2, 1.5, 1.3), mode="trilinear"), (1, 2, 2, 3, 4)),
    ("Upsample", (), dict(size=(3, 4, 2), mode="trilinear", align_corners=True),
     (1, 1, 2, 3, 4)),
    ("Upsample", (), dict(scale_factor=1.5, mode="bicubic"), (1, 2, 3, 4)),
    ("UpsamplingNearest2d", (), dict(scale_factor=3), (1, 2, 2, 3)),
    ("UpsamplingBilinear2d", (), dict(size=(5, 4)), (2, 1, 3, 3)),
    ("UpsamplingBilinear2d", (), dict(scale_factor=2), (1, 2, 3, 2)),
]


@pytest.mark.parametrize("name,args,kwargs,shape", UPSAMPLE_CASES)
def test_upsample_matches_torch(torch, name, args, kwargs, shape):
    _module_parity(torch, name, args, kwargs, _arr(*shape))


@pytest.mark.parametrize("mode,kw", [("nearest", {}), ("bilinear", {}),
                                      ("bilinear", {"align_corners": True})])
def test_interpolate_gradcheck(mode, kw):
    x = em.tensor(_arr(1, 2, 3, 4), requires_grad=True)
    assert gradcheck(lambda t: F.interpolate(t, scale_factor=(1.5, 2), mode=mode, **kw), (x,))


INTERP_CASES = [
    # regression: ATen's 2-D nearest kernel copies a kept dim and halves indices of a doubled
    # one whatever scale_factor says (Ember applied 1/scale_factor and picked other rows)
    ((2, 3, 3, 5), dict(scale_factor=(1.11, 2.3), mode="nearest")),
    ((1, 2, 2, 6), dict(scale_factor=(1.41, 0.33), mode="nearest")),
    ((1, 2, 2, 3), dict(scale_factor=(2.3, 1.2), mode="nearest")),
    ((2, 2, 3, 4), dict(scale_factor=1.11, mode="nearest")),
    ((2, 3, 4), dict(scale_factor=1.11, mode="nearest")),             # 1-D: no shortcut
    ((1, 2, 3, 2, 2), dict(scale_factor=(1.11, 2.3, 1.2), mode="nearest")),  # 3-D: none
    # regression: linear modes copy a dim whose size is unchanged (ATen's
    # compute_source_index_and_lambda), Ember interpolated it by 1/scale_factor
    ((1, 2, 3, 1, 4), dict(scale_factor=(1.11, 2.52, 1.7), mode="trilinear")),
    ((2, 1, 3, 5), dict(scale_factor=(1.2, 1.5), mode="bilinear")),
    ((2, 3, 4), dict(scale_factor=1.1, mode="linear")),
    # bicubic (was NotImplementedError): border taps, align_corners, downscaling
    ((2, 2, 2, 3), dict(size=(4, 8), mode="bicubic")),
    ((2, 2, 5, 2), dict(scale_factor=(1.05, 1.08), mode="bicubic")),
    ((1, 2, 6, 6), dict(scale_factor=(3.19, 0.54), mode="bicubic")),
    ((1, 3, 4, 5), dict(size=(7, 3), mode="bicubic", align_corners=True)),
    ((1, 2, 4, 4), dict(scale_factor=(1.48, 0.54), mode="bicubic",
                        recompute_scale_factor=True)),
    # antialias=True (was NotImplementedError): widened filters when downscaling
    ((2, 2, 9, 7), dict(size=(4, 3), mode="bilinear", antialias=True)),
    ((1, 2, 6, 10), dict(scale_factor=(0.45, 1.6), mode="bilinear", antialias=True)),
    ((1, 2, 6, 10), dict(scale_factor=(1.1, 0.5), mode="bilinear", antialias=True)),
    ((2, 1, 8, 5), dict(size=(3, 4), mode="bilinear", antialias=True, align_corners=True)),
    ((1, 2, 11, 6), dict(size=(4, 9), mode="bicubic", antialias=True)),
    ((1, 2, 7, 9), dict(scale_factor=(0.6, 0.3), mode="bicubic", antialias=True,
                        align_corners=True)),
    # regression: mode="area" on 5-D input raised NotImplementedError
    ((2, 2, 5, 4, 6), dict(size=(3, 5, 2), mode="area")),
    ((1, 2, 6, 3, 5), dict(scale_factor=(0.5, 1.7, 0.8), mode="area")),
]


@pytest.mark.parametrize("shape,kwargs", INTERP_CASES)
def test_interpolate_scale_factor_matches_torch(torch, shape, kwargs):
    for dt in (np.float64, np.float32):
        a = _arr(*shape).astype(dt)
        x, t = _pair(torch, a, grad=dt is np.float64)
        # NOTE: float32 bound: Ember sums the separable taps in another order than ATen (up
        # to 16 terms of |w| <= 1.25 on O(1) data: ~16 * 1.25 * 4 * 2**-24 ~ 5e-6)
        tol = dict(rtol=1e-10, atol=1e-12) if dt is np.float64 else dict(rtol=1e-5, atol=5e-6)
        _same(F.interpolate(x, **kwargs), torch.nn.functional.interpolate(t, **kwargs), **tol)


def test_interpolate_area3d_and_trilinear_gradcheck():
    x = em.tensor(_arr(1, 2, 4, 3, 5), requires_grad=True)
    assert gradcheck(lambda t: F.interpolate(t, size=(3, 2, 4), mode="area"), (x,))
    assert gradcheck(lambda t: F.interpolate(t, scale_factor=(1, 1.5, 0.8),
                                             mode="trilinear"), (x,))


@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_bicubic_gradcheck(align_corners):
    x = em.tensor(_arr(1, 2, 3, 4), requires_grad=True)
    assert gradcheck(lambda t: F.interpolate(t, size=(5, 3), mode="bicubic",
                                             align_corners=align_corners), (x,))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_antialias_gradcheck(mode):
    x = em.tensor(_arr(1, 2, 7, 5), requires_grad=True)
    assert gradcheck(lambda t: F.interpolate(t, size=(3, 4), mode=mode, antialias=True), (x,))


@pytest.mark.parametrize("shape,size", [((1, 2, 7, 1), (9, 1)), ((2, 1, 3, 4), (5, 9))])
def test_interpolate_antialias_upscaling_is_plain_bilinear(shape, size):
    # NOTE: upscaling never widens the filter, so antialias changes nothing. PyTorch 2.13
    # breaks this when the output width is 1 (every row comes out equal); Ember does not.
    x = em.tensor(_arr(*shape))
    _same(F.interpolate(x, size=size, mode="bilinear", antialias=True),
          F.interpolate(x, size=size, mode="bilinear"), rtol=1e-12, atol=1e-14)


def test_upsample_errors():
    # regression: recompute_scale_factor=True with an explicit size was silently accepted
    with pytest.raises(ValueError, match="interpolate: recompute_scale_factor is not "
                                         "meaningful with an explicit size \\(size=2\\)"):
        F.interpolate(em.ones(1, 1, 4, 4), size=2, recompute_scale_factor=True)
    with pytest.raises(ValueError, match="anti-alias option is restricted to bilinear and "
                                         "bicubic.*mode='nearest'"):
        F.interpolate(em.ones(1, 1, 4, 4), size=2, antialias=True)
    with pytest.raises(ValueError, match="interpolate: mode='bicubic' expects a 4-D input, "
                                         "got shape \\(1, 2, 3\\)"):
        nn.Upsample(scale_factor=2, mode="bicubic")(em.ones(1, 2, 3))
    with pytest.raises(ValueError, match="interpolate: .*bilinear.*4-D.*\\(1, 2, 3\\)"):
        nn.Upsample(scale_factor=2, mode="bilinear")(em.ones(1, 2, 3))
    with pytest.raises(ValueError, match="exactly one of size or scale_factor"):
        nn.Upsample()(em.ones(1, 2, 3))
    with pytest.raises(ValueError, match="align_corners"):
        nn.Upsample(scale_factor=2, mode="nearest", align_corners=True)(em.ones(1, 2, 3))


# ------------------------------------------------------------------ padding modules
PAD_CASES = [
    ("ZeroPad1d", ((1, 2),), {}, (2, 3, 4)),
    ("ZeroPad2d", (1,), {}, (2, 3, 4)),
    ("ZeroPad2d", ((1, 0, 2, -1),), {}, (1, 2, 3, 4)),
    ("ZeroPad3d", ((1, 0, 2, 1, 0, 1),), {}, (1, 2, 2, 3, 4)),
    ("ConstantPad1d", (2, 3.5), {}, (2, 4)),
    ("ConstantPad2d", ((1, 2, 0, 1), -1.0), {}, (1, 2, 3, 4)),
    ("ConstantPad3d", (1, 0.25), {}, (2, 2, 3, 4)),
    ("ReflectionPad1d", ((3, 1),), {}, (2, 3, 5)),
    ("ReflectionPad1d", (2,), {}, (3, 4)),
    ("ReflectionPad2d", ((1, 2, 2, 0),), {}, (1, 2, 3, 4)),
    ("ReflectionPad2d", (1,), {}, (2, 3, 4)),
    ("ReflectionPad3d", ((1, 0, 2, 1, 1, 1),), {}, (1, 2, 2, 3, 4)),
    ("ReplicationPad1d", ((3, 1),), {}, (2, 3, 2)),
    ("ReplicationPad2d", ((1, 4, 2, 0),), {}, (1, 2, 3, 4)),
    ("ReplicationPad3d", (2,), {}, (2, 2, 3, 4)),
    ("CircularPad1d", ((3, 1),), {}, (2, 3, 4)),
    ("CircularPad2d", ((1, 2, 2, 0),), {}, (1, 2, 3, 4)),
    ("CircularPad3d", ((1, 0, 2, 1, 1, 1),), {}, (1, 2, 2, 3, 4)),
]


@pytest.mark.parametrize("name,args,kwargs,shape", PAD_CASES)
def test_padding_matches_torch(torch, name, args, kwargs, shape):
    _module_parity(torch, name, args, kwargs, _arr(*shape))


@pytest.mark.parametrize("name", ["ReflectionPad2d", "ReplicationPad2d", "CircularPad2d",
                                  "ConstantPad2d"])
def test_padding_gradcheck(name):
    args = ((1, 2, 2, 1), 0.5) if name == "ConstantPad2d" else ((1, 2, 2, 1),)
    m = getattr(nn, name)(*args)
    assert gradcheck(m, (em.tensor(_arr(1, 2, 3, 4), requires_grad=True),))


def test_padding_errors():
    with pytest.raises(ValueError, match="ReflectionPad2d: padding must be an int or a tuple "
                                         "of 4 ints, got \\(1, 2\\)"):
        nn.ReflectionPad2d((1, 2))
    with pytest.raises(ValueError, match="CircularPad2d: expected 3D or 4D input, got shape "
                                         "\\(1, 1, 1, 2, 2\\)"):
        nn.CircularPad2d(1)(em.ones(1, 1, 1, 2, 2))
    with pytest.raises(ValueError, match="padding size should be less than"):
        nn.ReflectionPad1d(3)(em.ones(1, 1, 3))
    assert repr(nn.ConstantPad1d(2, 1.5)) == "ConstantPad1d(padding=(2, 2), value=1.5)"
    assert repr(nn.ZeroPad2d(1)) == "ZeroPad2d(padding=(1, 1, 1, 1))"


# ------------------------------------------------------------------ shuffles, fold, distances
MISC_CASES = [
    ("PixelShuffle", (2,), {}, [(2, 8, 3, 2)]),
    ("PixelShuffle", (3,), {}, [(2, 1, 9, 2, 2)]),
    ("PixelUnshuffle", (2,), {}, [(2, 3, 4, 6)]),
    ("ChannelShuffle", (2,), {}, [(2, 4, 3)]),
    ("ChannelShuffle", (3,), {}, [(1, 6, 2, 2)]),
    ("Unfold", (2,), dict(dilation=1, padding=1, stride=2), [(2, 3, 5, 4)]),
    ("Unfold", ((2, 3),), dict(dilation=(2, 1)), [(1, 2, 5, 6)]),
    ("Fold", ((4, 5), 2), {}, [(2, 12, 12)]),
    ("Fold", ((5, 5), (2, 3)), dict(padding=1, stride=2), [(1, 6, 9)]),
    ("CosineSimilarity", (), {}, [(4, 5), (4, 5)]),
    ("CosineSimilarity", (), dict(dim=-1, eps=1e-6), [(3, 1, 5), (2, 5)]),
    ("PairwiseDistance", (), {}, [(4, 5), (4, 5)]),
    ("PairwiseDistance", (), dict(p=1.0, keepdim=True), [(4, 5), (1, 5)]),
    ("PairwiseDistance", (), dict(p=3.0, eps=1e-3), [(4, 5), (4, 5)]),
    ("LocalResponseNorm", (2,), {}, [(2, 5, 3)]),
    ("LocalResponseNorm", (3,), dict(alpha=0.3, beta=0.6, k=2.0), [(2, 6, 3, 4)]),
    ("LocalResponseNorm", (4,), dict(alpha=0.5), [(1, 5, 2, 3, 2)]),
]


@pytest.mark.parametrize("name,args,kwargs,shapes", MISC_CASES)
def test_misc_layers_match_torch(torch, name, args, kwargs, shapes):
    _module_parity(torch, name, args, kwargs, *[_arr(*s) for s in shapes])


@pytest.mark.parametrize("name,args,shapes", [
    ("PixelShuffle", (2,), [(1, 4, 2, 3)]), ("PixelUnshuffle", (2,), [(1, 1, 4, 2)]),
    ("ChannelShuffle", (2,), [(1, 4, 3)]), ("Fold", ((3, 4), 2), [(1, 8, 6)]),
    ("Unfold", (2,), [(1, 2, 3, 3)]), ("CosineSimilarity", (), [(3, 4), (3, 4)]),
    ("PairwiseDistance", (), [(3, 4), (3, 4)]),
    ("LocalResponseNorm", (3, 0.5, 0.75, 1.0), [(2, 4, 3)]),
])
def test_misc_layers_gradcheck(name, args, shapes):
    m = getattr(nn, name)(*args)
    xs = tuple(em.tensor(_arr(*s), requires_grad=True) for s in shapes)
    assert gradcheck(m, xs)


def test_misc_layer_errors():
    with pytest.raises(ValueError, match="channel_shuffle: groups must .* dividing the 5 "
                                         "channels of input \\(1, 5, 2\\), got 2"):
        nn.ChannelShuffle(2)(em.ones(1, 5, 2))
    with pytest.raises(ValueError, match="channel_shuffle: .*\\(N, C, \\*\\).*\\(4, 2\\)"):
        nn.ChannelShuffle(2)(em.ones(4, 2))
    with pytest.raises(ValueError, match="local_response_norm: expected 3D .* \\(2, 3\\)"):
        nn.LocalResponseNorm(2)(em.ones(2, 3))
    with pytest.raises(ValueError, match="pixel_shuffle: .*\\(1, 3, 2, 2\\)"):
        nn.PixelShuffle(2)(em.ones(1, 3, 2, 2))
    with pytest.raises(ValueError, match="fold: input of shape \\(1, 8, 5\\)"):
        nn.Fold((3, 4), 2)(em.ones(1, 8, 5))


# ------------------------------------------------------------------ RReLU
def test_rrelu_eval_matches_torch(torch):
    for lo, hi in [(0.1, 0.4), (1 / 8, 1 / 3)]:
        m, tm = nn.RReLU(lo, hi).eval(), torch.nn.RReLU(lo, hi).eval()
        x, t = _pair(torch, _arr(3, 4), grad=True)
        _same(m(x), tm(t))
        m(x).sum().backward()
        tm(t).sum().backward()
        _same(x.grad, t.grad)


def test_rrelu_training_draws_slopes_in_range():
    a = -np.abs(_arr(2000)) - 0.1
    m = nn.RReLU(0.2, 0.3)
    x = em.tensor(a, requires_grad=True)
    y = m(x)
    slope = y.detach().numpy() / a
    assert slope.min() >= 0.2 and slope.max() <= 0.3 and slope.std() > 0.02
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), slope, rtol=1e-12)
    pos = em.tensor(np.abs(_arr(50)))
    np.testing.assert_array_equal(m(pos).numpy(), pos.numpy())


def test_rrelu_gradcheck_and_errors():
    m = nn.RReLU().eval()
    assert gradcheck(m, (em.tensor(_arr(3, 4) + 0.05, requires_grad=True),))
    with pytest.raises(ValueError, match="rrelu: lower bound .* lower=0.5, upper=0.1"):
        F.rrelu(em.ones(2), 0.5, 0.1)
    x = em.tensor(np.array([-1.0, 2.0]))
    assert F.rrelu_(x) is x and x.numpy()[0] == pytest.approx(-(1 / 8 + 1 / 3) / 2)
    assert repr(nn.RReLU(inplace=True)) == \
        "RReLU(lower=0.125, upper=0.3333333333333333, inplace=True)"


# ------------------------------------------------------------------ ember.compile
def test_new_layers_compile_like_eager():
    em.manual_seed(0)
    m = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(2, 8, 3), nn.PixelShuffle(2),
                      nn.Upsample(scale_factor=1.5, mode="bicubic"), nn.LocalResponseNorm(2),
                      nn.ChannelShuffle(2), nn.CircularPad2d((1, 0, 0, 1)),
                      nn.Upsample(size=(5, 7), mode="bilinear")).double()
    x = em.tensor(_arr(2, 2, 4, 4))
    ref = m(x)
    ref.sum().backward()
    g_ref = m[1].weight.grad.numpy().copy()
    cm = em.compile(m)
    for _ in range(2):
        m.zero_grad()
        out = cm(x)
        out.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(m[1].weight.grad.numpy(), g_ref, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ pdist
@pytest.mark.parametrize("shape,p", [((5, 3), 2.0), ((4, 6), 1.0), ((3, 2), 3.0),
                                     ((6, 4), float("inf")), ((1, 3), 2.0)])
def test_pdist_matches_torch(torch, shape, p):
    x, t = _pair(torch, _arr(*shape), grad=True)
    out, ref = F.pdist(x, p), torch.nn.functional.pdist(t, p)
    _same(out, ref)
    if ref.numel():
        g = _arr(*ref.shape)
        out.backward(em.tensor(g))
        ref.backward(torch.tensor(g))
        _same(x.grad, t.grad)


def test_pdist_gradcheck_and_errors():
    assert gradcheck(lambda t: F.pdist(t, 2.0), (em.tensor(_arr(4, 3), requires_grad=True),))
    with pytest.raises(ValueError, match="pdist: only supports 2D tensors, got shape "
                                         "\\(2, 3, 4\\)"):
        F.pdist(em.ones(2, 3, 4))
    with pytest.raises(ValueError, match="pdist: .*non-negative p.*p=-1"):
        F.pdist(em.ones(2, 3), -1)


NEW_MODULES = [c[0] for c in UPSAMPLE_CASES + PAD_CASES + MISC_CASES] + ["RReLU"]


@pytest.mark.parametrize("name", sorted(set(NEW_MODULES)))
def test_new_modules_live_where_pytorch_keeps_them(torch, name):
    ours, theirs = getattr(nn, name), getattr(torch.nn, name)
    assert ours.__module__.replace("ember.", "torch.", 1) == theirs.__module__
