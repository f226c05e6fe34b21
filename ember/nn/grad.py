"""``torch.nn.grad``: the gradients of a convolution with respect to its input or its
weight, given the output gradient — each one vector-Jacobian product of ``F.conv{N}d``
(through autograd, so they are exact and themselves differentiable).

Example:
    >>> w, go = ember.randn(4, 3, 3, 3), ember.randn(1, 4, 6, 6)
    >>> ember.nn.grad.conv2d_input((1, 3, 8, 8), w, go).shape
    ember.Size([1, 3, 8, 8])
"""
from __future__ import annotations

__all__ = ["conv1d_input", "conv1d_weight", "conv2d_input", "conv2d_weight", "conv3d_input",
           "conv3d_weight"]


def _vjp(nd, input, weight, grad_output, wrt, stride, padding, dilation, groups):
    from ..autograd.grad_mode import enable_grad
    from ..autograd import grad as autograd_grad
    from . import functional as F
    conv = getattr(F, f"conv{nd}d")
    if grad_output.ndim != nd + 2:
        raise ValueError(f"conv{nd}d_{wrt}: expected a {nd + 2}-D grad_output "
                         f"(N, C_out, *spatial), got shape {tuple(grad_output.shape)}")
    with enable_grad():
        x = input.detach().requires_grad_(wrt == "input")
        w = weight.detach().requires_grad_(wrt == "weight")
        out = conv(x, w, None, stride, padding, dilation, groups)
        if tuple(out.shape) != tuple(grad_output.shape):
            raise ValueError(f"conv{nd}d_{wrt}: grad_output has shape "
                             f"{tuple(grad_output.shape)} but the convolution gives "
                             f"{tuple(out.shape)} (check input/weight size, stride, padding)")
        (g,) = autograd_grad(out, x if wrt == "input" else w, grad_output,
                             create_graph=grad_output.requires_grad)
    return g


def _input_fn(nd):
    def fn(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
        from ..ops.factories import zeros
        x = zeros(*tuple(input_size), dtype=grad_output.dtype, device=grad_output.device)
        return _vjp(nd, x, weight, grad_output, "input", stride, padding, dilation, groups)
    fn.__name__ = fn.__qualname__ = f"conv{nd}d_input"
    fn.__doc__ = (f"Gradient of ``conv{nd}d`` with respect to an input of ``input_size``, "
                  f"given ``weight`` and ``grad_output`` (``torch.nn.grad.conv{nd}d_input``).")
    return fn


def _weight_fn(nd):
    def fn(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
        from ..ops.factories import zeros
        w = zeros(*tuple(weight_size), dtype=grad_output.dtype, device=grad_output.device)
        return _vjp(nd, input, w, grad_output, "weight", stride, padding, dilation, groups)
    fn.__name__ = fn.__qualname__ = f"conv{nd}d_weight"
    fn.__doc__ = (f"Gradient of ``conv{nd}d`` with respect to a weight of ``weight_size``, "
                  f"given ``input`` and ``grad_output`` (``torch.nn.grad.conv{nd}d_weight``).")
    return fn


conv1d_input, conv2d_input, conv3d_input = (_input_fn(n) for n in (1, 2, 3))
conv1d_weight, conv2d_weight, conv3d_weight = (_weight_fn(n) for n in (1, 2, 3))
