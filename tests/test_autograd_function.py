"""Custom differentiable ops: ember.autograd.Function (PyTorch's API and semantics)."""
from __future__ import annotations

import gc
import math
import weakref

import pytest

import ember as em
from ember.autograd import Function


def f64(data, requires_grad=False):
    return em.tensor(data, dtype=em.float64, requires_grad=requires_grad)


# ---------------------------------------------------------------- custom Function
class Exp(Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y

    @staticmethod
    def jvp(ctx, t):
        (y,) = ctx.saved_tensors
        return t * y


class ScaleShift(Function):
    """y = x * scale + shift: a non-tensor arg and keyword arg."""

    @staticmethod
    def forward(ctx, x, scale, shift=0.0):
        ctx.scale = scale
        ctx.seen_needs = ctx.needs_input_grad
        return x * scale + shift

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None, None


class WrongExp(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x                 # wrong on purpose


def test_function_forward_backward_and_grad_fn_name():
    x = f64([0.0, 1.0], requires_grad=True)
    y = Exp.apply(x)
    assert y.requires_grad and y.grad_fn.name() == "ExpBackward"
    y.sum().backward()
    assert x.grad.tolist() == pytest.approx([1.0, 2.718281828459045])


def test_function_forward_runs_without_grad_recording():
    seen = {}

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            seen["enabled"] = em.is_grad_enabled()
            y = x * 2
            seen["inner"] = y.requires_grad
            return y

        @staticmethod
        def backward(ctx, g):
            return g * 2

    Probe.apply(f64([1.0], requires_grad=True))
    assert seen == {"enabled": False, "inner": False}


def test_function_non_tensor_args_and_needs_input_grad():
    x = f64([1.0, 2.0], requires_grad=True)
    y = ScaleShift.apply(x, 3.0, 1.0)
    assert y.tolist() == [4.0, 7.0]
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    ctx = y.grad_fn.op.ctx
    assert ctx.seen_needs == (True, False, False)


def test_function_without_grad_inputs_records_nothing():
    y = ScaleShift.apply(f64([1.0]), 2.0)
    assert not y.requires_grad and y.grad_fn is None


def test_function_multiple_outputs_and_materialized_grads():
    class SplitScale(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, ga, gb):
            assert ga is not None and gb is not None   # materialized as zeros
            return ga * 2 + gb * 3

    x = f64([1.0, 2.0], requires_grad=True)
    a, b = SplitScale.apply(x)
    assert a.grad_fn is b.grad_fn and (a._out_nr, b._out_nr) == (0, 1)
    (a.sum() + (b * b).sum()).backward()
    assert x.grad.tolist() == [2 + 3 * 6.0, 2 + 3 * 12.0]
    x.grad = None
    a, b = SplitScale.apply(x)
    b.sum().backward()               # no gradient flows into a
    assert x.grad.tolist() == [3.0, 3.0]


def test_function_set_materialize_grads_false_passes_none():
    got = []

    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 1, x * 1

        @staticmethod
        def backward(ctx, ga, gb):
            got.append((ga is None, gb is None))
            return ga

    x = f64([1.0], requires_grad=True)
    a, _ = Two.apply(x)
    a.sum().backward()
    assert got == [(False, True)] and x.grad.tolist() == [1.0]


def test_function_mark_non_differentiable():
    class SortLike(Function):
        @staticmethod
        def forward(ctx, x):
            idx = x.to(em.int64)
            y = x * 1
            ctx.mark_non_differentiable(idx)
            return y, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            return g

    x = f64([1.0, 2.0], requires_grad=True)
    y, idx = SortLike.apply(x)
    assert y.requires_grad and not idx.requires_grad


def test_function_mark_dirty_rebases_the_input():
    class AddOneInPlace(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    x = f64([1.0, 2.0], requires_grad=True)
    a = x * 2
    v = a._version
    out = AddOneInPlace.apply(a)
    assert out is a and a._version == v + 1
    assert a.grad_fn.name() == "AddOneInPlaceBackward"
    assert a.tolist() == [3.0, 5.0]
    (a * a).sum().backward()
    assert x.grad.tolist() == [2 * 2 * 3.0, 2 * 2 * 5.0]
    with pytest.raises(RuntimeError, match="leaf Variable"):
        AddOneInPlace.apply(f64([1.0], requires_grad=True))


def test_function_returning_an_input_returns_an_alias():
    class Identity(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = f64([1.0], requires_grad=True)
    y = Identity.apply(x)
    assert y is not x and y.grad_fn is not None and x.is_leaf
    y.sum().backward()
    assert x.grad.tolist() == [2.0]


def test_function_saved_tensor_version_check():
    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = f64([1.0, 2.0], requires_grad=True)
    a = x * 1
    y = Square.apply(a)
    a.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_function_saved_tensors_freed_after_backward():
    x = f64([1.0, 2.0], requires_grad=True)
    y = Exp.apply(x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()
    y = Exp.apply(x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == pytest.approx([3 * 2.718281828459045, 3 * 7.38905609893065])


def test_function_saved_output_does_not_make_a_reference_cycle():
    x = f64([1.0, 2.0], requires_grad=True)
    y = Exp.apply(x)
    ref = weakref.ref(y.grad_fn)
    gc.disable()
    try:
        del y
        assert ref() is None         # freed by refcounting alone
    finally:
        gc.enable()


def test_function_double_backward():
    x = f64([0.5, 1.0], requires_grad=True)
    y = Exp.apply(x * x)                          # d/dx = 2x e^{x^2}
    (g,) = em.autograd.grad(y.sum(), x, create_graph=True)
    (gg,) = em.autograd.grad(g.sum(), x)          # (2 + 4x^2) e^{x^2}
    assert gg.tolist() == pytest.approx([(2 + 4 * v * v) * math.exp(v * v) for v in (0.5, 1.0)])


def test_function_gradcheck_and_gradgradcheck_pass():
    x = f64([0.1, -0.3, 0.7], requires_grad=True)
    assert em.autograd.gradcheck(Exp.apply, (x,))
    assert em.autograd.gradgradcheck(Exp.apply, (x,))


def test_gradcheck_fails_for_a_wrong_backward():
    x = f64([0.1, -0.3, 0.7], requires_grad=True)
    with pytest.raises(AssertionError, match="reverse-mode Jacobian mismatch"):
        em.autograd.gradcheck(WrongExp.apply, (x,), check_forward_ad=False)
    assert em.autograd.gradcheck(WrongExp.apply, (x,), check_forward_ad=False,
                                 raise_exception=False) is False


def test_gradgradcheck_fails_for_a_wrong_double_backward():
    class BadSecondOrder(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            # right value 3x^2, but written so its own derivative is wrong (x.detach())
            return g * 3 * x * x.detach()

    x = f64([0.4, -0.8], requires_grad=True)
    assert em.autograd.gradcheck(BadSecondOrder.apply, (x,), check_forward_ad=False)
    with pytest.raises(AssertionError):
        em.autograd.gradgradcheck(BadSecondOrder.apply, (x,))


def test_function_forward_mode_jvp():
    from ember.autograd import forward_ad as fwad
    x = f64([0.0, 1.0])
    with fwad.dual_level():
        y = Exp.apply(fwad.make_dual(x, f64([1.0, 2.0])))
        _, t = fwad.unpack_dual(y)
    assert t.tolist() == pytest.approx([1.0, 2 * 2.718281828459045])
    with fwad.dual_level():
        with pytest.raises(NotImplementedError, match="jvp"):
            WrongExp.apply(fwad.make_dual(x, f64([1.0, 2.0])))


def test_function_setup_context_style():
    class Mul(Function):
        @staticmethod
        def forward(x, y):
            return x * y

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return g * y, g * x

    a = f64([2.0], requires_grad=True)
    b = f64([5.0], requires_grad=True)
    Mul.apply(a, b).sum().backward()
    assert (a.grad.tolist(), b.grad.tolist()) == ([5.0], [2.0])


def test_function_wrong_number_of_gradients_raises():
    class Bad(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    a = f64([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        Bad.apply(a, a).sum().backward()


def test_function_grad_for_non_tensor_input_raises():
    class Bad(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    with pytest.raises(RuntimeError, match="not a Tensor"):
        Bad.apply(f64([1.0], requires_grad=True), 2.0).sum().backward()


def test_once_differentiable_backward_records_nothing():
    from ember.autograd import once_differentiable

    class Sq(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = f64([3.0], requires_grad=True)
    (g,) = em.autograd.grad(Sq.apply(x).sum(), x, create_graph=True)
    assert g.tolist() == [6.0] and not g.requires_grad
