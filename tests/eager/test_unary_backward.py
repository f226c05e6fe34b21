"""tanh/sigmoid backward as one primitive: same numbers as the old composite, one op per VJP."""
import numpy as np
import pytest

import ember as em
from ember.ops.registry import REGISTRY
from ember.ops.unary_backward import sigmoid_backward, tanh_backward


def _ops_in_backward(fn, x):
    """Names of the primitives the backward of ``fn(x).sum()`` runs (via the profiler)."""
    x = em.tensor(x, requires_grad=True)
    y = fn(x).sum()
    with em.profiler.profile() as prof:
        y.backward()
    return [e.key for e in prof.key_averages()]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_gradient_bitwise_equals_old_composite(name, dtype):
    rng = np.random.default_rng(0)
    xn = rng.uniform(-4, 4, (37, 5)).astype(dtype)
    gn = rng.standard_normal((37, 5)).astype(dtype)
    x = em.tensor(xn, requires_grad=True)
    y = getattr(em, name)(x)
    y.backward(em.tensor(gn))
    yn = y.detach().numpy()
    old = gn * (1 - yn * yn) if name == "tanh" else gn * (yn * (1 - yn))
    assert x.grad.dtype == y.dtype
    np.testing.assert_array_equal(x.grad.numpy(), old)


def test_one_backward_op_per_tanh():
    ops = _ops_in_backward(em.tanh, np.linspace(-1, 1, 8))
    assert "tanh_backward" in ops
    assert not {"sub", "rsub"} & set(ops), ops


def test_kernel_does_not_write_its_inputs():
    g = np.full((4, 3), 2.0)
    y = np.linspace(-0.9, 0.9, 12).reshape(4, 3)
    g0, y0 = g.copy(), y.copy()
    for op in ("tanh_backward", "sigmoid_backward"):
        r = REGISTRY[op].kernels["cpu"](np, g, y)
        assert r is not g and r is not y
    np.testing.assert_array_equal(g, g0)
    np.testing.assert_array_equal(y, y0)


def test_zero_dim_and_broadcast():
    g = em.tensor(3.0, dtype=em.float64)
    y = em.tensor([0.5, -0.25], dtype=em.float64)
    np.testing.assert_array_equal(tanh_backward(g, y).numpy(), 3.0 * (1 - y.numpy() ** 2))
    np.testing.assert_array_equal(sigmoid_backward(y, g).numpy(), y.numpy() * (3.0 * (1 - 3.0)))


def test_complex_refused_with_clear_error():
    z = em.tensor([0.5 + 0.5j])
    with pytest.raises(TypeError, match="tanh_backward.*complex"):
        tanh_backward(z, z)


def test_complex_tanh_gradient_still_conjugate():
    z = em.tensor([0.3 + 0.4j], requires_grad=True)
    y = em.tanh(z)
    y.backward(em.tensor([1.0 + 0.0j]))
    yn = np.tanh(np.array([0.3 + 0.4j]))
    np.testing.assert_allclose(z.grad.numpy(), np.conj(1 - yn * yn), rtol=1e-6)


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_double_backward(name):
    x = em.tensor([0.3, -1.2, 2.0], dtype=em.float64, requires_grad=True)
    (g,) = em.autograd.grad(getattr(em, name)(x).sum(), x, create_graph=True)
    (h,) = em.autograd.grad(g.sum(), x)
    xn = x.detach().numpy()
    if name == "tanh":
        t = np.tanh(xn)
        want = -2 * t * (1 - t * t)
    else:
        s = 1 / (1 + np.exp(-xn))
        want = s * (1 - s) * (1 - 2 * s)
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-12)


def test_compiled_matches_eager():
    def step(x):
        y = em.tanh(x) * 1.5 + em.sigmoid(x)
        y.sum().backward()
        return x.grad
    xn = np.linspace(-2, 2, 64)
    xe = em.tensor(xn, requires_grad=True)
    ge = step(xe).numpy().copy()
    xc = em.tensor(xn, requires_grad=True)
    gc = em.compile(step)(xc).numpy()
    np.testing.assert_allclose(gc, ge, rtol=1e-12)
