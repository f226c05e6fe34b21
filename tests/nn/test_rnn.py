"""RNN / LSTM / GRU and their cells: NumPy references, gradcheck, PyTorch parity (if installed)."""
import math

import numpy as np
import pytest

import ember as em
from ember import nn

RNG = np.random.default_rng(0)


def _np(t):
    return t.detach().numpy()


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


# ---------------------------------------------------------------- NumPy reference cells
def _ref_rnn(x, h, wih, whh, bih, bhh, act=np.tanh):
    return act(x @ wih.T + bih + h @ whh.T + bhh)


def _ref_lstm(x, h, c, wih, whh, bih, bhh):
    g = x @ wih.T + bih + h @ whh.T + bhh
    i, f, gg, o = np.split(g, 4, axis=-1)
    c = _sig(f) * c + _sig(i) * np.tanh(gg)
    return _sig(o) * np.tanh(c), c


def _ref_gru(x, h, wih, whh, bih, bhh):
    xr, xz, xn = np.split(x @ wih.T + bih, 3, axis=-1)
    hr, hz, hn = np.split(h @ whh.T + bhh, 3, axis=-1)
    r, z = _sig(xr + hr), _sig(xz + hz)
    n = np.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def _cell_weights(cell):
    return [_np(getattr(cell, n)) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]


def test_cells_match_numpy_reference():
    x, h, c = (RNG.standard_normal(s) for s in ((3, 4), (3, 5), (3, 5)))
    ex, eh, ec = (em.tensor(a) for a in (x, h, c))
    cell = nn.RNNCell(4, 5, dtype=em.float64)
    np.testing.assert_allclose(_np(cell(ex, eh)), _ref_rnn(x, h, *_cell_weights(cell)),
                               rtol=1e-12, atol=1e-12)
    cell = nn.RNNCell(4, 5, nonlinearity="relu", dtype=em.float64)
    np.testing.assert_allclose(_np(cell(ex, eh)), _ref_rnn(x, h, *_cell_weights(cell),
                                                           act=lambda v: np.maximum(v, 0)),
                               rtol=1e-12, atol=1e-12)
    cell = nn.LSTMCell(4, 5, dtype=em.float64)
    h1, c1 = cell(ex, (eh, ec))
    rh, rc = _ref_lstm(x, h, c, *_cell_weights(cell))
    np.testing.assert_allclose(_np(h1), rh, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(c1), rc, rtol=1e-12, atol=1e-12)
    cell = nn.GRUCell(4, 5, dtype=em.float64)
    np.testing.assert_allclose(_np(cell(ex, eh)), _ref_gru(x, h, *_cell_weights(cell)),
                               rtol=1e-12, atol=1e-12)


def test_cells_unbatched_default_state_and_no_bias():
    cell = nn.GRUCell(4, 5, bias=False, dtype=em.float64)
    assert cell.bias_ih is None and [n for n, _ in cell.named_parameters()] == \
        ["weight_ih", "weight_hh"]
    x = RNG.standard_normal(4)
    out = cell(em.tensor(x))
    assert tuple(out.shape) == (5,)
    w = [_np(cell.weight_ih), _np(cell.weight_hh), 0.0, 0.0]
    np.testing.assert_allclose(_np(out), _ref_gru(x[None], np.zeros((1, 5)), *w)[0],
                               rtol=1e-12, atol=1e-12)
    h, c = nn.LSTMCell(4, 5)(em.randn(4))
    assert tuple(h.shape) == tuple(c.shape) == (5,)


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_sequence_module_matches_numpy_unroll(mode, bidirectional):
    """Two layers, unrolled by hand with the reference cells (no torch needed)."""
    m = getattr(nn, mode)(3, 4, num_layers=2, bidirectional=bidirectional, dtype=em.float64)
    L, N, D = 4, 2, 2 if bidirectional else 1
    x = RNG.standard_normal((L, N, 3))
    out, hn = m(em.tensor(x))
    if mode == "LSTM":
        hn, cn = hn
    inp, finals = x, []
    for layer in range(2):
        outs = []
        for d, sfx in enumerate(["", "_reverse"][:D]):
            w = [_np(getattr(m, f"{n}_l{layer}{sfx}"))
                 for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            h, c, seq = np.zeros((N, 4)), np.zeros((N, 4)), [None] * L
            for t in (range(L - 1, -1, -1) if d else range(L)):
                if mode == "LSTM":
                    h, c = _ref_lstm(inp[t], h, c, *w)
                else:
                    h = (_ref_rnn if mode == "RNN" else _ref_gru)(inp[t], h, *w)
                seq[t] = h
            outs.append(np.stack(seq))
            finals.append((h, c))
        inp = np.concatenate(outs, -1)
    np.testing.assert_allclose(_np(out), inp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(hn), np.stack([f[0] for f in finals]), rtol=1e-12,
                               atol=1e-12)
    if mode == "LSTM":
        np.testing.assert_allclose(_np(cn), np.stack([f[1] for f in finals]), rtol=1e-12,
                                   atol=1e-12)


def test_parameter_names_shapes_and_init():
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    names = [n for n, _ in m.named_parameters()]
    assert names[:5] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                         "weight_ih_l0_reverse"]
    assert tuple(m.weight_ih_l1.shape) == (16, 8) and tuple(m.weight_hh_l1_reverse.shape) == (16, 4)
    assert len(m.all_weights) == 4 and len(m.all_weights[0]) == 4
    big = nn.GRU(2, 64)
    bound = 1 / math.sqrt(64)
    for p in big.parameters():
        assert float(p.abs().max()) <= bound
    assert float(big.weight_hh_l0.abs().max()) > 0.9 * bound
    assert repr(nn.GRU(2, 3, num_layers=2, batch_first=True)) == \
        "GRU(2, 3, num_layers=2, batch_first=True)"


def test_batch_first_unbatched_and_initial_state():
    m = nn.GRU(3, 4, num_layers=2, batch_first=True, dtype=em.float64)
    x = em.tensor(RNG.standard_normal((2, 5, 3)))
    h0 = em.tensor(RNG.standard_normal((2, 2, 4)))
    out, hn = m(x, h0)
    assert tuple(out.shape) == (2, 5, 4) and tuple(hn.shape) == (2, 2, 4)
    out1, hn1 = m(x[1], h0[:, 1])   # unbatched (L, F) with batch_first: same numbers
    np.testing.assert_allclose(_np(out1), _np(out[1]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(hn1), _np(hn[:, 1]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(out[:, -1]), _np(hn[-1]), rtol=1e-12, atol=1e-12)


def test_errors():
    m = nn.LSTM(3, 4)
    with pytest.raises(ValueError, match="2D or 3D"):
        m(em.randn(3))
    with pytest.raises(RuntimeError, match="input_size"):
        m(em.randn(2, 1, 5))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 2, 4\)"):
        m(em.randn(5, 2, 3), (em.zeros(1, 3, 4), em.zeros(1, 3, 4)))
    with pytest.raises(RuntimeError, match="2-D"):
        nn.GRU(3, 4)(em.randn(5, 3), em.zeros(1, 1, 4))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="dropout"):
        nn.GRU(3, 4, dropout=1.5)
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        nn.GRU(3, 4, dropout=0.5)
    with pytest.raises(ValueError, match="input_size"):
        nn.GRUCell(3, 4)(em.randn(2, 5))
    with pytest.raises(TypeError, match="tuple"):
        nn.LSTMCell(3, 4)(em.randn(3), em.zeros(2, 4))


def test_dropout_between_layers_train_only():
    m = nn.RNN(3, 50, num_layers=2, dropout=0.5, dtype=em.float64)
    x = em.tensor(RNG.standard_normal((3, 2, 3)))
    em.manual_seed(0)
    a = m(x)[0]
    em.manual_seed(1)
    b = m(x)[0]
    assert not np.allclose(_np(a), _np(b))
    m.eval()
    np.testing.assert_array_equal(_np(m(x)[0]), _np(m(x)[0]))


def test_gradcheck_lstm_cell_and_gru_sequence():
    cell = nn.LSTMCell(2, 3, dtype=em.float64)
    x, h, c = (em.tensor(RNG.standard_normal(s), requires_grad=True)
               for s in ((2, 2), (2, 3), (2, 3)))
    assert em.autograd.gradcheck(lambda x, h, c: cell(x, (h, c))[1], (x, h, c))
    assert em.autograd.gradcheck(lambda x, h, c: cell(x, (h, c))[0], (x, h, c))

    gru = nn.GRU(2, 2, bidirectional=True, dtype=em.float64)
    xs = em.tensor(RNG.standard_normal((3, 1, 2)), requires_grad=True)
    h0 = em.tensor(RNG.standard_normal((2, 1, 2)), requires_grad=True)
    assert em.autograd.gradcheck(lambda xs, h0: gru(xs, h0)[0], (xs, h0))


def test_gradcheck_wrt_weights():
    """Parameters as gradcheck inputs through a functional re-binding of the weights."""
    from ember.nn.modules.rnn import _lstm_step, _project
    x = em.tensor(RNG.standard_normal((2, 2)), requires_grad=True)
    h, c = em.tensor(RNG.standard_normal((2, 3))), em.tensor(RNG.standard_normal((2, 3)))
    wih, whh = (em.tensor(RNG.standard_normal(s) * 0.5, requires_grad=True)
                for s in ((12, 2), (12, 3)))
    bih, bhh = (em.tensor(RNG.standard_normal(12) * 0.1, requires_grad=True) for _ in range(2))

    def f(x, wih, whh, bih, bhh):
        h1, c1 = _lstm_step(_project(x, wih, bih, bhh, "LSTM"), h, c, whh.t())
        return h1 * 2 + c1
    assert em.autograd.gradcheck(f, (x, wih, whh, bih, bhh))


# ---------------------------------------------------------------- PyTorch parity
def _load_from_torch(em_mod, t_mod):
    sd = {k: em.tensor(v.detach().numpy()) for k, v in t_mod.state_dict().items()}
    assert list(em_mod.state_dict()) == list(sd)
    em_mod.load_state_dict(sd)


def _compare_grads(em_mod, t_mod):
    ep = dict(em_mod.named_parameters())
    for n, p in t_mod.named_parameters():
        np.testing.assert_allclose(_np(ep[n].grad), p.grad.numpy(), rtol=1e-9, atol=1e-11,
                                   err_msg=n)


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("layers,bidir,batch_first,with_h0", [
    (1, False, False, False), (2, True, True, True), (2, False, True, False),
    (1, True, False, True)])
def test_torch_parity(mode, layers, bidir, batch_first, with_h0):
    torch = pytest.importorskip("torch")
    kw = dict(num_layers=layers, bidirectional=bidir, batch_first=batch_first)
    if mode == "RNN" and layers == 2:
        kw["nonlinearity"] = "relu"
    t = getattr(torch.nn, mode)(3, 4, **kw).double()
    e = getattr(nn, mode)(3, 4, dtype=em.float64, **kw)
    _load_from_torch(e, t)
    x = RNG.standard_normal((2, 5, 3))
    D = (2 if bidir else 1) * layers
    N = 2 if batch_first else 5
    hx = [RNG.standard_normal((D, N, 4)) for _ in range(2 if mode == "LSTM" else 1)]
    tx = torch.tensor(x, requires_grad=True)
    ex = em.tensor(x, requires_grad=True)
    th = [torch.tensor(h, requires_grad=True) for h in hx]
    eh = [em.tensor(h, requires_grad=True) for h in hx]
    targ = (tuple(th) if mode == "LSTM" else th[0]) if with_h0 else None
    earg = (tuple(eh) if mode == "LSTM" else eh[0]) if with_h0 else None
    to, tst = t(tx, targ)
    eo, est = e(ex, earg)
    tst = tst if mode == "LSTM" else (tst,)
    est = est if mode == "LSTM" else (est,)
    np.testing.assert_allclose(_np(eo), to.detach().numpy(), rtol=1e-10, atol=1e-12)
    for a, b in zip(est, tst):
        np.testing.assert_allclose(_np(a), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    gw = RNG.standard_normal(tuple(to.shape))
    # NOTE: the loss weighs the output and every final state, so all paths get gradient.
    t_loss = (to * torch.tensor(gw)).sum() + sum(s.sum() * (i + 2) for i, s in enumerate(tst))
    e_loss = (eo * em.tensor(gw)).sum() + sum(s.sum() * (i + 2) for i, s in enumerate(est))
    t_loss.backward()
    e_loss.backward()
    np.testing.assert_allclose(_np(ex.grad), tx.grad.numpy(), rtol=1e-9, atol=1e-11)
    if with_h0:
        for a, b in zip(eh, th):
            np.testing.assert_allclose(_np(a.grad), b.grad.numpy(), rtol=1e-9, atol=1e-11)
    _compare_grads(e, t)


def test_torch_parity_lstm_proj_and_cells():
    torch = pytest.importorskip("torch")
    t = torch.nn.LSTM(3, 4, num_layers=2, proj_size=2, bidirectional=True).double()
    e = nn.LSTM(3, 4, num_layers=2, proj_size=2, bidirectional=True, dtype=em.float64)
    _load_from_torch(e, t)
    x = RNG.standard_normal((4, 2, 3))
    to, (th, tc) = t(torch.tensor(x))
    eo, (eh, ec) = e(em.tensor(x))
    for a, b in ((eo, to), (eh, th), (ec, tc)):
        np.testing.assert_allclose(_np(a), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    for name in ("RNNCell", "LSTMCell", "GRUCell"):
        tcell, ecell = getattr(torch.nn, name)(3, 4).double(), getattr(nn, name)(3, 4,
                                                                                dtype=em.float64)
        _load_from_torch(ecell, tcell)
        xi = RNG.standard_normal((2, 3))
        tout, eout = tcell(torch.tensor(xi)), ecell(em.tensor(xi))
        tout = tout[1] if name == "LSTMCell" else tout
        eout = eout[1] if name == "LSTMCell" else eout
        np.testing.assert_allclose(_np(eout), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
