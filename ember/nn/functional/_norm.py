"""Normalisation functionals: batch, layer, group, instance and RMS norm (composites).

Statistics are biased (divide by n) for normalising; running variances are updated with the
unbiased estimate (divide by n - 1), exactly like PyTorch. Running statistics are updated in
place under ``no_grad``.
"""
from __future__ import annotations

import functools

from ... import dtypes as _dt
from ...autograd.grad_mode import no_grad
from ...errors import ShapeError
from ...tensor import Tensor
from ...ops.dispatch import autocast_entry

__all__ = ['batch_norm', 'layer_norm', 'group_norm', 'rms_norm', 'instance_norm']

_LOWP = (_dt.bfloat16, _dt.float16)


def _lowp_in_float32(fn):
    """PyTorch's norm kernels take a bfloat16/float16 input with parameters of its dtype or
    float32, compute in float32 and round the output once to the input's dtype (so a
    bfloat16 activation stays bfloat16 through a float32 BatchNorm under autocast)."""
    @functools.wraps(fn)
    def norm(input, *args, **kwargs):
        if input.__class__ is Tensor and input.dtype in _LOWP:
            return fn(input.float(), *args, **kwargs).to(input.dtype)
        return fn(input, *args, **kwargs)
    return norm


def _normalize(x: Tensor, dims, eps: float):
    """(normalised x, mean, biased var) over ``dims`` (stats keep their dims)."""
    mean = x.mean(dim=dims, keepdim=True)
    xc = x - mean
    var = xc.square().mean(dim=dims, keepdim=True)
    return xc * (var + eps).rsqrt(), mean, var


def _channel_shape(x: Tensor):
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _affine(out, weight, bias, shape):
    if weight is not None:
        out = out * (weight.reshape(shape) if shape else weight)
    if bias is not None:
        out = out + (bias.reshape(shape) if shape else bias)
    return out


def _update(running, stat, momentum):
    with no_grad():
        running.mul_(1.0 - momentum).add_(stat.to(running.dtype) * momentum)


@_lowp_in_float32
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel (dim 1) over the batch and spatial dims.

    In training, batch statistics are used and the running ones updated in place:
    ``running = (1 - momentum) * running + momentum * batch_stat`` (unbiased variance).

    Example:
        >>> x = ember.randn(8, 3)
        >>> F.batch_norm(x, None, None, training=True).mean(0).abs().max() < 1e-6
        tensor(True)
    """
    if input.ndim < 2:
        raise ShapeError(f"batch_norm: expected an input with at least 2 dims (N, C, ...), got "
                         f"shape {tuple(input.shape)}")
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and t.numel() != c:
            raise ShapeError(f"batch_norm: {name} should contain {c} elements (the channels of "
                             f"input of shape {tuple(input.shape)}), not {t.numel()}")
    shape = _channel_shape(input)
    if training:
        dims = (0,) + tuple(range(2, input.ndim))
        n = input.numel() // max(c, 1)
        if n <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                             f"got input size {tuple(input.shape)}")
        out, mean, var = _normalize(input, dims, eps)
        if running_mean is not None:
            _update(running_mean, mean.detach().reshape(-1), momentum)
        if running_var is not None:
            _update(running_var, var.detach().reshape(-1) * (n / (n - 1)), momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var must be given when "
                             "training=False")
        inv = (running_var.reshape(shape) + eps).rsqrt()
        out = (input - running_mean.reshape(shape)) * inv
    return _affine(out, weight, bias, shape)


def _norm_dims(input, normalized_shape, op):
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    if k == 0 or tuple(input.shape[input.ndim - k:]) != ns or input.ndim < k:
        raise ShapeError(f"{op}: expected input with shape [*, {', '.join(map(str, ns))}], but "
                         f"got input of size {tuple(input.shape)}")
    return ns, tuple(range(-k, 0))


@autocast_entry("layer_norm")
@_lowp_in_float32
def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims, then scale and shift.

    Example:
        >>> F.layer_norm(ember.randn(2, 5), (5,)).shape
        ember.Size([2, 5])
    """
    _, dims = _norm_dims(input, normalized_shape, "layer_norm")
    out = _normalize(input, dims, eps)[0]
    return _affine(out, weight, bias, None)


@autocast_entry("rms_norm")
def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """``x / sqrt(mean(x², trailing dims) + eps) * weight``; ``eps`` defaults to the
    dtype's machine epsilon (as PyTorch)."""
    _, dims = _norm_dims(input, normalized_shape, "rms_norm")
    if input.dtype in _LOWP:
        # NOTE: as PyTorch: normalised in float32 (eps: float32's epsilon by default) and
        # rounded to the input's dtype, then scaled and rounded again
        out = rms_norm(input.float(), normalized_shape, None, eps).to(input.dtype)
        return out if weight is None else (out * weight).to(input.dtype)
    if eps is None:
        eps = _dt.finfo(input.dtype).eps
    out = input * (input.square().mean(dim=dims, keepdim=True) + eps).rsqrt()
    return out if weight is None else out * weight


@autocast_entry("group_norm")
@_lowp_in_float32
def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each group of ``C / num_groups`` channels over its channels and spatial dims."""
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise ShapeError(f"group_norm: expected an input (N, C, ...) with C divisible by "
                         f"num_groups={num_groups}, got shape {tuple(input.shape)}")
    n = input.shape[0]
    x = input.reshape(n, num_groups, -1)
    out = _normalize(x, (-1,), eps)[0].reshape(input.shape)
    return _affine(out, weight, bias, _channel_shape(input))


@_lowp_in_float32
def instance_norm(input: Tensor, running_mean: Tensor | None = None,
                  running_var: Tensor | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each (sample, channel) over its spatial dims."""
    if input.ndim < 3:
        raise ShapeError(f"instance_norm: expected an input (N, C, *spatial) with at least one "
                         f"spatial dim, got shape {tuple(input.shape)}")
    shape = _channel_shape(input)
    if use_input_stats:
        dims = tuple(range(2, input.ndim))
        n = input.numel() // max(input.shape[0] * input.shape[1], 1)
        if n <= 1:
            raise ValueError(f"instance_norm: expected more than 1 spatial element when "
                             f"training, got input size {tuple(input.shape)}")
        out, mean, var = _normalize(input, dims, eps)
        if running_mean is not None:
            _update(running_mean, mean.detach().mean(0).reshape(-1), momentum)
        if running_var is not None:
            _update(running_var, var.detach().mean(0).reshape(-1) * (n / (n - 1)), momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: running stats are needed when use_input_stats=False")
        out = (input - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    return _affine(out, weight, bias, shape)
