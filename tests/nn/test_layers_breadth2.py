"""Issue 17 nn breadth, part 2: affine_grid/grid_sample, EmbeddingBag, MaxUnpool, LPPool —
forward and gradients vs PyTorch (when installed), float64 gradcheck, and clear errors."""
import numpy as np
import pytest

import ember as em
import ember.nn as nn
import ember.nn.functional as F
from ember.autograd import gradcheck

RNG = np.random.default_rng(1717)


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def _arr(*shape):
    return RNG.standard_normal(shape)


def _np(t):
    return np.zeros(()) if t is None else t.detach().numpy()


def _same(got, want, rtol=1e-10, atol=1e-12):
    got, want = _np(got), _np(want)
    if want.ndim:
        got = np.broadcast_to(got, want.shape)     # a None gradient counts as zeros
    assert got.shape == want.shape, f"shape {got.shape} vs {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _same_then_backward(torch, out, ref):
    """Check ``out`` against ``ref``, then back-propagate one random gradient through both."""
    _same(out, ref)
    g = _arr(*ref.shape)
    out.backward(em.tensor(g))
    ref.backward(torch.tensor(g))


def _module_matches(torch, ours, theirs, x, grad_atol=1e-12):
    """Run ``x`` through both modules; outputs and input gradients must agree.

    Returns:
        The (ember, torch) inputs, for further checks.
    """
    a, t = em.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    _same_then_backward(torch, ours(a), theirs(t))
    _same(a.grad, t.grad, rtol=1e-10, atol=grad_atol)
    return a, t


def _copy_params(ours, theirs):
    """Give ``ours`` the weight (and bias) of the torch module ``theirs``."""
    with em.no_grad():
        ours.weight.copy_(em.tensor(theirs.weight.detach().numpy()))
        if ours.bias is not None:
            ours.bias.copy_(em.tensor(theirs.bias.detach().numpy()))


# ------------------------------------------------------------------ affine_grid / grid_sample
@pytest.mark.parametrize("spatial", [(4, 5), (3, 4, 5), (1, 3)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_matches_torch(torch, spatial, align_corners):
    nd = len(spatial)
    th = _arr(2, nd, nd + 1)
    size = (2, 3) + spatial
    a, t = em.tensor(th, requires_grad=True), torch.tensor(th, requires_grad=True)
    out = F.affine_grid(a, size, align_corners=align_corners)
    ref = torch.nn.functional.affine_grid(t, size, align_corners=align_corners)
    _same_then_backward(torch, out, ref)
    _same(a.grad, t.grad)


# PyTorch's bicubic grid_sample is 4-D only (its error is tested below)
@pytest.mark.parametrize("nd, mode", [(2, "bilinear"), (2, "nearest"), (2, "bicubic"),
                                      (3, "bilinear"), (3, "nearest")])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_matches_torch(torch, nd, mode, padding_mode, align_corners):
    sp = (4, 5) if nd == 2 else (3, 4, 5)
    x = _arr(2, 3, *sp)
    grid = RNG.uniform(-1.6, 1.6, (2,) + (3,) * nd + (nd,))   # some samples fall outside
    a, b = em.tensor(x, requires_grad=True), em.tensor(grid, requires_grad=True)
    ta, tb = torch.tensor(x, requires_grad=True), torch.tensor(grid, requires_grad=True)
    out = F.grid_sample(a, b, mode, padding_mode, align_corners)
    ref = torch.nn.functional.grid_sample(ta, tb, mode, padding_mode, align_corners)
    _same_then_backward(torch, out, ref)
    _same(a.grad, ta.grad)
    _same(b.grad, tb.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_gradcheck(mode, padding_mode):
    x = em.tensor(_arr(1, 2, 3, 4), requires_grad=True)
    grid = em.tensor(RNG.uniform(-1.3, 1.3, (1, 2, 3, 2)), requires_grad=True)
    assert gradcheck(lambda a, b: F.grid_sample(a, b, mode=mode, padding_mode=padding_mode,
                                                align_corners=False), (x, grid))


def test_affine_grid_then_grid_sample_gradcheck():
    x = em.tensor(_arr(2, 1, 4, 4), requires_grad=True)
    theta = em.tensor(np.array([[[0.9, 0.1, 0.05], [-0.2, 1.1, 0.1]]] * 2) + 0.01 * _arr(2, 2, 3),
                      requires_grad=True)
    assert gradcheck(lambda a, th: F.grid_sample(a, F.affine_grid(th, (2, 1, 3, 3), False),
                                                 align_corners=False), (x, theta))


def test_grid_sample_identity_affine_is_identity():
    x = em.tensor(_arr(1, 2, 5, 6))
    theta = em.tensor(np.array([[[1.0, 0, 0], [0, 1.0, 0]]]))
    grid = F.affine_grid(theta, (1, 2, 5, 6), align_corners=False)
    np.testing.assert_allclose(F.grid_sample(x, grid, align_corners=False).numpy(), x.numpy(),
                               rtol=1e-12, atol=1e-12)


def test_grid_sample_bad_input():
    x = em.zeros(1, 2, 4, 4)
    with pytest.raises(ValueError, match="grid_sample: mode must be one of"):
        F.grid_sample(x, em.zeros(1, 3, 3, 2), mode="area")
    with pytest.raises(ValueError, match="grid_sample: mode='bicubic' supports only 4-D input"):
        F.grid_sample(em.zeros(1, 1, 2, 2, 2), em.zeros(1, 1, 1, 1, 3), mode="bicubic")
    with pytest.raises(ValueError, match="grid_sample: padding_mode must be one of"):
        F.grid_sample(x, em.zeros(1, 3, 3, 2), padding_mode="wrap")
    with pytest.raises(ValueError, match=r"grid_sample: grid must be \(N, \*out, 2\)"):
        F.grid_sample(x, em.zeros(1, 3, 3, 3))
    with pytest.raises(ValueError, match="grid_sample: expected a 4-D input with a 4-D grid"):
        F.grid_sample(x, em.zeros(1, 3, 3, 3, 3))
    with pytest.raises(ValueError, match=r"affine_grid: expected theta of shape \(1, 2, 3\)"):
        F.affine_grid(em.zeros(1, 3, 4), (1, 2, 4, 4))


# ------------------------------------------------------------------ EmbeddingBag
BAG_INPUTS = [
    ("2d", RNG.integers(0, 10, (3, 4)), None, False),
    ("offsets", RNG.integers(0, 10, (9,)), [0, 2, 2, 7], False),       # an empty bag
    ("last_offset", RNG.integers(0, 10, (9,)), [0, 2, 2, 7, 9], True),
]


@pytest.mark.parametrize("case", BAG_INPUTS, ids=[c[0] for c in BAG_INPUTS])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding", [False, True])
def test_embedding_bag_matches_torch(torch, case, mode, padding):
    _, idx, off, last = case
    weight = _arr(10, 4)
    pad = int(idx.reshape(-1)[0]) if padding else None
    kw = dict(mode=mode, include_last_offset=last, padding_idx=pad)
    w, tw = em.tensor(weight, requires_grad=True), torch.tensor(weight, requires_grad=True)
    out = F.embedding_bag(em.tensor(idx), w, None if off is None else em.tensor(off), **kw)
    ref = torch.nn.functional.embedding_bag(torch.tensor(idx), tw,
                                            None if off is None else torch.tensor(off), **kw)
    _same_then_backward(torch, out, ref)
    _same(w.grad, tw.grad)


@pytest.mark.parametrize("case", BAG_INPUTS, ids=[c[0] for c in BAG_INPUTS])
def test_embedding_bag_per_sample_weights_matches_torch(torch, case):
    _, idx, off, last = case
    weight, psw = _arr(10, 4), _arr(*idx.shape)
    w, tw = em.tensor(weight, requires_grad=True), torch.tensor(weight, requires_grad=True)
    p, tp = em.tensor(psw, requires_grad=True), torch.tensor(psw, requires_grad=True)
    offs = (None, None) if off is None else (em.tensor(off), torch.tensor(off))
    out = F.embedding_bag(em.tensor(idx), w, offs[0], mode="sum", per_sample_weights=p,
                          include_last_offset=last)
    ref = torch.nn.functional.embedding_bag(torch.tensor(idx), tw, offs[1], mode="sum",
                                            per_sample_weights=tp, include_last_offset=last)
    _same_then_backward(torch, out, ref)
    _same(w.grad, tw.grad)
    _same(p.grad, tp.grad)


def test_embedding_bag_gradcheck():
    idx, off = em.tensor([1, 3, 3, 0, 2]), em.tensor([0, 3])
    w = em.tensor(_arr(4, 3), requires_grad=True)
    p = em.tensor(_arr(5), requires_grad=True)
    for mode in ("sum", "mean", "max"):
        assert gradcheck(lambda t: F.embedding_bag(idx, t, off, mode=mode), (w,))
    assert gradcheck(lambda t, s: F.embedding_bag(idx, t, off, mode="sum",
                                                  per_sample_weights=s), (w, p))


def test_embedding_bag_module_matches_torch(torch):
    ours = nn.EmbeddingBag(10, 3, mode="max", padding_idx=2)
    theirs = torch.nn.EmbeddingBag(10, 3, mode="max", padding_idx=2)
    assert ours.weight.shape == tuple(theirs.weight.shape)
    assert not ours.weight.detach().numpy()[2].any()
    with em.no_grad():
        ours.weight.copy_(em.tensor(theirs.weight.detach().numpy()))
    idx, off = [1, 2, 4, 5, 4, 3, 2, 9], [0, 4]
    _same(ours(em.tensor(idx), em.tensor(off)),
          theirs(torch.tensor(idx), torch.tensor(off)), rtol=1e-6)
    frozen = nn.EmbeddingBag.from_pretrained(em.tensor(_arr(5, 2)), mode="sum")
    assert not frozen.weight.requires_grad and frozen.mode == "sum"
    assert repr(ours) == repr(theirs)


def test_embedding_bag_bad_input():
    w = em.zeros(5, 2)
    with pytest.raises(ValueError, match="embedding_bag: mode has to be one of"):
        F.embedding_bag(em.tensor([[1]]), w, mode="min")
    with pytest.raises(ValueError, match="embedding_bag: offsets has to be a 1-D tensor"):
        F.embedding_bag(em.tensor([1, 2]), w)
    with pytest.raises(ValueError, match=r"embedding_bag: if input is 2-D \(1, 2\)"):
        F.embedding_bag(em.tensor([[1, 2]]), w, em.tensor([0]))
    with pytest.raises(ValueError, match="offsets must start at 0, be non-decreasing"):
        F.embedding_bag(em.tensor([1, 2]), w, em.tensor([0, 3]))
    with pytest.raises(NotImplementedError, match="only supported for mode='sum'"):
        F.embedding_bag(em.tensor([[1]]), w, mode="mean", per_sample_weights=em.ones(1, 1))
    with pytest.raises(IndexError, match=r"embedding_bag: index out of range.*\[0, 5\)"):
        F.embedding_bag(em.tensor([[7]]), w)
    with pytest.raises(TypeError, match="embedding_bag: expected integer indices"):
        F.embedding_bag(em.tensor([[1.0]]), w)


# ------------------------------------------------------------------ MaxUnpool / LPPool
UNPOOL_CASES = [
    (1, (2, 3, 9), dict(kernel_size=2), None),
    (1, (2, 3, 9), dict(kernel_size=3, stride=2, padding=1), (9,)),
    (2, (2, 3, 6, 7), dict(kernel_size=2), (6, 7)),
    (2, (3, 6, 6), dict(kernel_size=(2, 3), stride=(2, 2), padding=(1, 1)), (6, 6)),
    (2, (1, 3, 6, 6), dict(kernel_size=2, stride=2), None),
]


@pytest.mark.parametrize("nd, shape, kw, size", UNPOOL_CASES)
def test_max_unpool_matches_torch(torch, nd, shape, kw, size):
    x = torch.tensor(_arr(*shape))
    pooled, idx = getattr(torch.nn, f"MaxPool{nd}d")(**kw, return_indices=True)(x)
    ours, theirs = getattr(nn, f"MaxUnpool{nd}d")(**kw), getattr(torch.nn, f"MaxUnpool{nd}d")(**kw)
    assert repr(ours) == repr(theirs)
    a, t = em.tensor(pooled.numpy(), requires_grad=True), pooled.clone().requires_grad_()
    out = ours(a, em.tensor(idx.numpy()), output_size=size)
    ref = theirs(t, idx, output_size=size)
    _same_then_backward(torch, out, ref)
    _same(a.grad, t.grad)


def test_max_unpool_roundtrip_and_gradcheck():
    x = em.tensor(_arr(1, 2, 4, 6), requires_grad=True)
    pooled, idx = F.max_pool2d(x, 2, return_indices=True)
    back = F.max_unpool2d(pooled, idx, 2)
    kept = back.detach().numpy() != 0
    np.testing.assert_array_equal(back.detach().numpy()[kept], x.detach().numpy()[kept])
    assert kept.sum() == pooled.numel()
    v = em.tensor(_arr(1, 2, 2, 3), requires_grad=True)
    assert gradcheck(lambda t: F.max_unpool2d(t, idx, 2), (v,))
    v3 = em.tensor(_arr(1, 1, 2, 2, 2), requires_grad=True)
    i3 = em.tensor(np.arange(8).reshape(1, 1, 2, 2, 2) * 7)
    assert gradcheck(lambda t: F.max_unpool3d(t, i3, 2, output_size=(4, 4, 4)), (v3,))


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("p", [1.0, 2.0, 3.5])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_lp_pool_matches_torch(torch, nd, p, ceil_mode):
    shape = {1: (2, 3, 9), 2: (2, 3, 6, 7), 3: (2, 2, 5, 6, 7)}[nd]
    x = _arr(*shape)
    x = np.abs(x) + 0.1 if p == 3.5 else x       # a fractional power needs x >= 0
    args = (p, 3, 2, ceil_mode)
    ours, theirs = getattr(nn, f"LPPool{nd}d")(*args), getattr(torch.nn, f"LPPool{nd}d")(*args)
    assert repr(ours) == repr(theirs)
    _module_matches(torch, ours, theirs, x)


def test_lp_pool_gradcheck():
    x = em.tensor(np.abs(_arr(1, 2, 5, 5)) + 0.1, requires_grad=True)
    assert gradcheck(lambda t: F.lp_pool2d(t, 2.0, 2, 1), (x,))
    y = em.tensor(np.abs(_arr(2, 7)) + 0.1, requires_grad=True)
    assert gradcheck(lambda t: F.lp_pool1d(t, 3.0, 3), (y,))


def test_unpool_and_lp_pool_bad_input():
    x, idx = em.zeros(1, 1, 2, 2), em.zeros(1, 1, 2, 2, dtype=em.int64)
    with pytest.raises(ValueError, match=r"max_unpool2d: indices of shape \(1, 1, 4\) must have"):
        F.max_unpool2d(x, em.zeros(1, 1, 4, dtype=em.int64), 2)
    with pytest.raises(TypeError, match="max_unpool2d: indices must be an integer tensor"):
        F.max_unpool2d(x, em.zeros(1, 1, 2, 2), 2)
    with pytest.raises(ValueError, match=r"max_unpool2d: invalid output_size \(9, 4\)"):
        F.max_unpool2d(x, idx, 2, output_size=(9, 4))
    with pytest.raises(ValueError, match="max_unpool2d: found an invalid max index 16"):
        F.max_unpool2d(x, idx + 16, 2)
    with pytest.raises(ValueError, match="max_unpool1d: expected a 2-D or 3-D input"):
        F.max_unpool1d(x, idx, 2)
    with pytest.raises(ValueError, match="lp_pool2d: kernel_size must be an int or a tuple"):
        F.lp_pool2d(x, 2.0, (1, 2, 3))


# ------------------------------------------------------------------ Conv3d
CONV3D_CASES = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1)),
    dict(padding="same", dilation=2),
    dict(groups=2, padding=1, padding_mode="reflect"),
    dict(padding=1, padding_mode="circular", bias=False),
]


@pytest.mark.parametrize("kw", CONV3D_CASES, ids=str)
def test_conv3d_matches_torch(torch, kw):
    ours, theirs = nn.Conv3d(4, 6, (3, 2, 3), **kw).double(), \
        torch.nn.Conv3d(4, 6, (3, 2, 3), **kw).double()
    assert repr(ours) == repr(theirs)
    assert ours.weight.shape == tuple(theirs.weight.shape)
    _copy_params(ours, theirs)
    x = _arr(2, 4, 6, 7, 5)
    _module_matches(torch, ours, theirs, x)
    _same(ours.weight.grad, theirs.weight.grad, rtol=1e-10, atol=1e-11)


def test_conv3d_gradcheck_and_unbatched():
    x = em.tensor(_arr(1, 2, 3, 4, 3), requires_grad=True)
    w = em.tensor(_arr(2, 2, 2, 2, 2), requires_grad=True)
    b = em.tensor(_arr(2), requires_grad=True)
    assert gradcheck(lambda a, k, c: F.conv3d(a, k, c, stride=(2, 1, 1), padding=1), (x, w, b))
    np.testing.assert_allclose(F.conv3d(x[0], w, b).detach().numpy(),
                               F.conv3d(x, w, b)[0].detach().numpy(), rtol=1e-12)


def test_conv3d_bad_input():
    with pytest.raises(ValueError, match=r"conv3d: expected a 5-D weight"):
        F.conv3d(em.zeros(1, 2, 3, 3, 3), em.zeros(2, 2, 3, 3))
    with pytest.raises(ValueError, match=r"conv3d: expected a 4-D \(unbatched\) or 5-D input"):
        F.conv3d(em.zeros(2, 3, 3), em.zeros(2, 2, 1, 1, 1))
    with pytest.raises(ValueError, match="conv3d: padding='same' is not supported for strided"):
        F.conv3d(em.zeros(1, 2, 3, 3, 3), em.zeros(2, 2, 1, 1, 1), stride=2, padding="same")
    with pytest.raises(ValueError, match=r"conv3d: input of shape \(1, 2, 1, 3, 3\) is too small"):
        F.conv3d(em.zeros(1, 2, 1, 3, 3), em.zeros(2, 2, 2, 1, 1))
    with pytest.raises(ValueError, match="does not fit weight"):
        F.conv3d(em.zeros(1, 3, 3, 3, 3), em.zeros(2, 2, 1, 1, 1))


# ------------------------------------------------------------------ 3-D pooling
POOL3D_CASES = [
    ("MaxPool3d", (2,), {}),
    ("MaxPool3d", (3,), dict(stride=2, padding=1, ceil_mode=True)),
    ("MaxPool3d", ((3, 2, 2),), dict(stride=(2, 1, 2), dilation=(2, 1, 1), padding=(1, 1, 0))),
    ("AvgPool3d", (2,), {}),
    ("AvgPool3d", (3,), dict(stride=2, padding=1, ceil_mode=True)),
    ("AvgPool3d", (3,), dict(stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ("AvgPool3d", ((3, 2, 2),), dict(stride=(2, 1, 2), padding=(1, 1, 0), divisor_override=5)),
    ("AdaptiveAvgPool3d", ((3, 4, 2),), {}),
    ("AdaptiveAvgPool3d", ((None, 3, 1),), {}),
    ("AdaptiveMaxPool3d", ((3, 4, 2),), {}),
    ("AdaptiveMaxPool3d", ((None, 5, 1),), {}),
]


@pytest.mark.parametrize("name, args, kw", POOL3D_CASES)
@pytest.mark.parametrize("batched", [True, False])
def test_pool3d_matches_torch(torch, name, args, kw, batched):
    x = _arr(2, 3, 7, 6, 5) if batched else _arr(3, 7, 6, 5)
    ours, theirs = getattr(nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    assert repr(ours) == repr(theirs)
    _module_matches(torch, ours, theirs, x)


def test_pool3d_gradcheck():
    x = em.tensor(_arr(1, 2, 4, 3, 4), requires_grad=True)
    assert gradcheck(lambda t: F.avg_pool3d(t, 2, 1, 1, count_include_pad=False), (x,))
    assert gradcheck(lambda t: F.adaptive_avg_pool3d(t, (3, 2, 3)), (x,))
    assert gradcheck(lambda t: F.max_pool3d(t, 2, 2, ceil_mode=True), (x,))


def test_pool3d_bad_input():
    x = em.zeros(1, 1, 2, 4, 4)
    with pytest.raises(ValueError, match="max_pool3d: padding .* at most half of the kernel"):
        F.max_pool3d(x, 2, padding=2)
    with pytest.raises(ValueError, match=r"avg_pool3d: the output depth would be 0"):
        F.avg_pool3d(x, (3, 1, 1))
    with pytest.raises(ValueError, match=r"adaptive_avg_pool3d: expected a 4-D \(unbatched\)"):
        F.adaptive_avg_pool3d(em.zeros(2, 2, 2), 1)
    with pytest.raises(TypeError, match="max_pool3d: expected a floating point input"):
        F.max_pool3d(em.zeros(1, 1, 2, 4, 4, dtype=em.int64), 2)
    with pytest.raises(ValueError, match="kernel_size must be an int or a tuple of 3"):
        F.avg_pool3d(x, (2, 2))


NEW_MODULES = {"EmbeddingBag": "sparse", "MaxUnpool1d": "pooling", "MaxUnpool2d": "pooling",
               "MaxUnpool3d": "pooling", "LPPool1d": "pooling", "LPPool2d": "pooling",
               "LPPool3d": "pooling", "Conv3d": "conv", "ConvTranspose3d": "conv",
               "InstanceNorm3d": "instancenorm", "MaxPool3d": "pooling", "AvgPool3d": "pooling",
               "AdaptiveAvgPool3d": "pooling", "AdaptiveMaxPool3d": "pooling"}


@pytest.mark.parametrize("name", sorted(NEW_MODULES))
def test_new_modules_live_where_pytorch_keeps_them(torch, name):
    ours, theirs = getattr(nn, name), getattr(torch.nn, name)
    assert ours.__module__ == f"ember.nn.modules.{NEW_MODULES[name]}"
    assert ours.__module__.replace("ember.", "torch.", 1) == theirs.__module__


@pytest.mark.parametrize("kw", [dict(kernel_size=2),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=(3, 2, 2), stride=(2, 1, 2),
                                     dilation=(2, 1, 1), padding=(1, 1, 0))], ids=str)
def test_max_pool3d_indices_and_unpool3d_match_torch(torch, kw):
    x = _arr(2, 3, 7, 6, 5)
    out, idx = nn.MaxPool3d(**kw, return_indices=True)(em.tensor(x))
    ref, tidx = torch.nn.MaxPool3d(**kw, return_indices=True)(torch.tensor(x))
    _same(out, ref)
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    if "dilation" in kw:
        return          # (a dilated pooling has no unpooling of the input's size)
    unpool = dict(kernel_size=kw["kernel_size"], stride=kw.get("stride"),
                  padding=kw.get("padding", 0))
    back = nn.MaxUnpool3d(**unpool)(out, idx, output_size=x.shape)
    _same(back, torch.nn.MaxUnpool3d(**unpool)(ref, tidx, output_size=x.shape))


def test_adaptive_max_pool3d_indices_match_torch(torch):
    x = _arr(2, 3, 7, 6, 5)
    out, idx = F.adaptive_max_pool3d(em.tensor(x), (3, 4, 2), return_indices=True)
    ref, tidx = torch.nn.functional.adaptive_max_pool3d(torch.tensor(x), (3, 4, 2),
                                                        return_indices=True)
    _same(out, ref)
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    y = em.tensor(_arr(1, 2, 4, 3, 5), requires_grad=True)
    assert gradcheck(lambda t: F.adaptive_max_pool3d(t, (3, 2, 2)), (y,))


@pytest.mark.parametrize("name, shape, args", [
    ("max_pool1d", (2, 3, 9), (2,)), ("max_pool2d", (2, 3, 6, 7), (3, 2, 1)),
    ("max_pool3d", (2, 3, 5, 6, 7), (2,)), ("adaptive_max_pool1d", (2, 3, 9), (4,)),
    ("adaptive_max_pool2d", (2, 3, 6, 7), ((4, 3),)),
    ("adaptive_max_pool3d", (2, 3, 5, 6, 7), ((2, 4, 3),))])
def test_pool_with_indices_match_torch(torch, name, shape, args):
    x = _arr(*shape)
    out, idx = getattr(F, f"{name}_with_indices")(em.tensor(x), *args)
    ref, tidx = getattr(torch.nn.functional, f"{name}_with_indices")(torch.tensor(x), *args)
    _same(out, ref)
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())


CONVT3D_CASES = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 1), dilation=(1, 2, 1)),
    dict(groups=2, stride=2, output_padding=1, bias=False),
]


@pytest.mark.parametrize("kw", CONVT3D_CASES, ids=str)
def test_conv_transpose3d_matches_torch(torch, kw):
    ours = nn.ConvTranspose3d(4, 6, (3, 2, 3), **kw).double()
    theirs = torch.nn.ConvTranspose3d(4, 6, (3, 2, 3), **kw).double()
    assert repr(ours) == repr(theirs)
    _copy_params(ours, theirs)
    x = _arr(2, 4, 3, 4, 5)
    a, t = _module_matches(torch, ours, theirs, x, grad_atol=1e-11)
    _same(ours.weight.grad, theirs.weight.grad, rtol=1e-10, atol=1e-11)
    size = tuple(theirs(t).shape[2:])
    _same(ours(a, output_size=size), theirs(t, output_size=size), rtol=1e-10, atol=1e-12)


def test_conv_transpose3d_gradcheck_and_errors():
    x = em.tensor(_arr(1, 2, 2, 3, 2), requires_grad=True)
    w = em.tensor(_arr(2, 2, 2, 2, 2), requires_grad=True)
    assert gradcheck(lambda a, k: F.conv_transpose3d(a, k, stride=2, padding=1), (x, w))
    with pytest.raises(ValueError, match=r"conv_transpose3d: expected a 5-D weight"):
        F.conv_transpose3d(x, em.zeros(2, 2, 2, 2))
    with pytest.raises(ValueError, match=r"conv_transpose3d: output_padding \(2, 2, 2\) must be"):
        F.conv_transpose3d(x, w, stride=2, output_padding=2)


@pytest.mark.parametrize("kw", [dict(), dict(affine=True, track_running_stats=True)], ids=str)
def test_instance_norm3d_matches_torch(torch, kw):
    ours, theirs = nn.InstanceNorm3d(3, **kw).double(), torch.nn.InstanceNorm3d(3, **kw).double()
    assert repr(ours) == repr(theirs)
    for x in (_arr(2, 3, 4, 5, 3), _arr(3, 4, 5, 3)):
        _module_matches(torch, ours, theirs, x)
    if kw:
        _same(ours.running_var, theirs.running_var)
        ours.eval(), theirs.eval()
        x = _arr(2, 3, 4, 5, 3)
        _same(ours(em.tensor(x)), theirs(torch.tensor(x)))
    with pytest.raises(ValueError, match="InstanceNorm3d"):
        ours(em.zeros(2, 3, 4))
