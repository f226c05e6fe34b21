"""``lse_rows`` (``ember/graph/passes/lse_rows.py``) on traced graphs: which log-softmaxes
become per-row log-sum-exp, and which stay (the pass runs inside ``fuse_cuda``; here it is
called on CPU graphs, ``device="cpu"``, to look at its rewrite alone; the GPU pipeline's
results: ``tests/cuda/test_cuda_recompute.py``)."""
import numpy as np

import ember as em
from ember.graph.passes.lse_rows import lse_rows

PASSES = ["simplify", "fold", "cse", "dce"]


def _graph(f, *args):
    cf = em.compile(f, passes=PASSES)
    cf(*args)
    return cf.graph


def _args():
    em.manual_seed(0)
    x, w = em.randn(64, 32), em.randn(32, 512)
    y = em.tensor(np.random.default_rng(0).integers(0, 512, 64))
    return x, w, y


def _ops(g):
    return [n.op.name for n in g.nodes]


def test_a_loss_keeps_row_values_and_gathers_from_the_product(monkeypatch):
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")

    def f(x, w, y, b):
        w = w.detach().requires_grad_(True)
        loss = em.nn.functional.cross_entropy((x @ w) * 0.5 + b, y)
        return loss, em.autograd.grad(loss, [w])[0]
    g = _graph(f, *_args(), em.randn(512))
    assert "log_softmax" in _ops(g)
    new, n = lse_rows(g, "cpu")
    assert n == 1 and "log_softmax" not in _ops(new)
    assert {"amax", "exp", "log"} <= set(_ops(new))
    producer = {o.id: m for m in new.nodes for o in m.outs}
    # the gather reads the product (and a broadcast view of the bias), then scales and adds
    gathers = [m for m in new.nodes if m.op.name == "take_along_dim"]
    assert sorted(producer[m.inputs[0].id].op.name for m in gathers) == ["expand", "matmul"]
    new.verify()


def test_a_returned_log_softmax_stays(monkeypatch):
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")

    def f(x, w, y):
        lsm = em.nn.functional.log_softmax(x @ w, dim=-1)
        return lsm, em.nn.functional.nll_loss(lsm, y)
    g = _graph(f, *_args())
    assert lse_rows(g, "cpu") == (g, 0)


def test_a_log_softmax_read_by_a_product_stays(monkeypatch):
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")

    def f(x, w, y):
        return em.nn.functional.log_softmax(x @ w, dim=-1) @ w.T
    g = _graph(f, *_args())
    assert lse_rows(g, "cpu") == (g, 0)
