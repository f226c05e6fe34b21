"""``compiled.memory_plan(*args)`` on a signature never called (issue 14): the plan comes
back before anything runs, and the capture behind it leaves no trace — parameters,
buffers, gradients, optimizer state and random generators are as before, so training
afterwards is bitwise the training without the call."""
import numpy as np
import pytest

import ember as em
from ember import nn
import ember.nn.functional as F
from ember.graph.passes import EXACT_PASSES


def _build():
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.25),
                          nn.Linear(16, 3))
    return model, em.optim.Adam(model.parameters(), lr=1e-2)


def _step_for(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def _state(model, opt):
    sd = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    grads = [p.grad for p in model.parameters()]
    return sd, grads, len(opt.state), em.get_rng_state().numpy().copy()


def _train(model, step, x, y, n=3):
    em.manual_seed(1)
    losses = [step(x, y).item() for _ in range(n)]
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


def test_fresh_training_step_plan_has_no_side_effects():
    x, y = em.randn(32, 6), em.randint(0, 3, (32,))
    model, opt = _build()
    step = em.compile(_step_for(model, opt), passes=EXACT_PASSES)
    before = _state(model, opt)
    plan = step.memory_plan(x, y)                 # used to raise GraphError
    assert plan.peak_bytes > plan.input_bytes > 0 and plan.table(3).count("\n") == 3
    after = _state(model, opt)
    for k in before[0]:
        assert np.array_equal(before[0][k], after[0][k]), k   # weights, BN running stats
    assert after[1] == [None] * len(after[1]) and after[2] == 0   # no grads, no Adam state
    assert np.array_equal(before[3], after[3])                    # dropout drew nothing
    # training afterwards is the training of a twin that never asked for a plan
    twin, topt = _build()
    ref = _train(twin, em.compile(_step_for(twin, topt), passes=EXACT_PASSES), x, y)
    got = _train(model, step, x, y)
    assert got[0] == ref[0]
    for a, b in zip(got[1], ref[1]):
        assert np.array_equal(a, b)


def test_plan_capture_is_not_a_call():
    """A plan asked of a fresh step neither counts as a recompile nor hides the first
    call's capture; a steady new shape is captured once and then reused."""
    x, y = em.randn(32, 6), em.randint(0, 3, (32,))
    runs = []
    for ask in (False, True):
        model, opt = _build()
        step = em.compile(_step_for(model, opt))
        if ask:
            step.memory_plan(x, y)
        for _ in range(3):
            step(x, y)
        runs.append((step._recompiles, len(step.graphs())))
    assert runs[0] == runs[1]
    x2, y2 = em.randn(8, 6), em.randint(0, 3, (8,))
    params = [p.detach().numpy().copy() for p in model.parameters()]
    n = len(step.graphs())
    plan = step.memory_plan(x2, y2)               # steady state, new shape: cached
    assert len(step.graphs()) == n + 1 and plan.peak_bytes > plan.input_bytes
    for p, q in zip(model.parameters(), params):
        assert np.array_equal(p.detach().numpy(), q)
    step(x2, y2)
    assert len(step.graphs()) == n + 1            # the real call ran the planned graph


def test_plan_capture_undoes_writes_to_closure_tensors_also_when_fn_raises():
    counter, w = em.zeros(()), em.randn(4, 4)
    w0 = w.numpy().copy()
    gen = em.Generator().manual_seed(3)
    state0 = gen.get_state().numpy().copy()

    def f(x):
        counter.add_(1)                       # in-place writes into closure tensors
        w.mul_(2.0)
        return (x @ w + em.rand(4, 4, generator=gen)).sum()

    x = em.randn(4, 4)
    plan = em.compile(f).memory_plan(x)
    assert plan.peak_bytes > 0
    assert counter.item() == 0 and np.array_equal(w.numpy(), w0)
    assert np.array_equal(gen.get_state().numpy(), state0)

    def g(x):
        counter.add_(1)
        raise RuntimeError("boom in the traced call")

    with pytest.raises(RuntimeError, match="boom in the traced call"):
        em.compile(g).memory_plan(x)
    assert counter.item() == 0
