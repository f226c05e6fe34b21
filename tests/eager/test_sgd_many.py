"""SGD's whole-group update in one C call (``optim/sgd.py`` ``_many`` ->
``optim_kernels.sgd_many``): each parameter runs the one-parameter loop in turn, so the
bits are those of the per-parameter calls and of the NumPy passes; groups the loop would
not take whole (a non-contiguous gradient, mixed dtypes, a tensor lr, the step creating
momentum buffers) fall back to the per-parameter path."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen import optim_kernels as K
from ember.codegen.toolchain import find_compiler
from ember.optim import sgd as sgd_mod

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

CONFIGS = [dict(lr=0.1), dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
           dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)]


@pytest.fixture
def many_calls(monkeypatch):
    prev = K.set_enabled(True)
    n = [0]
    real = K.sgd_many

    def counted(*a, **k):
        n[0] += 1
        return real(*a, **k)
    monkeypatch.setattr(K, "sgd_many", counted)
    yield n
    K.set_enabled(prev)


def _run(cfg, dtype, shapes, path, steps=3, layout=None, dtypes=None):
    """Parameters after ``steps`` steps: ``path`` "many" (default), "one" (the per-parameter
    loop) or "passes" (NumPy)."""
    K.set_enabled(path != "passes")
    rng = np.random.default_rng(7)
    dts = dtypes or [dtype] * len(shapes)
    ps = [ember.nn.Parameter(ember.tensor(rng.standard_normal(s).astype(d)))
          for s, d in zip(shapes, dts)]
    opt = ember.optim.SGD(ps, **cfg)
    real = sgd_mod._many
    if path == "one":
        sgd_mod._many = lambda *a: False
    try:
        for i in range(steps):
            for p, d in zip(ps, dts):
                g = rng.standard_normal(p.shape).astype(d)
                if i == 1 and g.size > 1:
                    g.flat[0], g.flat[-1] = np.nan, np.inf
                p.grad = ember.tensor(g) if layout is None else layout(g)
            opt.step()
    finally:
        sgd_mod._many = real
        K.set_enabled(True)
    return [p.detach().numpy().copy() for p in ps]


def _same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y, strict=True)
        num = ~np.isnan(x)
        assert np.array_equal(np.signbit(x[num]), np.signbit(y[num]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["plain", "momentum_wd_damp", "nesterov_max"])
def test_one_call_same_bits_as_per_parameter_and_passes(cfg, dtype, many_calls):
    shapes = [(37, 5), (1031,), (3, 0), (), (512, 7)]
    fast = _run(cfg, dtype, shapes, "many")
    # momentum: the first step creates the buffers on the per-parameter path
    assert many_calls[0] == (2 if cfg.get("momentum") else 3)
    _same(fast, _run(cfg, dtype, shapes, "one"))
    _same(fast, _run(cfg, dtype, shapes, "passes"))


def test_more_parameters_than_one_launch_holds(many_calls):
    shapes = [(k % 7 + 1, 3) for k in range(2 * K._MANY + 5)]
    runs = K.stats["runs"]
    fast = _run(CONFIGS[1], np.float32, shapes, "many")
    # the first step creates the momentum buffers (NumPy passes); the next two take the loop
    assert K.stats["runs"] - runs == 2 * len(shapes) and many_calls[0] == 2
    _same(fast, _run(CONFIGS[1], np.float32, shapes, "passes"))


def test_groups_it_does_not_take(many_calls):
    shapes = [(6, 4), (9,)]
    # a transposed (non-contiguous) gradient: the per-parameter path for the whole group
    tr = _run(CONFIGS[0], np.float32, shapes, "many",
              layout=lambda g: ember.tensor(np.ascontiguousarray(g.T)).mT
              if g.ndim == 2 else ember.tensor(g))
    assert many_calls[0] == 0
    _same(tr, _run(CONFIGS[0], np.float32, shapes, "passes",
                   layout=lambda g: ember.tensor(np.ascontiguousarray(g.T)).mT
                   if g.ndim == 2 else ember.tensor(g)))
    # float32 and float64 parameters in one group
    mixed = _run(CONFIGS[0], None, shapes, "many", dtypes=[np.float32, np.float64])
    assert many_calls[0] == 0
    _same(mixed, _run(CONFIGS[0], None, shapes, "passes", dtypes=[np.float32, np.float64]))


def test_versions_bumped_and_buffers_updated(many_calls):
    ps = [ember.nn.Parameter(ember.randn(8)) for _ in range(3)]
    opt = ember.optim.SGD(ps, lr=0.1, momentum=0.9)
    for p in ps:
        p.grad = ember.ones(8)
    opt.step()                        # creates the buffers (per parameter)
    v0 = [(p._storage.version, opt.state[p]["momentum_buffer"]._storage.version) for p in ps]
    opt.step()
    assert many_calls[0] == 1
    for p, (a, b) in zip(ps, v0):
        assert p._storage.version > a
        assert opt.state[p]["momentum_buffer"]._storage.version > b
        np.testing.assert_array_equal(opt.state[p]["momentum_buffer"].numpy(),
                                      np.full(8, 1.9, np.float32))
