"""The memory planner: the peak it predicts before a compiled graph runs is the peak the
allocator measures while it runs (issue 5 item 3), and the executor counts its buffers.

The allocator counts every tensor alive; a plan counts the graph's inputs and what the
program allocates. So a run is measured as ``peak - (current at start - the inputs)``:
whatever else the process keeps alive is taken out. Old gradients that the step replaces
are released before it runs (as eager ``zero_grad`` does), so they are taken out too.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.graph.memory_plan import plan as plan_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from train import WORKLOADS  # noqa: E402
from compile import train_step  # noqa: E402


def _step_for(model, opt):
    return train_step(em, model, opt)      # the step bench/compile.py times


def _measure(call, params=()):
    """Allocator peak of ``call()`` above what was alive and is not released by it."""
    em.reset_peak_memory_stats()
    start = em.memory_stats()["current_bytes"]
    start -= sum(p.grad._storage.nbytes() for p in params if p.grad is not None)
    out = call()
    return em.memory_stats()["peak_bytes"] - start, out


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_training_step_planned_peak_matches_measured(name):
    wl = WORKLOADS[name]
    size = dict(wl.tiny, batch=32)
    em.manual_seed(0)
    model, opt = wl.build(em, **size)
    x, y = wl.data(np.random.default_rng(0), **size)
    x, y = em.tensor(x), em.tensor(y)
    f = em.compile(_step_for(model, opt), fullgraph=True)
    f(x, y)                                   # creates optimizer state: traced again next
    plan = f.memory_plan(x, y)                # the steady signature, captured not run
    assert plan.peak_bytes > plan.input_bytes > 0
    got, _ = _measure(lambda: f(x, y), list(model.parameters()))
    measured = got + plan.input_bytes
    assert abs(measured - plan.peak_bytes) <= 0.05 * plan.peak_bytes, (measured, plan)
    assert sum(plan.breakdown.values()) <= plan.peak_bytes
    # the table names the biggest buffers with the user's source line
    table = plan.table(5)
    assert len(table.splitlines()) == 6 and ".py:" in table


def test_forward_only_models_planned_peak_matches_measured():
    em.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(16 * 8 * 8, 10))
    mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.Tanh(),
                        nn.Linear(256, 10))
    for model, x in ((cnn, em.randn(32, 3, 16, 16)), (mlp, em.randn(128, 64))):
        with em.no_grad():
            f = em.compile(model)
            plan = f.memory_plan(x)
            got, out = _measure(lambda: f(x))
            measured = got + plan.input_bytes
            assert abs(measured - plan.peak_bytes) <= 0.05 * plan.peak_bytes, (measured, plan)
            np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_forward_with_compiled_backward_plan_matches_measured():
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 8))
    x = em.randn(256, 64)
    f = em.compile(model)
    f(x).sum().backward()
    for p in model.parameters():
        p.grad = None
    plan = f.memory_plan(x)
    assert plan.saved_bytes > 0
    got, _ = _measure(lambda: f(x).sum().backward())
    measured = got + plan.input_bytes
    assert abs(measured - plan.peak_bytes) <= 0.05 * plan.peak_bytes, (measured, plan)


def test_executor_counts_its_buffers_and_releases_them():
    em.manual_seed(0)
    w = em.randn(512, 512)

    def f(x):
        h = (x @ w).relu()
        return (h * 2.0 + 1.0).sum()
    cf = em.compile(f)
    x = em.randn(512, 512)
    cf(x)
    before = em.memory_stats()
    em.reset_peak_memory_stats()
    out = cf(x)
    after = em.memory_stats()
    # the call made at least one 1 MiB buffer, and left only its 0-d result counted
    assert after["peak_bytes"] - before["current_bytes"] >= 512 * 512 * 4
    assert after["current_bytes"] - before["current_bytes"] == out._storage.nbytes()
    assert after["num_allocs"] > before["num_allocs"]


def test_memory_limit_applies_inside_compiled_graphs():
    em.manual_seed(0)
    w = em.randn(256, 256)
    cf = em.compile(lambda x: ((x @ w) @ w).sum())
    x = em.randn(256, 256)
    cf(x)
    cur = em.memory_stats()["current_bytes"]
    em.set_memory_limit(cur + 1000)
    try:
        with pytest.raises(MemoryError, match="out of memory"):
            cf(x)
    finally:
        em.set_memory_limit(None)
    assert em.memory_stats()["current_bytes"] == cur      # nothing leaked by the error


def test_plan_reuses_dead_buffers_and_writes_in_place_without_changing_results():
    em.manual_seed(0)
    w1, w2 = em.randn(64, 64, dtype=em.float64), em.randn(64, 64, dtype=em.float64)

    def f(x):
        a = (x @ w1).exp()          # dies in the add: in place
        b = a + 1.0
        c = b @ w2                  # same size as dead buffers: written into one
        return (c * c).sqrt() - x
    x = em.randn(64, 64, dtype=em.float64)
    want = f(x).numpy()
    cf = em.compile(f, passes=[])
    cf(x)
    got = cf(x).numpy()
    np.testing.assert_array_equal(got, want)
    plan = cf.memory_plan()
    kinds = set(plan.kind.values())
    assert "inplace" in kinds and "reuse" in kinds
    assert plan.peak_bytes == plan.input_bytes + max(plan.timeline)


def test_a_buffer_a_view_still_reads_is_never_overwritten():
    em.manual_seed(0)

    def f(x):
        a = x.exp()
        v = a.t()                   # a view of a's buffer, read after a's last direct use
        b = a.neg()                 # a's last direct use: must not write into a
        return b + v
    x = em.randn(16, 16)
    cf = em.compile(f, passes=[])
    cf(x)
    np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
    g = cf.graph
    p = plan_graph(g)
    neg = next(n for n in g.nodes if n.op.name == "neg")
    assert p.kind[neg.outs[0].id] != "inplace"


def test_memory_plan_before_a_call_needs_arguments():
    cf = em.compile(lambda x: x + 1)
    with pytest.raises(em.graph.GraphError if hasattr(em.graph, "GraphError") else Exception,
                       match="nothing captured"):
        cf.memory_plan()


def test_state_written_back_is_updated_in_place_not_copied():
    """Gradients accumulated into existing ``.grad`` (and parameters / Adam moments
    updated by the step) are computed straight into those tensors: the plan holds no
    output bytes for them, the measured peak matches, results equal eager bitwise."""
    from ember.graph.passes import EXACT_PASSES

    def build():
        em.manual_seed(0)
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
    x = em.randn(32, 64)
    eager, model = build(), build()
    for m in (eager, model):
        m(x).sum().backward()                 # gradients exist: later steps accumulate

    def acc(t):
        model(t).sum().backward()
    f = em.compile(acc, passes=EXACT_PASSES)
    f(x)
    plan = f.memory_plan(x)
    grads = [p.grad for p in model.parameters()]
    arrays = [g._data for g in grads]
    assert plan.breakdown["outputs"] == 0, plan
    got, _ = _measure(lambda: f(x))
    assert got + plan.input_bytes == plan.peak_bytes, (got, plan)
    for _ in range(2):                        # the capture call and the measured one
        eager(x).sum().backward()
    for p, q, g, a in zip(model.parameters(), eager.parameters(), grads, arrays):
        assert p.grad is g and p.grad._data is a           # the same tensor, updated
        assert np.array_equal(p.grad.numpy(), q.grad.numpy())
    # an Adam step: parameters and moments are updated where they live
    opt = em.optim.Adam(model.parameters(), lr=1e-3)
    eopt = em.optim.Adam(eager.parameters(), lr=1e-3)

    def step(t):
        opt.zero_grad()
        model(t).sum().backward()
        opt.step()
    s = em.compile(step, passes=EXACT_PASSES)
    for _ in range(3):
        s(x)
        eopt.zero_grad()
        eager(x).sum().backward()
        eopt.step()
    plan = s.memory_plan(x)
    assert plan.kind and any(plan.src.get(v.id) in {i.id for i in plan.graph.inputs}
                             for v in plan.graph.outputs)
    for p, q in zip(model.parameters(), eager.parameters()):
        assert np.array_equal(p.detach().numpy(), q.detach().numpy())


def test_fused_adam_update_writes_its_state_in_place():
    """The fused Adam update is one kernel with several outputs (moments, parameter): each
    is computed straight into its state's array (``plan.donated``), so nothing is copied
    back, the results are bitwise those of the same program without donation, and the
    parameters follow eager within float32 rounding."""
    from ember.graph.executor import Program
    wl = WORKLOADS["W1 MLP Adam"]
    size = dict(wl.tiny, batch=16)
    built = []
    for _ in range(2):
        em.manual_seed(0)
        built.append(wl.build(em, **size))
    (model, opt), (emodel, eopt) = built
    x, y = wl.data(np.random.default_rng(0), **size)
    x, y = em.tensor(x), em.tensor(y)
    f = em.compile(_step_for(model, opt), fullgraph=True)
    g = _step_for(emodel, eopt)
    for _ in range(3):
        f(x, y)
        g(x, y)
    plan = f.memory_plan(x, y)
    graph = plan.graph
    ins = {v.id: k for k, v in enumerate(graph.inputs)}
    (e,) = [e for e in f._cache.values() if not e.eager and e.program.plan is plan]
    back = {graph.outputs[i].id for _, i in e.writes}          # state written back
    written = [o for n in graph.nodes if len(n.outs) > 1 for o in n.outs if o.id in back]
    # each parameter, both its moments (and its step count): all computed in place
    assert len(written) >= 3 * len(list(model.parameters()))
    assert all(o.id in plan.donated and plan.src[o.id] in ins for o in written)
    got, _ = _measure(lambda: f(x, y), list(model.parameters()))
    assert abs(got + plan.input_bytes - plan.peak_bytes) <= 0.05 * plan.peak_bytes
    g(x, y)                                   # the measured call was a fourth step
    for p, q in zip(model.parameters(), emodel.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    # the same graph with and without donation, on the same state: bitwise equal, and the
    # donated outputs are the very input arrays
    arrays = [x._data, y._data] + [s.read() for s in e.sources]
    a1 = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
    a2 = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
    out1 = e.program.run(a1)
    out2 = Program(graph).run(a2)
    pos = {v.id: k for k, v in enumerate(graph.outputs)}
    for o in written:
        assert out1[pos[o.id]] is a1[ins[plan.src[o.id]]]
        assert out2[pos[o.id]] is not a2[ins[plan.src[o.id]]]
    for r1, r2 in zip(out1, out2):
        assert np.array_equal(np.asarray(r1), np.asarray(r2))
