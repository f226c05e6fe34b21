"""Shared by the ``reduce-overhead`` conformance matrix (``test_cuda_graphs_matrix*.py``):
training runs in one compile mode, everything a step leaves behind as bits, and the
comparison with the default mode."""
import numpy as np

import ember as em

F = em.nn.functional
nn = em.nn
STEPS = 7


def _np(t):
    return None if t is None else t.detach().cpu().numpy().copy()


def _bits(x):
    """A tensor (or nested tuple of them, or a number) as comparable bits."""
    if isinstance(x, (tuple, list)):
        return tuple(_bits(v) for v in x)
    if isinstance(x, em.Tensor):
        a = _np(x)
        return ("tensor", a.dtype.str, a.shape, a.tobytes())
    return x


def _snap(model, opt) -> dict:
    """Everything a step leaves behind, by name: parameters, gradients, buffers and the
    optimizer's state (tensors as bits)."""
    out = {}
    idx = {}
    for i, (n, p) in enumerate(model.named_parameters()):
        idx[id(p)] = i
        out["param " + n] = _bits(p)
        out["grad " + n] = None if p.grad is None else _bits(p.grad)
    for n, b in model.named_buffers():
        out["buffer " + n] = _bits(b)
    if opt is not None:
        for p, st in opt.state.items():
            for k, v in st.items():
                out[f"opt {idx[id(p)]} {k}"] = _bits(v)
        out["lr"] = [g["lr"] for g in opt.param_groups]
    return out


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    bad = [k for k in want if got[k] != want[k]]
    assert not bad, f"differs from the default mode: {bad}"


def _entries(fn):
    return [e for e in fn._cache.values() if not e.eager and e.program is not None]


def _runner(fn):
    return _entries(fn)[-1].program.cuda_graph


def _data(n, shape=(6, 8), classes=4, seed=1):
    rng = np.random.default_rng(seed)
    return [(em.tensor(rng.standard_normal(shape).astype(np.float32)).to("cuda"),
             em.tensor(rng.integers(0, classes, shape[0])).to("cuda")) for _ in range(n)]


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


OPTS = {
    "sgd-momentum": lambda ps: em.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": lambda ps: em.optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: em.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
}


def _train(mode, make=_mlp, opt="adamw", step=None, data=None, between=None,
           steps=STEPS, sched=None):
    """Train ``make()`` with ``step(model, opt)(x, y)`` compiled in ``mode``: per call,
    the returned value (kept: converted at the end) and a snapshot; the compiled step."""
    em.manual_seed(0)
    model = make().to("cuda")
    o = (OPTS[opt] if isinstance(opt, str) else opt)(model.parameters())
    s = sched(o) if sched is not None else None
    fn = em.compile(step(model, o), mode=mode)
    kept, snaps = [], []
    for i, (x, y) in enumerate(data or _data(steps)):
        kept.append(fn(x, y))
        snaps.append(_snap(model, o))
        if s is not None:
            s.step()
        if between is not None:
            between(i, model)
    return [_bits(r) for r in kept], snaps, fn


def _check(mode_runs, replays):
    """Both runs equal bit for bit; the reduce-overhead run's runner replayed."""
    want, got = mode_runs
    assert got[0] == want[0], "returned values differ"
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    assert _runner(want[2]) is None
    g = _runner(got[2])
    assert g.failed is None and g.replays == replays, (g.failed, g.replays)
    return g


def _both(**kw):
    return _train(None, **kw), _train("reduce-overhead", **kw)


def _step_fn(set_to_none, returns):
    """A whole training step for ``_train``: forward, cross-entropy, backward, optimizer
    step, ``zero_grad(set_to_none)``; returns the loss, or (``"several"``) the detached
    loss, the logits and the count of right answers."""
    def make(model, opt):
        def step(x, y):
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=set_to_none)
            if returns == "loss":
                return loss
            return loss.detach(), out.detach(), (out.argmax(-1) == y).sum()
        return step
    return make


def _bn_mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.GELU(), nn.Linear(16, 4))


def _encoder():
    return nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)


def _compiled_fn(cm):
    return cm.forward


def _train_model(mode, make, data, x_eval, switch_at=(4,)):
    """A compiled model, eager loss/backward/AdamW; after every step ``model.eval()``, an
    evaluation under ``no_grad`` (a forward-only program of its own) and ``train()``; at
    ``switch_at`` also a train-mode call under ``no_grad`` (BatchNorm updates its
    running statistics: a third program)."""
    em.manual_seed(0)
    model = make().to("cuda")
    cm = em.compile(model, mode=mode)
    opt = OPTS["adamw"](model.parameters())
    kept, snaps = [], []
    for i, (x, y) in enumerate(data):
        out = cm(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        kept.append(loss.detach())
        cm.eval()
        with em.no_grad():
            kept.append(cm(x_eval))
        cm.train()
        if i in switch_at:
            with em.no_grad():
                kept.append(cm(x_eval))
        snaps.append(_snap(model, opt))
    return [_bits(r) for r in kept], snaps, _compiled_fn(cm)


def _model_data(make, n=8):
    if make is _encoder:
        rng = np.random.default_rng(2)
        data = [(em.tensor(rng.standard_normal((2, 5, 8)).astype(np.float32)).to("cuda"),
                 em.tensor(rng.integers(0, 8, (2, 5))).to("cuda")) for _ in range(n)]
        return data, em.tensor(rng.standard_normal((2, 5, 8)).astype(np.float32)).to("cuda")
    return _data(n), _data(1, seed=7)[0][0]


def _small():
    return nn.Sequential(nn.Linear(8, 4))
