"""``ember.library.custom_op``: eager calls below autograd, a registered backward, the fake
implementation on ``meta``, device kernels, ``ember.ops.<ns>``, in-place ops, ``opcheck``."""
import numpy as np
import pytest

import ember as em
from ember import library


def _define(ns):
    @library.custom_op(f"{ns}::numpy_sin", mutates_args=())
    def numpy_sin(x: em.Tensor, scale: float = 1.0) -> em.Tensor:
        assert not em.is_grad_enabled()            # the implementation runs below autograd
        return em.from_numpy(np.sin(x.numpy()) * scale)
    return numpy_sin


def test_eager_call_and_ops_namespace():
    op = _define("t_eager")
    x = em.tensor([0.0, 1.0, 2.0])
    np.testing.assert_allclose(op(x, scale=2.0).numpy(), 2 * np.sin(x.numpy()), rtol=1e-6)
    assert em.ops.t_eager.numpy_sin is op and em.ops.t_eager.numpy_sin.default is op
    assert library.get_op("t_eager::numpy_sin") is op
    y = op(em.ones(2, requires_grad=True))         # x.numpy() inside works, as PyTorch's
    with pytest.raises(RuntimeError, match="autograd is not registered for this custom op"):
        y.sum().backward()
    with pytest.raises(ValueError, match="already defined"):
        _define("t_eager")
    with pytest.raises(ValueError, match="'mylib::my_op'"):
        library.custom_op("nonamespace", lambda x: x, mutates_args=())


def test_autograd_and_fake_and_opcheck():
    op = _define("t_grad")

    @op.register_fake
    def _(x, scale=1.0):
        return em.empty_like(x)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.scale = inputs[1]

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos() * ctx.scale, None
    op.register_autograd(backward, setup_context=setup_context)
    x = em.tensor([0.5, 1.5], requires_grad=True)
    op(x, 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.cos([0.5, 1.5]), rtol=1e-6)
    m = op(em.empty(4, 5, device="meta"))
    assert m.is_meta and tuple(m.shape) == (4, 5)
    res = library.opcheck(op, (em.randn(3, dtype=em.float64),))
    assert res == {"test_faketensor": "SUCCESS", "test_autograd_registration": "SUCCESS"}
    op.register_fake(lambda x, scale=1.0: em.empty(1, device=x.device))     # a wrong fake
    bad = library.opcheck(op, (em.randn(3),), raise_exception=False)
    assert isinstance(bad["test_faketensor"], AssertionError)


def test_no_fake_on_meta_and_device_kernels():
    op = _define("t_kernel")
    with pytest.raises(RuntimeError, match="no fake implementation for meta tensors"):
        op(em.empty(2, device="meta"))
    calls = []

    @op.register_kernel("cpu")
    def _(x, scale=1.0):
        calls.append("cpu")
        return x * 0 + scale
    assert op(em.ones(2), 5.0).tolist() == [5.0, 5.0] and calls == ["cpu"]


def test_mutating_op_bumps_versions():
    @library.custom_op("t_mut::add_one_", mutates_args=("x",))
    def add_one_(x: em.Tensor) -> None:
        x.add_(1)
    x = em.zeros(3)
    v = x._version
    add_one_(x)
    assert x.tolist() == [1.0, 1.0, 1.0] and x._version > v
    with pytest.raises(RuntimeError, match="mutate their inputs"):
        add_one_.register_autograd(lambda ctx, g: g)
    with pytest.raises(ValueError, match="does not take"):
        library.custom_op("t_mut::bad", lambda x: x, mutates_args=("y",))


def test_custom_op_under_compile_and_vmap():
    @library.custom_op("t_trace::scaled", mutates_args=())
    def scaled(x: em.Tensor, k: float) -> em.Tensor:
        return x * k + 1                                  # Ember ops: traced inline
    f = em.compile(lambda x: scaled(x, 2.0).sum())
    for _ in range(3):
        assert f(em.ones(4)).item() == 12.0
    out = em.func.vmap(lambda r: scaled(r, 3.0))(em.ones(2, 3))
    assert out.tolist() == [[4.0] * 3] * 2


def test_forward_mode_through_a_custom_op_is_refused_not_zero():
    op = _define("t_fwd")
    import ember.autograd.forward_ad as fwad
    with fwad.dual_level():
        d = fwad.make_dual(em.ones(2), em.ones(2))
        with pytest.raises(NotImplementedError, match="jvp"):
            op(d)
