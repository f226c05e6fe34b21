"""The trimmed eager call paths keep their semantics: weak Python scalars in the dispatcher,
positional kernel and VJP calls, the engine's gradient buffers keyed by node (outputs
k > 0 of a multi-output node included), real_only's complex refusal, mul's direct VJP."""
import numpy as np
import pytest

import ember
from ember.ops.registry import REGISTRY
from ember.ops.unary_backward import _INPLACE_MIN, sigmoid_backward, tanh_backward


# ------------------------------------------------------------------ dtypes of scalar ops
_SCALAR_CASES = [
    ("int32", "mul", 1.5), ("int32", "add", 2), ("int32", "add", True), ("bool", "add", 1),
    ("bool", "mul", 2.5), ("float16", "mul", 2.5), ("float16", "add", 3),
    ("float32", "mul", True), ("float64", "sub", 1), ("int64", "div", 2),
    ("float32", "mul", 1 + 2j), ("int16", "mul", -3),
]


@pytest.mark.parametrize("dtype,op,scalar", _SCALAR_CASES)
def test_tensor_with_python_scalar_promotes_like_pytorch(dtype, op, scalar):
    torch = pytest.importorskip("torch")
    a = np.array([1, 0, 3], dtype=dtype)
    fn = {"mul": lambda x, s: x * s, "add": lambda x, s: x + s, "sub": lambda x, s: x - s,
          "div": lambda x, s: x / s}[op]
    want = fn(torch.from_numpy(a), scalar)
    got = fn(ember.tensor(a), scalar)
    assert got.dtype.name == str(want.dtype).replace("torch.", ""), (got.dtype, want.dtype)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    # reflected: the scalar comes first in the op's inputs
    want_r = fn(scalar, torch.from_numpy(a)) if op in ("mul", "add") else None
    if want_r is not None:
        got_r = fn(scalar, ember.tensor(a))
        assert got_r.dtype.name == str(want_r.dtype).replace("torch.", "")
        np.testing.assert_array_equal(got_r.numpy(), want_r.numpy())


def test_numpy_scalar_is_not_a_weak_python_scalar():
    x = ember.ones(3, dtype=ember.float32)
    # NOTE: a NumPy float64 scalar is not a Python float: it takes the promotion path, which
    # treats a 0-d value as PyTorch treats a 0-d tensor (the tensor's float32 wins)
    y = x * np.float64(2.0)
    assert y.dtype is ember.float32
    np.testing.assert_array_equal(y.numpy(), np.full(3, 2.0, np.float32))


# ------------------------------------------------------------------ kernels and VJPs by arity
def test_three_input_op_and_op_with_params_still_dispatch():
    c = ember.tensor([True, False, True])
    a = ember.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = ember.tensor([10.0, 20.0, 30.0], requires_grad=True)
    y = ember.where(c, a, b)                               # three inputs
    s = (y * y).sum(dim=0, keepdim=True)                   # params
    s.backward(ember.ones(1))
    np.testing.assert_array_equal(y.detach().numpy(), [1.0, 20.0, 3.0])
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 0.0, 6.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.0, 40.0, 0.0])


def test_mul_vjp_conjugates_complex_and_takes_python_scalars():
    z = ember.tensor([1 + 2j, -0.5j], requires_grad=True)
    w = ember.tensor([0.5 - 1j, 2 + 1j])
    (z * w).sum().abs().backward()
    zn, wn = np.array([1 + 2j, -0.5j]), np.array([0.5 - 1j, 2 + 1j])
    s = (zn * wn).sum()
    np.testing.assert_allclose(z.grad.numpy(), (s / abs(s)) * np.conj(wn), rtol=1e-6)
    x = ember.tensor([1.0, -2.0], requires_grad=True)
    (x * 1.5 * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_mul_vjp_under_vmap_of_grad():
    from ember.func import grad, vmap
    xs = ember.tensor([[1.0, 2.0], [3.0, -1.0]])
    c = ember.tensor([0.5, 4.0])
    g = vmap(grad(lambda x: (x * c * x).sum()))(xs)
    np.testing.assert_allclose(g.numpy(), 2 * xs.numpy() * c.numpy())


# ------------------------------------------------------------------ engine buffers
class _Split(ember.autograd.Function):
    """Two outputs of one node: (2x, 3x)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, g0, g1):
        g = 0
        if g0 is not None:
            g = g + 2 * g0
        if g1 is not None:
            g = g + 3 * g1
        return g


@pytest.mark.parametrize("which", ["first", "second", "both", "second-as-root"])
def test_gradients_reach_every_output_of_a_multi_output_node(which):
    x = ember.tensor([1.0, -2.0, 0.5], requires_grad=True)
    a, b = _Split.apply(x)
    if which == "first":
        (a * a).sum().backward()
        want = 2 * 2 * (2 * x.detach().numpy())
    elif which == "second":
        (b * 5.0).sum().backward()
        want = np.full(3, 15.0)
    elif which == "both":
        (a * b).sum().backward()                  # 6x^2 -> 12x
        want = 12 * x.detach().numpy()
    else:
        b.backward(ember.tensor([1.0, 2.0, 3.0]))  # the root is output 1 of the node
        want = 3 * np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12)


def test_autograd_grad_and_backward_agree_on_a_diamond():
    x = ember.tensor([0.3, -0.7], dtype=ember.float64, requires_grad=True)
    h = x.tanh()
    y = (h * 2.0 + h * h + x).sum()
    (gx,) = ember.autograd.grad(y, x, retain_graph=True)
    y.backward()
    t = np.tanh(x.detach().numpy())
    want = (2.0 + 2 * t) * (1 - t * t) + 1
    np.testing.assert_allclose(gx.numpy(), want, rtol=1e-12)
    np.testing.assert_array_equal(x.grad.numpy(), gx.numpy())


# ------------------------------------------------------------------ real_only
@pytest.mark.parametrize("fn", [lambda z: z.relu(), lambda z: z > 0, lambda z: z.floor(),
                                lambda z: ember.maximum(z, z)])
def test_ordered_ops_refuse_complex_tensors(fn):
    z = ember.tensor([0.5 + 0.5j, -1j])
    with pytest.raises(TypeError, match="complex"):
        fn(z)


def test_ordered_op_refuses_a_python_complex_beside_a_real_tensor():
    with pytest.raises(TypeError, match="complex"):
        ember.tensor([1.0, 2.0]) > 1j


# ------------------------------------------------------------------ one-temporary kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["tanh_backward", "sigmoid_backward"])
def test_large_backward_kernels_bitwise_equal_the_expression(name, dtype):
    """From _INPLACE_MIN elements the kernels reuse one temporary: same bits, inputs kept."""
    rng = np.random.default_rng(1)
    n = _INPLACE_MIN + 3
    g = rng.standard_normal(n).astype(dtype)
    y = rng.uniform(-1, 1, n).astype(dtype)
    g0, y0 = g.copy(), y.copy()
    r = REGISTRY[name].kernels["cpu"](np, g, y)
    want = g * (1 - y * y) if name == "tanh_backward" else g * (y * (1 - y))
    np.testing.assert_array_equal(r, want)
    assert r is not g and r is not y
    np.testing.assert_array_equal(g, g0)
    np.testing.assert_array_equal(y, y0)
    fn = tanh_backward if name == "tanh_backward" else sigmoid_backward
    np.testing.assert_array_equal(fn(ember.tensor(g), ember.tensor(y)).numpy(), want)
