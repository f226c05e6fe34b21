"""Leaf accumulation keeps a gradient view without a copy when nothing else can see its
buffer (PyTorch's AccumulateGrad steals such gradients), and copies it otherwise."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F


def _linear_setup(seed=0, rows=6, n_in=5, n_out=4):
    ember.manual_seed(seed)
    lin = ember.nn.Linear(n_in, n_out, dtype=ember.float64)
    x = ember.randn(rows, n_in, dtype=ember.float64)
    y = ember.randint(0, n_out, (rows,))
    return lin, x, y


def _allocs_of_backward(lin, x, y):
    # NOTE: the layer as matmul + add (F.linear's one-op primitive makes a fresh weight
    # gradient): matmul's VJP gives the weight's gradient as a view of a fresh product
    loss = F.cross_entropy(x @ lin.weight.mT + lin.bias, y)
    before = ember.memory_stats()["num_allocs"]
    loss.backward()
    return ember.memory_stats()["num_allocs"] - before


def _numpy_weight_grad(lin, x, y):
    w, b, xn = lin.weight.detach().numpy(), lin.bias.detach().numpy(), x.numpy()
    z = xn @ w.T + b
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(xn)), y.numpy()] -= 1.0
    return (p / len(xn)).T @ xn


def test_linear_weight_gradient_is_kept_without_a_copy():
    lin, x, y = _linear_setup()
    stolen = _allocs_of_backward(lin, x, y)
    hooked, _, _ = _linear_setup()
    hooked.weight.register_hook(lambda g: None)   # a leaf hook: the engine must copy
    copied = _allocs_of_backward(hooked, x, y)
    assert stolen == copied - 1
    g = lin.weight.grad
    assert g._data.strides == lin.weight._data.strides and g.is_contiguous()
    np.testing.assert_allclose(g.numpy(), _numpy_weight_grad(lin, x, y), rtol=1e-12)
    np.testing.assert_array_equal(g.numpy(), hooked.weight.grad.numpy())


def test_second_backward_accumulates_in_place_into_the_kept_gradient():
    lin, x, y = _linear_setup(1)
    F.cross_entropy(lin(x), y).backward()
    g0 = lin.weight.grad
    first = g0.numpy().copy()
    F.cross_entropy(lin(x), y).backward()
    assert lin.weight.grad is g0
    np.testing.assert_allclose(g0.numpy(), 2 * first, rtol=1e-12)


def test_one_view_reaching_two_leaves_is_kept_once_and_copied_once():
    ember.manual_seed(2)
    a = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    b = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    v = ember.randn(5, 3, dtype=ember.float64)
    # add's VJP hands the same gradient (a view: permute's VJP of a fresh product) to both
    (v @ (a + b).mT.mT).sum().backward()
    assert a.grad._storage is not b.grad._storage
    expected = np.broadcast_to(v.numpy().sum(0)[:, None], (3, 4))
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-12)
    a.grad.add_(1.0)
    np.testing.assert_allclose(b.grad.numpy(), expected, rtol=1e-12)


def test_view_in_another_layout_than_the_parameter_is_copied():
    """A gradient that is its base again but whose strides differ from the parameter's
    (here an F-ordered leaf) is not kept: ``.grad`` would break the layout contract."""
    ember.manual_seed(3)
    w = ember.randn(3, 4, dtype=ember.float64).mT.detach().requires_grad_()   # (4, 3), F order
    c = ember.randn(4, 3, dtype=ember.float64)
    kept = ember.randn(4, 3, dtype=ember.float64).requires_grad_()            # C order
    allocs = []
    for leaf in (w, kept):
        loss = (leaf.mT.mT * c).sum()   # mul's fresh C-order gradient, then two permutes
        before = ember.memory_stats()["num_allocs"]
        loss.backward()
        allocs.append(ember.memory_stats()["num_allocs"] - before)
        np.testing.assert_array_equal(leaf.grad.numpy(), c.numpy())
    assert allocs[0] == allocs[1] + 1        # the F-ordered leaf's gradient was copied
    assert kept.grad._data.strides == kept._data.strides


def test_a_tensor_that_shares_the_buffer_forces_a_copy():
    """A hook on an intermediate keeps the gradient flowing into ``weight.mT``'s node: the
    leaf's gradient is a view of the same buffer, so it must be copied."""
    lin, x, y = _linear_setup(4)
    kept = []
    out = x @ lin.weight.mT
    wt_grads = lin.weight.mT
    wt_grads.register_hook(kept.append)
    F.cross_entropy(x @ wt_grads + lin.bias, y).backward()
    assert kept and lin.weight.grad._storage is not kept[0]._storage
    before = lin.weight.grad.numpy().copy()
    kept[0].add_(1.0)
    np.testing.assert_array_equal(lin.weight.grad.numpy(), before)
    del out


@pytest.mark.parametrize("create_graph", [False, True])
def test_backward_with_inputs_and_create_graph_give_the_same_values(create_graph):
    lin, x, y = _linear_setup(5)
    ref = _numpy_weight_grad(lin, x, y)
    F.cross_entropy(lin(x), y).backward(inputs=[lin.weight], create_graph=create_graph)
    np.testing.assert_allclose(lin.weight.grad.detach().numpy(), ref, rtol=1e-12)
    assert lin.bias.grad is None
