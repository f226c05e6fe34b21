"""The ``scatter_stack`` pass: unbind's VJP (zero-constant scatters joined by adds) becomes
one node, bitwise equal to the unfused graph, and a ``permute`` after it is absorbed."""
import numpy as np
import pytest

import ember as em
from ember.graph.passes import DEFAULT_PASSES, EXACT_PASSES
from ember.graph.passes.scatter_stack import scatter_stack

NOSTACK = [p for p in EXACT_PASSES if p != "scatter_stack"]


def _names(g) -> list:
    return [n.op.name for n in g.nodes]


def _qkv_grad(use=(0, 1, 2), layout="gpt"):
    """d/dt of a weighted sum of the unbound slots of ``t`` (GPT's q, k, v split)."""
    def f(t, w):
        t = t.detach().requires_grad_(True)
        if layout == "gpt":     # (B, T, 3, H, D) -> (3, B, H, T, D), as bench/train.py
            parts = t.permute(2, 0, 3, 1, 4).unbind(0)
        else:
            parts = t.unbind(0)
        loss = sum((parts[j] * w[j]).sum() for j in use)
        (g,) = em.autograd.grad(loss, [t])
        return g.reshape(t.shape[0], t.shape[1], -1) if layout == "gpt" else g
    return f


def _inputs(layout="gpt"):
    em.manual_seed(0)
    if layout == "gpt":
        return em.randn(2, 5, 3, 2, 4), em.randn(3, 2, 2, 5, 4)
    return em.randn(3, 4, 6), em.randn(3, 4, 6)


@pytest.mark.parametrize("use", [(0, 1, 2), (2, 0), (1, 2)])
@pytest.mark.parametrize("layout", ["gpt", "plain"])
def test_unbind_grad_is_one_node_and_bitwise_equal(use, layout):
    f = _qkv_grad(use, layout)
    t, w = _inputs(layout)
    on = em.compile(f, passes=EXACT_PASSES)
    off = em.compile(f, passes=NOSTACK)
    on(t, w), off(t, w)       # the first call traces (an eager run): compare the second
    got, ref, eager = on(t, w).numpy(), off(t, w).numpy(), f(t, w).numpy()
    names = _names(on.graph)
    assert "scatter_stack" in names and "as_strided_scatter" not in names, names
    assert "as_strided_scatter" in _names(off.graph)
    np.testing.assert_array_equal(got.view(np.int32), ref.view(np.int32))
    np.testing.assert_array_equal(got.view(np.int32), eager.view(np.int32))
    if len(use) < 3:          # the slot no gradient reaches is zero
        missing = ({0, 1, 2} - set(use)).pop()
        g5 = got.reshape(t.shape) if layout == "gpt" else got
        sl = g5[:, :, missing] if layout == "gpt" else g5[missing]
        assert np.all(sl == 0)


def test_permute_is_absorbed_and_reshape_becomes_a_view():
    f = _qkv_grad()
    t, w = _inputs()
    on = em.compile(f, passes=EXACT_PASSES)
    on(t, w)
    g = on.graph
    i = _names(g).index("scatter_stack")
    node = g.nodes[i]
    assert node.params["dims"] == (1, 3, 0, 2, 4)
    assert tuple(node.out.shape) == (2, 5, 3, 2, 4)
    # the planner sees the reshape after it as a view of its buffer (no copy)
    plan = on.memory_plan(t, w)
    reader = next(n for n in g.nodes[i + 1:] if node.out in n.inputs)
    assert reader.op.name == "reshape"
    assert plan.kind[reader.out.id] == "alias"


def test_minus_zero_becomes_plus_zero_like_the_sum():
    def f(t, w):
        t = t.detach().requires_grad_(True)
        a, b = t.unbind(0)
        (g,) = em.autograd.grad((a * w).sum() + (b * 2.0).sum(), [t])
        return g
    t, w = em.randn(2, 8), em.tensor(np.array([-0.0, 1.0] * 4, np.float32))
    cf = em.compile(f, passes=EXACT_PASSES)
    cf(t, w)                  # the first call traces (an eager run)
    got, want = cf(t, w).numpy(), f(t, w).numpy()
    assert "scatter_stack" in _names(cf.graph)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    assert not np.signbit(got[0]).any()


def test_slots_no_gradient_reaches_are_zero_filled_in_a_used_buffer():
    from ember.graph.passes.scatter_stack import _run_stack
    g = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    out = np.full((3, 2, 3), np.nan, np.float32)          # a dead buffer handed as out=
    res = _run_stack(np, g, slots=(1,), full=(3, 2, 3), dims=(0, 1, 2), out=out)
    assert res is out
    np.testing.assert_array_equal(res, np.stack([np.zeros((2, 3)), g[0], np.zeros((2, 3))]))
    out = np.full((2, 3, 3), np.nan, np.float32)          # permuted: (full[1], full[2], full[0])
    res = _run_stack(np, g, slots=(1,), full=(3, 2, 3), dims=(1, 2, 0), out=out)
    np.testing.assert_array_equal(res.transpose(2, 0, 1)[1], g[0])
    assert not np.isnan(res).any()


def test_not_rewritten_when_a_scatter_is_read_elsewhere():
    def f(t):
        t = t.detach().requires_grad_(True)
        a, b = t.unbind(0)
        (g,) = em.autograd.grad((a * 3.0).sum() + (b * 2.0).sum(), [t])
        return g
    t = em.randn(2, 6)
    cf = em.compile(f, passes=["simplify", "fold", "cse"])
    cf(t)
    g = cf.graph
    sc = [n for n in g.nodes if n.op.name == "as_strided_scatter"]
    assert len(sc) == 2
    # make one scatter's result a graph output too: it must stay
    from ember.graph.ir import Graph
    g2 = Graph(g.inputs, g.nodes, list(g.outputs) + [sc[0].out], g.name)
    new, stats = scatter_stack(g2)
    assert stats["stacked"] == 0 and new is g2


def test_default_pipeline_runs_it_before_fusion():
    assert DEFAULT_PASSES.index("scatter_stack") < DEFAULT_PASSES.index("fuse")
    f = _qkv_grad()
    t, w = _inputs()
    cf = em.compile(f)
    cf(t, w)
    np.testing.assert_allclose(cf(t, w).numpy(), f(t, w).numpy(), rtol=1e-6, atol=1e-6)
    assert "scatter_stack" in _names(cf.graph)


class _DeviceArray:
    """A stand-in for a CuPy constant (a graph captured on a GPU): no ``np.ndarray``,
    reductions answer device arrays (0-d), ``get()`` copies to the host."""

    def __init__(self, a):
        self.a = a
        self.shape, self.dtype, self.size = a.shape, a.dtype, a.size

    def any(self):
        return _DeviceArray(np.asarray(self.a.any()))

    def __bool__(self):
        return bool(self.a)

    def get(self):
        return self.a


@pytest.mark.parametrize("zero", [True, False])
def test_a_device_constant_is_recognised(zero):
    # A graph captured on a GPU holds its zero constants as CuPy arrays: the pass must
    # inspect those too (it once looked at NumPy values only and never fired on a GPU).
    f = _qkv_grad()
    t, w = _inputs()
    off = em.compile(f, passes=NOSTACK)
    off(t, w), off(t, w)
    g = off.graph
    consts = [n for n in g.nodes if n.op.name == "constant"]
    assert consts
    for n in consts:
        v = n.params["value"]
        n.params["value"] = _DeviceArray(v if zero or not isinstance(v, np.ndarray)
                                         else v + 1)
    new, changed = scatter_stack(g)
    assert changed["stacked"] == (1 if zero else 0)
    assert ("scatter_stack" in _names(new)) == zero
