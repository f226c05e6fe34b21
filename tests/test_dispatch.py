"""The dispatcher: promotion and casting, device checks, error wrapping, views, saved values."""
import numpy as np
import pytest

import ember as em
from ember.ops.registry import REGISTRY


def test_cast_gradient_returns_to_input_dtype():
    x = em.tensor([1.0, 2.0, 3.0], requires_grad=True)            # float32
    y = x.to(em.float64) * em.tensor([1.0, 2.0, 3.0], dtype=em.float64)
    y.sum().backward()
    assert x.grad.dtype == em.float32
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0, 3.0])


def test_mixed_dtype_binary_grads_keep_each_input_dtype():
    a = em.tensor([1.0, 2.0], requires_grad=True)
    b = em.tensor([3.0, 4.0], dtype=em.float64, requires_grad=True)
    out = a * b
    assert out.dtype == em.float64
    out.sum().backward()
    assert a.grad.dtype == em.float32 and b.grad.dtype == em.float64
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 4.0])
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 2.0])


def test_broadcast_gradient_is_summed_back_to_input_shape():
    a = em.tensor(np.ones((3, 1)), requires_grad=True)
    b = em.tensor(np.arange(4.0), requires_grad=True)
    (a + b).sum().backward()
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,)
    np.testing.assert_array_equal(a.grad.numpy(), np.full((3, 1), 4.0))
    np.testing.assert_array_equal(b.grad.numpy(), np.full(4, 3.0))


def test_broadcast_error_names_op_and_shapes():
    with pytest.raises(ValueError) as e:
        em.ones(2, 3) + em.ones(4)
    msg = str(e.value)
    assert "add" in msg and "(2, 3)" in msg and "(4,)" in msg and "float32" in msg


def test_kernel_errors_are_wrapped_not_numpy_tracebacks():
    with pytest.raises(RuntimeError) as e:
        em.ones(2, 3) @ em.ones(2, 3)
    assert "matmul" in str(e.value) and "(2, 3)" in str(e.value)


def test_python_scalars_are_weak():
    x = em.ones(3, dtype=em.float16)
    assert (x + 2.5).dtype == em.float16
    assert (em.ones(3, dtype=em.int32) + 2.5).dtype == em.float32
    assert (em.ones(3, dtype=em.int32) + 2).dtype == em.int32


def test_empty_tensor_saved_versions_are_ints():
    a = em.zeros(0, 3, requires_grad=True)
    b = em.ones(3, 2, requires_grad=True)
    (a @ b).sum().backward()
    assert a.grad.shape == (0, 3) and float(b.grad.sum()) == 0.0


def test_saved_value_modified_in_place_raises():
    x = em.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = y * y          # saves y
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_every_primitive_declares_consistent_fields():
    for name, op in REGISTRY.items():
        assert op.name == name
        assert op.save in ("inputs", "output", "both", None), name
        if op.differentiable:
            assert op.vjp is not None, name
            assert op.jvp is not None, f"{name}: differentiable primitive without a JVP rule"


def test_memory_is_released_after_backward():
    em.reset_peak_memory_stats()
    before = em.memory_stats()["current_bytes"]
    x = em.randn(256, 256, requires_grad=True)
    for _ in range(3):
        y = (x * 2).exp().sum()
        y.backward()
        del y
    x_bytes = 256 * 256 * 4
    assert em.memory_stats()["current_bytes"] - before <= 2 * x_bytes   # x and x.grad
