"""Reverse-mode autograd semantics, checked against PyTorch's documented behaviour."""
from __future__ import annotations

import gc
import inspect
import os

import pytest

import ember as em
from ember.autograd import AnomalyError


def f64(data, requires_grad=False):
    return em.tensor(data, dtype=em.float64, requires_grad=requires_grad)


def line_of_next_statement() -> int:
    return inspect.currentframe().f_back.f_lineno + 1


# ---------------------------------------------------------------- accumulation
def test_grad_accumulates_across_backward_calls():
    x = f64([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * x).sum().backward()
    assert x.grad.tolist() == [4.0, 8.0]


def test_grad_accumulates_over_multiple_paths():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * x + 3 * x + x.exp() * 0 + x
    y.sum().backward()
    assert x.grad.tolist() == [2 * 1 + 4, 2 * 2 + 4]


def test_grad_is_not_aliased_to_the_incoming_gradient():
    x = f64([1.0, 2.0], requires_grad=True)
    g = f64([1.0, 1.0])
    (x + 0).backward(g)
    x.grad.add_(5)
    assert g.tolist() == [1.0, 1.0]


def test_retained_grad_is_not_aliased_to_leaf_or_incoming_gradients():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x.clone()
    y.retain_grad()
    (y * 2).sum().backward()        # clone's VJP passes y's gradient buffer on to x
    x.grad.add_(100)
    assert y.grad.tolist() == [2.0, 2.0]
    y = x * 2
    y.retain_grad()
    g = f64([1.0, 1.0])
    y.backward(g)
    g.add_(5)
    assert y.grad.tolist() == [1.0, 1.0]


def test_zeroing_grad_between_steps():
    x = f64(3.0, requires_grad=True)
    (x * x).backward()
    x.grad = None
    (x * 2).backward()
    assert x.grad.item() == 2.0


# ---------------------------------------------------------------- retain_graph / create_graph
@pytest.mark.parametrize("op", [lambda x: x.exp(), lambda x: x * x, lambda x: x.log()])
def test_second_backward_without_retain_graph_raises(op):
    x = f64([1.0, 2.0], requires_grad=True)
    y = op(x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x.exp().sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == pytest.approx([2 * 2.718281828459045, 2 * 7.38905609893065])


def test_create_graph_gives_higher_derivatives():
    x = f64(2.0, requires_grad=True)
    y = x ** 3
    (d1,) = em.autograd.grad(y, x, create_graph=True)
    (d2,) = em.autograd.grad(d1, x, create_graph=True)
    (d3,) = em.autograd.grad(d2, x)
    assert (d1.item(), d2.item(), d3.item()) == (12.0, 12.0, 6.0)
    assert d1.requires_grad and not d3.requires_grad


def test_backward_with_create_graph_then_grad_of_grad():
    x = f64([1.0, 2.0], requires_grad=True)
    (x.exp() * x).sum().backward(create_graph=True)
    g = x.grad                       # (1 + x) e^x, itself differentiable
    assert g.requires_grad
    (gg,) = em.autograd.grad(g.sum(), x)
    assert gg.tolist() == pytest.approx([3 * 2.718281828459045, 4 * 7.38905609893065])


# ---------------------------------------------------------------- hooks and retain_grad
def test_leaf_hook_modifies_grad_and_can_be_removed():
    x = f64([1.0, 2.0], requires_grad=True)
    seen = []
    h = x.register_hook(lambda g: (seen.append(g.tolist()), g * 10)[1])
    (x * 2).sum().backward()
    assert seen == [[2.0, 2.0]] and x.grad.tolist() == [20.0, 20.0]
    h.remove()
    x.grad = None
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0] and len(seen) == 1


def test_non_leaf_hook_changes_what_flows_upstream():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.register_hook(lambda g: g * 0 + 1)   # replace dL/dy by ones
    (y * y).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_hook_returning_none_keeps_grad():
    x = f64([1.0], requires_grad=True)
    x.register_hook(lambda g: None)
    (x * 4).sum().backward()
    assert x.grad.tolist() == [4.0]


def test_register_hook_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        f64([1.0]).register_hook(lambda g: g)


def test_retain_grad_on_non_leaf():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * x
    y.retain_grad()
    z = y * 3
    z.sum().backward()
    assert y.retains_grad and y.grad.tolist() == [3.0, 3.0]
    assert z.grad is None and not z.is_leaf


def test_retain_grad_sees_hook_modified_grad():
    x = f64([1.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g * 5)
    y.sum().backward()
    assert y.grad.tolist() == [5.0] and x.grad.tolist() == [10.0]


# ---------------------------------------------------------------- grad modes
def test_no_grad_and_enable_grad_nest():
    x = f64([1.0], requires_grad=True)
    with em.no_grad():
        y = x * 2
        with em.enable_grad():
            z = x * 2
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None
    assert em.is_grad_enabled()


def test_no_grad_as_decorator():
    @em.no_grad()
    def f(t):
        return t * 2
    assert not f(f64([1.0], requires_grad=True)).requires_grad
    assert em.is_grad_enabled()


def test_set_grad_enabled_as_function_context_and_decorator():
    x = f64([1.0], requires_grad=True)
    em.set_grad_enabled(False)
    try:
        assert not em.is_grad_enabled()
        assert not (x * 2).requires_grad
    finally:
        em.set_grad_enabled(True)
    assert em.is_grad_enabled()
    with em.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert em.is_grad_enabled()

    @em.set_grad_enabled(False)
    def f(t):
        return t * 2
    assert em.is_grad_enabled()          # decorating does not change the mode
    assert not f(x).requires_grad
    assert em.is_grad_enabled()


def test_grad_mode_restored_after_exception():
    with pytest.raises(ValueError):
        with em.no_grad():
            raise ValueError
    assert em.is_grad_enabled()


def test_inference_mode():
    x = f64([1.0], requires_grad=True)
    with em.inference_mode():
        assert not em.is_grad_enabled() and em.is_inference_mode_enabled()
        y = x * 2
    assert not y.requires_grad and y.is_inference() is True
    assert not em.is_inference_mode_enabled() and em.is_grad_enabled()
    assert (x * 2).is_inference() is False   # a method, as PyTorch's (was a property)
    with em.inference_mode(False):
        assert em.is_grad_enabled()


# ---------------------------------------------------------------- detach / requires_grad
def test_detach_shares_data_and_cuts_graph():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    assert d.data_ptr() == y.data_ptr()


def test_detach_in_place():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.detach_()
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf


def test_requires_grad_flags():
    x = f64([1.0])
    assert x.requires_grad_() is x and x.requires_grad
    x.requires_grad = False
    assert not x.requires_grad
    y = f64([1.0], requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)


@pytest.mark.parametrize("dtype", [em.int64, em.int32, em.bool])
def test_requires_grad_on_non_float_raises(dtype):
    with pytest.raises(RuntimeError, match="floating point"):
        em.tensor([1, 0], dtype=dtype, requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        em.tensor([1, 0], dtype=dtype).requires_grad_()


def test_int_results_do_not_require_grad():
    x = f64([1.5, 2.5], requires_grad=True)
    assert not x.to(em.int64).requires_grad


# ---------------------------------------------------------------- autograd.grad
def test_autograd_grad_does_not_touch_dot_grad():
    x = f64([1.0, 2.0], requires_grad=True)
    (g,) = em.autograd.grad((x * x).sum(), x)
    assert g.tolist() == [2.0, 4.0] and x.grad is None


def test_autograd_grad_allow_unused_and_materialize():
    x = f64([1.0], requires_grad=True)
    u = f64([5.0], requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        em.autograd.grad(y, [x, u], retain_graph=True)
    gx, gu = em.autograd.grad(y, [x, u], retain_graph=True, allow_unused=True)
    assert gx.tolist() == [2.0] and gu is None
    gx, gu = em.autograd.grad(y, [x, u], materialize_grads=True)
    assert gu.tolist() == [0.0]


def test_autograd_grad_with_respect_to_non_leaf():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * 3
    z = (y * y).sum()
    gy, gx = em.autograd.grad(z, [y, x])
    assert gy.tolist() == [6.0, 12.0] and gx.tolist() == [18.0, 36.0]


def test_autograd_grad_multiple_outputs_and_grad_outputs():
    x = f64([1.0, 2.0], requires_grad=True)
    (g,) = em.autograd.grad([x * 2, x * x], [x], [f64([1.0, 1.0]), f64([1.0, 0.0])])
    assert g.tolist() == [4.0, 2.0]


def test_autograd_grad_input_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        em.autograd.grad(f64(1.0, requires_grad=True) * 2, f64(1.0))


def test_backward_inputs_limits_accumulation():
    a = f64([1.0], requires_grad=True)
    b = f64([2.0], requires_grad=True)
    (a * b).sum().backward(inputs=[a])
    assert a.grad.tolist() == [2.0] and b.grad is None


def test_non_scalar_backward_needs_gradient():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="scalar outputs"):
        y.backward()
    y.backward(gradient=f64([1.0, 10.0]))
    assert x.grad.tolist() == [2.0, 20.0]


def test_gradient_shape_mismatch_raises():
    x = f64([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="shape"):
        (x * 2).backward(f64([1.0, 2.0, 3.0]))


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        f64([1.0]).sum().backward()


def test_broadcast_gradients_are_reduced_to_input_shape():
    x = f64([[1.0], [2.0]], requires_grad=True)
    b = f64([1.0, 2.0, 3.0], requires_grad=True)
    (x * b).sum().backward()
    assert x.grad.tolist() == [[6.0], [6.0]] and b.grad.tolist() == [3.0, 3.0, 3.0]


def test_graph_is_freed_with_the_output():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x.exp()
    import weakref
    ref = weakref.ref(y.grad_fn)
    del y
    gc.collect()
    assert ref() is None


# ---------------------------------------------------------------- version counter / in-place
def test_inplace_on_saved_output_raises_at_backward():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x.exp()                      # exp saves its output
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_inplace_on_saved_input_raises_at_backward():
    x = f64([1.0, 2.0], requires_grad=True)
    a = x * 1
    y = a * a                        # mul saves its inputs
    a.mul_(2)
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        y.sum().backward()


def test_inplace_on_unsaved_value_is_fine():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x + 1                        # add saves nothing
    y.mul_(3)                        # mul by a scalar saves y's old value (a copy)
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_version_counter_bumps():
    x = f64([1.0, 2.0])
    v = x._version
    x.add_(1)
    x.mul_(2)
    assert x._version == v + 2


def test_inplace_on_leaf_requiring_grad_raises():
    x = f64([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)
    with em.no_grad():
        x.add_(1)                    # allowed: the optimizer-step pattern
    assert x.tolist() == [2.0, 3.0] and x.is_leaf


# ---------------------------------------------------------------- anomaly detection
def test_anomaly_forward_reports_op_and_user_line():
    x = f64([1.0, 2.0], requires_grad=True)
    with em.autograd.detect_anomaly():
        with pytest.raises(AnomalyError) as ei:
            line = line_of_next_statement()
            em.log(-x)
    msg = str(ei.value)
    assert "log" in msg and "forward" in msg
    assert f"{os.path.basename(__file__)}:{line}" in msg


def test_anomaly_backward_reports_forward_line():
    x = f64([0.0, 4.0], requires_grad=True)
    with em.autograd.detect_anomaly():
        line = line_of_next_statement()
        y = x ** 0.5                 # finite forward, d/dx at 0 is inf
        z = (y * 2).sum()
        with pytest.raises(AnomalyError) as ei:
            z.backward()
    msg = str(ei.value)
    assert "PowBackward" in msg and "NaN/Inf" in msg
    assert f"{os.path.basename(__file__)}:{line}" in msg


def test_anomaly_backward_division_by_zero_pattern():
    x = f64([1.0, 2.0], requires_grad=True)
    d = f64([0.0, 1.0], requires_grad=True)
    with em.autograd.detect_anomaly():
        line = line_of_next_statement()
        y = (x * d) / (d + 1) ** 0.5 * d ** 0.5
        with pytest.raises(AnomalyError) as ei:
            y.sum().backward()
    assert f"{os.path.basename(__file__)}:{line}" in str(ei.value)


def test_anomaly_off_by_default_and_restored():
    assert not em.autograd.is_anomaly_enabled()
    x = f64([1.0], requires_grad=True)
    y = em.log(-x)                   # NaN silently, like PyTorch
    assert y.tolist()[0] != y.tolist()[0]
    with em.autograd.detect_anomaly():
        assert em.autograd.is_anomaly_enabled()
    assert not em.autograd.is_anomaly_enabled()


def test_anomaly_ignores_nan_already_in_inputs():
    x = f64([float("nan"), 1.0], requires_grad=True)
    with em.autograd.detect_anomaly():
        (x * 2).sum().backward()     # NaN did not *appear* here
    assert x.grad.tolist() == [2.0, 2.0]
