"""The fused recurrent layers (``ember/ops/rnn.py``) behind nn.RNN/LSTM/GRU and the cells:
fused == per-step composite (forward and every gradient), C step kernels == NumPy kernels,
and PyTorch parity when it is installed."""
import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn.modules import _rnn_fused as rnn_mod
from ember.ops import _rnn_cpu, rnn as rnn_ops

CONFIGS = [  # (class, kwargs)
    (nn.LSTM, {}), (nn.LSTM, {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    (nn.LSTM, {"bias": False}),
    (nn.GRU, {}), (nn.GRU, {"num_layers": 2, "bidirectional": True}),
    (nn.GRU, {"bias": False, "batch_first": True}),
    (nn.RNN, {"num_layers": 2}), (nn.RNN, {"nonlinearity": "relu", "bidirectional": True}),
]


def _run(model, x, states, fused, monkeypatch):
    monkeypatch.setattr(rnn_mod, "_FUSED", fused)
    for p in model.parameters():
        p.grad = None
    xs = x.detach().requires_grad_()
    st = tuple(s.detach().requires_grad_() for s in states)
    out, h = model(xs, st if isinstance(model, nn.LSTM) else st[0])
    hs = h if isinstance(h, tuple) else (h,)
    loss = (out * out.detach().cos()).sum() + sum((v * (k + 2)).sum() for k, v in enumerate(hs))
    loss.backward()
    grads = [xs.grad] + [s.grad for s in st] + [p.grad for p in model.parameters()]
    return [out] + list(hs), grads


@pytest.mark.parametrize("cls,kw", CONFIGS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_fused_matches_composite(cls, kw, monkeypatch):
    em.manual_seed(0)
    model = cls(3, 5, dtype=em.float64, **kw)
    D = 2 if model.bidirectional else 1
    x = em.randn(4, 6, 3, dtype=em.float64)          # (T, N, F) or (N, T, F): both 3-D
    N = x.shape[0] if model.batch_first else x.shape[1]
    states = [em.randn(model.num_layers * D, N, 5, dtype=em.float64)
              for _ in range(2 if cls is nn.LSTM else 1)]
    fo, fg = _run(model, x, states, True, monkeypatch)
    co, cg = _run(model, x, states, False, monkeypatch)
    for a, b in zip(fo + fg, co + cg):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    assert fo[0].is_contiguous()


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell, nn.RNNCell])
def test_cells_fused_match_composite(cls, monkeypatch):
    em.manual_seed(1)
    cell = cls(3, 4, dtype=em.float64)
    x = em.randn(5, 3, dtype=em.float64)
    hx = tuple(em.randn(5, 4, dtype=em.float64) for _ in range(2 if cls is nn.LSTMCell else 1))
    res = []
    for fused in (True, False):
        monkeypatch.setattr(rnn_mod, "_FUSED", fused)
        cell.zero_grad()
        xs = x.detach().requires_grad_()
        out = cell(xs, hx if cls is nn.LSTMCell else hx[0])
        outs = out if isinstance(out, tuple) else (out,)
        sum((o * (k + 1.5)).sum() for k, o in enumerate(outs)).backward()
        res.append([*outs, xs.grad, *(p.grad for p in cell.parameters())])
    for a, b in zip(*res):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_fused_path_is_taken():
    lstm = nn.LSTM(3, 4)
    out, _ = lstm(em.randn(2, 1, 3, requires_grad=True))
    names = set()
    stack = [out.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in names:
            continue
        names.add(n)
        stack.extend(f for f, _ in getattr(n, "next_functions", ()) if f is not None)
    assert "LstmLayerBackward" in {n.name() for n in names}


_C_CASES = [(np.float64, 1e-12), (np.float32, 2e-5)]


@pytest.mark.parametrize("dtype,tol", _C_CASES, ids=["float64", "float32"])
def test_c_step_kernels_match_numpy(dtype, tol):
    from ember.codegen import rnn_kernels
    if rnn_kernels.kernels() is None:
        pytest.skip("no C compiler: the primitives run their NumPy kernels")
    rng = np.random.default_rng(0)
    L, N, H = 7, 3, 9
    r = lambda *s: rng.standard_normal(s).astype(dtype)       # noqa: E731
    # a strided input projection (every other column) and a transposed-then-copied state
    x, h0, c0, w = r(L, N, 8 * H)[..., ::2], r(H, N).T, r(N, H), r(4 * H, H)
    ref = rnn_ops._lstm_np(np, x, h0, c0, w)
    out = _rnn_cpu.lstm(np, x, h0, c0, w, rnn_kernels)
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    g = r(L, N, 6 * H)
    got = tuple(np.full(s, np.nan, dtype) for s in ((L, N, 4 * H), (N, H), (N, H)))
    _rnn_cpu.lstm_grad(np, g, ref, h0, c0, w, rnn_kernels, *got)
    for a, b in zip(got, rnn_ops._lstm_bptt_np(np, g, ref, h0, c0, w)):
        np.testing.assert_allclose(a, b, rtol=tol * 10, atol=tol * 10)
    x, w, b = r(L, N, 3 * H), r(3 * H, H), r(3 * H)
    ref = rnn_ops._gru_np(np, x, h0, w, b)
    np.testing.assert_allclose(_rnn_cpu.gru(np, x, h0, w, b, None), ref, rtol=tol, atol=tol)
    g = r(L, N, H)[:, :, ::-1]
    np.testing.assert_allclose(_rnn_cpu.gru_grad(np, g, ref, x, h0, w, b, None),
                               rnn_ops._gru_grad_np(np, g, ref, x, h0, w, b),
                               rtol=tol * 10, atol=tol * 10)


def test_nan_propagates_like_composite(monkeypatch):
    lstm = nn.LSTM(2, 3, dtype=em.float64)
    x = em.randn(3, 1, 2, dtype=em.float64)
    x[1, 0, 0] = float("nan")
    outs = []
    for fused in (True, False):
        monkeypatch.setattr(rnn_mod, "_FUSED", fused)
        outs.append(lstm(x)[0].detach().numpy())
    np.testing.assert_array_equal(np.isnan(outs[0]), np.isnan(outs[1]))
    assert np.isnan(outs[0][1:]).all() and not np.isnan(outs[0][0]).any()


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_matches_torch(name):
    torch = pytest.importorskip("torch")
    kw = {"num_layers": 2, "bidirectional": True, "batch_first": True}
    em.manual_seed(0)
    mine = getattr(nn, name)(3, 4, dtype=em.float64, **kw)
    ref = getattr(torch.nn, name)(3, 4, dtype=torch.float64, **kw)
    with torch.no_grad():
        for n, p in ref.named_parameters():
            p.copy_(torch.from_numpy(getattr(mine, n).detach().numpy().copy()))
    x = np.random.default_rng(2).standard_normal((2, 5, 3))
    h0 = np.random.default_rng(3).standard_normal((4, 2, 4))
    ex, tx = em.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    eh, th = em.tensor(h0, requires_grad=True), torch.tensor(h0, requires_grad=True)
    if name == "LSTM":
        (eo, (ehn, ecn)), (to, (thn, tcn)) = mine(ex, (eh, eh * 0.5)), ref(tx, (th, th * 0.5))
        (eo.sum() + ehn.sum() * 2 + ecn.sum() * 3).backward()
        (to.sum() + thn.sum() * 2 + tcn.sum() * 3).backward()
    else:
        (eo, ehn), (to, thn) = mine(ex, eh), ref(tx, th)
        (eo.sum() + ehn.sum() * 2).backward()
        (to.sum() + thn.sum() * 2).backward()
    np.testing.assert_allclose(eo.detach().numpy(), to.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(eh.grad.numpy(), th.grad.numpy(), rtol=1e-10, atol=1e-12)
    for n, p in ref.named_parameters():
        np.testing.assert_allclose(getattr(mine, n).grad.numpy(), p.grad.numpy(),
                                   rtol=1e-10, atol=1e-12, err_msg=n)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_compiled_training_step_matches_eager(cls):
    F = nn.functional

    def build():
        em.manual_seed(0)
        m = nn.ModuleDict({"emb": nn.Embedding(16, 8), "out": nn.Linear(12, 16),
                           "rnn": cls(8, 12, num_layers=2, batch_first=True)})
        return m, em.optim.Adam(m.parameters(), lr=1e-2)

    def make(m, opt):
        def step(x, y):
            opt.zero_grad()
            h, _ = m["rnn"](m["emb"](x))
            loss = F.cross_entropy(m["out"](h).reshape(-1, 16), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss.detach()
        return step
    x, y = em.randint(0, 16, (4, 6)), em.randint(0, 16, (4, 6))
    (m1, o1), (m2, o2) = build(), build()
    eager, compiled = make(m1, o1), em.compile(make(m2, o2), fullgraph=True)
    for _ in range(3):
        np.testing.assert_allclose(float(compiled(x, y)), float(eager(x, y)), rtol=1e-5)
    layer = "lstm_layer" if cls is nn.LSTM else "gru_layer"
    assert {layer, layer + "_grad"} <= {n.op.name for n in compiled.graph.nodes}
    np.testing.assert_allclose(m2["rnn"].weight_hh_l1.detach().numpy(),
                               m1["rnn"].weight_hh_l1.detach().numpy(), rtol=1e-4, atol=1e-6)
