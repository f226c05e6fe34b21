"""``relu``'s ``eager_vjp`` (ops/unary_backward.py): a plain eager backward runs the
``threshold_backward`` kernel that ``relu_backward`` dispatches (the eager C kernel from its
size, else the CPU kernel) without the dispatch: the same gradient bits; under
``create_graph``, a dispatch mode or another dtype the rule's dispatch runs."""
import numpy as np
import pytest

import ember
from ember.ops.unary import relu_p
from op_names import OpNames


@pytest.fixture
def calls(monkeypatch):
    n = [0]
    rule = relu_p.eager_vjp

    def counted(*a, **k):
        r = rule(*a, **k)
        n[0] += r is not None
        return r
    monkeypatch.setattr(relu_p, "eager_vjp", counted)
    return n


def _grad(x, g):
    t = ember.tensor(x, requires_grad=True)
    ember.relu(t).backward(ember.tensor(g))
    return t.grad.numpy().copy()


# below and above the eager C kernel's size (32K elements), both float dtypes
@pytest.mark.parametrize("shape", [(7, 5), (128, 512), (3, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_bits_as_the_dispatched_rule(shape, dtype, calls, monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    if x.size > 4:
        x.flat[:3] = [0.0, np.nan, -0.0]
        g.flat[3:5] = [np.inf, np.nan]
    fast = _grad(x, g)
    assert calls[0] == 1
    monkeypatch.setattr(relu_p, "eager_vjp", None)
    slow = _grad(x, g)
    np.testing.assert_array_equal(fast, slow, strict=True)
    assert np.array_equal(np.signbit(fast), np.signbit(slow))
    want = np.where(np.isnan(x) | (x > 0), g, 0)
    np.testing.assert_array_equal(fast, want.astype(dtype))


def test_declines_where_the_op_must_be_seen(calls):
    x = ember.randn(6, 4, requires_grad=True)
    y = ember.relu(x)
    with OpNames() as rec:
        y.backward(ember.ones(6, 4))
    assert calls[0] == 0 and "threshold_backward" in rec.names
    (gx,) = ember.autograd.grad(ember.relu(x).square().sum(), [x], create_graph=True)
    assert calls[0] == 0 and gx.requires_grad
    h = ember.randn(6, 4, dtype=ember.float16, requires_grad=True)
    ember.relu(h).sum().backward()
    assert calls[0] == 0
    np.testing.assert_array_equal(h.grad.numpy(), (h.detach().numpy() > 0).astype(np.float16))
