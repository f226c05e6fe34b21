"""Eager W1's small ops (issue 19): relu's one-kernel backward ``threshold_backward``.

The NumPy kernel (below the eager C kernel's 32K-element threshold) and the generated C
kernel (above it) are both checked against NumPy's ``where(y <= t, 0, g)``, bit for bit
(the result is ``g``'s bits or +0), with PyTorch's NaN/Inf behaviour.
"""
import numpy as np
import pytest

import ember
from ember.ops.unary_backward import threshold_backward

# sizes on each side of the eager C kernel's threshold (1 << 15 elements)
SIZES = [(7, 5), (128, 512)]


def _ref(g, y, t):
    return np.where(y <= t, np.zeros((), g.dtype), g)


def _special(rng, shape, dtype):
    """(g, y) with NaN/inf/-0.0 sprinkled into both."""
    g = rng.standard_normal(shape).astype(dtype)
    y = rng.standard_normal(shape).astype(dtype)
    flat_g, flat_y = g.reshape(-1), y.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], dtype)
    idx = rng.integers(0, flat_g.size, size=max(5, flat_g.size // 10))
    flat_g[idx] = specials[rng.integers(0, 5, size=idx.size)]
    idx = rng.integers(0, flat_y.size, size=max(5, flat_y.size // 10))
    flat_y[idx] = specials[rng.integers(0, 5, size=idx.size)]
    return g, y


@pytest.mark.parametrize("shape", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("t", [0, 0.5])
def test_threshold_backward_bits_with_nan_inf(shape, dtype, t):
    g, y = _special(np.random.default_rng(0), shape, dtype)
    out = threshold_backward(ember.tensor(g), ember.tensor(y), t).numpy()
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.view(f"i{out.itemsize}"),
                                  _ref(g, y, t).view(f"i{out.itemsize}"))


@pytest.mark.parametrize("shape", SIZES)
def test_threshold_backward_noncontiguous_and_broadcast(shape):
    rng = np.random.default_rng(1)
    g, y = _special(rng, (shape[1], 2 * shape[0]), np.float32)
    g = g[:, :shape[0]].copy()
    gt, yt = ember.tensor(g).mT, ember.tensor(y)[:, ::2].mT     # transposed, strided
    out = threshold_backward(gt, yt, 0).numpy()
    np.testing.assert_array_equal(out, _ref(g.T, y[:, ::2].T, 0))
    row = rng.standard_normal(shape[1]).astype(np.float32)        # y broadcast over rows
    gg = rng.standard_normal(shape).astype(np.float32)
    out = threshold_backward(ember.tensor(gg), ember.tensor(row), 0).numpy()
    np.testing.assert_array_equal(out, _ref(gg, np.broadcast_to(row, shape), 0))


def test_threshold_backward_zero_size_and_errors():
    out = threshold_backward(ember.ones(0, 3), ember.ones(3), 0)
    assert tuple(out.shape) == (0, 3)
    with pytest.raises(TypeError, match="threshold_backward"):
        threshold_backward(ember.ones(3), ember.ones(3), ember.zeros(()))
    with pytest.raises(TypeError, match="threshold_backward"):
        threshold_backward(ember.ones(3, dtype=ember.complex64), ember.ones(3), 0)


@pytest.mark.parametrize("shape", SIZES)
def test_relu_grad_is_threshold_backward(shape):
    g, x = _special(np.random.default_rng(2), shape, np.float32)
    xt = ember.tensor(x, requires_grad=True)
    ember.relu(xt).backward(ember.tensor(g))
    # PyTorch's relu backward on relu's output: NaN input passes g, masked inf/NaN g -> 0
    np.testing.assert_array_equal(xt.grad.numpy(), _ref(g, np.maximum(x, 0), 0))


def test_relu_grad_matches_torch_on_nan_inf():
    torch = pytest.importorskip("torch")
    g, x = _special(np.random.default_rng(3), (64, 9), np.float32)
    xe = ember.tensor(x, requires_grad=True)
    ember.relu(xe).backward(ember.tensor(g))
    xt = torch.tensor(x, requires_grad=True)
    torch.relu(xt).backward(torch.tensor(g))
    np.testing.assert_array_equal(xe.grad.numpy(), xt.grad.numpy())


def test_relu_double_backward():
    x = ember.tensor([-1.5, 0.5, 2.0], dtype=ember.float64, requires_grad=True)
    g = ember.tensor([1.0, 2.0, 3.0], dtype=ember.float64, requires_grad=True)
    (gx,) = ember.autograd.grad(ember.relu(x), x, g, create_graph=True)
    (gg,) = ember.autograd.grad((gx * ember.tensor([5.0, 7.0, 11.0],
                                                   dtype=ember.float64)).sum(), g)
    np.testing.assert_array_equal(gx.detach().numpy(), [0.0, 2.0, 3.0])
    np.testing.assert_array_equal(gg.numpy(), [0.0, 7.0, 11.0])


def test_relu_traced_backward_keeps_mask_form():
    """Under ember.compile the VJP stays ``g * (out > 0)`` (what the pool pass matches);
    on finite values compiled and eager gradients agree."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 8)).astype(np.float32)

    def f(t):
        return (ember.relu(t) * 3.0).sum()

    xe = ember.tensor(x, requires_grad=True)
    f(xe).backward()
    xc = ember.tensor(x, requires_grad=True)
    cf = ember.compile(f)
    cf(xc).backward()
    np.testing.assert_array_equal(xc.grad.numpy(), xe.grad.numpy())


# ------------------------------------------------------------------ log_softmax's backward
def _lsm_composite(g, out, dim):
    """The composite VJP the primitive replaces, in Ember ops (the reference bits)."""
    return g - ember.exp(out) * g.sum(dim, keepdim=True)


@pytest.mark.parametrize("shape,dim", [((128, 10), 1), ((5, 7, 3), 0), ((300, 200), -1)])
@pytest.mark.parametrize("dtype", [ember.float32, ember.float64])
def test_log_softmax_grad_bits_equal_composite(shape, dim, dtype):
    """Eager VJP (one log_softmax_backward below 32K elements, the composite above) gives
    the composite's bits, NaN/inf included."""
    rng = np.random.default_rng(5)
    x = ember.tensor(rng.standard_normal(shape), dtype=dtype, requires_grad=True)
    g = rng.standard_normal(shape)
    g.reshape(-1)[::17] = np.inf
    g.reshape(-1)[::23] = np.nan
    g = ember.tensor(g, dtype=dtype)
    out = ember.log_softmax(x, dim)
    out.backward(g)
    want = _lsm_composite(g, out.detach(), dim).numpy()
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_log_softmax_backward_primitive_forward_and_errors():
    from ember.ops.softmax import log_softmax_backward
    rng = np.random.default_rng(6)
    g, y = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    got = log_softmax_backward(ember.tensor(g).mT, ember.tensor(y).mT, 0).numpy()  # strided
    np.testing.assert_allclose(got, (g - np.exp(y) * g.sum(1, keepdims=True)).T,
                               rtol=1e-12, atol=1e-12)
    assert tuple(log_softmax_backward(ember.ones(0, 3), ember.ones(0, 3), 1).shape) == (0, 3)
    with pytest.raises(ValueError, match="log_softmax_backward"):
        log_softmax_backward(ember.ones(2, 3), ember.ones(3), 1)
    with pytest.raises(IndexError):
        log_softmax_backward(ember.ones(2, 3), ember.ones(2, 3), 2)


def test_log_softmax_double_backward_through_primitive():
    """create_graph: the gradient is differentiable (the primitive's own VJP) and matches
    the composite's second derivative."""
    rng = np.random.default_rng(7)
    xa, ga = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    w = ember.tensor(rng.standard_normal((3, 4)))
    grads = []
    for composite in (False, True):
        x = ember.tensor(xa, requires_grad=True)
        out, g = ember.log_softmax(x, 1), ember.tensor(ga)
        if composite:
            gx = _lsm_composite(g, out, 1)
        else:
            (gx,) = ember.autograd.grad(out, x, g, create_graph=True)
            assert gx.grad_fn is not None
        (h,) = ember.autograd.grad((gx * w).sum(), x)
        grads.append(h.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12, atol=1e-12)
