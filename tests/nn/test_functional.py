"""ember.nn.functional activations and layer functionals: forward vs independent NumPy
references, gradcheck on tiny float64 inputs, in-place variants, dropout statistics, and
PyTorch as an extra oracle when it is installed."""
import math

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.autograd import gradcheck

RNG = np.random.default_rng(7)
_erf = np.vectorize(math.erf)


def _t(a, grad=False):
    return em.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _np(t):
    return t.detach().numpy()


def _close(got, want, rtol=1e-10, atol=1e-12):
    got = _np(got) if isinstance(got, em.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} vs {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _softplus(x, beta=1.0, thr=20.0):
    with np.errstate(over="ignore"):
        return np.where(x * beta > thr, x, np.log1p(np.exp(beta * x)) / beta)


def _sig(x):
    return 1 / (1 + np.exp(-x))


_SA, _SS = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

# name -> (ember call, NumPy reference)
ACTS = {
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "relu6": (F.relu6, lambda x: np.minimum(np.maximum(x, 0), 6)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda x: F.elu(x, 1.5), lambda x: np.where(x > 0, x, 1.5 * (np.exp(x) - 1))),
    "celu": (lambda x: F.celu(x, 2.0), lambda x: np.where(x > 0, x, 2 * (np.exp(x / 2) - 1))),
    "selu": (F.selu, lambda x: _SS * np.where(x > 0, x, _SA * (np.exp(x) - 1))),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))),
    "silu": (F.silu, lambda x: x * _sig(x)),
    "mish": (F.mish, lambda x: x * np.tanh(_softplus(x))),
    "softplus": (lambda x: F.softplus(x, beta=2.0, threshold=10.0),
                 lambda x: _softplus(x, 2.0, 10.0)),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 2.0), lambda x: np.clip(x, -0.5, 2.0)),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "sigmoid": (F.sigmoid, _sig),
    "tanh": (F.tanh, np.tanh),
    "logsigmoid": (F.logsigmoid, lambda x: -np.logaddexp(0, -x)),
    "threshold": (lambda x: F.threshold(x, 0.3, -2.0), lambda x: np.where(x > 0.3, x, -2.0)),
    "tanhshrink": (F.tanhshrink, lambda x: x - np.tanh(x)),
    "softshrink": (lambda x: F.softshrink(x, 0.5),
                   lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0))),
    "hardshrink": (lambda x: F.hardshrink(x, 0.5), lambda x: np.where(np.abs(x) > 0.5, x, 0)),
    "prelu": (lambda x: F.prelu(x.T, em.tensor([0.1, 0.2, 0.3], dtype=x.dtype)).T,
              lambda x: np.where(x > 0, x, x * np.array([0.1, 0.2, 0.3])[:, None])),
    "glu": (lambda x: F.glu(x[:2], 0), lambda x: x[:1] * _sig(x[1:2])),
    "softmin": (lambda x: F.softmin(x, dim=1),
                lambda x: np.exp(-x) / np.exp(-x).sum(1, keepdims=True)),
}

# tiny inputs away from kinks (0, ±0.5, ±3, thresholds) for gradcheck
_GRAD_X = np.array([[-2.2, -0.8, 0.35, 1.3], [0.7, -1.4, 2.1, -0.2], [-3.6, 0.9, 3.4, 4.1]])


@pytest.mark.parametrize("name", list(ACTS))
def test_activation_forward_matches_numpy(name):
    fn, ref = ACTS[name]
    x = RNG.standard_normal((3, 7)) * 4
    x[0, :3] = [40.0, -40.0, 0.0]            # overflow-prone values for softplus/logsigmoid
    _close(fn(_t(x)), ref(x))
    out32 = fn(em.tensor(x.astype(np.float32)))
    assert out32.dtype == em.float32
    _close(out32, ref(x), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", list(ACTS))
def test_activation_gradcheck(name):
    fn = ACTS[name][0]
    assert gradcheck(fn, (_t(_GRAD_X, grad=True),))


def test_activation_gradients_are_finite_at_extremes():
    for name, (fn, _) in ACTS.items():
        x = _t([[-800.0, 800.0, -60.0], [60.0, 1.0, 2.0]] * 2 if name not in ("glu",) else
               [[-800.0, 800.0, -60.0]] * 2, grad=True)
        if name == "prelu":
            x = _t([[-800.0], [800.0], [-60.0]], grad=True)
        fn(x).sum().backward()
        assert np.isfinite(_np(x.grad)).all(), name


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(_t([1.0]), approximate="fast")


def test_glu_odd_dim_and_prelu_channel_errors():
    with pytest.raises(ValueError, match="even"):
        F.glu(_t(np.ones((2, 3))))
    with pytest.raises(ValueError, match="channels"):
        F.prelu(_t(np.ones((2, 3))), _t([0.1, 0.2]))


@pytest.mark.parametrize("name,call", [
    ("relu", lambda x, ip: F.relu(x, inplace=ip)),
    ("leaky_relu", lambda x, ip: F.leaky_relu(x, 0.1, inplace=ip)),
    ("elu", lambda x, ip: F.elu(x, inplace=ip)),
    ("hardtanh", lambda x, ip: F.hardtanh(x, inplace=ip)),
    ("silu", lambda x, ip: F.silu(x, inplace=ip)),
    ("threshold", lambda x, ip: F.threshold(x, 0.1, 5.0, inplace=ip)),
    ("hardswish", lambda x, ip: F.hardswish(x, inplace=ip)),
])
def test_inplace_activations_write_input_and_keep_gradients(name, call):
    a = RNG.standard_normal(6) + 0.05
    w_ref = _t(a, grad=True)
    call(w_ref * 2.0, False).sum().backward()
    w = _t(a, grad=True)
    h = w * 2.0
    out = call(h, True)
    assert out is h
    _close(h, _np(call(_t(a) * 2.0, False)))
    out.sum().backward()
    _close(w.grad, _np(w_ref.grad))
    plain = _t(a)
    assert call(plain, True) is plain


def test_inplace_on_leaf_requiring_grad_is_an_error():
    with pytest.raises(RuntimeError):
        F.leaky_relu(_t([1.0, -1.0], grad=True), inplace=True)


# ------------------------------------------------------------------ linear / bilinear
def test_linear_and_bilinear_match_numpy_and_gradcheck():
    x, w, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((5, 4)), RNG.standard_normal(5)
    _close(F.linear(_t(x), _t(w), _t(b)), x @ w.T + b)
    _close(F.linear(_t(x[0, 0]), _t(w)), x[0, 0] @ w.T)
    x1, x2 = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 2))
    wb, bb = RNG.standard_normal((4, 3, 2)), RNG.standard_normal(4)
    _close(F.bilinear(_t(x1), _t(x2), _t(wb), _t(bb)),
           np.einsum("ni,kij,nj->nk", x1, wb, x2) + bb)
    assert gradcheck(F.linear, (_t(x[0, :2], True), _t(w[:3], True), _t(b[:3], True)))
    assert gradcheck(F.bilinear, (_t(x1, True), _t(x2, True), _t(wb[:2], True),
                                  _t(bb[:2], True)))
    with pytest.raises(ValueError, match="linear"):
        F.linear(_t(x), _t(np.ones((5, 3))))


# ------------------------------------------------------------------ dropout
def test_dropout_is_reproducible_under_manual_seed_and_scales_kept_values():
    x = em.ones(2000, dtype=em.float64)
    em.manual_seed(3)
    a = F.dropout(x, 0.3)
    em.manual_seed(3)
    b = F.dropout(x, 0.3)
    assert em.equal(a, b)
    vals = _np(a)
    kept = vals != 0
    _close(vals[kept], np.full(kept.sum(), 1 / 0.7))
    assert abs(kept.mean() - 0.7) < 0.04             # ~4.6 sigma for n=2000
    assert abs(vals.mean() - 1.0) < 0.06              # expectation preserved
    assert not em.equal(F.dropout(x, 0.3), a)         # the generator moved on


def test_dropout_edge_cases_and_gradient():
    x = _t(np.arange(1.0, 7.0), grad=True)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    _close(F.dropout(x, 1.0), np.zeros(6))
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)
    em.manual_seed(0)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    _close(x.grad, (_np(y) != 0) * 2.0)            # d/dx = mask / (1 - p)
    z = _t(np.ones(50))
    em.manual_seed(1)
    out = F.dropout(z, 0.5, inplace=True)
    assert out is z and set(np.unique(_np(z))) <= {0.0, 2.0}


def test_dropout_gradcheck_with_a_fixed_mask():
    def seeded(fn):
        def f(x):
            em.manual_seed(4)          # the same mask on every evaluation
            return fn(x)
        return f
    x = _t(RNG.standard_normal((2, 3, 2)), True)
    assert gradcheck(seeded(lambda x: F.dropout(x, 0.4)), (x,))
    assert gradcheck(seeded(lambda x: F.dropout1d(x, 0.5)), (x,))
    assert gradcheck(seeded(lambda x: F.alpha_dropout(x, 0.3, training=True)), (x,))


def test_second_order_gradients_of_composites():
    from ember.autograd import gradgradcheck
    x = _t([[-1.3, 0.4, 2.2], [0.9, -0.6, 1.7]], True)
    for fn in (F.gelu, F.silu, F.mish, F.logsigmoid, lambda x: F.softplus(x, 2.0),
               lambda x: F.layer_norm(x, (3,)), lambda x: F.group_norm(x, 1),
               lambda x: F.elu(x, 0.7)):
        assert gradgradcheck(fn, (x,))


def test_feature_dropout_drops_whole_channels():
    em.manual_seed(5)
    x = em.ones(4, 8, 3, 3, dtype=em.float64)
    y = _np(F.dropout2d(x, 0.5))
    per_channel = y.reshape(4, 8, 9)
    assert ((per_channel == 0).all(-1) | (per_channel == 2.0).all(-1)).all()
    assert 0 < (per_channel == 0).all(-1).sum() < 32
    y1 = _np(F.dropout1d(em.ones(3, 6, 5, dtype=em.float64), 0.5)).reshape(18, 5)
    assert ((y1 == 0).all(-1) | (y1 == 2.0).all(-1)).all()
    y3 = _np(F.dropout2d(em.ones(6, 2, 2, dtype=em.float64), 0.5)).reshape(6, 4)  # unbatched
    assert ((y3 == 0).all(-1) | (y3 == 2.0).all(-1)).all()
    with pytest.raises(ValueError, match="dropout2d"):
        F.dropout2d(em.ones(3, 4), 0.5)


def test_alpha_dropout_keeps_zero_mean_unit_variance():
    em.manual_seed(11)
    x = em.randn(20000, dtype=em.float64)
    y = _np(F.alpha_dropout(x, 0.2, training=True))
    assert abs(y.mean()) < 0.05 and abs(y.std() - 1.0) < 0.05
    assert F.alpha_dropout(x, 0.2) is x                # training defaults to False
    f = _np(F.feature_alpha_dropout(em.ones(2, 5, 3, dtype=em.float64), 0.5, training=True))
    assert (f == f[..., :1]).all()


# ------------------------------------------------------------------ normalisation
def _bn_ref(x, eps, w=None, b=None):
    axes = (0,) + tuple(range(2, x.ndim))
    m, v = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    out = (x - m) / np.sqrt(v + eps)
    if w is not None:
        out = out * w.reshape(shape) + b.reshape(shape)
    return out


def test_batch_norm_training_updates_running_stats_with_unbiased_variance():
    x = RNG.standard_normal((4, 3, 2, 2)) * 3 + 1
    rm, rv = _t(np.full(3, 0.5)), _t(np.full(3, 2.0))
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    out = F.batch_norm(_t(x), rm, rv, _t(w), _t(b), training=True, momentum=0.2, eps=1e-3)
    _close(out, _bn_ref(x, 1e-3, w, b))
    axes = (0, 2, 3)
    _close(rm, 0.8 * 0.5 + 0.2 * x.mean(axes))
    _close(rv, 0.8 * 2.0 + 0.2 * x.var(axes, ddof=1))
    assert not rm.requires_grad
    ev = F.batch_norm(_t(x), rm, rv, _t(w), _t(b), training=False, eps=1e-3)
    shp = (1, 3, 1, 1)
    _close(ev, (x - _np(rm).reshape(shp)) / np.sqrt(_np(rv).reshape(shp) + 1e-3)
           * w.reshape(shp) + b.reshape(shp))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(_t(np.ones((1, 3))), None, None, training=True)


def test_norm_functionals_match_numpy():
    x = RNG.standard_normal((2, 4, 3, 2))
    w, b = RNG.standard_normal((3, 2)), RNG.standard_normal((3, 2))
    m, v = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
    _close(F.layer_norm(_t(x), (3, 2), _t(w), _t(b)), (x - m) / np.sqrt(v + 1e-5) * w + b)
    _close(F.instance_norm(_t(x)), (x - m) / np.sqrt(v + 1e-5))
    g = x.reshape(2, 2, -1)
    gn = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5))
    wc, bc = RNG.standard_normal(4), RNG.standard_normal(4)
    _close(F.group_norm(_t(x), 2, _t(wc), _t(bc)),
           gn.reshape(x.shape) * wc[:, None, None] + bc[:, None, None])
    rms = np.sqrt((x * x).mean((-2, -1), keepdims=True) + 1e-6)
    _close(F.rms_norm(_t(x), (3, 2), _t(w), eps=1e-6), x / rms * w)
    x32 = em.tensor(x.astype(np.float32))
    eps32 = np.finfo(np.float32).eps
    _close(F.rms_norm(x32, [2]), x / np.sqrt((x * x).mean(-1, keepdims=True) + eps32),
           rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="layer_norm"):
        F.layer_norm(_t(x), (3,))


def test_instance_norm_running_stats():
    x = RNG.standard_normal((3, 2, 5))
    rm, rv = _t(np.zeros(2)), _t(np.ones(2))
    F.instance_norm(_t(x), rm, rv, momentum=0.5)
    _close(rm, 0.5 * x.mean(2).mean(0))
    _close(rv, 0.5 + 0.5 * x.var(2, ddof=1).mean(0))


def test_norm_gradchecks():
    x = _t(RNG.standard_normal((3, 2, 2)), True)
    w, b = _t(RNG.standard_normal(2), True), _t(RNG.standard_normal(2), True)
    assert gradcheck(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                     (x, w, b))
    assert gradcheck(lambda x, w, b: F.layer_norm(x, (2,), w, b), (x, w, b))
    assert gradcheck(lambda x, w, b: F.group_norm(x, 1, w, b), (x, w, b))
    assert gradcheck(lambda x, w: F.rms_norm(x, (2,), w, 1e-5), (x, w))
    assert gradcheck(lambda x: F.instance_norm(x), (x,))


# ------------------------------------------------------------------ embedding
def test_embedding_lookup_padding_gradient_and_max_norm():
    table = RNG.standard_normal((5, 3))
    idx = np.array([[0, 2, 2], [4, 0, 1]])
    w = _t(table, grad=True)
    out = F.embedding(em.tensor(idx), w, padding_idx=2)
    _close(out, table[idx])                            # the padding row is still looked up
    out.backward(_t(np.ones((2, 3, 3))))
    want = np.zeros_like(table)
    np.add.at(want, idx.reshape(-1), 1.0)
    want[2] = 0.0
    _close(w.grad, want)
    assert gradcheck(lambda w: F.embedding(em.tensor(idx), w), (_t(table, True),))
    big = _t(np.full((3, 2), 10.0))
    F.embedding(em.tensor([0, 0]), big, max_norm=1.0)
    _close(np.linalg.norm(_np(big)[0]), 1.0, rtol=1e-6)
    _close(_np(big)[1:], np.full((2, 2), 10.0))        # rows not looked up are unchanged
    with pytest.raises(IndexError, match="embedding"):
        F.embedding(em.tensor([5]), w)
    with pytest.raises(TypeError, match="integer"):
        F.embedding(_t([1.0]), w)


# ------------------------------------------------------------------ distances
def test_normalize_cosine_pairwise_match_numpy_and_gradcheck():
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    _close(F.normalize(_t(a)), a / np.linalg.norm(a, axis=1, keepdims=True))
    _close(F.normalize(_t(a), p=1, dim=0), a / np.abs(a).sum(0, keepdims=True))
    _close(F.normalize(_t(np.zeros((2, 2)))), np.zeros((2, 2)))
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    _close(F.cosine_similarity(_t(a), _t(b)), cos)
    _close(F.cosine_similarity(_t(a), _t(b[:1]), dim=1),
           (a * b[:1]).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b[0])))
    _close(F.pairwise_distance(_t(a), _t(b)), np.linalg.norm(a - b + 1e-6, axis=-1))
    assert gradcheck(F.normalize, (_t(a[:2], True),))
    assert gradcheck(F.cosine_similarity, (_t(a[:2], True), _t(b[:2], True)))
    assert gradcheck(F.pairwise_distance, (_t(a[:2], True), _t(b[:2], True)))


# ------------------------------------------------------------------ interpolate
def _np_nearest(x, oh, ow):
    h, w = x.shape[2:]
    ih = np.minimum(np.floor(np.arange(oh) * np.float32(h / oh)).astype(int), h - 1)
    iw = np.minimum(np.floor(np.arange(ow) * np.float32(w / ow)).astype(int), w - 1)
    return x[:, :, ih][:, :, :, iw]


def _np_bilinear(x, oh, ow, align):
    def coords(n_in, n_out):
        d = np.arange(n_out, dtype=np.float64)
        if align:
            src = d * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
        else:
            src = np.maximum((d + 0.5) * n_in / n_out - 0.5, 0)
        i0 = np.minimum(np.floor(src).astype(int), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, src - i0
    h0, h1, lh = coords(x.shape[2], oh)
    w0, w1, lw = coords(x.shape[3], ow)
    lh, lw = lh[:, None], lw[None, :]
    g = lambda hi, wi: x[:, :, hi][:, :, :, wi]  # noqa: E731
    return ((1 - lh) * (1 - lw) * g(h0, w0) + (1 - lh) * lw * g(h0, w1)
            + lh * (1 - lw) * g(h1, w0) + lh * lw * g(h1, w1))


@pytest.mark.parametrize("size", [(5, 7), (2, 3), (3, 3), (1, 1)])
def test_interpolate_matches_numpy(size):
    x = RNG.standard_normal((2, 3, 3, 4))
    _close(F.interpolate(_t(x), size=size), _np_nearest(x, *size))
    for align in (False, True):
        _close(F.interpolate(_t(x), size=size, mode="bilinear", align_corners=align),
               _np_bilinear(x, *size, align))


def test_interpolate_gradcheck_and_errors():
    x = _t(RNG.standard_normal((1, 1, 2, 3)), True)
    assert gradcheck(lambda x: F.interpolate(x, size=(3, 4), mode="bilinear"), (x,))
    assert gradcheck(lambda x: F.interpolate(x, scale_factor=2), (x,))
    assert gradcheck(lambda x: F.interpolate(x[0], size=5, mode="linear", align_corners=True),
                     (x,))
    with pytest.raises(ValueError, match="exactly one"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, size=2, align_corners=True)
    with pytest.raises(ValueError, match="bilinear"):
        F.interpolate(x[0], size=2, mode="bilinear")


def test_pixel_shuffle_round_trip_and_layout():
    x = RNG.standard_normal((2, 8, 2, 3))
    y = F.pixel_shuffle(_t(x), 2)
    want = x.reshape(2, 2, 2, 2, 2, 3).transpose(0, 1, 4, 2, 5, 3).reshape(2, 2, 4, 6)
    _close(y, want)
    _close(F.pixel_unshuffle(y, 2), x)


# ------------------------------------------------------------------ PyTorch oracle
_TORCH_ACTS = {
    "relu": "relu", "relu6": "relu6", "leaky_relu": ("leaky_relu", 0.2), "elu": ("elu", 1.5),
    "celu": ("celu", 2.0), "selu": "selu", "gelu": "gelu", "silu": "silu", "mish": "mish",
    "softsign": "softsign", "hardsigmoid": "hardsigmoid", "hardswish": "hardswish",
    "sigmoid": "sigmoid", "tanh": "tanh", "logsigmoid": "logsigmoid",
    "tanhshrink": "tanhshrink",
}


@pytest.mark.parametrize("name", list(_TORCH_ACTS))
def test_activations_match_torch_forward_and_grad(name):
    torch = pytest.importorskip("torch")
    spec = _TORCH_ACTS[name]
    tname, args = (spec, ()) if isinstance(spec, str) else (spec[0], spec[1:])
    x = RNG.standard_normal(40) * 5
    x[:4] = [30.0, -30.0, 100.0, -100.0]
    e = _t(x, True)
    ACTS[name][0](e).backward(_t(np.linspace(-1, 1, 40)))
    t = torch.tensor(x, requires_grad=True)
    out = getattr(torch.nn.functional, tname)(t, *args)
    out.backward(torch.linspace(-1, 1, 40, dtype=torch.float64))
    _close(ACTS[name][0](_t(x)), out.detach().numpy(), rtol=1e-12, atol=1e-14)
    # NOTE: torch's float64 hardsigmoid backward multiplies by a float32 1/6 (rel. error 3e-8);
    # ours is exact (gradcheck above checks it against central differences).
    _close(e.grad, t.grad.numpy(), rtol=5e-8 if name == "hardsigmoid" else 1e-10, atol=1e-14)


def test_softplus_gelu_tanh_match_torch():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal(30) * 8
    tx = torch.tensor(x)
    _close(F.softplus(_t(x), 2.0, 10.0), torch.nn.functional.softplus(tx, 2.0, 10.0).numpy())
    _close(F.gelu(_t(x), approximate="tanh"),
           torch.nn.functional.gelu(tx, approximate="tanh").numpy())
    _close(F.hardtanh(_t(x), -2, 3), torch.nn.functional.hardtanh(tx, -2, 3).numpy())


@pytest.mark.parametrize("mode,align", [("nearest", None), ("nearest-exact", None),
                                        ("bilinear", False), ("bilinear", True),
                                        ("area", None)])
@pytest.mark.parametrize("kw", [dict(size=(5, 7)), dict(size=(2, 3)), dict(scale_factor=2),
                                dict(scale_factor=(1.5, 0.7)), dict(scale_factor=0.5)])
def test_interpolate_matches_torch(mode, align, kw):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 2, 4, 5)).astype(np.float32)
    if mode == "area" and "scale_factor" in kw and kw["scale_factor"] == (1.5, 0.7):
        kw = dict(size=(6, 3))
    e = em.tensor(x, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    out_e = F.interpolate(e, mode=mode, align_corners=align, **kw)
    out_t = torch.nn.functional.interpolate(t, mode=mode, align_corners=align, **kw)
    _close(out_e, out_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    g = RNG.standard_normal(tuple(out_t.shape)).astype(np.float32)
    out_e.backward(em.tensor(g))
    out_t.backward(torch.tensor(g))
    _close(e.grad, t.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_interpolate_linear_1d_matches_torch():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((1, 2, 5))
    for align in (False, True):
        for size in (3, 9):
            want = torch.nn.functional.interpolate(torch.tensor(x), size=size, mode="linear",
                                                   align_corners=align).numpy()
            _close(F.interpolate(_t(x), size=size, mode="linear", align_corners=align), want)


def test_norm_and_distance_functionals_match_torch():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = RNG.standard_normal((3, 4, 5))
    a, b = RNG.standard_normal((4, 6)), RNG.standard_normal((4, 6))
    _close(F.group_norm(_t(x), 2), tf.group_norm(torch.tensor(x), 2).numpy())
    _close(F.layer_norm(_t(x), (5,)), tf.layer_norm(torch.tensor(x), (5,)).numpy())
    _close(F.rms_norm(_t(x), (4, 5)), tf.rms_norm(torch.tensor(x), (4, 5)).numpy())
    _close(F.cosine_similarity(_t(a), _t(b)),
           tf.cosine_similarity(torch.tensor(a), torch.tensor(b)).numpy())
    _close(F.pairwise_distance(_t(a), _t(b)),
           tf.pairwise_distance(torch.tensor(a), torch.tensor(b)).numpy())
    _close(F.normalize(_t(a), dim=0), tf.normalize(torch.tensor(a), dim=0).numpy())
    xs = RNG.standard_normal((1, 2, 4, 4))
    f1 = tf.pixel_unshuffle(torch.tensor(xs), 2).numpy()
    _close(F.pixel_unshuffle(_t(xs), 2), f1)
    rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    erm, erv = _t(np.zeros(4)), _t(np.ones(4))
    _close(F.instance_norm(_t(x.reshape(3, 4, 5)), erm, erv, momentum=0.3),
           tf.instance_norm(torch.tensor(x), rm, rv, momentum=0.3).numpy())
    _close(erm, rm.numpy())
    _close(erv, rv.numpy())
