"""Issue 19 item 7: the ``feature_major`` pass keeps linear-layer chains transposed.

A compiled MLP step computes its hidden activations as ``W @ x.T`` (``(features, batch)``)
and its backward likewise; the logits before ``log_softmax``, graph outputs and anything
read by an op that would need a strided copy stay batch-major. Not bitwise (GEMM
orientation, row sums for the bias gradients): results follow eager and the pipeline
without the pass within float32 rounding; the exact pipeline never runs it.
"""
import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember import nn
from ember.graph.passes import DEFAULT_PASSES, EXACT_PASSES
from ember.graph.passes.feature_major import COLUMN, feature_major
from ember.graph.replay import donations

WITHOUT = [p for p in DEFAULT_PASSES if p != "feature_major"]


def _mlp(seed=0, sizes=(12, 16, 16, 3)):
    em.manual_seed(seed)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _sgd_step(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _entry(f):
    """The latest graph ``f`` captured and replays."""
    return [e for e in f._cache.values() if not e.eager and e.program is not None][-1]


def _data(batch=8, nin=12, ncls=3):
    rng = np.random.default_rng(0)
    return (em.tensor(rng.standard_normal((batch, nin)).astype(np.float32)),
            em.tensor(rng.integers(0, ncls, batch)))


def test_default_pipeline_only():
    assert "feature_major" in DEFAULT_PASSES
    assert DEFAULT_PASSES.index("feature_major") < DEFAULT_PASSES.index("fuse")
    assert "feature_major" not in EXACT_PASSES


def test_mlp_step_runs_transposed_and_follows_eager():
    x, y = _data()
    runs = {}
    for name, passes in (("fm", DEFAULT_PASSES), ("without", WITHOUT), ("eager", None)):
        model = _mlp()
        opt = em.optim.SGD(model.parameters(), lr=0.1)
        step = _sgd_step(model, opt)
        f = step if passes is None else em.compile(step, fullgraph=True, passes=passes)
        losses = [float(f(x, y)) for _ in range(5)]
        runs[name] = (losses, [p.detach().numpy().copy() for p in model.parameters()], f)
    g = _entry(runs["fm"][2]).graph
    changed = {r["pass"]: r["changed"] for r in _entry(runs["fm"][2]).report}
    assert changed["feature_major"]["feature_major"] >= 6, changed
    # the hidden layers' products come out (features, batch); the logits stay (batch, 3)
    shapes = [n.outs[0].shape for n in g.nodes if n.op.name in ("matmul", "matmul_t")]
    assert (16, 8) in shapes and (8, 16) not in shapes, shapes
    # (the logits' product: a node of its own, or in ce_rows with the cross-entropy)
    assert (8, 3) in shapes or any(n.op.name == "ce_rows" and n.params.get("product") and
                                   n.outs[1].shape == (8, 3) for n in g.nodes)
    assert sum(n.op is COLUMN for n in g.nodes) == 2          # the two hidden biases
    g0 = _entry(runs["without"][2]).graph
    assert all(n.outs[0].shape != (16, 8) for n in g0.nodes if n.op.name.startswith("matmul"))
    for other in ("without", "eager"):
        np.testing.assert_allclose(runs["fm"][0], runs[other][0], rtol=1e-5, atol=1e-6)
        for a, b in zip(runs["fm"][1], runs[other][1]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bias_updates_stay_in_place():
    """The bias broadcast as a column is a pure view (``COLUMN``), so the planner still
    writes each parameter's SGD update straight into its array."""
    x, y = _data()
    model = _mlp()
    opt = em.optim.SGD(model.parameters(), lr=0.1)
    f = em.compile(_sgd_step(model, opt), fullgraph=True)
    for _ in range(3):
        f(x, y)
    e = _entry(f)
    plan = e.program.plan
    g = plan.graph
    pairs = donations(e)
    written = {g.outputs[o].id for o, _ in pairs}
    params = {g.inputs[i].id for _, i in pairs}
    assert len(written) == 6
    assert all(v in plan.donated and plan.src[v] in params for v in written)


def test_outputs_and_strided_readers_stay_batch_major():
    """A returned activation, and one read by ``softmax`` (which would need a strided
    copy), are never transposed; a hidden value between two products is."""
    rng = np.random.default_rng(1)
    w1 = em.tensor(rng.standard_normal((16, 12)).astype(np.float32))
    b1 = em.tensor(rng.standard_normal(16).astype(np.float32))
    w2 = em.tensor(rng.standard_normal((5, 16)).astype(np.float32))
    x = em.tensor(rng.standard_normal((8, 12)).astype(np.float32))

    def returned(x):
        return F.relu(F.linear(x, w1, b1))

    def hidden(x):
        return F.softmax(F.linear(F.relu(F.linear(x, w1, b1)), w2), dim=1)

    def soft(x):
        return F.softmax(F.relu(F.linear(x, w1, b1)), dim=1).sum(0)

    for fn, kept in ((returned, 0), (hidden, 3), (soft, 0)):
        f = em.compile(fn, fullgraph=True)
        got = f(x).numpy()
        f(x)
        changed = {r["pass"]: r["changed"] for r in _entry(f).report}
        assert changed["feature_major"]["feature_major"] == kept, (fn.__name__, changed)
        np.testing.assert_allclose(got, fn(x).numpy(), rtol=1e-5, atol=1e-6)


def test_pass_on_a_graph_without_linear_layers_changes_nothing():
    f = em.compile(lambda a, b: (a * b).relu().sum(0), fullgraph=True, passes=["simplify"])
    a = em.randn(4, 5)
    f(a, a), f(a, a)
    g = _entry(f).graph
    new, changed = feature_major(g)
    assert changed == {"feature_major": 0} and new is g


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gradients_of_a_transposed_chain(dtype):
    """``ember.compile`` of a function computing gradients through two layers (the
    region's backward: input-gradient products, relu masks, row-sum bias gradients)."""
    rng = np.random.default_rng(2)
    dt = getattr(em, dtype)
    ws = [em.tensor(rng.standard_normal(s), dtype=dt).requires_grad_()
          for s in ((16, 12), (16,), (16, 16), (16,), (4, 16), (4,))]
    x = em.tensor(rng.standard_normal((8, 12)), dtype=dt)

    def grads(x):
        h = F.relu(F.linear(x, ws[0], ws[1]))
        h = F.relu(F.linear(h, ws[2], ws[3]))
        out = F.log_softmax(F.linear(h, ws[4], ws[5]), dim=1)
        return em.autograd.grad(out.sum() * 0.5 + (out * out).mean(), ws)

    f = em.compile(grads, fullgraph=True)
    got = f(x)
    got = f(x)
    assert {r["pass"]: r["changed"] for r in _entry(f).report}["feature_major"][
        "feature_major"] > 0
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == "float64" else dict(rtol=1e-5, atol=1e-6)
    for a, b in zip(got, grads(x)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), **tol)


def test_compiled_products_are_eager_products_bitwise():
    """``matmul_t`` (and a planned ``matmul``) make the call eager's float32 matmul kernel
    makes — Ember's own GEMM where its size rule picks it, else NumPy's — so a compiled
    product has eager's bits whichever GEMM runs."""
    rng = np.random.default_rng(3)
    x = em.tensor(rng.standard_normal((128, 300)).astype(np.float32))
    w = em.tensor(rng.standard_normal((256, 300)).astype(np.float32))
    f = em.compile(lambda x, w: (x @ w.T, w @ x.T), fullgraph=True)
    f(x, w)
    got = f(x, w)
    assert "matmul_t" in [n.op.name for n in _entry(f).graph.nodes]
    for a, b in zip(got, (x @ w.T, w @ x.T)):
        np.testing.assert_array_equal(a.numpy().view(np.int32), b.numpy().view(np.int32))


def test_graph_cache_round_trip_keeps_the_new_ops():
    """The graph cache pickles module-level graph ops by reference: ``COLUMN`` and
    ``count_true``'s op come back as themselves."""
    from ember.graph import graph_pickle
    from ember.graph.passes.ce_rows import CE_ROWS
    from ember.graph.passes.count_true import COUNT_TRUE
    x, y = _data()
    model = _mlp()
    opt = em.optim.SGD(model.parameters(), lr=0.1)
    f = em.compile(_sgd_step(model, opt), fullgraph=True)
    for _ in range(3):
        f(x, y)
    g = _entry(f).graph
    back = graph_pickle.loads(graph_pickle.dumps({"graph": g, "report": []}))["graph"]
    ops = (COLUMN, COUNT_TRUE, CE_ROWS)
    assert [n.op for n in back.nodes if n.op in ops] == [n.op for n in g.nodes if n.op in ops]
    assert sum(n.op is COLUMN for n in back.nodes) == 2
    # the loss's count: count_true's node, or (folded with the loss) ce_rows's
    assert sum(n.op in (COUNT_TRUE, CE_ROWS) for n in back.nodes) == 1
