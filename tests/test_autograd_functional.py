"""``ember.autograd.functional`` (torch.autograd.functional): Jacobians, Hessians and their
products against analytic derivatives, central differences and ``ember.func``; PyTorch's
results where it is installed; the small ``torch.autograd`` names (Variable, dual levels,
multithreading switch)."""
import numpy as np
import pytest

import ember as em
from ember.autograd.functional import hessian, hvp, jacobian, jvp, vhp, vjp

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 2))
Y = RNG.standard_normal(2)


def E(a):
    return em.tensor(a, dtype=em.float64)


def f(x, y):                      # two outputs, two inputs
    return (x.sin() * y).sum(0), x.exp().sum()


def g(x):                         # a scalar of one input with a non-diagonal Hessian
    return (x ** 3).sum() * x[0, 0]


def _central_jacobian(fn, xs, j, eps=1e-6):
    """d fn(*xs) / d xs[j] by central differences, shape out + in."""
    base = [np.array(x, dtype=np.float64) for x in xs]
    out_shape = np.shape(fn(*[E(b) for b in base]).numpy())
    cols = []
    for k in range(base[j].size):
        plus, minus = [b.copy() for b in base], [b.copy() for b in base]
        plus[j].flat[k] += eps
        minus[j].flat[k] -= eps
        cols.append((fn(*[E(b) for b in plus]).numpy() - fn(*[E(b) for b in minus]).numpy())
                    / (2 * eps))
    return np.stack(cols, -1).reshape(out_shape + base[j].shape)


@pytest.mark.parametrize("vectorize,strategy", [(False, "reverse-mode"), (True, "reverse-mode"),
                                                (True, "forward-mode")])
def test_jacobian_of_several_outputs_and_inputs_is_nested_output_then_input(vectorize,
                                                                           strategy):
    jac = jacobian(f, (E(X), E(Y)), vectorize=vectorize, strategy=strategy)
    assert isinstance(jac, tuple) and len(jac) == 2 and all(len(r) == 2 for r in jac)
    for i in range(2):
        for j in range(2):
            want = _central_jacobian(lambda x, y, i=i: f(x, y)[i], (X, Y), j)
            assert tuple(jac[i][j].shape) == want.shape
            np.testing.assert_allclose(jac[i][j].numpy(), want, rtol=1e-6, atol=1e-8)
            assert not jac[i][j].requires_grad


@pytest.mark.parametrize("vectorize", [False, True])
def test_jacobian_of_one_output_and_input_is_a_tensor(vectorize):
    jac = jacobian(lambda x: x.exp(), E(X), vectorize=vectorize)
    want = np.zeros((3, 2, 3, 2))
    for a in range(3):
        for b in range(2):
            want[a, b, a, b] = np.exp(X[a, b])
    np.testing.assert_allclose(jac.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(jacobian(lambda x: x.exp(), E(X)).numpy(),
                               em.func.jacrev(em.exp)(E(X)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("vectorize,strategy", [(False, "reverse-mode"), (True, "reverse-mode"),
                                                (True, "forward-mode")])
def test_hessian_matches_central_differences_of_the_gradient(vectorize, strategy):
    h = hessian(g, E(X), vectorize=vectorize, outer_jacobian_strategy=strategy)
    grad = lambda x: em.autograd.grad(g(x.requires_grad_()), x)[0]   # noqa: E731
    want = _central_jacobian(grad, (X,), 0)
    assert tuple(h.shape) == (3, 2, 3, 2)
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-6, atol=1e-7)
    hh = hessian(lambda x, y: (x.sin() * y).sum(), (E(X), E(Y)), vectorize=vectorize,
                 outer_jacobian_strategy=strategy)
    assert [tuple(t.shape) for r in hh for t in r] == [(3, 2, 3, 2), (3, 2, 2), (2, 3, 2),
                                                        (2, 2)]
    np.testing.assert_allclose(hh[1][1].numpy(), 0.0)           # linear in y
    np.testing.assert_allclose(hh[1][0].numpy(), np.moveaxis(hh[0][1].numpy(), -1, 0))


def test_products_equal_the_matrices_they_multiply():
    v_out = (E(Y), E(1.5))
    _, (gx, gy) = vjp(f, (E(X), E(Y)), v_out)
    jac = jacobian(f, (E(X), E(Y)))
    np.testing.assert_allclose(gx.numpy(), np.einsum("o,oab->ab", Y, jac[0][0].numpy()) +
                               1.5 * jac[1][0].numpy(), rtol=1e-12)
    out, (t0, t1) = jvp(f, (E(X), E(Y)), (E(X), E(Y)))
    np.testing.assert_allclose(t0.numpy(), np.einsum("oab,ab->o", jac[0][0].numpy(), X) +
                               jac[0][1].numpy() @ Y, rtol=1e-12)
    np.testing.assert_allclose(out[0].numpy(), f(E(X), E(Y))[0].numpy())
    h = hessian(g, E(X)).numpy().reshape(6, 6)
    V = RNG.standard_normal((3, 2))
    np.testing.assert_allclose(vhp(g, E(X), E(V))[1].numpy().ravel(), V.ravel() @ h,
                               rtol=1e-10)
    np.testing.assert_allclose(hvp(g, E(X), E(V))[1].numpy().ravel(), h @ V.ravel(),
                               rtol=1e-10)


def test_v_may_be_left_out_only_for_one_element():
    assert vjp(lambda x: (x * x).sum(), E(X))[1].numpy().tolist() == (2 * X).tolist()
    assert jvp(lambda x: x * x, E([2.0]))[1].tolist() == [4.0]
    with pytest.raises(RuntimeError, match="v can only be None"):
        vjp(lambda x: x * x, E(X))
    with pytest.raises(RuntimeError, match="v can only be None"):
        hvp(g, E(X))
    with pytest.raises(RuntimeError, match=r"v has invalid size: should be \(3, 2\)"):
        vhp(g, E(X), E(Y))
    with pytest.raises(TypeError, match="must be a Tensor or a tuple of Tensors"):
        jacobian(lambda x: x, [1.0, 2.0])


def test_independent_inputs_give_zeros_or_raise_in_strict_mode():
    jac = jacobian(lambda x, y: x * 2, (E(Y), E(Y)))
    assert jac[1].numpy().tolist() == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(RuntimeError, match="independent of input 1"):
        jacobian(lambda x, y: x * 2, (E(Y), E(Y)), strict=True)
    with pytest.raises(RuntimeError, match="does not require gradients"):
        vjp(lambda x: E(Y), E(Y), E(Y), strict=True)
    with pytest.raises(RuntimeError, match="jacobian .* is independent of the input"):
        hessian(lambda x: (x * 3).sum(), E(Y), strict=True)      # linear: zero Hessian
    with pytest.raises(RuntimeError, match="strict=True and vectorize=True"):
        jacobian(f, (E(X), E(Y)), strict=True, vectorize=True)
    with pytest.raises(NotImplementedError, match="needs vectorize=True"):
        jacobian(f, (E(X), E(Y)), strategy="forward-mode")
    with pytest.raises(ValueError, match="strategy"):
        jacobian(f, (E(X), E(Y)), strategy="sideways")


def test_create_graph_keeps_results_differentiable():
    x = E(Y).requires_grad_()
    jac = jacobian(lambda a: a ** 3, x, create_graph=True)
    assert jac.requires_grad
    jac.sum().backward()                          # d/dx sum(diag(3 x^2)) = 6 x
    np.testing.assert_allclose(x.grad.numpy(), 6 * Y, rtol=1e-12)
    x.grad = None
    _, p = hvp(lambda a: (a ** 4).sum(), x, E([1.0, 1.0]), create_graph=True)
    p.sum().backward()                            # d/dx sum(12 x^2) = 24 x
    np.testing.assert_allclose(x.grad.numpy(), 24 * Y, rtol=1e-12)
    assert not jacobian(lambda a: a ** 3, x).requires_grad


def test_matches_pytorch():
    torch = pytest.importorskip("torch")
    import torch.autograd.functional as F

    def T(a):
        return torch.tensor(a, dtype=torch.float64)

    def same(a, b):
        if isinstance(a, tuple):
            assert len(a) == len(b)
            for u, w in zip(a, b):
                same(u, w)
            return
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12,
                                   atol=1e-14)
    same(jacobian(f, (E(X), E(Y))), F.jacobian(f, (T(X), T(Y))))
    same(hessian(g, E(X)), F.hessian(g, T(X)))
    same(vjp(f, (E(X), E(Y)), (E(Y), E(1.5))), F.vjp(f, (T(X), T(Y)), (T(Y), T(1.5))))
    same(jvp(f, (E(X), E(Y)), (E(X), E(Y))), F.jvp(f, (T(X), T(Y)), (T(X), T(Y))))
    same(vhp(g, E(X), E(X)), F.vhp(g, T(X), T(X)))
    same(hvp(g, E(X), E(X)), F.hvp(g, T(X), T(X)))


def test_variable_is_the_legacy_leaf_wrapper():
    from ember.autograd import Variable
    x = em.ones(2, requires_grad=True) * 2
    v = Variable(x, requires_grad=True)
    assert v.is_leaf and v.requires_grad and v.grad_fn is None
    v.sum().backward()
    assert x.grad is None and v.grad.tolist() == [1.0, 1.0]
    v.data.add_(1)                                # shares memory with x
    assert x.tolist() == [3.0, 3.0]
    assert isinstance(em.zeros(1), Variable) and not isinstance(np.zeros(1), Variable)
    with pytest.raises(TypeError, match="Variable data has to be a tensor"):
        Variable([1.0])


def test_dual_levels_by_function_and_multithreading_switch():
    fwad = em.autograd.forward_ad
    level = fwad.enter_dual_level()
    try:
        x = fwad.make_dual(em.tensor(3.0), em.tensor(1.0))
        assert fwad.unpack_dual(x * x).tangent.item() == 6.0
    finally:
        fwad.exit_dual_level()
    with pytest.raises(RuntimeError, match="need an active dual_level"):
        fwad.make_dual(em.tensor(3.0), em.tensor(1.0))
    with pytest.raises(RuntimeError, match=f"level {level} is not open"):
        fwad.exit_dual_level(level=level)
    assert em.autograd.is_multithreading_enabled() is False
    with em.autograd.set_multithreading_enabled(True):
        assert em.autograd.grad((em.ones(1, requires_grad=True) * 2).sum(),
                                em.ones(1, requires_grad=True), allow_unused=True)[0] is None
    assert em.amp.is_autocast_available("cuda") and em.amp.is_autocast_available("cpu:0")
    assert not em.amp.is_autocast_available("mps")
