"""``F.relu`` / ``nn.ReLU`` through the compiled form on large inputs (eager_composite).

From ``F.relu.min_elements`` elements an eager relu runs its compiled graph (one fused
backward kernel instead of ``out > 0`` and a float-by-bool multiply). relu and its gradient
``g * (x > 0)`` are exact, so the fast path must give the NumPy primitive's bits: forward
and gradient, NaN/Inf and signed zeros included, on non-contiguous inputs, and the same as
``ember.compile`` of the same function.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.codegen import eager_composite as ec
from ember.codegen.toolchain import find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")


@pytest.fixture
def small_threshold(monkeypatch):
    """The fast path from 64 elements and the first call (the tests use small shapes)."""
    monkeypatch.setattr(F.relu, "min_elements", 64)
    monkeypatch.setattr(ec, "WARMUP", 0)
    prev = ec.set_enabled(True)
    yield
    ec.set_enabled(prev)


def _data(shape, dtype, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    flat = a.reshape(-1)
    flat[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40 if dtype == np.float32 else 1e-310]
    return a


def _same_bits(a, b):
    np.testing.assert_array_equal(a, b, strict=True)
    num = ~np.isnan(a)
    assert np.array_equal(np.signbit(a[num]), np.signbit(b[num]))


def _fwd_bwd(fn, xa, ga, transpose=False):
    x = em.tensor(xa)
    if transpose:
        x = em.tensor(np.ascontiguousarray(xa.swapaxes(-1, -2))).mT   # non-contiguous view
    x = x.detach().requires_grad_(True)
    y = fn(x)
    y.backward(em.tensor(ga))
    return y.detach().numpy().copy(), x.grad.numpy().copy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose", [False, True])
def test_fast_relu_equals_primitive_bitwise(small_threshold, dtype, transpose):
    xa, ga = _data((4, 6, 9), dtype), _data((4, 6, 9), dtype, seed=1)
    runs = ec.stats["runs"]
    fast = _fwd_bwd(F.relu, xa, ga, transpose)
    assert ec.stats["runs"] == runs + 1                 # the compiled form ran
    plain = _fwd_bwd(F.relu.__wrapped_composite__, xa, ga, transpose)
    for a, b in zip(fast, plain):
        _same_bits(a, b)


def test_module_uses_fast_path(small_threshold):
    xa = _data((8, 16), np.float32)
    runs = ec.stats["runs"]
    out = em.nn.ReLU()(em.tensor(xa))
    assert ec.stats["runs"] == runs + 1
    _same_bits(out.numpy(), F.relu.__wrapped_composite__(em.tensor(xa)).numpy())


def test_below_threshold_and_inplace_run_the_primitive(small_threshold):
    runs = ec.stats["runs"]
    F.relu(em.ones(8, 7))                       # 56 < 64 elements
    F.relu(em.ones(0, 100))                     # zero-size
    x = em.tensor(_data((8, 16), np.float32))
    y = F.relu(x, inplace=True)                 # writes its input: runs as written
    assert y is x and not np.isnan(x.numpy()[1:]).any() and (x.numpy()[1:] >= 0).all()
    em.nn.ReLU(inplace=True)(em.tensor(_data((8, 16), np.float32)))
    assert ec.stats["runs"] == runs


def test_default_threshold_keeps_small_layers_on_the_primitive():
    assert F.relu.min_elements == 1 << 20
    runs = ec.stats["runs"]
    for _ in range(ec.WARMUP + 2):
        F.relu(em.ones(128, 512, requires_grad=True)).sum().backward()
    assert ec.stats["runs"] == runs


def test_eager_equals_compiled(small_threshold):
    xa, ga = _data((5, 40), np.float32), _data((5, 40), np.float32, seed=2)
    compiled = em.compile(lambda t: F.relu(t))
    eager = _fwd_bwd(F.relu, xa, ga)
    comp = _fwd_bwd(compiled, xa, ga)
    for a, b in zip(eager, comp):
        _same_bits(a, b)
