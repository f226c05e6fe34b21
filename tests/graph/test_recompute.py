"""Recomputation inside fusion: cheap forward intermediates are recomputed by the backward
kernels instead of being stored (``ember/graph/passes/recompute.py``).

Each test compiles a forward+backward function twice — with recomputation and with it
disabled — and checks (a) which values the forward kernels still write, (b) gradients
equal eager's within the fused pipeline's rounding (a few ulps per op in the chain).
"""
import sys

import numpy as np
import pytest

import ember as em
from ember.graph.passes import recompute as rc
from ._kernels import needs_compiler

FUSE = sys.modules["ember.graph.passes.fuse"]
PASSES = ["simplify", "fold", "cse", "fuse", "dce"]


_need_compiler = needs_compiler("the fuse pass (and recomputation) leave graphs unchanged")


def _grad_fn(model):
    def f(x, w):
        x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        y = model(x, w)
        gx, gw = em.autograd.grad((y * y).sum(), [x, w])
        return y.detach(), gx, gw
    return f


def _compile(f, args, on=True, monkeypatch=None):
    if not on:
        monkeypatch.setattr(FUSE, "recompute", lambda g, groups: (g, 0))
    cf = em.compile(f, passes=PASSES)
    out = cf(*args)
    if not on:
        monkeypatch.undo()
    return cf, out


def _written(cf, numel) -> int:
    """Full-size (``numel`` elements) arrays written by fused kernels of the graph."""
    return sum(1 for n in cf.graph.nodes if n.op.name in ("fused", "fused_reduce")
               for o in n.outs if o.numel() == numel)


# A matmul after the activation keeps the forward and backward kernels apart (otherwise
# the loss's gradient, elementwise too, fuses everything into one kernel).
def _gelu_erf(x, w):
    h = x @ w
    return (0.5 * h * (1 + em.erf(h * 0.7071067811865476))) @ w.T


def _layer_norm(x, w):
    h = x @ w
    return em.nn.functional.layer_norm(h, (h.shape[-1],)) @ w.T


@pytest.mark.parametrize("model", [_gelu_erf, _layer_norm])
@pytest.mark.parametrize("dtype", [em.float32, em.float64])
def test_backward_recomputes_and_matches_eager(model, dtype, monkeypatch):
    g = em.Generator().manual_seed(0)
    x = em.randn(64, 48, generator=g, dtype=dtype)
    w = em.randn(48, 512, generator=g, dtype=dtype) * 0.2
    f = _grad_fn(model)
    cf_on, got = _compile(f, (x, w))
    cf_off, _ = _compile(f, (x, w), on=False, monkeypatch=monkeypatch)
    n = 64 * 512
    assert _written(cf_on, n) < _written(cf_off, n), (cf_on.graph, cf_off.graph)
    want = f(x, w)
    eps = float(em.finfo(dtype).eps)
    for a, b in zip(got, want):
        a, b = a.numpy(), b.numpy()
        scale = np.abs(b).max() + 1
        assert np.abs(a - b).max() <= 64 * eps * scale


def test_expensive_ops_and_matmul_readers_are_not_recomputed(monkeypatch):
    # tanh(h) is read by the backward (d tanh = 1 - t^2): never recomputed (a libm call);
    # h * 2 read by a matmul (not fusible) is stored either way.
    def model(x, w):
        h = x @ w
        t = em.tanh(h)
        return (t @ w.T) * (h * 2) @ w
    g = em.Generator().manual_seed(1)
    x, w = em.randn(64, 256, generator=g), em.randn(256, 256, generator=g) * 0.1
    f = _grad_fn(model)
    cf_on, got = _compile(f, (x, w))
    cf_off, _ = _compile(f, (x, w), on=False, monkeypatch=monkeypatch)
    assert _written(cf_on, 64 * 256) == _written(cf_off, 64 * 256)
    for a, b in zip(got, f(x, w)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_chain_reading_two_full_size_values_is_not_recomputed():
    # v = a * b from two stored full-size values: recomputing it reads two arrays for one.
    class _N:
        def __init__(self, name, inputs, out):
            self.op = type("Op", (), {"name": name})()
            self.inputs, self.out, self.outs = inputs, out, (out,)
    from ember.graph.ir import Var
    a = Var(0, (256, 256), em.float32, em.device("cpu"))
    b = Var(1, (256, 256), em.float32, em.device("cpu"))
    v = Var(2, (256, 256), em.float32, em.device("cpu"))
    assert rc._full_leaves([_N("mul", (a, b), v)], v.numel()) == 2
    row = Var(3, (256, 1), em.float32, em.device("cpu"))
    assert rc._full_leaves([_N("sub", (a, row), v)], v.numel()) == 1
