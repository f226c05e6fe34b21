"""The one-pass optimizer loops (ember/codegen/optim_kernels.py) against the NumPy passes.

The default SGD/Adam/AdamW step runs each parameter's update as one C loop that must give
the NumPy passes' bits exactly (same operations, same order, no FMA contraction): every
case below runs the same steps with the loops on and off and compares bitwise, with NaN and
Inf in the gradients, zero-size and 0-d parameters, both float dtypes, and checks that the
loops really ran (or, for operands they do not take, that the passes did).
"""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen import optim_kernels as K
from ember.codegen.toolchain import find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

SHAPES = [(37, 5), (1031,), (3, 0), ()]
CASES = {
    "adam": lambda ps: ember.optim.Adam(ps, lr=1e-2),
    "adam_l2_maximize": lambda ps: ember.optim.Adam(ps, lr=1e-2, weight_decay=0.1,
                                                    maximize=True, betas=(0.3, 0.9)),
    "adam_lerp_upper": lambda ps: ember.optim.Adam(ps, lr=1e-2, betas=(0.4, 0.99), eps=1e-3),
    "adamw": lambda ps: ember.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "sgd": lambda ps: ember.optim.SGD(ps, lr=0.1),
    "sgd_momentum_wd_damp": lambda ps: ember.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                       dampening=0.1, weight_decay=0.01),
    "sgd_nesterov_maximize": lambda ps: ember.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                        nesterov=True, maximize=True),
}


@pytest.fixture
def loops_on():
    prev = K.set_enabled(True)
    yield
    K.set_enabled(prev)


def _run(make, on, dtype, steps=4, grad_layout=None):
    K.set_enabled(on)
    rng = np.random.default_rng(1)
    ps = [ember.nn.Parameter(ember.tensor(rng.standard_normal(s).astype(dtype)))
          for s in SHAPES]
    opt = make(ps)
    for i in range(steps):
        for p in ps:
            g = rng.standard_normal(p.shape).astype(dtype)
            if i == 2 and g.size > 1:
                g.flat[0], g.flat[-1] = np.nan, -np.inf
            p.grad = ember.tensor(g) if grad_layout is None else grad_layout(g)
        opt.step()
    state = [np.asarray(v.numpy()).copy() for p in ps for v in opt.state[p].values()
             if isinstance(v, ember.Tensor)]
    return [p.detach().numpy().copy() for p in ps] + state


def _same_bits(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        # NOTE: bitwise, NaN sign/payload aside (x86's default NaN is negative, NumPy's
        # loops may keep an operand's): equal values, NaN at the same places, equal zeros
        np.testing.assert_array_equal(x, y, strict=True)
        num = ~np.isnan(x)
        assert np.array_equal(np.signbit(x[num]), np.signbit(y[num]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_loop_equals_numpy_passes_bitwise(loops_on, name, dtype):
    before = K.stats["runs"]
    fast = _run(CASES[name], True, dtype)
    assert K.stats["runs"] > before          # the loops ran
    slow = _run(CASES[name], False, dtype)
    _same_bits(fast, slow)


def test_non_contiguous_gradient_takes_the_passes(loops_on):
    before = K.stats["runs"]
    fast = _run(CASES["adam"], True, np.float32,
                grad_layout=lambda g: ember.tensor(np.ascontiguousarray(g.T)).mT
                if g.ndim == 2 else ember.tensor(g))
    slow = _run(CASES["adam"], False, np.float32,
                grad_layout=lambda g: ember.tensor(np.ascontiguousarray(g.T)).mT
                if g.ndim == 2 else ember.tensor(g))
    _same_bits(fast, slow)
    # 4 steps x 3 contiguous parameters (the (37, 5) one's transposed gradient is not taken)
    assert K.stats["runs"] - before == 4 * 3


def test_amsgrad_takes_the_passes(loops_on):
    before = K.stats["runs"]
    _run(lambda ps: ember.optim.Adam(ps, lr=1e-2, amsgrad=True), True, np.float32)
    assert K.stats["runs"] == before


def test_version_counters_bumped(loops_on):
    p = ember.nn.Parameter(ember.randn(64))
    opt = ember.optim.Adam([p], lr=1e-2)
    p.grad = ember.randn(64)
    opt.step()
    st = opt.state[p]
    v0 = (p._storage.version, st["exp_avg"]._storage.version,
          st["exp_avg_sq"]._storage.version)
    runs = K.stats["runs"]
    opt.step()
    assert K.stats["runs"] == runs + 1
    v1 = (p._storage.version, st["exp_avg"]._storage.version,
          st["exp_avg_sq"]._storage.version)
    assert all(b > a for a, b in zip(v0, v1))


def test_matches_torch_adamw():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((16, 8)).astype(np.float32)
    grads = [rng.standard_normal((16, 8)).astype(np.float32) for _ in range(5)]
    pe = ember.nn.Parameter(ember.tensor(w0))
    pt = torch.nn.Parameter(torch.tensor(w0))
    oe = ember.optim.AdamW([pe], lr=1e-2, weight_decay=0.1)
    ot = torch.optim.AdamW([pt], lr=1e-2, weight_decay=0.1, foreach=False)
    for g in grads:
        pe.grad, pt.grad = ember.tensor(g), torch.tensor(g)
        oe.step()
        ot.step()
    np.testing.assert_allclose(pe.detach().numpy(), pt.detach().numpy(), rtol=1e-6, atol=1e-7)
