"""The per-call path of eager composites (``ember/codegen/eager_composite.py``).

A compiled key's calls run its forward program directly, with one autograd node whose
backward runs the backward program (no compiled-call signature, guards or nested node):
the results must be bitwise those of the compiled call, and small calls must return to
the composite before any key is built.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.codegen import eager_composite as ec
from ember.codegen.toolchain import find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")


@pytest.fixture(autouse=True)
def _every_call_compiled(monkeypatch):
    monkeypatch.setattr(ec, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(ec, "WARMUP", 0)
    monkeypatch.setattr(F.relu, "min_elements", 0)
    prev = ec.set_enabled(True)
    yield
    ec.set_enabled(prev)


def _rand(shape, dtype, seed):
    return em.tensor(np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype))


def _target(n, classes, seed=3):
    return em.tensor(np.random.default_rng(seed).integers(0, classes, n))


# name, call, input shapes (None: a class target for the previous input's rows)
CASES = {
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (8,), w, b), [(4, 5, 8), (8,), (8,)]),
    "gelu": (F.gelu, [(6, 7)]),
    "relu": (F.relu, [(6, 7)]),
    "cross_entropy": (F.cross_entropy, [(9, 5), None]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), [(2, 3, 6, 5), (4, 3, 3, 3), (4,)]),
}


def _inputs(specs, dtype, grad=True):
    out = []
    for i, s in enumerate(specs):
        if s is None:
            out.append(_target(specs[i - 1][0], specs[i - 1][1]))
        else:
            out.append(_rand(s, dtype, i).requires_grad_(grad))
    return out


def _entry(fn):
    live = [e for e in fn._eager_cache.values() if e]
    assert len(live) == 1
    return live[0]


def _fwd_bwd(call, xs, cot_seed=7):
    y = call(*xs)
    g = _rand(tuple(y.shape), y.dtype.name, cot_seed)
    y.backward(g)
    return y.detach().numpy().copy(), [x.grad.numpy().copy() for x in xs if x.requires_grad]


def _wrapped(name):
    return {"layer_norm": F.layer_norm, "gelu": F.gelu, "relu": F.relu,
            "cross_entropy": F.cross_entropy, "conv2d": F.conv2d}[name]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(CASES))
def test_direct_call_is_bitwise_the_compiled_call(name, dtype):
    call, specs = CASES[name]
    _wrapped(name)._eager_cache.clear()
    _fwd_bwd(call, _inputs(specs, dtype))         # captures (runs the composite traced)
    entry = _entry(_wrapped(name))
    assert entry.prog is not None, "the key did not get the direct path"
    y1, g1 = _fwd_bwd(call, _inputs(specs, dtype))        # direct
    prog, entry.prog = entry.prog, None
    try:
        y2, g2 = _fwd_bwd(call, _inputs(specs, dtype))    # through the compiled call
    finally:
        entry.prog = prog
    assert len(g1) == len(g2) == len(specs) - specs.count(None)
    for a, b in zip([y1] + g1, [y2] + g2):
        assert a.tobytes() == b.tobytes()


def test_direct_call_skips_the_compiled_function_and_makes_one_node():
    x = _rand((5, 6), "float32", 0).requires_grad_()
    F.gelu._eager_cache.clear()
    F.gelu(x)
    entry = _entry(F.gelu)

    class _Boom:
        def __call__(self, *a, **k):
            raise AssertionError("the compiled call ran")
    entry.cf, cf = _Boom(), entry.cf
    try:
        runs = ec.stats["runs"]
        y = F.gelu(x)
        assert ec.stats["runs"] == runs + 1
        assert y.grad_fn.name() == "_DirectCallBackward"
        nxt = [f for f, _ in y.grad_fn.next_functions if f is not None]
        assert len(nxt) == 1 and nxt[0].name() == "AccumulateGrad"
        y.sum().backward()
        assert x.grad is not None and x.grad.shape == x.shape
    finally:
        entry.cf = cf


def test_small_calls_return_before_the_key_is_built(monkeypatch):
    monkeypatch.setattr(ec, "MIN_ELEMENTS", 1 << 15)

    def boom(*a, **k):
        raise AssertionError("_key ran below the size threshold")
    monkeypatch.setattr(ec, "_key", boom)
    x = _rand((128, 10), "float32", 0).requires_grad_()
    F.cross_entropy(x, _target(128, 10)).backward()
    F.layer_norm(x, (10,)).sum().backward()
    with pytest.raises(AssertionError, match="_key ran"):
        F.layer_norm(_rand((256, 128), "float32", 1), (128,))


def test_no_grad_direct_forward_is_bitwise_and_has_no_node():
    x, w, b = _inputs(CASES["layer_norm"][1], "float32")
    F.layer_norm._eager_cache.clear()
    with em.no_grad():
        F.layer_norm(x, (8,), w, b)                # capture
        entry = _entry(F.layer_norm)
        assert entry.prog is not None
        y = F.layer_norm(x, (8,), w, b)
        prog, entry.prog = entry.prog, None
        try:
            ref = F.layer_norm(x, (8,), w, b)      # through the compiled call
        finally:
            entry.prog = prog
    assert y.grad_fn is None and not y.requires_grad
    assert y.numpy().tobytes() == ref.numpy().tobytes()


def test_direct_call_version_check_retain_graph_and_free():
    x = _rand((4, 6), "float64", 0).requires_grad_()
    F.gelu._eager_cache.clear()
    F.gelu(x)
    y = F.gelu(x)
    assert _entry(F.gelu).prog is not None
    y.sum().backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * first)
    with pytest.raises(RuntimeError, match="second time"):
        y.sum().backward()
    z = F.gelu(x)
    with em.no_grad():
        x.add_(1.0)
    with pytest.raises(RuntimeError):
        z.sum().backward()


def test_direct_call_double_backward_and_hooks_match_the_composite():
    x = _rand((4, 6), "float64", 0).requires_grad_()
    F.gelu._eager_cache.clear()
    F.gelu(x)
    seen = []
    y = F.gelu(x)
    assert _entry(F.gelu).prog is not None
    y.register_hook(lambda g: seen.append("out") or g * 2)
    (gx,) = em.autograd.grad(y.sum(), [x], create_graph=True)
    (ggx,) = em.autograd.grad(gx.sum(), [x])
    prev = ec.set_enabled(False)
    try:
        y2 = F.gelu(x)
        y2.register_hook(lambda g: g * 2)
        (rx,) = em.autograd.grad(y2.sum(), [x], create_graph=True)
        (rrx,) = em.autograd.grad(rx.sum(), [x])
    finally:
        ec.set_enabled(prev)
    assert seen == ["out"]
    np.testing.assert_allclose(gx.detach().numpy(), rx.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(ggx.numpy(), rrx.numpy())


def test_anomaly_mode_runs_the_composite():
    x = _rand((4, 6), "float32", 0).requires_grad_()
    F.gelu._eager_cache.clear()
    F.gelu(x)
    with em.autograd.detect_anomaly():
        y = F.gelu(x)
    assert y.grad_fn.name() != "_DirectCallBackward"
