"""ember.compile: captured graphs give eager's results, and say what they did.

Covers whole training steps (the W1/W2/W3 workloads of bench/train.py, tiny sizes),
every OpInfo through a compiled function (forward and gradients), signatures and
recompiles, graph breaks (naming the line), random ops, in-place writes on arguments
and state, learning-rate schedules, and explain().
"""
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember import nn
from ember.graph import GraphBreak
from ember.graph.passes import EXACT_PASSES

from opinfo import OPINFOS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from train import WORKLOADS  # noqa: E402
from compile import train_step  # noqa: E402


def _step_for(model, opt):
    return train_step(em, model, opt)      # the step bench/compile.py times


def _run(wl, compiled, steps=4, passes=None):
    size = dict(wl.tiny)
    em.manual_seed(0)
    model, opt = wl.build(em, **size)
    x, y = wl.data(np.random.default_rng(0), **size)
    x, y = em.tensor(x), em.tensor(y)
    step = _step_for(model, opt)
    f = em.compile(step, fullgraph=True, passes=passes) if compiled else step
    losses, grads = [], None
    for _ in range(steps):
        losses.append(float(f(x, y)))
        if grads is None:
            grads = [p.grad.numpy().copy() for p in model.parameters()]
            first = [p.detach().numpy().copy() for p in model.parameters()]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], f, grads, first


def _depth(graph) -> int:
    """The longest chain of nodes in ``graph`` (how many roundings a value went through)."""
    d: dict = {}
    for n in graph.nodes:
        k = 1 + max((d.get(x.id, 0) for x in n.var_inputs()), default=0)
        for o in n.outs:
            d[o.id] = k
    return max(d.values(), default=1)


def _rtol(dtype, graph) -> float:
    """Relative tolerance of a fused graph vs eager: each of the ``depth`` ops of a chain
    rounds once (half an ulp) in either version, so they differ by at most
    ``2 * depth * eps / 2`` relative (to first order), i.e. ``depth * eps``."""
    return _depth(graph) * float(np.finfo(np.dtype(dtype)).eps)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_training_step_compiled_equals_eager_exact_passes(name):
    wl = WORKLOADS[name]
    la, pa, f, _, _ = _run(wl, True, passes=EXACT_PASSES)
    lb, pb, _, _, _ = _run(wl, False)
    np.testing.assert_allclose(la, lb, rtol=1e-6)
    for a, b in zip(pa, pb):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    log = f.explain()
    assert not log.breaks
    # the first call creates optimizer state/grads, so a second graph is traced; then stable
    # (the first is kept too where only the grads it creates changed: a call starting with
    # None grads can replay it)
    assert len(f.explain().captures) == 2
    g = f.graph
    assert any(n.op.name == "matmul" for n in g.nodes)
    assert str(g).count("\n") >= len(g.nodes)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_training_step_fused_close_to_eager(name):
    """The default pipeline (generated kernels) against eager, at float32's tolerance.

    Losses over four steps and the first step's gradients agree to ``depth * eps``
    (relative; gradients absolute in units of their largest element, since some are
    rounding noise around 0: a GPT's key bias has an exactly-zero gradient, softmax being
    shift invariant). Parameters after the first step: SGD moves them by ``lr * g`` (so
    the same tolerance); Adam by ``lr * m / (sqrt(v) + eps)``, which normalises noise-level
    gradients to a step of up to ``lr`` in either direction — so Adam's parameters agree
    to ``2 * lr`` absolute, and the well-conditioned ones are covered by the losses.
    """
    wl = WORKLOADS[name]
    la, pa, f, ga, fa = _run(wl, True)
    lb, pb, _, gb, fb = _run(wl, False)
    g = f.graph
    assert any(n.op.name.startswith("fused") for n in g.nodes), g
    assert any(n.op.name == "matmul" for n in g.nodes)
    rtol = _rtol("float32", f.raw_graphs()[-1])
    np.testing.assert_allclose(la, lb, rtol=rtol)
    for a, b in zip(ga, gb):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max())
    adam = "Adam" in name
    lr = 3e-4 if "AdamW" in name else 1e-3 if adam else 0.01
    for a, b in zip(fa, fb):
        if adam:
            np.testing.assert_allclose(a, b, rtol=0, atol=2 * lr)
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max())


def _opinfo_cases():
    out = []
    for info in OPINFOS:
        if "float64" not in [np.dtype(d).name for d in info.dtypes]:
            continue
        out.append(info)
    return out


def _check(got, want, graph, exact, msg):
    for g, w in zip(got, want):
        g, w = g.numpy(), w.numpy()
        if exact or graph is None or not np.issubdtype(w.dtype, np.floating):
            np.testing.assert_array_equal(g, w, err_msg=msg)
        else:
            rtol = _rtol(w.dtype, graph)
            scale = np.abs(w[np.isfinite(w)]).max(initial=1.0)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=msg)


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fused"])
@pytest.mark.parametrize("info", _opinfo_cases(), ids=repr)
def test_every_opinfo_compiled_forward_and_grad(info, exact):
    rng = np.random.default_rng(7)
    samples = info.samples(rng, np.dtype("float64"))
    passes = EXACT_PASSES if exact else None
    for s in samples[:3]:
        args = [em.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a for a in s.args]

        def f(*xs):
            r = info.fn(*xs, **s.kwargs)
            rs = r if isinstance(r, (tuple, list)) else (r,)
            return tuple(rs) if info.out_index is None else (rs[info.out_index],)
        want = f(*args)
        cf = em.compile(f, fullgraph=False, passes=passes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cf(*args)                       # traced call
            got = cf(*args)                 # graph run (or eager after a graph break)
        graphs = cf.raw_graphs()
        _check(got, want, graphs[-1] if graphs else None, exact, f"{info.name} {s.name}")
        if not (info.grad and s.grad):
            continue
        idx = [i for i, a in enumerate(args) if isinstance(a, em.Tensor) and
               a.dtype.is_floating_point]

        def loss_grads(*xs):
            xs = [x.detach().requires_grad_(True) if i in idx else x for i, x in enumerate(xs)]
            outs = f(*xs)
            total = sum((o * (k + 1.5)).sum() for k, o in enumerate(outs)
                        if o.dtype.is_floating_point and o.requires_grad)
            if not isinstance(total, em.Tensor):
                return ()
            gs = em.autograd.grad(total, [xs[i] for i in idx], allow_unused=True)
            return tuple(g for g in gs if g is not None)
        want = loss_grads(*args)
        cg = em.compile(loss_grads, passes=passes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cg(*args)
            got = cg(*args)
        assert len(got) == len(want)
        graphs = cg.raw_graphs()
        _check(got, want, graphs[-1] if graphs else None, exact, f"{info.name} grad")


def _mlp():
    em.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))


def test_graph_break_names_the_line_fullgraph():
    def f(x):
        y = x * 2
        if y.sum() > 0:    # data-dependent Python: a graph break
            return y
        return -y
    line = f.__code__.co_firstlineno + 2
    with pytest.raises(GraphBreak) as e:
        em.compile(f, fullgraph=True)(em.ones(3))
    assert f"{__file__}:{line}" in str(e.value)
    assert "bool()" in str(e.value)


def test_graph_break_runs_eagerly_with_one_warning():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            return y
        return -y
    cf = em.compile(f)
    with pytest.warns(UserWarning, match="graph break"):
        a = cf(em.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no second warning for the same signature
        b = cf(-em.ones(3))
    assert a.tolist() == [2, 2, 2] and b.tolist() == [2, 2, 2]
    assert len(cf.explain().breaks) == 1
    assert "item" in str(cf.explain()) or "bool" in str(cf.explain())


def test_recompile_on_shape_change_and_explain_diff():
    cf = em.compile(lambda x: (x * 3).sum(0))
    cf(em.ones(2, 3))
    cf(em.ones(2, 3))
    cf(em.ones(4, 3))
    log = cf.explain()
    assert len(log.captures) == 2 and len(log.recompiles) == 1
    assert "float32[2, 3]" in str(log) and "float32[4, 3]" in str(log)
    np.testing.assert_array_equal(cf(em.ones(4, 3)).numpy(), np.full(3, 12.0, np.float32))


def test_training_flag_is_part_of_the_signature():
    model = _mlp()
    cf = em.compile(model)
    x = em.randn(5, 6)
    with em.no_grad():
        model.eval()
        a = cf(x)
        b = cf(x)
        model.train()
        cf(x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    diff = cf.explain().recompiles[-1]
    assert any(k.endswith("training") for k in diff)


def test_dropout_draws_fresh_randomness_each_call_like_eager():
    model = _mlp()
    x = em.randn(5, 6)

    def fwd(x):
        return model(x)
    cf = em.compile(fwd)
    with em.no_grad():
        em.manual_seed(123)
        eager = [model(x).numpy().copy() for _ in range(4)]
        em.manual_seed(123)
        comp = [cf(x).numpy().copy() for _ in range(4)]
    for a, b in zip(eager, comp):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(comp[2], comp[3])      # fresh masks from the graph runs
    assert cf.explain().captures[-1].randoms >= 1


def test_inplace_write_to_argument_and_closure_state_is_written_back():
    counter = em.zeros(())

    def f(x):
        x.mul_(2)
        counter.add_(1)
        return x + 1
    cf = em.compile(f, fullgraph=True)
    x = em.ones(3)
    for _ in range(3):
        out = cf(x)
    assert x.tolist() == [8.0, 8.0, 8.0]
    assert out.tolist() == [9.0, 9.0, 9.0]
    assert counter.item() == 3.0


def test_inplace_write_through_a_view():
    def f(x):
        y = x.clone()
        y[1:].add_(10)
        return y * 1
    cf = em.compile(f, fullgraph=True)
    x = em.arange(4.0)
    cf(x)
    assert cf(x).tolist() == [0.0, 11.0, 12.0, 13.0]


def test_lr_schedule_does_not_recompile_and_is_followed():
    def make():
        em.manual_seed(0)
        m = nn.Linear(4, 2)
        o = em.optim.SGD(m.parameters(), lr=0.5)
        return m, o, em.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
    x, y = em.randn(8, 4), em.randn(8, 2)

    def run(compiled):
        m, o, sched = make()

        def step(x, y):
            o.zero_grad()
            F.mse_loss(m(x), y).backward()
            o.step()
        f = em.compile(step, fullgraph=True) if compiled else step
        for _ in range(5):
            f(x, y)
            sched.step()
        return m.weight.detach().numpy().copy(), f
    a, cf = run(True)
    b, _ = run(False)
    np.testing.assert_allclose(a, b, rtol=1e-6)
    assert not any(any("lr" in k for k in d) for d in cf.explain().recompiles)


def test_python_scalar_args_specialise():
    cf = em.compile(lambda x, k: x * k)
    assert cf(em.ones(2), 3).tolist() == [3.0, 3.0]
    assert cf(em.ones(2), 5).tolist() == [5.0, 5.0]
    assert len(cf.explain().captures) == 2


def test_compiled_module_outputs_get_a_compiled_backward():
    def make():
        em.manual_seed(0)
        return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    eager, model = make(), make()
    cm = em.compile(model, fullgraph=True)
    for k in range(3):
        x = em.randn(5, 6, dtype=em.float32)
        xe, xc = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        (eager(xe) ** 2).sum().backward()         # grads accumulate over the calls
        (cm(xc) ** 2).sum().backward()
        np.testing.assert_allclose(xc.grad.numpy(), xe.grad.numpy(), rtol=1e-6, atol=1e-7)
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert len(cm.graphs()) == 1
    e = next(e for e in cm._cache.values() if not e.eager)
    assert e.joint is not None
    bwd = e.joint.bwd_graph
    assert bwd.count("matmul") + bwd.count("matmul_t") >= 3
    assert not any(n.op.name in ("matmul", "matmul_t") and n.outs[0].shape == (6, 8)
                   for n in e.graph.nodes), "weight gradients belong to the backward graph"


def test_explain_reports_passes_and_compile_time():
    model = _mlp()
    model.eval()
    cf = em.compile(model)
    with em.no_grad():
        cf(em.randn(2, 6))
    text = str(cf.explain())
    assert "capture #1" in text and "pass dce" in text and "compile time" in text
    assert cf.explain().compile_time > 0


def test_training_step_may_return_the_loss_itself():
    em.manual_seed(0)
    m = nn.Linear(4, 2)
    o = em.optim.SGD(m.parameters(), lr=0.1)
    x, y = em.randn(8, 4), em.randn(8, 2)

    def step(x, y):
        o.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        o.step()
        return loss
    cf = em.compile(step, fullgraph=True)
    losses = [cf(x, y).item() for _ in range(4)]
    assert len(cf.explain().captures) == 2 and not cf.explain().notes
    assert losses == sorted(losses, reverse=True)


def test_executor_writes_into_dying_buffers_without_changing_results():
    from ember.graph.executor import Program

    def f(x, w):
        h = (x @ w).exp()          # h dies in the add: the add may write into h's buffer
        k = h + 1.0
        return (k * k).sqrt() - x.contiguous(), h.sum() if False else k
    x, w = em.randn(4, 4, dtype=em.float64), em.randn(4, 4, dtype=em.float64)
    want = f(x, w)
    cf = em.compile(f, passes=EXACT_PASSES)
    cf(x, w)
    got = cf(x, w)
    for g, e in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), e.numpy())
    assert Program(cf.graph).reused >= 1
    assert x.numpy().flags.writeable and np.isfinite(x.numpy()).all()


def test_parallel_executor_matches_serial():
    from ember.graph.executor import Program
    wl = WORKLOADS["W3 GPT AdamW"]
    size = dict(wl.tiny)
    em.manual_seed(0)
    model, opt = wl.build(em, **size)
    x, y = wl.data(np.random.default_rng(0), **size)
    cf = em.compile(_step_for(model, opt))
    x, y = em.tensor(x), em.tensor(y)
    cf(x, y)
    cf(x, y)
    e = next(e for e in cf._cache.values() if not e.eager)
    arrays = [x._data, y._data] + [s.read() for s in e.sources]
    serial = Program(e.graph).run(arrays)
    parallel = Program(e.graph, parallel=True).run(arrays)
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a, b)


def test_debug_level_3_prints_the_ir_after_each_pass(monkeypatch, capsys):
    monkeypatch.setenv("EMBER_DEBUG", "3")
    cf = em.compile(lambda x: x.t().t() + 0)
    cf(em.ones(2, 3))
    out = capsys.readouterr().out
    assert "# after dce" in out and "return (" in out
