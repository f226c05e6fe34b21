"""Warm starts (:mod:`ember.graph.warm_start`): a later compile of the same code over the
same state runs the cached program without tracing; anything that changes what the trace
would record (a hyper-parameter, a closure value, the model, the code) misses; a damaged
or dangling record is never trusted."""
import json
import os
import sys
import textwrap

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F
from ember.codegen import find_compiler
from ember.graph import disk_cache, warm_start

from ._processes import run_twice

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def wcache(monkeypatch, tmp_path):
    """The graph cache on with warm starts, over a fresh private folder; counters reset."""
    if find_compiler() is None:
        pytest.skip("no C compiler")
    d = tmp_path / "graphs"
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "1")
    monkeypatch.setenv("EMBER_GRAPH_CACHE_DIR", str(d))
    monkeypatch.setattr(disk_cache, "stats", {k: 0 for k in disk_cache.stats})
    monkeypatch.setattr(warm_start, "stats", {k: 0 for k in warm_start.stats})
    monkeypatch.setattr(disk_cache, "_warned", set())
    return d


def _setup(hidden=32, wd=0.01, lr=1e-2, scale=1.0, double=False):
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, hidden), nn.LayerNorm(hidden), nn.GELU(),
                          nn.Linear(hidden, 5))
    opt = ember.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.standard_normal((64, 16)).astype(np.float32))
    y = ember.tensor(rng.integers(0, 5, 64))

    if double:
        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y) * 2.0
            loss.backward()
            opt.step()
            return loss.detach()
    else:
        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y) * scale
            loss.backward()
            opt.step()
            return loss.detach()
    return ember.compile(step), model, x, y


def _train(n=4, **kw):
    """Losses and the parameters after each step."""
    step, model, x, y = _setup(**kw)
    losses, params = [], []
    for _ in range(n):
        losses.append(float(step(x, y)))
        params.append([p.detach().numpy().copy() for p in model.parameters()])
    return losses, params, step


def _notes(cf):
    return " | ".join(cf.explain().notes)


def _close(a, b):
    # NOTE: the compiled program vs the traced eager step: fused kernels round differently
    for pa, pb in zip(a, b):
        np.testing.assert_allclose(pa, pb, rtol=1e-5, atol=1e-6)


def test_second_compile_starts_warm(wcache):
    fresh, pf, s1 = _train()
    assert warm_start.stats["stored"] == 1 and warm_start.stats["hits"] == 0
    warm, pw, s2 = _train()
    assert warm_start.stats["hits"] == 1
    notes = _notes(s2)
    assert "ran untraced" in notes and "warm start" in notes and "warm start" not in _notes(s1)
    # the first call (creating AdamW's state) computes exactly what the traced call did
    assert warm[0] == fresh[0]
    for a, b in zip(pf[0], pw[0]):
        np.testing.assert_array_equal(a, b)
    # from the second call on, the same optimised program runs (in s1 from the third)
    assert str(s2.graph) == str(s1.graph)
    np.testing.assert_allclose(warm, fresh, rtol=1e-6)
    for k in range(1, 4):
        _close(pf[k], pw[k])
    assert len(s2.explain().captures) == 1          # nothing traced but the first call


def test_untraced_first_call_is_bitwise_a_traced_one(wcache):
    _train(2)
    # the same first call with the cache off (traced): same loss, same parameters, bitwise
    os.environ["EMBER_GRAPH_CACHE"] = "0"
    try:
        off, poff, _ = _train(1)
    finally:
        os.environ["EMBER_GRAPH_CACHE"] = "1"
    on, pon, s = _train(1)
    assert "ran untraced" in _notes(s)
    assert on == off
    for a, b in zip(poff[0], pon[0]):
        np.testing.assert_array_equal(a, b)


def test_learning_rate_is_read_not_baked_in(wcache):
    _train(3)
    warm, pw, s = _train(3, lr=1e-3)
    assert warm_start.stats["hits"] == 1               # lr is a graph input: same program
    os.environ["EMBER_GRAPH_CACHE"] = "0"
    try:
        ref, pr, _ = _train(3, lr=1e-3)
    finally:
        os.environ["EMBER_GRAPH_CACHE"] = "1"
    for k in range(3):
        _close(pr[k], pw[k])


@pytest.mark.parametrize("change", [{"wd": 0.1}, {"scale": 2.0}, {"hidden": 48},
                                    {"double": True}],
                         ids=["hyper-parameter", "closure value", "model", "code"])
def test_a_change_misses_and_traces(wcache, change):
    _train(3)
    hits = warm_start.stats["hits"]
    got, pg, s = _train(3, **change)
    assert warm_start.stats["hits"] == hits, "a changed step must not start warm"
    assert "warm start" not in _notes(s)
    os.environ["EMBER_GRAPH_CACHE"] = "0"
    try:
        ref, pr, _ = _train(3, **change)
    finally:
        os.environ["EMBER_GRAPH_CACHE"] = "1"
    assert got == ref                                  # traced like a fresh compile: bitwise
    for a, b in zip(pr[-1], pg[-1]):
        np.testing.assert_array_equal(a, b)


def _records(d, prefix="w"):
    return [d / n for n in os.listdir(d) if n.startswith(prefix) and n.endswith(".graph")]


def test_corrupt_record_is_rebuilt(wcache):
    fresh, _, _ = _train(3)
    (rec,) = _records(wcache)
    data = bytearray(rec.read_bytes())
    data[-3] ^= 0xFF
    rec.write_bytes(bytes(data))
    got, _, s = _train(3)
    assert warm_start.stats["hits"] == 0 and disk_cache.stats["rebuilt"] >= 1
    assert got == fresh and "warm start" not in _notes(s)
    _train(3)                                          # rewritten by the traced capture
    assert warm_start.stats["hits"] == 1


def test_record_without_its_graph_misses(wcache):
    fresh, _, _ = _train(3)
    for p in os.listdir(wcache):
        if p.endswith(".graph") and not p.startswith(("w", "u")):
            os.unlink(wcache / p)
    got, _, s = _train(3)
    assert warm_start.stats["hits"] == 0 and got == fresh


def test_wrong_hint_costs_one_untraced_call(wcache, monkeypatch):
    monkeypatch.setattr(warm_start, "known_unstable", lambda cf, sig: True)
    w = ember.randn(4, 3)

    @ember.compile
    def f(x):
        return (x @ w).relu().sum()
    x = ember.randn(5, 4)
    vals = [float(f(x)) for _ in range(3)]
    assert "ran untraced" in _notes(f) and len(f.graphs()) == 1
    np.testing.assert_allclose(vals, float((x @ w).relu().sum()), rtol=1e-6)


def test_trace_mode_writes_no_records(wcache, monkeypatch):
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "trace")
    _train(3)
    _train(3)
    assert warm_start.stats["stored"] == 0 and warm_start.stats["hits"] == 0
    assert _records(wcache) == [] and _records(wcache, "u") == []
    assert disk_cache.stats["hits"] == 1


CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    from graph.test_warm_start import _train
    from ember.graph import disk_cache, warm_start
    import hashlib
    losses, params, _ = _train(3)
    print(json.dumps({{"losses": [repr(v) for v in losses], "warm": warm_start.stats,
                      "env": hashlib.sha256(disk_cache.environment().encode()).hexdigest()}}))
""")


def test_new_process_starts_warm(wcache):
    env = dict(os.environ, EMBER_GRAPH_CACHE="1", EMBER_GRAPH_CACHE_DIR=str(wcache))
    code = CHILD.format(tests=os.path.join(ROOT, "tests"))
    runs = run_twice(code, env)
    assert runs[0]["warm"]["stored"] == 1 and runs[0]["warm"]["hits"] == 0
    assert runs[1]["warm"]["hits"] == 1 and runs[1]["warm"]["stored"] == 0
    assert runs[1]["losses"][0] == runs[0]["losses"][0]


def test_guards_of_a_warm_start_catch_a_replaced_parameter(wcache):
    _train(3)
    step, model, x, y = _setup()
    for _ in range(2):
        step(x, y)
    assert warm_start.stats["hits"] == 1
    old = model[0].weight
    model[0].weight = nn.Parameter(ember.zeros_like(old))
    step(x, y)
    assert len(step.explain().captures) == 2           # retraced: the guard saw it
    assert any("guard model.0.weight" in k for k in step.explain().recompiles[-1])
    # the backward reached the new parameter (a stale program would read the old one)
    assert model[0].weight.grad is not None


def _infer_setup(hidden=32):
    ember.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, hidden), nn.GELU(), nn.Linear(hidden, 3))
    model.eval()

    def predict(x):
        with ember.no_grad():
            return model(x).softmax(-1)
    return ember.compile(predict), model


def test_inference_function_starts_warm(wcache):
    x = ember.tensor(np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32))
    f, model = _infer_setup()
    fresh = [f(x).numpy().copy() for _ in range(2)]
    g, model2 = _infer_setup()
    warm = g(x).numpy()
    assert warm_start.stats["hits"] == 1 and "warm start" in _notes(g)
    np.testing.assert_allclose(warm, fresh[1], rtol=1e-6, atol=1e-7)
    with ember.no_grad():
        np.testing.assert_allclose(warm, model2(x).softmax(-1).numpy(), rtol=1e-5, atol=1e-6)


def _kw_fn(kw):
    class Sample:                 # a user object whose dict's keys no code names
        kwargs = kw

    s = Sample()

    def f(x):
        return (x.sum(**s.kwargs) * 2.0,)
    return ember.compile(f)


@pytest.mark.parametrize("second", [1, 0], ids=["other value", "same"])
def test_kwargs_read_by_unpacking_are_part_of_the_key(wcache, second):
    x = ember.tensor(np.arange(6.0).reshape(2, 3))
    f = _kw_fn({"dim": 0})
    f(x), f(x)
    g = _kw_fn({"dim": second})
    (out,) = g(x)
    np.testing.assert_array_equal(out.numpy(), x.numpy().sum(second) * 2.0)
    assert warm_start.stats["hits"] == (1 if second == 0 else 0)


def test_a_failing_warm_start_traces_instead(wcache, monkeypatch):
    fresh, _, _ = _train(3)

    def broken(*a, **k):
        raise RuntimeError("kernel library vanished")
    monkeypatch.setattr(sys.modules["ember.graph.replay"], "program", broken)
    with pytest.warns(disk_cache.KernelCacheWarning, match="warm start failed"):
        got, _, s = _train(3)
    assert got == fresh and warm_start.stats["hits"] == 0


def test_warm_start_keeps_the_output_layout(wcache):
    # the record carries each output's layout: a warm call (never traced) returns the
    # channels-last result a traced call returns
    x = np.random.default_rng(2).standard_normal((2, 8, 5, 5)).astype(np.float32)
    cl = ember.tensor(x).to(memory_format=ember.channels_last)

    def make():
        w = ember.tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(8, 1, 1))
        return ember.compile(lambda t: (t * w).exp())
    f = make()
    fresh = [f(cl) for _ in range(2)]
    g = make()
    warm = g(cl)
    assert warm_start.stats["hits"] == 1 and "warm start" in _notes(g)
    for y in fresh + [warm]:
        assert y.stride() == (200, 1, 40, 8)
    np.testing.assert_allclose(warm.numpy(), fresh[1].numpy(), rtol=1e-6)
