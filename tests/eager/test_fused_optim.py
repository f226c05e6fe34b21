"""The ``fused=True`` path of SGD/Adam/AdamW (``ember/optim/_fused.py``).

The compiled update must give the per-parameter loop's trajectory (to rounding), actually
run, leave the default and ``foreach`` to the loop, resume bit-exactly from a state dict,
follow LR changes without recompiling, and keep the loop while a tracer is active.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import optim
from ember.codegen.toolchain import find_compiler
from ember.optim import _fused

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

CASES = [
    (optim.Adam, dict(lr=0.05)),
    (optim.Adam, dict(lr=0.05, amsgrad=True, weight_decay=0.1, maximize=True)),
    (optim.AdamW, dict(lr=0.05, weight_decay=0.3)),
    (optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.2)),
]


def _params(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [em.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True)
            for s in ((7, 5), (5,), (3, 4, 2))]


def _grads(params, step):
    for i, p in enumerate(params):      # fresh .grad tensors each step, like backward()
        rng = np.random.default_rng(100 * step + i)
        p.grad = em.tensor(rng.standard_normal(tuple(p.shape)).astype(p.numpy(force=True)
                                                                     .dtype))


def _trajectory(cls, kw, dtype, steps=5, params=None, opt=None, start=0):
    params = params or _params(dtype)
    opt = opt or cls(params, **kw)
    for k in range(start, start + steps):
        opt.zero_grad()
        _grads(params, k)
        opt.step()
    return params, opt


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cls,kw", CASES)
def test_compiled_update_matches_the_loop(cls, kw, dtype):
    before = _fused.stats["steps"]
    loop, _ = _trajectory(cls, kw, dtype)
    assert _fused.stats["steps"] == before
    fast, opt = _trajectory(cls, dict(kw, fused=True), dtype)
    assert _fused.stats["steps"] == before + 4       # every step but the state-making first
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    for a, b in zip(fast, loop):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **tol)
    for p, q in zip(fast, loop):                     # the state too (step counter, moments)
        assert set(opt.state[p]) <= {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq",
                                     "momentum_buffer"}
    if "step" in opt.state[fast[0]]:
        assert float(opt.state[fast[0]]["step"]) == 5.0


@pytest.mark.parametrize("flags,fast", [(dict(fused=True), True), (dict(foreach=True), False),
                                        (dict(fused=True, foreach=False), True), ({}, False),
                                        (dict(foreach=False), False), (dict(fused=False), False)])
def test_flags_pick_the_path(flags, fast):
    before = _fused.stats["steps"]
    _trajectory(optim.Adam, dict(lr=0.01, **flags), "float32", steps=3)
    assert (_fused.stats["steps"] - before == 2) is fast


def test_resume_from_state_dict_is_bit_exact():
    full, _ = _trajectory(optim.AdamW, dict(lr=0.05, fused=True), "float32", steps=6)
    params, opt = _trajectory(optim.AdamW, dict(lr=0.05, fused=True), "float32", steps=3)
    saved = opt.state_dict()
    fresh = [em.tensor(p.detach().numpy().copy(), requires_grad=True) for p in params]
    opt2 = optim.AdamW(fresh, lr=1.0, fused=True)
    opt2.load_state_dict(saved)
    _trajectory(None, None, None, steps=3, params=fresh, opt=opt2, start=3)
    for a, b in zip(full, fresh):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_lr_changes_are_followed_without_recompiling():
    fast, opt = _trajectory(optim.Adam, dict(lr=0.05, fused=True), "float64", steps=3)
    loop, lopt = _trajectory(optim.Adam, dict(lr=0.05), "float64", steps=3)
    for o in (opt, lopt):
        o.param_groups[0]["lr"] = 0.2
    _trajectory(None, None, None, steps=2, params=fast, opt=opt, start=3)
    _trajectory(None, None, None, steps=2, params=loop, opt=lopt, start=3)
    for a, b in zip(fast, loop):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12)
    assert opt._fused_update.explain().recompiles == []


def test_a_parameter_without_grad_is_skipped_like_the_loop():
    ps = _params("float64")
    qs = [em.tensor(p.detach().numpy().copy(), requires_grad=True) for p in ps]
    fast, loop = optim.Adam(ps, lr=0.1, fused=True), optim.Adam(qs, lr=0.1)
    for k in range(4):
        for params, opt in ((ps, fast), (qs, loop)):
            opt.zero_grad()
            _grads(params, k)
            if k >= 2:
                params[1].grad = None
            opt.step()
    for a, b in zip(ps, qs):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12)


def test_a_compiled_training_step_still_captures_the_loop():
    model = em.nn.Linear(4, 3)
    opt = optim.Adam(model.parameters(), lr=0.01, fused=True)
    x = em.randn(8, 4)

    @em.compile
    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    before = _fused.stats["steps"]
    for _ in range(3):
        step()
    assert _fused.stats["steps"] == before        # the tracer sees the update's ops
    assert "_fused_update" not in opt.__dict__


@pytest.mark.parametrize("cycle", [True, False])
def test_momentum_cycling_scheduler_keeps_the_loop_from_the_first_step(cycle):
    params = _params("float32")
    opt = optim.AdamW(params, lr=0.01, fused=True)
    sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=10,
                                          cycle_momentum=cycle)
    before = _fused.stats["steps"]
    for k in range(4):
        opt.zero_grad()
        _grads(params, k)
        opt.step()
        sched.step()
    assert _fused.stats["steps"] - before == (0 if cycle else 3)
