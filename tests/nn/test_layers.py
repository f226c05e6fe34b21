"""ember.nn layer modules: forward vs independent NumPy references, default init statistics,
BatchNorm running statistics, dropout and embedding behaviour, errors and reprs, and (when
PyTorch is installed) forward + parameter-gradient parity with weights copied through
state_dict — which also checks that state_dict keys match PyTorch's."""
import math

import numpy as np
import pytest

import ember as em
import ember.nn as nn

RNG = np.random.default_rng(11)
F64 = em.float64


def _t(a, grad=False):
    return em.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _np(t):
    return t.detach().numpy()


def _close(got, want, rtol=1e-10, atol=1e-12):
    got = _np(got) if isinstance(got, em.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} vs {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# ------------------------------------------------------------------ NumPy references
def _np_conv2d(x, w, b, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + dil * (kh - 1) + 1:dil,
                           j * stride:j * stride + dil * (kw - 1) + 1:dil]
                out[:, oc, i, j] = (patch * w[oc]).sum((1, 2, 3)) + (b[oc] if b is not None
                                                                      else 0)
    return out


def _np_pool(x, k, s, fn):
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = fn(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
    return out


def test_linear_and_identity_forward_match_numpy():
    fc = nn.Linear(4, 3, dtype=F64)
    x = RNG.standard_normal((2, 5, 4))
    _close(fc(_t(x)), x @ _np(fc.weight).T + _np(fc.bias))
    nb = nn.Linear(4, 3, bias=False, dtype=F64)
    assert nb.bias is None and [k for k, _ in nb.named_parameters()] == ["weight"]
    _close(nb(_t(x)), x @ _np(nb.weight).T)
    xi = _t(x)
    assert nn.Identity(3, foo=1)(xi) is xi
    bl = nn.Bilinear(3, 2, 4, dtype=F64)
    a, b = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 2))
    _close(bl(_t(a), _t(b)), np.einsum("ni,kij,nj->nk", a, _np(bl.weight), b) + _np(bl.bias))


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1),
                                                    (1, 1, 1, 2)])
def test_conv2d_matches_numpy(stride, pad, dil, groups):
    conv = nn.Conv2d(4, 6, 3, stride=stride, padding=pad, dilation=dil, groups=groups, dtype=F64)
    x = RNG.standard_normal((2, 4, 7, 6))
    _close(conv(_t(x)), _np_conv2d(x, _np(conv.weight), _np(conv.bias), stride, pad, dil,
                                   groups))


def test_conv1d_same_padding_and_padding_modes_match_numpy():
    conv = nn.Conv1d(2, 3, 4, padding="same", bias=False, dtype=F64)
    x = RNG.standard_normal((1, 2, 6))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 2)))         # 'same' puts the odd pad on the right
    w = _np(conv.weight)
    want = np.stack([(xp[:, None, :, i:i + 4] * w[None]).sum((2, 3)) for i in range(6)], -1)
    _close(conv(_t(x)), want)
    c2 = nn.Conv2d(1, 1, 3, padding=1, padding_mode="circular", bias=False, dtype=F64)
    x2 = RNG.standard_normal((1, 1, 4, 5))
    xw = np.pad(x2, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="wrap")
    _close(c2(_t(x2)), _np_conv2d(xw, _np(c2.weight), None, 1, 0, 1, 1))
    c3 = nn.Conv2d(1, 1, 3, padding=1, padding_mode="reflect", bias=False, dtype=F64)
    xr = np.pad(x2, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect")
    _close(c3(_t(x2)), _np_conv2d(xr, _np(c3.weight), None, 1, 0, 1, 1))


def test_conv_transpose2d_is_the_adjoint_of_conv2d():
    ct = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, bias=False, dtype=F64)
    x = RNG.standard_normal((1, 3, 3, 4))
    y = ct(_t(x))
    assert tuple(y.shape) == (1, 2, 5, 7)
    # <conv_transpose(x), z> == <x, conv(z)> with the same weight
    z = RNG.standard_normal(tuple(y.shape))
    cz = _np_conv2d(np.pad(z, ((0, 0), (0, 0), (1, 1), (1, 1))), _np(ct.weight), None, 2, 0, 1,
                    1)
    _close((_np(y) * z).sum(), (x * cz).sum())
    assert tuple(ct(_t(x), output_size=(6, 8)).shape) == (1, 2, 6, 8)
    with pytest.raises(ValueError, match="output size"):
        ct(_t(x), output_size=(9, 9))


def test_pooling_modules_match_numpy():
    x = RNG.standard_normal((2, 3, 6, 6))
    _close(nn.MaxPool2d(2)(_t(x)), _np_pool(x, 2, 2, np.max))
    _close(nn.MaxPool2d(3, stride=1)(_t(x)), _np_pool(x, 3, 1, np.max))
    _close(nn.AvgPool2d(3, 3)(_t(x)), _np_pool(x, 3, 3, np.mean))
    _close(nn.AdaptiveAvgPool2d(1)(_t(x)), x.mean((2, 3), keepdims=True))
    _close(nn.AdaptiveAvgPool2d((2, 3))(_t(x)), x.reshape(2, 3, 2, 3, 3, 2).mean((3, 5)))
    x1 = RNG.standard_normal((2, 3, 8))
    _close(nn.MaxPool1d(2)(_t(x1)), x1.reshape(2, 3, 4, 2).max(-1))
    _close(nn.AvgPool1d(4)(_t(x1)), x1.reshape(2, 3, 2, 4).mean(-1))
    _close(nn.AdaptiveAvgPool1d(2)(_t(x1)), x1.reshape(2, 3, 2, 4).mean(-1))
    vals, idx = nn.MaxPool2d(2, return_indices=True)(_t(x))
    assert tuple(idx.shape) == (2, 3, 3, 3) and idx.dtype == em.int64


def test_flatten_unflatten():
    x = _t(RNG.standard_normal((2, 3, 4, 5)))
    assert tuple(nn.Flatten()(x).shape) == (2, 60)
    assert tuple(nn.Flatten(0, 2)(x).shape) == (24, 5)
    assert tuple(nn.Unflatten(1, (2, 30))(nn.Flatten()(x)).shape) == (2, 2, 30)
    _close(nn.Unflatten(1, (2, 30))(nn.Flatten()(x)).reshape(2, 3, 4, 5), _np(x))
    with pytest.raises(TypeError):
        nn.Unflatten(1, 5)


# ------------------------------------------------------------------ normalisation
def test_batchnorm_running_stats_momentum_and_eval():
    bn = nn.BatchNorm1d(3, momentum=0.3, dtype=F64)
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                     "num_batches_tracked"]
    xs = [RNG.standard_normal((6, 3)) * 2 + 1 for _ in range(3)]
    rm, rv = np.zeros(3), np.ones(3)
    for x in xs:
        out = bn(_t(x))
        _close(out, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5))
        rm = 0.7 * rm + 0.3 * x.mean(0)
        rv = 0.7 * rv + 0.3 * x.var(0, ddof=1)
    _close(bn.running_mean, rm)
    _close(bn.running_var, rv)
    assert int(bn.num_batches_tracked) == 3 and bn.num_batches_tracked.dtype == em.int64
    bn.eval()
    x = RNG.standard_normal((4, 3))
    _close(bn(_t(x)), (x - rm) / np.sqrt(rv + 1e-5))
    _close(bn.running_mean, rm)                        # eval leaves the stats alone
    assert int(bn.num_batches_tracked) == 3


def test_batchnorm_cumulative_average_and_no_tracking():
    bn = nn.BatchNorm2d(2, momentum=None, affine=False, dtype=F64)
    xs = [RNG.standard_normal((3, 2, 2, 2)) for _ in range(4)]
    for x in xs:
        bn(_t(x))
    _close(bn.running_mean, np.mean([x.mean((0, 2, 3)) for x in xs], 0))
    _close(bn.running_var, np.mean([x.var((0, 2, 3), ddof=1) for x in xs], 0))
    nt = nn.BatchNorm2d(2, track_running_stats=False, dtype=F64).eval()
    assert list(nt.state_dict()) == ["weight", "bias"]
    x = xs[0]
    m, v = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
    _close(nt(_t(x)), (x - m) / np.sqrt(v + 1e-5))     # batch stats even in eval
    with pytest.raises(ValueError, match="4D"):
        nn.BatchNorm2d(2)(em.ones(2, 2))
    with pytest.raises(ValueError, match="2D or 3D"):
        nn.BatchNorm1d(2)(em.ones(2, 2, 2, 2))


def test_layer_group_rms_norm_modules():
    x = RNG.standard_normal((2, 4, 3))
    ln = nn.LayerNorm([4, 3], dtype=F64)
    m, v = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
    _close(ln(_t(x)), (x - m) / np.sqrt(v + 1e-5))
    assert ln.weight.shape == (4, 3) and ln.normalized_shape == (4, 3)
    assert nn.LayerNorm(3, bias=False).bias is None
    assert list(nn.LayerNorm(3, elementwise_affine=False).state_dict()) == []
    gn = nn.GroupNorm(2, 4, dtype=F64)
    g = x.reshape(2, 2, 6)
    _close(gn(_t(x)), ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True)
                                                                 + 1e-5)).reshape(x.shape))
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(3, 4)
    rn = nn.RMSNorm(3, eps=1e-6, dtype=F64)
    _close(rn(_t(x)), x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6))
    inn = nn.InstanceNorm1d(4, dtype=F64)
    _close(inn(_t(x)), (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True)
                                                                 + 1e-5))
    _close(inn(_t(x[0])), _np(inn(_t(x)))[0])          # unbatched input


# ------------------------------------------------------------------ dropout / embedding
def test_dropout_modules_train_eval_and_determinism():
    d = nn.Dropout(0.25)
    x = em.ones(1000, dtype=F64)
    em.manual_seed(42)
    a = d(x)
    em.manual_seed(42)
    assert em.equal(a, d(x))
    vals = _np(a)
    assert set(np.unique(vals)) == {0.0, 1 / 0.75}
    assert d.eval()(x) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(-0.1)
    y = _np(nn.Dropout2d(0.5)(em.ones(2, 6, 3, 3))).reshape(12, 9)
    assert ((y == 0).all(1) | (y == 2).all(1)).all()


def test_embedding_padding_gradient_and_from_pretrained():
    em.manual_seed(0)
    emb = nn.Embedding(6, 4, padding_idx=-1, dtype=F64)
    assert emb.padding_idx == 5
    _close(emb.weight[5], np.zeros(4))
    idx = em.tensor([[5, 1, 5], [2, 5, 1]])
    out = emb(idx)
    _close(out, _np(emb.weight)[_np(idx)])
    (out * 3.0).sum().backward()
    g = _np(emb.weight.grad)
    _close(g[5], np.zeros(4))                          # no gradient into the padding row
    _close(g[1], np.full(4, 6.0))
    _close(g[[0, 3, 4]], np.zeros((3, 4)))
    table = _t(RNG.standard_normal((3, 2)))
    fr = nn.Embedding.from_pretrained(table)
    assert not fr.weight.requires_grad and fr.num_embeddings == 3
    _close(fr(em.tensor([2, 0])), _np(table)[[2, 0]])
    assert nn.Embedding.from_pretrained(table, freeze=False).weight.requires_grad


# ------------------------------------------------------------------ default init
def test_default_init_bounds_and_statistics():
    em.manual_seed(1)
    fc = nn.Linear(64, 200)
    w, b, bound = _np(fc.weight), _np(fc.bias), 1 / math.sqrt(64)
    assert fc.weight.dtype == em.float32 and fc.weight.requires_grad and fc.weight.is_leaf
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound and abs(w.mean()) < 0.02 * bound
    assert np.abs(w).max() > 0.95 * bound
    conv = nn.Conv2d(4, 32, 3, groups=2)
    cb = 1 / math.sqrt(2 * 9)                          # fan_in = in/groups * kh * kw
    cw = _np(conv.weight)
    assert cw.shape == (32, 2, 3, 3) and np.abs(cw).max() <= cb and np.abs(cw).max() > 0.9 * cb
    assert np.abs(_np(conv.bias)).max() <= cb
    ct = nn.ConvTranspose2d(4, 6, 2)                   # weight (in, out, k, k): fan_in = 6 * 4
    assert np.abs(_np(ct.weight)).max() <= 1 / math.sqrt(24)
    e = _np(nn.Embedding(500, 20).weight)
    assert abs(e.std() - 1) < 0.05 and abs(e.mean()) < 0.05
    bn = nn.BatchNorm2d(3)
    _close(bn.weight, np.ones(3))
    _close(bn.bias, np.zeros(3))
    _close(bn.running_var, np.ones(3))
    _close(nn.PReLU(3).weight, np.full(3, 0.25), rtol=1e-7)
    em.manual_seed(9)
    a = _np(nn.Linear(3, 3).weight)
    em.manual_seed(9)
    assert (a == _np(nn.Linear(3, 3).weight)).all()


# ------------------------------------------------------------------ errors and reprs
def test_constructor_errors():
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="zeros"):
        nn.ConvTranspose2d(3, 4, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")


REPR_CASES = [
    "Linear(3, 4)", "Linear(3, 4, bias=False)", "Bilinear(2, 3, 4)", "Identity()",
    "Conv1d(2, 4, 3, stride=2, padding=1)", "Conv2d(3, 8, 3, padding='same', bias=False)",
    "Conv2d(4, 8, (3, 5), dilation=2, groups=2, padding_mode='reflect', padding=1)",
    "ConvTranspose2d(4, 2, 3, stride=2, output_padding=1)", "MaxPool2d(2)",
    "MaxPool2d(3, stride=1, padding=1)", "AvgPool2d(2)", "AvgPool1d(3)",
    "AdaptiveAvgPool2d((2, 1))",
    "BatchNorm1d(4)", "BatchNorm2d(3, momentum=None, affine=False)", "LayerNorm(5)",
    "LayerNorm((2, 3), elementwise_affine=False)", "GroupNorm(2, 4)", "RMSNorm(4)",
    "InstanceNorm2d(3)", "Dropout(0.2)", "Dropout2d()", "Embedding(10, 3, padding_idx=0)",
    "Flatten()", "Unflatten(1, (2, 3))", "ReLU()", "ReLU(inplace=True)", "ReLU6()",
    "LeakyReLU(0.2)", "PReLU(3)", "ELU(alpha=0.5)", "SELU()", "GELU(approximate='tanh')",
    "SiLU()", "Mish()", "Softplus(beta=2.0)", "Sigmoid()", "Tanh()", "Softmax(dim=1)",
    "LogSoftmax(dim=-1)", "Softmin(dim=0)", "Hardtanh(-2.0, 2.0)", "Hardswish()",
    "Threshold(0.1, 20.0)", "GLU()", "CELU()", "Softsign()", "LogSigmoid()", "Hardshrink()",
]


@pytest.mark.parametrize("expr", REPR_CASES)
def test_repr_matches_torch(expr):
    torch = pytest.importorskip("torch")
    assert repr(eval("nn." + expr)) == repr(eval("torch.nn." + expr))


# ------------------------------------------------------------------ PyTorch parity
# (expression, input shape); both modules are built in float64 and share the weights.
PARITY = [
    ("Linear(4, 3)", (2, 5, 4)), ("Linear(4, 3, bias=False)", (4,)),
    ("Conv1d(2, 4, 3, stride=2, padding=1)", (2, 2, 7)),
    ("Conv1d(4, 4, 2, groups=4, dilation=2, padding='same')", (1, 4, 6)),
    ("Conv2d(2, 4, 3)", (2, 2, 5, 6)), ("Conv2d(4, 6, (3, 2), stride=(2, 1), groups=2)",
                                        (1, 4, 6, 5)),
    ("Conv2d(2, 3, 3, padding='same', dilation=2)", (1, 2, 5, 5)),
    ("Conv2d(2, 3, 3, padding=1, padding_mode='replicate')", (1, 2, 4, 4)),
    ("Conv2d(2, 3, 3, padding=2, padding_mode='circular')", (2, 4, 4)),
    ("ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)", (1, 4, 3, 3)),
    ("ConvTranspose2d(4, 6, 2, groups=2, dilation=2)", (2, 4, 3, 2)),
    ("ConvTranspose1d(3, 2, 3, stride=2)", (1, 3, 4)),
    ("BatchNorm1d(3)", (5, 3)), ("BatchNorm1d(3)", (4, 3, 2)), ("BatchNorm2d(3)", (2, 3, 2, 3)),
    ("LayerNorm((3, 2))", (4, 3, 2)), ("GroupNorm(2, 4)", (2, 4, 3)), ("RMSNorm(3)", (2, 3)),
    ("InstanceNorm2d(3, affine=True)", (2, 3, 3, 3)), ("PReLU(3)", (2, 3, 4)),
    ("MaxPool2d(2, ceil_mode=True)", (1, 2, 5, 5)), ("AvgPool2d(3, 2, 1)", (1, 2, 5, 5)),
    ("AdaptiveAvgPool2d((2, 3))", (1, 2, 5, 7)), ("ELU()", (7,)), ("GELU()", (7,)),
    ("Softplus()", (7,)), ("LogSoftmax(dim=1)", (2, 5)), ("Softmax(dim=-1)", (2, 5)),
    ("GLU()", (3, 4)), ("Hardswish()", (9,)), ("Mish()", (7,)), ("LeakyReLU(0.3)", (7,)),
]


def _copy_weights(tmod, emod):
    tsd = tmod.state_dict()
    assert list(emod.state_dict()) == list(tsd)
    res = emod.load_state_dict({k: em.tensor(v.numpy()) for k, v in tsd.items()})
    assert not res.missing_keys and not res.unexpected_keys


@pytest.mark.parametrize("expr,shape", PARITY, ids=[p[0] for p in PARITY])
def test_module_matches_torch_forward_and_gradients(expr, shape):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tmod = eval("torch.nn." + expr).double()
    emod = eval("nn." + expr).double()
    _copy_weights(tmod, emod)
    x = RNG.standard_normal(shape)
    tx, ex = torch.tensor(x, requires_grad=True), _t(x, True)
    tout, eout = tmod(tx), emod(ex)
    _close(eout, tout.detach().numpy())
    g = RNG.standard_normal(tuple(tout.shape))
    tout.backward(torch.tensor(g))
    eout.backward(_t(g))
    _close(ex.grad, tx.grad.numpy())
    tgrads = dict(tmod.named_parameters())
    for name, p in emod.named_parameters():
        _close(p.grad, tgrads[name].grad.numpy())
    for name, b in tmod.named_buffers():                 # running stats updated alike
        _close(dict(emod.named_buffers())[name], b.numpy())


def test_batchnorm_matches_torch_over_steps_train_and_eval():
    torch = pytest.importorskip("torch")
    for mom in (0.1, None):
        tbn, ebn = torch.nn.BatchNorm2d(3, momentum=mom).double(), \
            nn.BatchNorm2d(3, momentum=mom).double()
        with torch.no_grad():
            tbn.weight.uniform_(0.5, 1.5)
            tbn.bias.uniform_(-1, 1)
        _copy_weights(tbn, ebn)
        for _ in range(3):
            x = RNG.standard_normal((4, 3, 2, 2)) * 3 + 2
            _close(ebn(_t(x)), tbn(torch.tensor(x)).detach().numpy())
        for k, v in tbn.state_dict().items():
            _close(ebn.state_dict()[k], v.numpy())
        tbn.eval(), ebn.eval()
        x = RNG.standard_normal((2, 3, 2, 2))
        _close(ebn(_t(x)), tbn(torch.tensor(x)).detach().numpy())


def test_embedding_matches_torch_with_padding_idx():
    torch = pytest.importorskip("torch")
    temb = torch.nn.Embedding(7, 3, padding_idx=2).double()
    eemb = nn.Embedding(7, 3, padding_idx=2).double()
    with torch.no_grad():
        temb.weight[2] = 1.5                           # a non-zero padding row is still returned
    _copy_weights(temb, eemb)
    idx = np.array([[2, 0, 6], [2, 2, 3]])
    tout, eout = temb(torch.tensor(idx)), eemb(em.tensor(idx))
    _close(eout, tout.detach().numpy())
    g = RNG.standard_normal((2, 3, 3))
    tout.backward(torch.tensor(g))
    eout.backward(_t(g))
    _close(eemb.weight.grad, temb.weight.grad.numpy())


def test_dropout_statistics_match_torch_semantics():
    torch = pytest.importorskip("torch")
    em.manual_seed(2)
    x = np.ones((200, 50))
    e = _np(nn.Dropout(0.4)(_t(x)))
    t = torch.nn.Dropout(0.4)(torch.tensor(x)).numpy()
    assert set(np.unique(e)) == set(np.unique(t))     # same kept value, 1 / (1 - p)
    assert abs((e == 0).mean() - 0.4) < 0.02


def test_softmax_modules_implicit_dim_follows_torch_legacy_rule():
    x = _t(RNG.standard_normal((2, 3)))
    with pytest.warns(UserWarning, match="Implicit dimension"):
        y = nn.Softmax()(x)
    _close(y.sum(1), np.ones(2))
    with pytest.warns(UserWarning):
        _close(nn.LogSoftmax()(_t(np.zeros(4))), np.full(4, -np.log(4)))
    _close(nn.Softmax2d()(_t(np.zeros((2, 4, 1, 1)))), np.full((2, 4, 1, 1), 0.25))


def test_bilinear_matches_torch_forward_and_gradients():
    torch = pytest.importorskip("torch")
    tb, eb = torch.nn.Bilinear(3, 2, 4).double(), nn.Bilinear(3, 2, 4).double()
    _copy_weights(tb, eb)
    a, b = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 2))
    ta, tb2 = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ea, eb2 = _t(a, True), _t(b, True)
    tout, eout = tb(ta, tb2), eb(ea, eb2)
    _close(eout, tout.detach().numpy())
    tout.sum().backward()
    eout.sum().backward()
    _close(ea.grad, ta.grad.numpy())
    _close(eb2.grad, tb2.grad.numpy())
    _close(eb.weight.grad, tb.weight.grad.numpy())
    _close(eb.bias.grad, tb.bias.grad.numpy())
