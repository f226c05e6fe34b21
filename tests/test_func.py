"""ember.func transforms: torch.func signatures, composition, pytrees."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember import func
from ember.autograd import Function


def f64(data, requires_grad=False):
    return em.tensor(data, dtype=em.float64, requires_grad=requires_grad)


def cubic_sum(x):
    return (x ** 3).sum()


def exp_x(x):
    return (x.exp() * x).sum()        # grad (1+x)e^x, hessian diag (2+x)e^x


X = [0.5, -1.0, 2.0]


def test_tree_flatten_roundtrip():
    tree = {"b": (1, [2, 3]), "a": 4}
    leaves, spec = func.tree_flatten(tree)
    assert leaves == [4, 1, 2, 3]
    assert func.tree_unflatten([10, 11, 12, 13], spec) == {"a": 10, "b": (11, [12, 13])}
    assert func.tree_map(lambda v: v * 2, (1, {"k": 2})) == (2, {"k": 4})
    with pytest.raises(ValueError):
        func.tree_unflatten([1], spec)


# ---------------------------------------------------------------- grad
def test_grad_basic_and_inputs_need_not_require_grad():
    x = f64(X)
    g = func.grad(cubic_sum)(x)
    assert g.tolist() == pytest.approx([3 * v * v for v in X])
    assert not g.requires_grad and not x.requires_grad and x.grad is None


def test_grad_of_grad_is_second_derivative():
    d2 = func.grad(func.grad(lambda x: x ** 3))(f64(2.0))
    assert d2.item() == pytest.approx(12.0)
    d3 = func.grad(func.grad(func.grad(lambda x: x ** 3)))(f64(2.0))
    assert d3.item() == pytest.approx(6.0)


def test_grad_of_grad_with_closure_is_not_confused():
    # d/dx [ d/dy (x*y) at y=x ] = d/dx x = 1  (perturbation confusion would give 2)
    x = f64(3.0)
    r = func.grad(lambda x: func.grad(lambda y: x * y)(x))(x)
    assert r.item() == pytest.approx(1.0)


def test_grad_argnums_tuple_and_pytree_inputs():
    a, b = f64([1.0, 2.0]), f64([3.0, 4.0])
    ga, gb = func.grad(lambda a, b: (a * b).sum(), argnums=(0, 1))(a, b)
    assert ga.tolist() == [3.0, 4.0] and gb.tolist() == [1.0, 2.0]
    gb_only = func.grad(lambda a, b: (a * b * b).sum(), argnums=1)(a, b)
    assert gb_only.tolist() == [6.0, 16.0]
    params = {"w": f64([2.0]), "bias": (f64([1.0]),)}
    g = func.grad(lambda p, x: ((p["w"] * x + p["bias"][0]) ** 2).sum())(params, f64([3.0]))
    assert set(g) == {"w", "bias"} and isinstance(g["bias"], tuple)
    assert g["w"].tolist() == [2 * 7.0 * 3.0] and g["bias"][0].tolist() == [14.0]


def test_grad_has_aux():
    g, aux = func.grad(lambda x: ((x * x).sum(), {"n": x * 2}), has_aux=True)(f64([1.0, 3.0]))
    assert g.tolist() == [2.0, 6.0] and aux["n"].tolist() == [2.0, 6.0]


def test_grad_of_unused_input_is_zero():
    g = func.grad(lambda x, y: (x * 2).sum(), argnums=1)(f64([1.0]), f64([5.0, 6.0]))
    assert g.tolist() == [0.0, 0.0]


def test_grad_errors():
    with pytest.raises(ValueError, match="scalar"):
        func.grad(lambda x: x * 2)(f64([1.0, 2.0]))
    with pytest.raises(TypeError, match="floating point|Tensor"):
        func.grad(lambda x: x.sum())(em.tensor([1, 2]))
    with pytest.raises(ValueError, match="argnums"):
        func.grad(lambda x: x.sum(), argnums=3)(f64([1.0]))
    with pytest.raises(TypeError, match="has_aux"):
        func.grad(lambda x: x.sum(), has_aux=True)(f64([1.0]))


def test_grad_works_inside_no_grad():
    with em.no_grad():
        g = func.grad(cubic_sum)(f64([2.0]))
    assert g.tolist() == [12.0] and not g.requires_grad


def test_grad_result_stays_differentiable_for_outer_graph():
    x = f64([1.0, 2.0], requires_grad=True)
    g = func.grad(cubic_sum)(x)          # 3x^2, connected to x
    assert g.requires_grad
    g.sum().backward()
    assert x.grad.tolist() == [6.0, 12.0]


def test_grad_and_value_and_value_and_grad():
    x = f64([1.0, 2.0])
    g, v = func.grad_and_value(cubic_sum)(x)
    assert v.item() == 9.0 and g.tolist() == [3.0, 12.0]
    v2, g2 = func.value_and_grad(cubic_sum)(x)
    assert v2.item() == 9.0 and g2.tolist() == [3.0, 12.0]
    (v3, aux), g3 = func.value_and_grad(lambda x: (cubic_sum(x), "tag"), has_aux=True)(x)
    assert aux == "tag" and v3.item() == 9.0
    g4, (v4, aux4) = func.grad_and_value(lambda x: (cubic_sum(x), 7), has_aux=True)(x)
    assert aux4 == 7 and v4.item() == 9.0 and g4.tolist() == [3.0, 12.0]


# ---------------------------------------------------------------- vjp
def test_vjp_matches_grad_and_returns_tuple():
    x, y = f64([1.0, 2.0]), f64([3.0, 5.0])
    out, vjp_fn = func.vjp(lambda a, b: a * b + a.exp(), x, y)
    assert out.tolist() == pytest.approx([3 + math.e, 10 + math.exp(2)])
    gx, gy = vjp_fn(f64([1.0, 10.0]))
    assert gx.tolist() == pytest.approx([3 + math.e, 10 * (5 + math.exp(2))])
    assert gy.tolist() == pytest.approx([1.0, 20.0])
    gx2, _ = vjp_fn(f64([1.0, 0.0]))     # callable more than once
    assert gx2.tolist() == pytest.approx([3 + math.e, 0.0])


def test_vjp_pytree_output_and_aux():
    x = f64([1.0, 2.0])
    out, vjp_fn, aux = func.vjp(lambda x: ({"sq": x * x, "id": x}, "aux"), x, has_aux=True)
    assert aux == "aux" and set(out) == {"sq", "id"}
    (g,) = vjp_fn({"sq": f64([1.0, 1.0]), "id": f64([1.0, 1.0])})
    assert g.tolist() == [3.0, 5.0]
    with pytest.raises(ValueError, match="shape"):
        vjp_fn({"sq": f64([1.0]), "id": f64([1.0, 1.0])})


# ---------------------------------------------------------------- jvp
def test_jvp_matches_finite_differences():
    f = lambda x, y: (x * y).exp() + x / y  # noqa: E731
    x0, y0 = np.array([0.3, -0.2]), np.array([1.5, 2.0])
    tx, ty = np.array([1.0, 0.5]), np.array([-0.3, 2.0])
    out, t = func.jvp(f, (f64(x0), f64(y0)), (f64(tx), f64(ty)))
    eps = 1e-6
    fp = np.array(f(f64(x0 + eps * tx), f64(y0 + eps * ty)).tolist())
    fm = np.array(f(f64(x0 - eps * tx), f64(y0 - eps * ty)).tolist())
    np.testing.assert_allclose(t.tolist(), (fp - fm) / (2 * eps), rtol=1e-7)
    assert out.tolist() == pytest.approx(f(f64(x0), f64(y0)).tolist())
    assert out._fw is None and not out.requires_grad


def test_jvp_of_constant_output_is_zero_and_has_aux():
    out, t, aux = func.jvp(lambda x: (f64([1.0, 2.0]), x * 2), (f64([3.0]),), (f64([1.0]),),
                           has_aux=True)
    assert t.tolist() == [0.0, 0.0] and aux.tolist() == [6.0] and aux._fw is None


def test_jvp_of_jvp_second_derivative():
    f = lambda x: x.exp() * x ** 2  # noqa: E731  f'' = e^x (x^2 + 4x + 2)
    x = f64(0.7)

    def df(x):
        return func.jvp(f, (x,), (f64(1.0),))[1]
    _, d2 = func.jvp(df, (x,), (f64(1.0),))
    assert d2.item() == pytest.approx(math.exp(0.7) * (0.49 + 2.8 + 2))


def test_jvp_argument_errors():
    with pytest.raises(TypeError, match="tuples"):
        func.jvp(em.exp, f64([1.0]), f64([1.0]))
    with pytest.raises(ValueError, match="shape"):
        func.jvp(em.exp, (f64([1.0]),), (f64([1.0, 2.0]),))


def test_reverse_over_forward():
    # grad of a jvp (Hessian-vector product via reverse-over-forward)
    v = f64([1.0, 0.0, 2.0])
    hvp = func.grad(lambda x: func.jvp(exp_x, (x,), (v,))[1])(f64(X))
    expect = [(2 + x) * math.exp(x) * vi for x, vi in zip(X, v.tolist())]
    assert hvp.tolist() == pytest.approx(expect)


# ---------------------------------------------------------------- jacobians
def test_jacrev_and_jacfwd_agree_with_analytic_jacobian():
    def f(x):
        return x.exp() * x.sum()
    x = f64(X)
    s = sum(X)
    expect = np.array([[math.exp(a) * ((i == j) * s + 1) for j in range(3)]
                       for i, a in enumerate(X)])
    for jac in (func.jacrev, func.jacfwd, func.jacobian):
        J = jac(f)(x)
        assert tuple(J.shape) == (3, 3)
        np.testing.assert_allclose(np.array(J.tolist()), expect, rtol=1e-12)


def test_jacobian_shapes_argnums_and_pytree_outputs():
    a, b = f64([[1.0, 2.0], [3.0, 4.0]]), f64([1.0, 2.0, 3.0])

    def f(a, b):
        return {"m": a * 2, "s": (a.sum() * b)}
    for jac in (func.jacrev, func.jacfwd):
        J = jac(f, argnums=(0, 1))(a, b)
        assert tuple(J["m"][0].shape) == (2, 2, 2, 2) and tuple(J["m"][1].shape) == (2, 2, 3)
        assert tuple(J["s"][0].shape) == (3, 2, 2) and tuple(J["s"][1].shape) == (3, 3)
        m0 = np.array(J["m"][0].tolist()).reshape(4, 4)
        np.testing.assert_allclose(m0, 2 * np.eye(4))
        np.testing.assert_allclose(np.array(J["s"][1].tolist()), 10 * np.eye(3))
        np.testing.assert_allclose(np.array(J["s"][0].tolist()),
                                   np.broadcast_to(np.array([1.0, 2, 3])[:, None, None],
                                                   (3, 2, 2)))


def test_jacrev_has_aux():
    J, aux = func.jacrev(lambda x: (x * 3, "a"), has_aux=True)(f64([1.0, 2.0]))
    assert aux == "a" and J.tolist() == [[3.0, 0.0], [0.0, 3.0]]
    J, aux = func.jacfwd(lambda x: (x * 3, x), has_aux=True)(f64([1.0, 2.0]))
    assert aux.tolist() == [1.0, 2.0] and J.tolist() == [[3.0, 0.0], [0.0, 3.0]]


def test_hessian_forward_over_reverse_matches_reverse_over_reverse():
    x = f64(X)
    H = func.hessian(exp_x)(x)
    H2 = func.jacrev(func.jacrev(exp_x))(x)
    H3 = func.jacfwd(func.jacfwd(exp_x))(x)
    expect = np.diag([(2 + v) * math.exp(v) for v in X])
    for h in (H, H2, H3):
        np.testing.assert_allclose(np.array(h.tolist()), expect, rtol=1e-12, atol=1e-14)


def test_hessian_of_coupled_function():
    def f(x):
        return (x.sum() ** 2) * x.exp().sum()
    x = f64([0.1, 0.2])
    H = np.array(func.hessian(f)(x).tolist())
    H2 = np.array(func.jacrev(func.jacrev(f))(x).tolist())
    np.testing.assert_allclose(H, H2, rtol=1e-12)
    np.testing.assert_allclose(H, H.T, rtol=1e-12)
    # against central differences of the analytic gradient via grad
    eps = 1e-6
    num = np.zeros((2, 2))
    for j in range(2):
        e = np.zeros(2)
        e[j] = eps
        gp = func.grad(f)(f64(np.array([0.1, 0.2]) + e)).tolist()
        gm = func.grad(f)(f64(np.array([0.1, 0.2]) - e)).tolist()
        num[:, j] = (np.array(gp) - np.array(gm)) / (2 * eps)
    np.testing.assert_allclose(H, num, rtol=1e-6)


def test_transforms_through_custom_function():
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * x * g

        @staticmethod
        def jvp(ctx, t):
            (x,) = ctx.saved_tensors
            return 3 * x * x * t

    x = f64([1.0, 2.0])
    assert func.grad(lambda x: Cube.apply(x).sum())(x).tolist() == [3.0, 12.0]
    assert func.jvp(Cube.apply, (x,), (f64([1.0, 1.0]),))[1].tolist() == [3.0, 12.0]
    H = func.jacrev(func.jacrev(lambda x: Cube.apply(x).sum()))(x)
    assert H.tolist() == [[6.0, 0.0], [0.0, 12.0]]
