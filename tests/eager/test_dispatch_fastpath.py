"""The eager hot paths (dispatcher, engine, leaf accumulation) keep their semantics."""
import numpy as np
import pytest

import ember
from ember.errors import GraphError


def _chain_grad_numpy(x, c):
    y, tape = x, []
    for i in range(20):
        k = i % 4
        if k == 2:
            y = np.tanh(y)
            tape.append(1 - y * y)
        elif k == 1:
            y = y + 0.1
            tape.append(None)
        else:
            tape.append(c if k == 0 else 1.5)
            y = y * tape[-1]
    g = np.ones_like(y)
    for d in reversed(tape):
        if d is not None:
            g = g * d
    return g


def test_elementwise_chain_gradient_matches_numpy():
    xn = np.linspace(-1, 1, 64)
    cn = np.full(64, 0.5)
    x = ember.tensor(xn, requires_grad=True)
    c = ember.tensor(cn)
    y = x
    for i in range(20):
        k = i % 4
        y = y * c if k == 0 else y + 0.1 if k == 1 else y.tanh() if k == 2 else y * 1.5
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), _chain_grad_numpy(xn, cn), rtol=1e-12)


def test_gradient_view_whose_base_a_hook_keeps_is_copied():
    # NOTE: x @ w.mT: matmul's VJP gives w.mT's gradient as a transposed view, and the
    # permute's VJP transposes it back: w's gradient is a view of that product
    w = ember.randn(3, 5, dtype=ember.float64, requires_grad=True)
    x = ember.randn(4, 5, dtype=ember.float64)
    kept = []
    w.register_hook(lambda g: kept.append(g._base))
    (x @ w.mT).sum().backward()
    assert kept[0] is not None
    assert w.grad._storage is not kept[0]._storage
    before = w.grad.numpy().copy()
    kept[0].add_(1.0)              # the hook's tensor changes; the leaf's grad must not
    np.testing.assert_array_equal(w.grad.numpy(), before)


def test_gradient_view_of_a_caller_tensor_is_copied():
    x = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    gout = ember.randn(4, 3, dtype=ember.float64)
    x.mT.backward(gout)
    assert x.grad._storage is not gout._storage
    np.testing.assert_array_equal(x.grad.numpy(), gout.numpy().T)


def test_fast_vjp_path_still_raises_freed_and_version_errors():
    x = ember.linspace(-1, 1, 8, requires_grad=True)
    y = x.tanh()
    z = y * 2.0
    z.sum().backward()
    with pytest.raises(GraphError, match="backward through the graph a second time"):
        z.sum().backward()
    a = ember.linspace(-1, 1, 8, requires_grad=True)
    b = a * 1.0
    t = b.tanh()
    t.mul_(2.0)                    # tanh saved its output; the write bumps its version
    with pytest.raises(GraphError, match="modified by an inplace operation"):
        t.sum().backward()


def test_leaf_gradient_shared_with_a_pending_node_is_not_accumulated_in_place():
    # add's VJP hands the same gradient to the leaf and to h's node; k's node (processed in
    # between) adds into the leaf: that must not change what h's node still has to read
    a = ember.tensor([1.0, 2.0], dtype=ember.float64, requires_grad=True)
    h = a * 2.0
    k = a * 3.0
    s = a + h
    y = (s + k) * 1.0
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [6.0, 6.0])    # 1 + 2 + 3


def test_existing_grad_is_still_accumulated_in_place():
    a = ember.tensor([1.0, 2.0], dtype=ember.float64, requires_grad=True)
    (a * 2.0).sum().backward()
    g0 = a.grad
    (a * 3.0).sum().backward()
    assert a.grad is g0
    np.testing.assert_array_equal(g0.numpy(), [5.0, 5.0])


def test_real_leaf_keeps_the_real_part_of_a_complex_gradient_not_its_base():
    """A complex gradient reaching a real leaf is cut to its real part, a view of the
    complex tensor with the same shape and strides: the leaf must not keep that base."""
    a = ember.tensor(np.random.default_rng(0).standard_normal((4, 4)), requires_grad=True)
    z = ember.complex(a, ember.zeros(4, 4, dtype=ember.float64)) * (1 + 2j)
    w = np.random.default_rng(1).standard_normal((4, 4))
    (z.real * ember.tensor(w)).sum().backward()
    assert a.grad.dtype == ember.float64
    np.testing.assert_array_equal(a.grad.numpy(), w)
    leaf = ember.tensor(np.random.default_rng(0).standard_normal((4, 4)), requires_grad=True)
    ember.linalg.eig(leaf)[0].real.sum().backward()
    assert leaf.grad.dtype == ember.float64
