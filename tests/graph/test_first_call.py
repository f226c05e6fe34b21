"""A first call predicted to create optimizer state runs untraced on a cold cache
(:mod:`ember.graph.first_call`): same numerics as the traced call, the steady signature is
still captured at the second call, and a wrong guess only costs one traced call."""
import os

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F
from ember.graph import disk_cache, first_call, warm_start
from ember.graph.discover import discover

from .test_warm_start import _notes, wcache  # noqa: F401 - a fixture


def _setup(opt_cls=ember.optim.AdamW, step_opt=True, **opt_kw):
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 5))
    opt = opt_cls(model.parameters(), lr=1e-2, **opt_kw)
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.standard_normal((64, 16)).astype(np.float32))
    y = ember.tensor(rng.integers(0, 5, 64))

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if step_opt:
            opt.step()
        return loss.detach()
    return step, model, opt, x, y


def _run(n, compiled=True, **kw):
    step, model, opt, x, y = _setup(**kw)
    f = ember.compile(step) if compiled else step
    losses = [float(f(x, y)) for _ in range(n)]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], f


@pytest.mark.parametrize("opt_cls,kw,want", [
    (ember.optim.AdamW, {}, True), (ember.optim.Adam, {}, True),
    (ember.optim.SGD, {"momentum": 0.9}, True), (ember.optim.SGD, {}, False),
    (ember.optim.RMSprop, {}, True)])
def test_prediction_by_optimizer(opt_cls, kw, want):
    step, model, opt, x, y = _setup(opt_cls, **kw)
    assert first_call.predicts_unstable(discover(step, (x, y), {})) is want
    if want:     # once the state exists, nothing is predicted
        step(x, y)
        assert first_call.predicts_unstable(discover(step, (x, y), {})) is False


def test_cold_first_call_runs_untraced_and_bitwise(wcache):
    on, pon, f = _run(1)
    assert "may create optimizer state" in _notes(f)
    assert f.explain().captures == []                     # nothing recorded
    os.environ["EMBER_GRAPH_CACHE"] = "0"                 # the traced first call
    try:
        off, poff, g = _run(1)
    finally:
        os.environ["EMBER_GRAPH_CACHE"] = "1"
    assert len(g.explain().captures) == 1 and on == off
    for a, b in zip(pon, poff):
        np.testing.assert_array_equal(a, b)


def test_steady_signature_still_compiled_at_second_call(wcache):
    on, pon, f = _run(4)
    assert len(f.explain().captures) == 1 and f.graph is not None
    eager, peager, _ = _run(4, compiled=False)
    assert on[:2] == eager[:2]          # both traced calls are eager ones
    np.testing.assert_allclose(on, eager, rtol=1e-5)
    for a, b in zip(pon, peager):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert warm_start.stats["stored"] == 1 and disk_cache.stats["stored"] >= 1


def test_sgd_without_momentum_is_traced_at_once(wcache):
    _, _, f = _run(1, opt_cls=ember.optim.SGD)
    assert "ran untraced" not in _notes(f)
    assert len(f.explain().captures) == 1          # no state to create: traced as before


def test_wrong_guess_costs_one_traced_call(wcache):
    # reaches AdamW (no state) but never steps it: the guess is wrong, the signature stays
    on, pon, f = _run(3, step_opt=False)
    assert "may create optimizer state" in _notes(f)
    assert len(f.explain().captures) == 1          # traced at the second call, then replayed
    eager, peager, _ = _run(3, compiled=False, step_opt=False)
    assert on[:2] == eager[:2]
    np.testing.assert_allclose(on, eager, rtol=1e-6)


class _Attn(nn.Module):
    def __init__(self, dtype=ember.float32):
        super().__init__()
        self.qkv = nn.Linear(8, 24, dtype=dtype)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_attention_is_expected_from_the_code_it_reaches():
    m, mlp = _Attn(), nn.Sequential(nn.Linear(8, 8), nn.GELU())
    x = ember.randn(2, 5, 8)

    def step(x):
        return model(x).sum()
    for model, want in ((m, ["f32"]), (nn.Sequential(mlp, m), ["f32"]), (mlp, []),
                        (_Attn(ember.float64), ["f64"])):
        assert first_call.attention_dtypes(step, discover(step, (x,), {})) == want

    def direct(q):          # the function itself names it; no parameters: nothing to guess
        return F.scaled_dot_product_attention(q, q, q)
    assert first_call.attention_dtypes(direct, discover(direct, (x,), {})) == []


def test_prefetch_starts_attention_forward_and_backward(monkeypatch):
    from ember.codegen import cache
    calls = []
    monkeypatch.setattr(cache, "prefetch", lambda srcs, name="compile": calls.append(
        (name, len(srcs))))
    m = _Attn()
    x = ember.randn(2, 5, 8)

    def step(x):
        return m(x).sum()
    first_call.prefetch_kernels(step, discover(step, (x,), {}))
    # pool, launcher, attention forward, column sums, take_rows; the backward on a thread
    assert calls == [("compile", 5), ("attention-backward", 1)]
    calls.clear()
    mlp = nn.Linear(8, 8)
    first_call.prefetch_kernels(lambda x: mlp(x), discover(lambda x: mlp(x), (x,), {}))
    assert calls == [("compile", 4)]


def test_prefetched_attention_sources_are_the_ones_sdpa_loads(monkeypatch):
    from ember.codegen import attention_kernels as att, cache, find_compiler
    cc = find_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    batches = {}
    monkeypatch.setattr(cache, "prefetch", lambda srcs, name="compile": batches.update(
        {name: [s if isinstance(s, str) else s(cc) for s in srcs]}))
    m = _Attn()

    def step(x):
        return m(x).sum()
    first_call.prefetch_kernels(step, discover(step, (ember.randn(2, 5, 8),), {}))
    loaded, real = [], cache.load
    monkeypatch.setattr(cache, "load", lambda src, c: (loaded.append(src), real(src, c))[1])
    att.kernels()                           # (the tables _load fills)
    att._load("f32", "fwd")
    att._load("f32", "bwd")
    assert batches["compile"][2] in loaded and batches["attention-backward"][0] in loaded


def test_a_graph_break_is_found_at_the_traced_second_call(wcache):
    from ember.graph.trace import GraphBreak
    _, model, opt, x, y = _setup()

    def breaking(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.item())                  # reads a traced value into Python
    f = ember.compile(breaking, fullgraph=True)
    first = f(x, y)                                # untraced: runs, no graph to break
    assert isinstance(first, float) and "may create optimizer state" in _notes(f)
    with pytest.raises(GraphBreak):
        f(x, y)
