"""What a split backward graph saves (``ember/graph/partition.py``).

A compiled call whose outputs need gradients is split into a forward and a backward
graph; the backward recomputes cheap elementwise chains from the inputs and row
statistics instead of reading full-size intermediates the forward stored (PyTorch's GELU
saves its input, its layer norm the input, mean and rstd). The recomputed values must
be the stored ones bit for bit, random draws are never recomputed, and an eager
composite (``F.gelu``, ``F.layer_norm``) runs that partition.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.codegen import eager_composite as ec
from ember.codegen.toolchain import find_compiler
from ember.graph import joint

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

CASES = {
    "gelu": (lambda x: F.gelu(x), [(4, 8, 64)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(4, 8, 64)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (64,), w, b), [(4, 8, 64), (64,), (64,)]),
    "layer_norm_plain": (lambda x: F.layer_norm(x, (64,)), [(4, 8, 64)]),
    "silu": (lambda x: F.silu(x), [(4, 8, 64)]),
}


def _inputs(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [em.tensor(rng.uniform(-3, 3, s).astype(dtype), requires_grad=True) for s in shapes]


def _run(fn, shapes, dtype):
    """(compiled function, output, input gradients) of one compiled call + backward."""
    xs = _inputs(shapes, dtype)
    cf = em.compile(fn, fullgraph=True)
    out = cf(*xs)
    g = em.tensor(np.random.default_rng(1).standard_normal(out.shape).astype(dtype))
    out.backward(g)
    return cf, out.detach().numpy(), [x.grad.numpy() for x in xs]


def _saved(cf):
    """(saved vars, forward graph) of the compiled function's only entry."""
    (e,) = [e for e in cf._cache.values() if not e.eager]
    return list(e.graph.outputs[e.joint.n_fwd:]), e.graph


def _stored_full(cf, numel):
    """Saved full-size values the forward writes only to save them (not inputs)."""
    saved, graph = _saved(cf)
    ins = {v.id for v in graph.inputs}
    return [v for v in saved if v.numel() == numel and v.id not in ins]


def test_gelu_saves_input_and_erf_term_only():
    cf, _, _ = _run(*CASES["gelu"], "float32")
    saved, graph = _saved(cf)
    assert graph.inputs[0].id in {v.id for v in saved}
    # the erf term stays saved (recomputing a transcendental costs more than reading it);
    # x * 0.5 and x / sqrt(2) are recomputed in the backward kernel
    assert len(_stored_full(cf, 4 * 8 * 64)) == 1


def test_gelu_tanh_saves_input_and_tanh_term_only():
    cf, _, _ = _run(*CASES["gelu_tanh"], "float32")
    assert len(_stored_full(cf, 4 * 8 * 64)) == 1


@pytest.mark.parametrize("case", ["layer_norm", "layer_norm_plain"])
def test_layer_norm_saves_input_and_row_statistics(case):
    cf, _, _ = _run(*CASES[case], "float32")
    saved, graph = _saved(cf)
    assert graph.inputs[0].id in {v.id for v in saved}
    assert _stored_full(cf, 4 * 8 * 64) == []          # no x - mean, no normalised x
    assert all(v.numel() <= 4 * 8 * 64 // 8 for v in saved if v.id != graph.inputs[0].id)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_recomputed_values_are_the_stored_ones_bitwise(case, dtype, monkeypatch):
    fn, shapes = CASES[case]
    _, out, grads = _run(fn, shapes, dtype)
    monkeypatch.setattr(joint, "recompute_pointwise", lambda b, f, bw, g, o: (bw, g))
    cf_off, out_off, grads_off = _run(fn, shapes, dtype)
    assert len(_stored_full(cf_off, 4 * 8 * 64)) >= 1    # the policy was off
    np.testing.assert_array_equal(out, out_off)
    for a, b in zip(grads, grads_off):
        np.testing.assert_array_equal(a, b)


def test_random_draws_are_saved_not_redrawn():
    em.manual_seed(0)
    x = em.tensor(np.linspace(0.5, 2.0, 4096, dtype=np.float32), requires_grad=True)
    cf = em.compile(lambda t: F.dropout(t * 3.0, 0.5, training=True), fullgraph=True)
    y = cf(x)
    y.sum().backward()
    kept = y.detach().numpy() != 0
    assert 0 < kept.sum() < kept.size
    np.testing.assert_array_equal(x.grad.numpy(), np.where(kept, np.float32(6.0), 0))


def test_eager_layer_norm_runs_the_partition(monkeypatch):
    monkeypatch.setattr(ec, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(ec, "WARMUP", 0)
    prev = ec.set_enabled(True)
    try:
        xs = _inputs([(4, 8, 32), (32,), (32,)], "float32", seed=3)
        runs = ec.stats["runs"]
        F.layer_norm(xs[0], (32,), xs[1], xs[2]).sum().backward()
        assert ec.stats["runs"] == runs + 1
        key = [k for k, v in F.layer_norm._eager_cache.items()
               if v and v.cf._cache and k[1][0][0] == (4, 8, 32)]
        assert key
        cf = F.layer_norm._eager_cache[key[-1]].cf
        assert _stored_full(cf, 4 * 8 * 32) == []
        ref = _inputs([(4, 8, 32), (32,), (32,)], "float32", seed=3)
        F.layer_norm.__wrapped_composite__(ref[0], (32,), ref[1], ref[2]).sum().backward()
        for a, b in zip(xs, ref):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=2e-5, atol=2e-6)
    finally:
        ec.set_enabled(prev)


def test_values_a_matmul_reads_are_saved_not_recomputed():
    """A GELU's output feeds the next Linear: the forward writes it anyway, so the
    backward reads it (for the weight gradient) instead of recomputing the chain."""
    em.manual_seed(0)
    m = em.nn.Sequential(em.nn.Linear(16, 64), em.nn.GELU(), em.nn.Linear(64, 16),
                         em.nn.LayerNorm(16))
    cm = em.compile(m)
    x = em.randn(8, 16)
    cm(x).sum().backward()
    grads = [p.grad.numpy().copy() for p in m.parameters()]
    (e,) = [e for e in cm.forward._cache.values() if not e.eager]
    saved = {v.id for v in e.graph.outputs[e.joint.n_fwd:]}
    mms = [n for n in e.graph.nodes if n.op.name == "matmul"]
    assert len(mms) == 2 and mms[1].inputs[0].id in saved
    for p in m.parameters():
        p.grad = None
    m(x).sum().backward()                    # eager, composites as written
    for a, p in zip(grads, m.parameters()):
        np.testing.assert_allclose(a, p.grad.numpy(), rtol=2e-5, atol=2e-6)
