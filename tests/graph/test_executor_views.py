"""Issue 19 item 7: views of graph inputs (a bias as a column, the targets reshaped) are
made right after the inputs are bound, not by steps among the GEMMs — same values, and a
reshape that has to copy (a strided argument) is still counted by the allocator."""
import numpy as np

import ember as em
import ember.nn.functional as F
from ember import nn


def _entry(f):
    return [e for e in f._cache.values() if not e.eager and e.program is not None][-1]


def test_mlp_step_makes_its_input_views_up_front():
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = em.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    x = em.randn(8, 12)
    y = em.tensor(np.arange(8) % 3)
    f = em.compile(step, fullgraph=True)
    for _ in range(3):
        f(x, y)
    prog = _entry(f).program
    pre = [s.name for s in prog._pre]
    assert "column" in pre and "reshape" in pre, pre
    assert not {s.name for s in prog._serial} & {"column"}
    assert len(prog._pre) + len(prog._serial) + sum(
        s.name == "constant" for s in prog.steps) == len(prog.steps)


def test_input_view_values_and_a_copying_reshape_is_counted():
    def fn(a, b):
        return (a.reshape(-1) * 2 + b.reshape(-1)).sum(), a.reshape(6, 2) + 1

    a = em.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    b = em.tensor(np.ones((4, 3), np.float32))
    f = em.compile(fn, fullgraph=True, passes=["simplify", "dce"])
    f(a, b)
    f(a, b)
    assert [s.name for s in _entry(f).program._pre].count("reshape") >= 1
    # a transposed argument of the same shape: the reshapes copy, the copies are counted
    at = em.tensor(np.arange(12, dtype=np.float32).reshape(4, 3)).T
    assert not at.is_contiguous()
    peaks = {}
    for name, arg in (("contiguous", a), ("strided", at)):
        start = em.memory_stats()["current_bytes"]
        em.reset_peak_memory_stats()
        got = f(arg, b)
        peaks[name] = em.memory_stats()["peak_bytes"] - start
        want = fn(arg, b)
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
        del got, want
        assert em.memory_stats()["current_bytes"] == start
    assert peaks["strided"] >= peaks["contiguous"] + 48, peaks
