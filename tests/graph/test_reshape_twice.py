"""simplify: the second reshape of a non-contiguous view to another shape reads the first
(a view of its copy) instead of copying the view again; chains are still composed."""
import importlib

import numpy as np

import ember as em
from ember.graph.passes import EXACT_PASSES

from ._kernels import op_names

S = importlib.import_module("ember.graph.passes.simplify")


def _twice(x):
    y = (x * 2).permute(0, 2, 1, 3)             # (B, H, T, D) -> (B, T, H, D): strided
    a = y.reshape(3, 5, 8)
    b = y.reshape(15, 8)
    return a + 1, b * 3


def _reshapes(c):
    return [n for n in c.graph.nodes if n.op.name == "reshape"]


def test_second_reshape_is_a_view_of_the_first(monkeypatch):
    x = em.randn(3, 2, 5, 4)
    on = em.compile(_twice, passes=EXACT_PASSES)
    on(x)
    first, second = _reshapes(on)
    assert second.inputs[0] is first.out
    plan = on.memory_plan(x)
    assert plan.kind[first.out.id] != "alias" and plan.kind[second.out.id] == "alias"
    monkeypatch.setattr(S, "_reshape_of_first", lambda *a: None)
    off = em.compile(_twice, passes=EXACT_PASSES)
    off(x)
    a, b = _reshapes(off)
    assert a.inputs[0] is b.inputs[0]                        # both copy the permuted view
    plan = off.memory_plan(x)
    assert plan.kind[a.out.id] != "alias" and plan.kind[b.out.id] != "alias"
    for got, ref, eager in zip(on(x), off(x), _twice(x)):
        np.testing.assert_array_equal(got.numpy(), ref.numpy())
        np.testing.assert_array_equal(got.numpy(), eager.numpy())


def test_a_chain_read_once_is_still_one_reshape():
    def f(x):
        return x.permute(0, 2, 1, 3).reshape(3, 5, 8).reshape(15, 8) * 2

    x = em.randn(3, 2, 5, 4)
    c = em.compile(f, passes=EXACT_PASSES)
    c(x)
    (r,) = _reshapes(c)
    assert tuple(r.out.shape) == (15, 8) and c.graph.producer(r.inputs[0]).op.name == "permute"
    np.testing.assert_array_equal(c(x).numpy(), f(x).numpy())


def test_a_chain_whose_inner_reshape_is_read_elsewhere_is_kept():
    def f(x):
        a = x.permute(0, 2, 1, 3).reshape(3, 5, 8)
        return a * 2, a.reshape(15, 8) + 1

    x = em.randn(3, 2, 5, 4)
    c = em.compile(f, passes=EXACT_PASSES)
    c(x)
    first, second = _reshapes(c)
    assert second.inputs[0] is first.out
    for got, ref in zip(c(x), f(x)):
        np.testing.assert_array_equal(got.numpy(), ref.numpy())


def test_reshapes_of_a_fresh_value_are_left_alone():
    def f(x):
        y = x * 2
        return y.reshape(6, 20) + 1, y.reshape(120) * 3

    c = em.compile(f, passes=EXACT_PASSES)
    x = em.randn(3, 2, 5, 4)
    c(x)
    names = op_names(c.graph)
    assert names.count("reshape") == 2
    assert all(c.graph.producer(r.inputs[0]).op.name == "mul" for r in _reshapes(c))
