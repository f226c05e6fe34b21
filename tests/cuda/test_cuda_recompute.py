"""``fuse_cuda`` recomputes cheap forward intermediates in the backward kernels, as the CPU
``fuse`` pass does (``ember/graph/passes/recompute.py``): before, ``recompute`` classified
GPU nodes as the CPU's, found none fusible and a compiled GPT step's GELU forward kernel
stored six full-size intermediates for its backward (bench/cuda_gap.py)."""
import sys

import numpy as np

import ember as em
import ember.graph.passes.fuse_cuda  # noqa: F401 - the module (the package exports the pass)

from test_cuda_fusion import gpu_like  # noqa: F401 - the fixture


def _gelu_mlp(dev):
    em.manual_seed(0)
    fc1, fc2 = em.nn.Linear(32, 128).to(dev), em.nn.Linear(128, 32).to(dev)
    x = em.randn(256, 32).to(dev)

    def f(x):
        loss = fc2(em.nn.functional.gelu(fc1(x), approximate="tanh")).square().mean()
        loss.backward()
        return loss
    cf = em.compile(f)
    cf(x)                           # NOTE: the traced call runs eagerly; the second the graph
    for p in (*fc1.parameters(), *fc2.parameters()):
        p.grad = None
    loss = float(cf(x))
    return cf, loss, [p.grad.cpu().numpy() for p in (*fc1.parameters(), *fc2.parameters())]


def _stored(cf, numel) -> int:
    """Full-size values written by a fused kernel and read by another graph node."""
    g = cf.graphs()[-1]
    readers = {x.id for n in g.nodes for x in n.inputs if hasattr(x, "id")}
    return sum(1 for n in g.nodes if n.op.name in ("fused", "fused_reduce")
               for o in n.outs if o.numel() == numel and o.id in readers)


def test_gelu_intermediates_are_recomputed_on_the_gpu(gpu_like, monkeypatch):  # noqa: F811
    _sources, launches = gpu_like
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    fuse_cuda = sys.modules["ember.graph.passes.fuse_cuda"]
    cf, loss, grads = _gelu_mlp("cuda")
    assert launches
    on = _stored(cf, 256 * 128)
    monkeypatch.setattr(fuse_cuda, "recompute", lambda g, groups, *a: (g, 0))
    cf_off, loss_off, grads_off = _gelu_mlp("cuda")
    off = _stored(cf_off, 256 * 128)
    assert on < off, (on, off)
    _, want_loss, want = _gelu_mlp("cpu")
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    for a, b in zip(grads, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
