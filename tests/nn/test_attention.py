"""Attention and transformer blocks: NumPy references, gradcheck, PyTorch parity (if installed)."""
import math

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember import nn

RNG = np.random.default_rng(1)


def _np(t):
    return t.detach().numpy()


def _t(a, grad=False):
    return em.tensor(a, requires_grad=grad)


def _ref_softmax(s):
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def _ref_sdpa(q, k, v, bias=None, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if bias is not None:
        s = s + bias
    dead = np.isneginf(s).all(-1, keepdims=True)
    w = np.where(dead, 0.0, _ref_softmax(np.where(dead, 0.0, s)))
    return w @ v


# ---------------------------------------------------------------- scaled_dot_product_attention
def test_sdpa_plain_scale_and_causal():
    q, k, v = (RNG.standard_normal(s) for s in ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7)))
    out = F.scaled_dot_product_attention(_t(q), _t(k), _t(v))
    np.testing.assert_allclose(_np(out), _ref_sdpa(q, k, v), rtol=1e-12, atol=1e-12)
    out = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), scale=0.3)
    np.testing.assert_allclose(_np(out), _ref_sdpa(q, k, v, scale=0.3), rtol=1e-12, atol=1e-12)
    causal = np.where(np.tril(np.ones((4, 6), bool)), 0.0, -np.inf)
    out = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), is_causal=True)
    np.testing.assert_allclose(_np(out), _ref_sdpa(q, k, v, causal), rtol=1e-12, atol=1e-12)


def test_sdpa_bool_and_float_masks_and_dead_rows():
    q, k, v = (RNG.standard_normal(s) for s in ((2, 4, 3), (2, 5, 3), (2, 5, 3)))
    mask = RNG.random((2, 4, 5)) < 0.6
    mask[0, 1] = False                     # a fully masked row -> zeros (as torch)
    out = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), attn_mask=em.tensor(mask))
    ref = _ref_sdpa(q, k, v, np.where(mask, 0.0, -np.inf))
    np.testing.assert_allclose(_np(out), ref, rtol=1e-12, atol=1e-12)
    assert np.all(_np(out)[0, 1] == 0)
    fmask = RNG.standard_normal((4, 5))    # broadcast over the batch
    out = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), attn_mask=_t(fmask))
    np.testing.assert_allclose(_np(out), _ref_sdpa(q, k, v, fmask), rtol=1e-12, atol=1e-12)
    # gradients stay finite with a dead row
    qq = _t(q, grad=True)
    F.scaled_dot_product_attention(qq, _t(k), _t(v), attn_mask=em.tensor(mask)).sum().backward()
    assert np.isfinite(_np(qq.grad)).all() and np.all(_np(qq.grad)[0, 1] == 0)
    fmask[2] = -np.inf                     # a dead row in an additive mask: zeros, finite grads
    qq = _t(q, grad=True)
    out = F.scaled_dot_product_attention(qq, _t(k), _t(v), attn_mask=_t(fmask))
    np.testing.assert_allclose(_np(out), _ref_sdpa(q, k, v, fmask), rtol=1e-12, atol=1e-12)
    out.sum().backward()
    assert np.isfinite(_np(qq.grad)).all() and np.all(_np(qq.grad)[:, 2] == 0)


def test_sdpa_gqa_and_errors():
    q, k = RNG.standard_normal((1, 4, 3, 2)), RNG.standard_normal((1, 2, 5, 2))
    out = F.scaled_dot_product_attention(_t(q), _t(k), _t(k), enable_gqa=True)
    kk = np.repeat(k, 2, axis=1)
    np.testing.assert_allclose(_np(out), _ref_sdpa(q, kk, kk), rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal"):
        F.scaled_dot_product_attention(_t(q), _t(q), _t(q), attn_mask=em.ones(3, 3, dtype=em.bool),
                                       is_causal=True)
    with pytest.raises(ValueError, match="key"):
        F.scaled_dot_product_attention(_t(q), _t(q[..., :1]), _t(q))
    with pytest.raises(TypeError, match="bool or floating"):
        F.scaled_dot_product_attention(_t(q), _t(q), _t(q), attn_mask=em.ones(3, 3, dtype=em.int64))


def test_sdpa_dropout_on_weights():
    q, k = RNG.standard_normal((2, 4, 3)), RNG.standard_normal((2, 6, 3))
    eye = np.broadcast_to(np.eye(6), (2, 6, 6))      # value = I: the output IS the weights
    w = _ref_sdpa(q, k, eye)
    em.manual_seed(3)
    out = _np(F.scaled_dot_product_attention(_t(q), _t(k), _t(eye), dropout_p=0.5))
    kept = out != 0
    assert 0 < kept.sum() < kept.size
    np.testing.assert_allclose(out[kept], 2 * w[kept], rtol=1e-12)
    em.manual_seed(3)
    again = _np(F.scaled_dot_product_attention(_t(q), _t(k), _t(eye), dropout_p=0.5))
    np.testing.assert_array_equal(out, again)


def test_sdpa_gradcheck():
    q, k, v = (_t(RNG.standard_normal(s), grad=True) for s in ((1, 3, 2), (1, 4, 2), (1, 4, 2)))
    assert em.autograd.gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                                 (q, k, v))
    q3 = _t(RNG.standard_normal((1, 3, 2)), grad=True)
    assert em.autograd.gradcheck(
        lambda q, v: F.scaled_dot_product_attention(q, q, v, is_causal=True), (q3, v[:, :3]))
    mask = em.tensor(np.array([[True, False, True, True]] * 3))
    assert em.autograd.gradcheck(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v))


# ---------------------------------------------------------------- MultiheadAttention
def _ref_mha(m, x, mask=None):
    """Unbatched self-attention by hand from the module's weights (no torch)."""
    W, b = _np(m.in_proj_weight), _np(m.in_proj_bias)
    q, k, v = np.split(x @ W.T + b, 3, axis=-1)
    H, hd = m.num_heads, m.head_dim
    heads = [np.split(t, H, axis=-1) for t in (q, k, v)]
    outs, ws = [], []
    for h in range(H):
        s = heads[0][h] @ heads[1][h].T / math.sqrt(hd) + (0 if mask is None else mask)
        w = _ref_softmax(s)
        ws.append(w)
        outs.append(w @ heads[2][h])
    out = np.concatenate(outs, -1) @ _np(m.out_proj.weight).T + _np(m.out_proj.bias)
    return out, np.mean(ws, 0)


def test_mha_matches_numpy_reference_and_init():
    m = nn.MultiheadAttention(6, 3, dtype=em.float64)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    assert float(m.in_proj_bias.abs().max()) == 0 and float(m.out_proj.bias.abs().max()) == 0
    assert float(m.in_proj_weight.abs().max()) <= math.sqrt(6 / (6 + 18))
    x = RNG.standard_normal((4, 6))
    mask = np.where(RNG.random((4, 4)) < 0.3, -np.inf, 0.0)
    np.fill_diagonal(mask, 0.0)
    out, w = m(_t(x), _t(x), _t(x), attn_mask=_t(mask))
    rout, rw = _ref_mha(m, x, mask)
    np.testing.assert_allclose(_np(out), rout, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(w), rw, rtol=1e-12, atol=1e-12)
    out2, none = m(_t(x), _t(x), _t(x), attn_mask=_t(mask), need_weights=False)
    assert none is None
    np.testing.assert_allclose(_np(out2), rout, rtol=1e-12, atol=1e-12)


def test_mha_errors_and_shapes():
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(5, 2)
    m = nn.MultiheadAttention(4, 2, batch_first=True, kdim=3, vdim=5)
    assert m.in_proj_weight is None and tuple(m.k_proj_weight.shape) == (4, 3)
    out, w = m(em.randn(2, 3, 4), em.randn(2, 6, 3), em.randn(2, 6, 5),
               average_attn_weights=False)
    assert tuple(out.shape) == (2, 3, 4) and tuple(w.shape) == (2, 2, 3, 6)
    with pytest.raises(RuntimeError, match="is_causal"):
        m(em.randn(2, 3, 4), em.randn(2, 6, 3), em.randn(2, 6, 5), is_causal=True)
    with pytest.raises(ValueError, match="key_padding_mask"):
        m(em.randn(2, 3, 4), em.randn(2, 6, 3), em.randn(2, 6, 5),
          key_padding_mask=em.zeros(2, 5, dtype=em.bool))


def _from_torch(e, t):
    sd = {k: em.tensor(v.detach().numpy()) for k, v in t.state_dict().items()}
    assert list(e.state_dict()) == list(sd)
    e.load_state_dict(sd)


def _check_grads(e, t, rtol=1e-9, atol=1e-11):
    ep = dict(e.named_parameters())
    for n, p in t.named_parameters():
        np.testing.assert_allclose(_np(ep[n].grad), p.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=n)


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")
@pytest.mark.parametrize("kw", [dict(), dict(batch_first=True), dict(add_bias_kv=True),
                                dict(add_zero_attn=True, bias=False), dict(kdim=3, vdim=5)])
def test_mha_torch_parity(kw):
    torch = pytest.importorskip("torch")
    t = torch.nn.MultiheadAttention(4, 2, **kw).double()
    e = nn.MultiheadAttention(4, 2, dtype=em.float64, **kw)
    _from_torch(e, t)
    L, S, N, bf = 3, 5, 2, kw.get("batch_first", False)
    shape = (lambda n, d: (N, n, d)) if bf else (lambda n, d: (n, N, d))
    arrs = [RNG.standard_normal(shape(L, 4)), RNG.standard_normal(shape(S, kw.get("kdim", 4))),
            RNG.standard_normal(shape(S, kw.get("vdim", 4)))]
    kpm = RNG.random((N, S)) < 0.4
    kpm[:, 0] = False
    am = RNG.random((L, S)) < 0.3
    am[:, 1] = False
    cases = [dict(), dict(key_padding_mask=kpm),
             dict(attn_mask=am, key_padding_mask=kpm, need_weights=False),
             dict(attn_mask=RNG.standard_normal((N * 2, L, S)), key_padding_mask=kpm,
                  average_attn_weights=False)]
    for case in cases:
        tt = [torch.tensor(a, requires_grad=True) for a in arrs]
        ee = [_t(a, grad=True) for a in arrs]
        conv = lambda f: {k: f(v) if isinstance(v, np.ndarray) else v  # noqa: E731
                          for k, v in case.items()}
        to, tw = t(*tt, **conv(torch.tensor))
        eo, ew = e(*ee, **conv(em.tensor))
        np.testing.assert_allclose(_np(eo), to.detach().numpy(), rtol=1e-10, atol=1e-12)
        assert (ew is None) == (tw is None)
        if tw is not None:
            np.testing.assert_allclose(_np(ew), tw.detach().numpy(), rtol=1e-10, atol=1e-12)
        gw = RNG.standard_normal(tuple(to.shape))
        (to * torch.tensor(gw)).sum().backward()
        (eo * _t(gw)).sum().backward()
        for a, b in zip(ee, tt):
            np.testing.assert_allclose(_np(a.grad), b.grad.numpy(), rtol=1e-9, atol=1e-11)
        _check_grads(e, t)
        t.zero_grad()
        e.zero_grad()


def test_mha_torch_parity_self_attention_unbatched_causal():
    torch = pytest.importorskip("torch")
    t = torch.nn.MultiheadAttention(4, 2).double()
    e = nn.MultiheadAttention(4, 2, dtype=em.float64)
    _from_torch(e, t)
    x = RNG.standard_normal((5, 4))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    for nw in (True, False):
        to, _ = t(*[torch.tensor(x)] * 3, attn_mask=mask, is_causal=True, need_weights=nw)
        ex = _t(x)
        eo, _ = e(ex, ex, ex, attn_mask=_t(mask.numpy()), is_causal=True, need_weights=nw)
        np.testing.assert_allclose(_np(eo), to.detach().numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- transformer blocks
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first,activation", [(False, "relu"), (True, "gelu")])
def test_encoder_layer_torch_parity(norm_first, batch_first, activation):
    torch = pytest.importorskip("torch")
    kw = dict(dim_feedforward=16, batch_first=batch_first, norm_first=norm_first,
              activation=activation)
    t = torch.nn.TransformerEncoderLayer(8, 2, **kw).double().eval()
    e = nn.TransformerEncoderLayer(8, 2, dtype=em.float64, **kw).eval()
    _from_torch(e, t)
    x = RNG.standard_normal((2, 5, 8) if batch_first else (5, 2, 8))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    kpm = np.array([[False] * 5, [False, False, False, True, True]])
    for case in (dict(), dict(src_mask=mask, is_causal=True), dict(src_key_padding_mask=kpm)):
        tx, ex = torch.tensor(x, requires_grad=True), _t(x, grad=True)
        to = t(tx, **{k: torch.as_tensor(v) if k != "is_causal" else v for k, v in case.items()})
        eo = e(ex, **{k: em.tensor(np.asarray(v)) if k != "is_causal" else v
                      for k, v in case.items()})
        np.testing.assert_allclose(_np(eo), to.detach().numpy(), rtol=1e-10, atol=1e-12)
        to.pow(2).sum().backward()
        eo.pow(2).sum().backward()
        np.testing.assert_allclose(_np(ex.grad), tx.grad.numpy(), rtol=1e-9, atol=1e-11)
        _check_grads(e, t)
        t.zero_grad()
        e.zero_grad()


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_and_stacks_torch_parity(norm_first):
    torch = pytest.importorskip("torch")
    kw = dict(dim_feedforward=16, norm_first=norm_first)
    t = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, **kw), 2,
                                    torch.nn.LayerNorm(8)).double().eval()
    e = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, **kw), 2, nn.LayerNorm(8))
    e = e.double().eval()
    _from_torch(e, t)
    tgt, mem = RNG.standard_normal((4, 2, 8)), RNG.standard_normal((6, 2, 8))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
    mkpm = np.zeros((2, 6), bool)
    mkpm[1, 4:] = True
    tt = torch.tensor(tgt, requires_grad=True)
    et = _t(tgt, grad=True)
    to = t(tt, torch.tensor(mem), tgt_mask=mask, memory_key_padding_mask=torch.tensor(mkpm))
    eo = e(et, _t(mem), tgt_mask=_t(mask.numpy()), memory_key_padding_mask=em.tensor(mkpm))
    np.testing.assert_allclose(_np(eo), to.detach().numpy(), rtol=1e-10, atol=1e-12)
    to.pow(2).sum().backward()
    eo.pow(2).sum().backward()
    np.testing.assert_allclose(_np(et.grad), tt.grad.numpy(), rtol=1e-9, atol=1e-11)
    _check_grads(e, t)


def test_encoder_stack_deep_copies_and_full_transformer():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
    enc = nn.TransformerEncoder(layer, 2)
    assert enc.layers[0] is not layer and enc.layers[0].linear1.weight is not \
        enc.layers[1].linear1.weight
    assert len(list(enc.parameters())) == 2 * len(list(layer.parameters()))
    m = nn.Transformer.generate_square_subsequent_mask(3)
    assert _np(m).tolist() == [[0, -np.inf, -np.inf], [0, 0, -np.inf], [0, 0, 0]]
    torch = pytest.importorskip("torch")
    t = torch.nn.Transformer(8, 2, 1, 1, 16, batch_first=True).double().eval()
    e = nn.Transformer(8, 2, 1, 1, 16, batch_first=True, dtype=em.float64).eval()
    _from_torch(e, t)
    src, tgt = RNG.standard_normal((2, 5, 8)), RNG.standard_normal((2, 4, 8))
    tm = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
    ts = torch.tensor(src, requires_grad=True)   # grad on: keeps torch off its fast path
    to = t(ts, torch.tensor(tgt), tgt_mask=tm)
    eo = e(_t(src), _t(tgt), tgt_mask=_t(tm.numpy()))
    np.testing.assert_allclose(_np(eo), to.detach().numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(RuntimeError, match="batch number"):
        e(_t(src), _t(tgt[:1]))


def test_transformer_dropout_is_train_only():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.5)
    x = em.randn(5, 2, 8)
    em.manual_seed(0)
    a = layer(x)
    em.manual_seed(1)
    assert not np.allclose(_np(a), _np(layer(x)))
    layer.eval()
    np.testing.assert_array_equal(_np(layer(x)), _np(layer(x)))
