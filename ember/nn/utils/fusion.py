"""``ember.nn.utils.fusion``: fold an eval-mode BatchNorm into the conv/linear before it."""
from __future__ import annotations

import copy

from ...autograd.grad_mode import no_grad
from ...ops.factories import ones_like, zeros_like
from ...tensor import Tensor
from ..parameter import Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights"]


def _check_eval(op: str, *mods) -> None:
    if any(m.training for m in mods):
        raise RuntimeError(f"{op}: fusion only for eval (call .eval() on "
                           f"{' and '.join(type(m).__name__ for m in mods)} first)")


def fuse_conv_bn_weights(conv_w: Tensor, conv_b: Tensor | None, bn_rm: Tensor, bn_rv: Tensor,
                         bn_eps: float, bn_w: Tensor | None, bn_b: Tensor | None,
                         transpose: bool = False) -> tuple[Parameter, Parameter]:
    """Weights of a convolution computing ``bn(conv(x))`` (BatchNorm in eval mode).

    Args:
        conv_w, conv_b: the convolution's weight and bias (None: zeros).
        bn_rm, bn_rv, bn_eps: the BatchNorm's running mean, variance and epsilon.
        bn_w, bn_b: its affine weight and bias (None: ones, zeros).
        transpose: the convolution is transposed (output channels on dim 1).

    Returns:
        ``(fused_weight, fused_bias)`` as Parameters, in ``conv_w``'s dtype.
    """
    conv_b = zeros_like(bn_rm) if conv_b is None else conv_b
    bn_w = ones_like(bn_rm) if bn_w is None else bn_w
    bn_b = zeros_like(bn_rm) if bn_b is None else bn_b
    rsqrt = (bn_rv + bn_eps).rsqrt()
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (conv_w.ndim - 2)
    w = (conv_w * (bn_w * rsqrt).reshape(shape)).to(conv_w.dtype)
    b = ((conv_b - bn_rm) * rsqrt * bn_w + bn_b).to(conv_w.dtype)
    return Parameter(w, conv_w.requires_grad), Parameter(b, conv_b.requires_grad)


def fuse_conv_bn_eval(conv, bn, transpose: bool = False):
    """A copy of ``conv`` whose output equals ``bn(conv(x))`` (both in eval mode).

    Raises:
        RuntimeError: either module is in training mode.
    """
    _check_eval("fuse_conv_bn_eval", conv, bn)
    fused = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise RuntimeError("fuse_conv_bn_eval: the BatchNorm has no running statistics "
                           "(track_running_stats=False)")
    with no_grad():
        fused.weight, fused.bias = fuse_conv_bn_weights(
            fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight,
            bn.bias, transpose)
    return fused


def fuse_linear_bn_weights(linear_w: Tensor, linear_b: Tensor | None, bn_rm: Tensor,
                           bn_rv: Tensor, bn_eps: float, bn_w: Tensor,
                           bn_b: Tensor) -> tuple[Parameter, Parameter]:
    """Weights of a linear layer computing ``bn(linear(x))`` (BatchNorm in eval mode)."""
    linear_b = zeros_like(bn_rm) if linear_b is None else linear_b
    scale = bn_w * (bn_rv + bn_eps).rsqrt()
    w = linear_w * scale.unsqueeze(-1)
    b = (linear_b - bn_rm) * scale + bn_b
    return Parameter(w, linear_w.requires_grad), Parameter(b, linear_b.requires_grad)


def fuse_linear_bn_eval(linear, bn):
    """A copy of ``linear`` whose output equals ``bn(linear(x))`` (both in eval mode).

    Raises:
        RuntimeError: either module is in training mode.
        ValueError: the BatchNorm's features are neither ``out_features`` nor 1.
    """
    _check_eval("fuse_linear_bn_eval", linear, bn)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise ValueError(f"fuse_linear_bn_eval: BatchNorm num_features ({bn.num_features}) "
                         f"must equal the Linear's out_features ({linear.out_features}) or 1")
    if bn.running_mean is None or bn.running_var is None:
        raise RuntimeError("fuse_linear_bn_eval: the BatchNorm has no running statistics "
                           "(track_running_stats=False)")
    fused = copy.deepcopy(linear)
    with no_grad():
        fused.weight, fused.bias = fuse_linear_bn_weights(
            fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight,
            bn.bias)
    return fused
