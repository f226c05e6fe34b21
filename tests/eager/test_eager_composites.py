"""Eager composites through their compiled form (``ember/codegen/eager_composite.py``).

Each wrapped ``F.*`` function must give what the composite written in Ember ops gives:
forward values and gradients, on contiguous and non-contiguous inputs, with NaN/inf, at
zero size, in float32 and float64, and double backward (``create_graph=True``).
"""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.codegen import eager_composite as ec
from ember.codegen.toolchain import find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-11, atol=1e-12)}


@pytest.fixture(autouse=True)
def _every_call_compiled(monkeypatch):
    """Take the fast path from the first call and at any size (the tests use small shapes)."""
    monkeypatch.setattr(ec, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(ec, "WARMUP", 0)
    prev = ec.set_enabled(True)
    yield
    ec.set_enabled(prev)


def _rand(shape, dtype, seed=0, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


# name, call(F, *tensors), [(shape, requires_grad)...]; the last entry of a case may be an
# integer target (shape, classes).
CASES = {
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), [(2, 3, 7, 6), (4, 3, 3, 3), (4,)]),
    "conv2d_strided": (lambda x, w: F.conv2d(x, w, stride=2, dilation=(1, 2)),
                       [(2, 3, 9, 9), (5, 3, 3, 2)]),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, padding=2), [(2, 3, 11), (4, 3, 5), (4,)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [(2, 3, 8, 6)]),
    "max_pool2d_pad": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
                       [(2, 2, 7, 9)]),
    "max_pool1d": (lambda x: F.max_pool1d(x, 3, stride=2), [(2, 3, 11)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2, padding=1), [(2, 3, 6, 5)]),
    "avg_pool1d": (lambda x: F.avg_pool1d(x, 2), [(2, 3, 10)]),
    "gelu": (lambda x: F.gelu(x), [(3, 5, 7)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(3, 5, 7)]),
    "silu": (lambda x: F.silu(x), [(4, 9)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (6,), w, b), [(3, 4, 6), (6,), (6,)]),
    "layer_norm_plain": (lambda x: F.layer_norm(x, (4, 6)), [(3, 4, 6)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), [(2, 4, 3, 3), (4,), (4,)]),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), [(6, 5), ("target", 6, 5)]),
    "cross_entropy_smooth": (lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1,
                                                          reduction="sum"),
                             [(6, 5), ("target", 6, 5)]),
    "nll_loss": (lambda x, t: F.nll_loss(x, t), [(6, 5), ("target", 6, 5)]),
}


def _inputs(specs, dtype, transposed=False, seed=0):
    out = []
    for i, s in enumerate(specs):
        if s[0] == "target":
            out.append(em.tensor(np.random.default_rng(seed + i).integers(0, s[2], s[1])))
            continue
        a = _rand(s, dtype, seed + i)
        if transposed and a.ndim >= 2:          # same values, a transposed layout
            t = em.tensor(np.ascontiguousarray(a.swapaxes(-1, -2))).transpose(-1, -2)
            assert not t.is_contiguous()
        else:
            t = em.tensor(a)
        out.append(t.requires_grad_())
    return out


def _run(fn, tensors, fast: bool):
    """(output, grads of the float inputs) with the fast path on or off."""
    prev = ec.set_enabled(fast)
    try:
        leaves = [t.detach().requires_grad_(t.requires_grad) for t in tensors]
        before = ec.stats["runs"]
        out = fn(*leaves)
        ran = ec.stats["runs"] - before
        g = em.tensor(_rand(tuple(out.shape), out.detach().numpy().dtype, 99))
        diff = [x for x in leaves if x.requires_grad]
        grads = em.autograd.grad(out, diff, g) if diff and out.numel() else []
    finally:
        ec.set_enabled(prev)
    return out.detach().numpy(), [x.detach().numpy() for x in grads], ran


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("transposed", [False, True])
def test_fast_path_matches_composite(name, dtype, transposed):
    fn, specs = CASES[name]
    tensors = _inputs(specs, dtype, transposed)
    ref, ref_g, ran = _run(fn, tensors, fast=False)
    assert ran == 0
    got, got_g, ran = _run(fn, tensors, fast=True)
    assert ran == 1, "the compiled form did not run"
    np.testing.assert_allclose(got, ref, **TOL[dtype])
    assert len(got_g) == len(ref_g)
    for a, b in zip(got_g, ref_g):
        np.testing.assert_allclose(a, b, **TOL[dtype])


@pytest.mark.parametrize("name", ["gelu", "silu", "layer_norm", "max_pool2d", "conv2d",
                                  "cross_entropy"])
def test_nan_and_inf_propagate_like_the_composite(name):
    fn, specs = CASES[name]
    tensors = _inputs(specs, "float64")
    x = tensors[0].detach().numpy().copy()
    x.reshape(-1)[[0, 3, 7]] = [np.nan, np.inf, -np.inf]
    tensors[0] = em.tensor(x, requires_grad=True)
    ref, ref_g, _ = _run(fn, tensors, fast=False)
    got, got_g, ran = _run(fn, tensors, fast=True)
    assert ran == 1
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12, equal_nan=True)
    for a, b in zip(got_g, ref_g):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("name,specs", [
    ("gelu", [(0, 5)]), ("layer_norm", [(0, 4, 6), (6,), (6,)]),
    ("max_pool2d", [(0, 3, 8, 6)])])
def test_zero_size_inputs(name, specs):
    fn = CASES[name][0]
    tensors = _inputs(specs, "float32")
    ref, ref_g, _ = _run(fn, tensors, fast=False)
    got, got_g, _ = _run(fn, tensors, fast=True)
    assert got.shape == ref.shape and got.size == 0
    for a, b in zip(got_g, ref_g):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["gelu", "layer_norm", "conv2d"])
def test_double_backward_differentiates_the_composite(name):
    fn, specs = CASES[name]

    def second(fast):
        prev = ec.set_enabled(fast)
        try:
            xs = _inputs(specs, "float64")
            before = ec.stats["runs"]
            out = fn(*xs)
            assert (ec.stats["runs"] - before) == int(fast)
            (g,) = em.autograd.grad((out * out).sum(), [xs[0]], create_graph=True)
            return [t.numpy() for t in em.autograd.grad((g * g).sum(), xs)]
        finally:
            ec.set_enabled(prev)
    for a, b in zip(second(True), second(False)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_backward_twice_with_retain_graph_and_leaf_grads_accumulate():
    x = em.tensor(_rand((4, 6), "float64"), requires_grad=True)
    w = em.tensor(_rand((6,), "float64", 1), requires_grad=True)
    y = F.layer_norm(x, (6,), w)
    assert y.grad_fn is not None
    y.sum().backward(retain_graph=True)
    first = w.grad.numpy().copy()
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * first, rtol=1e-12)


def test_no_grad_and_inputs_without_grad_take_the_forward_program():
    x = em.tensor(_rand((2, 3, 8, 8), "float32"))
    before = ec.stats["runs"]
    with em.no_grad():
        y = F.max_pool2d(x, 2)
    z = F.max_pool2d(x, 2)
    assert ec.stats["runs"] - before == 2
    assert y.grad_fn is None and z.grad_fn is None and not z.requires_grad
    np.testing.assert_array_equal(y.numpy(), z.numpy())


def test_composite_runs_as_written_under_a_tracer_forward_ad_and_when_off():
    x = em.tensor(_rand((3, 8), "float64"), requires_grad=True)
    before = ec.stats["runs"]
    with em.autograd.forward_ad.dual_level():
        d = em.autograd.forward_ad.make_dual(x.detach(), em.ones_like(x))
        F.gelu(d)
    compiled = em.compile(lambda t: F.gelu(t) * 2)
    np.testing.assert_allclose(compiled(x).detach().numpy(), (F.gelu(x) * 2).detach().numpy(),
                               rtol=1e-12)
    after_compiled = ec.stats["runs"]
    assert after_compiled - before == 1      # only the plain eager call in the comparison
    ec.set_enabled(False)
    F.gelu(x)
    assert ec.stats["runs"] == after_compiled


def test_small_inputs_keep_the_composite_by_default(monkeypatch):
    monkeypatch.setattr(ec, "MIN_ELEMENTS", 1 << 15)
    x = em.tensor(_rand((4, 8), "float32"), requires_grad=True)
    before = ec.stats["runs"]
    for _ in range(4):
        F.gelu(x)
    assert ec.stats["runs"] == before


def test_a_key_is_compiled_only_after_warmup_calls(monkeypatch):
    monkeypatch.setattr(ec, "WARMUP", 2)
    x = em.tensor(_rand((5, 7), "float32"), requires_grad=True)
    before = ec.stats["runs"]
    F.silu(x), F.silu(x)
    assert ec.stats["runs"] == before
    F.silu(x)
    assert ec.stats["runs"] == before + 1


def test_inplace_silu_and_return_indices_run_as_written():
    x = em.tensor(_rand((4, 9), "float32"))
    before = ec.stats["runs"]
    y = F.silu(x, inplace=True)
    assert y is x
    vals, idx = F.max_pool2d(em.tensor(_rand((1, 2, 4, 4), "float32")), 2, return_indices=True)
    assert idx.dtype == em.int64 and vals.shape == (1, 2, 2, 2)
    assert ec.stats["runs"] == before


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_updates_running_stats_like_the_composite(training):
    x = em.tensor(_rand((6, 4, 3, 3), "float64"), requires_grad=True)
    w = em.tensor(_rand((4,), "float64", 1), requires_grad=True)
    b = em.tensor(_rand((4,), "float64", 2), requires_grad=True)
    got = {}
    for fast in (False, True):
        prev = ec.set_enabled(fast)
        try:
            rm, rv = em.zeros(4, dtype=em.float64), em.ones(4, dtype=em.float64)
            before = ec.stats["runs"]
            steps = []
            for _ in range(3):
                y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.2)
                grads = em.autograd.grad((y * y).sum(), [x, w, b])
                steps.append([y.detach().numpy()] + [t.numpy() for t in grads])
            assert (ec.stats["runs"] - before) == (3 if fast else 0)
            got[fast] = steps, rm.numpy().copy(), rv.numpy().copy()
        finally:
            ec.set_enabled(prev)
    for s_fast, s_ref in zip(got[True][0], got[False][0]):
        for a, r in zip(s_fast, s_ref):
            np.testing.assert_allclose(a, r, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(got[True][1], got[False][1], rtol=1e-12)
    np.testing.assert_allclose(got[True][2], got[False][2], rtol=1e-12)
    if training:
        assert not np.allclose(got[True][1], 0.0)       # the stats did move


def test_an_input_written_in_place_before_backward_raises():
    # NOTE: the compiled backward may read any input's array, so every tensor input is
    # version-checked, as PyTorch's native gelu/layer_norm/conv/pool save their input (the
    # layer_norm composite, which saves x - mean instead, did not raise here).
    for fast, fn in ((False, F.gelu), (True, F.gelu),
                     (True, lambda t: F.layer_norm(t, (6,), w))):
        prev = ec.set_enabled(fast)
        try:
            w = em.tensor(_rand((6,), "float64"), requires_grad=True)
            x = em.tensor(_rand((4, 6), "float64"), requires_grad=True)
            h = x * 1.0
            y = fn(h)
            h.add_(1.0)
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                y.sum().backward()
        finally:
            ec.set_enabled(prev)


def test_saved_activations_are_freed_by_backward_while_the_output_lives():
    def live_after_backward(fast):
        prev = ec.set_enabled(fast)
        try:
            x = em.tensor(_rand((64, 256), "float32"), requires_grad=True)
            F.gelu(x).sum().backward()                      # compile outside the window
            x.grad = None
            base = em.memory_stats()["current_bytes"]
            y = F.gelu(x)
            during = em.memory_stats()["current_bytes"] - base
            y.sum().backward()
            x.grad = None
            after = em.memory_stats()["current_bytes"] - base
            del y
            return during, after
        finally:
            ec.set_enabled(prev)
    during, after = live_after_backward(True)
    _, after_ref = live_after_backward(False)
    assert during > 64 * 256 * 4                            # activations were saved...
    assert after <= after_ref                               # ...and freed like the composite's
    with pytest.raises(RuntimeError, match="second time"):
        x = em.tensor(_rand((64, 256), "float32"), requires_grad=True)
        y = F.gelu(x)
        y.sum().backward()
        y.sum().backward()


def test_eager_fast_path_agrees_with_the_compiled_step():
    """A small conv/pool/norm/gelu/cross-entropy step: eager (fast composites) and
    ``ember.compile`` of the same step give the same loss and gradients (to rounding)."""
    nn = em.nn

    def make():
        em.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.GroupNorm(2, 4), nn.Flatten(), nn.Linear(4 * 4 * 4, 16),
                             nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 5))
    x = em.tensor(_rand((6, 3, 8, 8), "float32"))
    y = em.tensor(np.random.default_rng(1).integers(0, 5, 6))

    def grads(model, step):
        loss = step(model)
        return [float(loss)] + [p.grad.numpy().copy() for p in model.parameters()]

    def step(model):
        for p in model.parameters():
            p.grad = None
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss.detach()
    before = ec.stats["runs"]
    eager = grads(make(), step)
    assert ec.stats["runs"] - before >= 5          # conv, pool, norms, gelu, cross-entropy
    m = make()
    compiled = em.compile(lambda: step(m))
    for _ in range(3):
        got = grads(m, lambda _m: compiled())
    for a, b in zip(got, eager):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
