"""Eager slice/select gradients: written into a fresh zeroed buffer (no full-size copy of a
zero base first), and ``as_strided_scatter`` over a broadcast base."""
import numpy as np
import pytest

import ember


@pytest.mark.parametrize("take", [lambda x: x[1], lambda x: x[:, 1:3], lambda x: x[..., ::2],
                                  lambda x: x.select(2, -1), lambda x: x.narrow(1, 0, 0),
                                  lambda x: x.as_strided((2, 3), (20, 2), 1)])
def test_view_gradient_equals_numpy(take):
    xn = np.random.default_rng(0).standard_normal((3, 4, 5))
    x = ember.tensor(xn, requires_grad=True)
    y = take(x)
    w = np.random.default_rng(1).standard_normal(tuple(y.shape))
    (y * ember.tensor(w)).sum().backward()
    ref = np.zeros(xn.size)
    pos = take(ember.tensor(np.arange(xn.size, dtype=np.float64).reshape(xn.shape))).numpy()
    np.add.at(ref, pos.astype(np.int64).reshape(-1), w.reshape(-1))
    np.testing.assert_array_equal(x.grad.numpy(), ref.reshape(xn.shape))


def test_non_contiguous_input_and_minus_zero_kept_in_the_slot():
    x = ember.randn(4, 6, dtype=ember.float64).t().requires_grad_()    # (6, 4), strided
    g = ember.tensor(np.array([-0.0, 1.0, -2.0, 0.0]))
    x[2].backward(g)
    got = x.grad.numpy()
    assert np.signbit(got[2, 0]) and not np.signbit(got[0]).any()
    np.testing.assert_array_equal(got[2], g.numpy())
    assert not got[[0, 1, 3, 4, 5]].any()


def test_double_backward_through_a_select():
    x = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    g, = ember.autograd.grad((x[1] ** 3).sum(), x, create_graph=True)
    g.sum().backward()
    ref = np.zeros((3, 4))
    ref[1] = 6 * x.detach().numpy()[1]
    np.testing.assert_allclose(x.grad.numpy(), ref, rtol=1e-12)


@pytest.mark.parametrize("dtype,value", [(ember.float32, 0.0), (ember.float64, -0.0),
                                         (ember.float64, 2.5), (ember.int64, 0),
                                         (ember.int64, 7), (ember.bool, True),
                                         (ember.complex64, 0.0)])
def test_scatter_into_a_broadcast_base(dtype, value):
    base = ember.tensor(value, dtype=dtype).expand(3, 4)
    src = ember.ones(2, 2, dtype=dtype)
    out = ember.as_strided_scatter(base, src, (2, 2), (4, 1), 5)
    ref = np.full((3, 4), value, dtype=base.numpy().dtype)
    ref.reshape(-1)[[5, 6, 9, 10]] = 1
    np.testing.assert_array_equal(out.numpy(), ref)
    assert out.is_contiguous()
    assert (np.signbit(out.numpy()) == np.signbit(ref)).all() if ref.dtype.kind == "f" else True
    assert not np.shares_memory(out.numpy(), base.numpy())


def test_traced_slice_gradient_keeps_the_full_zeros_form():
    # The compiled graph's scatter_stack pass matches scatters into an all-zero constant of
    # the full shape; under a tracer the slice VJP must keep emitting that form.
    def f(t):
        t = t.detach().requires_grad_(True)
        a, b = t[0], t[1]
        return ember.autograd.grad((a * 2).sum() + (b * 3).sum(), [t])[0]
    t = ember.randn(2, 8)
    cf = ember.compile(f)
    cf(t)
    got = cf(t).numpy()
    np.testing.assert_array_equal(got, np.stack([np.full(8, 2.0), np.full(8, 3.0)]))
    assert "scatter_stack" in {n.op.name for n in cf.graph.nodes}


def test_scatter_into_broadcast_minus_zero_and_complex_parts():
    for value, dtype in ((-0.0, ember.float32), (complex(0.0, -0.0), ember.complex128),
                         (complex(-0.0, 0.0), ember.complex64)):
        base = ember.tensor(value, dtype=dtype).expand(2, 3)
        out = ember.as_strided_scatter(base, ember.ones(1, dtype=dtype), (1,), (1,), 0).numpy()
        rest = out.reshape(-1)[1:]
        assert (np.signbit(rest.real) == np.signbit(np.real(value))).all()
        assert (np.signbit(rest.imag) == np.signbit(np.imag(value))).all()
