"""More pooling functionals: ``max_unpool1d/2d/3d`` (a ``scatter`` of the pooled values to
the positions ``max_pool``'s indices name) and ``lp_pool1d/2d`` (power-average pooling built
on ``avg_pool``), with PyTorch's signatures and output sizes."""
from __future__ import annotations

from ...errors import DTypeError, ShapeError
from ...tensor import Tensor

__all__ = ['max_unpool1d', 'max_unpool2d', 'max_unpool3d', 'lp_pool1d', 'lp_pool2d']


def _tuple(v, nd, name, op):
    t = (int(v),) * nd if isinstance(v, int) else tuple(int(e) for e in v)
    if len(t) != nd:
        raise ValueError(f"{op}: {name} must be an int or a tuple of {nd} ints, got {v!r}")
    return t


def _unpool_size(x, nd, k, s, p, output_size, op):
    default = tuple((x.shape[-nd + i] - 1) * s[i] - 2 * p[i] + k[i] for i in range(nd))
    if output_size is None:
        return default
    size = tuple(int(v) for v in output_size)
    if len(size) == nd + 2:
        size = size[-nd:]
    if len(size) != nd:
        raise ValueError(f"{op}: output_size must have {nd} elements (or {nd + 2} with batch "
                         f"and channels), got {tuple(output_size)}")
    for i in range(nd):
        lo, hi = default[i] - s[i], default[i] + s[i]
        if not lo < size[i] < hi:
            raise ValueError(f"{op}: invalid output_size {size} for input of shape "
                             f"{tuple(x.shape)}: dim {i} must be between {lo + 1} and {hi - 1}")
    return size


def _max_unpool(input, indices, kernel_size, stride, padding, output_size, nd):
    op = f"max_unpool{nd}d"
    if input.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{op}: expected a {nd + 1}-D or {nd + 2}-D input, got shape "
                         f"{tuple(input.shape)}")
    if not isinstance(indices, Tensor) or indices.dtype.is_floating_point or \
            indices.dtype.name == "bool":
        raise DTypeError(f"{op}: indices must be an integer tensor (as returned by "
                         f"max_pool{nd}d(..., return_indices=True)), got "
                         f"{getattr(indices, 'dtype', type(indices).__name__)}")
    if tuple(indices.shape) != tuple(input.shape):
        raise ShapeError(f"{op}: indices of shape {tuple(indices.shape)} must have the input's "
                         f"shape {tuple(input.shape)}")
    k = _tuple(kernel_size, nd, "kernel_size", op)
    s = k if stride is None else _tuple(stride, nd, "stride", op)
    p = _tuple(padding, nd, "padding", op)
    size = _unpool_size(input, nd, k, s, p, output_size, op)
    lead = tuple(input.shape[:-nd])
    total = 1
    for v in size:
        total *= v
    x = input.reshape(*lead, -1)
    idx = indices.reshape(*lead, -1)
    a = idx._data        # NOTE: values read for validation only (no effect on the graph)
    if a.size and (int(a.min()) < 0 or int(a.max()) >= total):
        raise ValueError(f"{op}: found an invalid max index {int(a.max())} (output volumes "
                         f"are of size {size}, {total} elements)")
    from ...ops.factories import zeros
    out = zeros(*lead, total, dtype=input.dtype, device=input.device)
    return out.scatter(-1, idx, x).reshape(*lead, *size)


def max_unpool1d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,
                 output_size=None) -> Tensor:
    """Partial inverse of ``max_pool1d``: each value goes back to its index, zeros elsewhere.

    Args:
        input: ``(N, C, L)`` or ``(C, L)`` pooled values.
        indices: ``max_pool1d(..., return_indices=True)``'s indices, input's shape.
        kernel_size, stride, padding: the pooling's (stride defaults to kernel_size).
        output_size: the size to restore (when the pooling dropped a remainder).

    Returns:
        ``(N, C, L_out)``, ``L_out = (L - 1) * stride - 2 * padding + kernel_size`` by default.
    """
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,
                 output_size=None) -> Tensor:
    """Partial inverse of ``max_pool2d`` (see ``max_unpool1d``), ``(N, C, H, W)`` input."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2)


def max_unpool3d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,
                 output_size=None) -> Tensor:
    """Partial inverse of a 3-D max pooling (see ``max_unpool1d``), ``(N, C, D, H, W)``."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3)


def _lp_finish(avg, norm_type, count):
    from ._activation import relu
    return (avg.sign() * relu(avg.abs())).mul(count).pow(1.0 / norm_type)


def lp_pool1d(input: Tensor, norm_type: float, kernel_size, stride=None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling: ``(sum over each window of x ** p) ** (1 / p)`` on ``(N, C, L)``.

    Args:
        input: ``(N, C, L)`` or ``(C, L)``.
        norm_type: the power p (p = 1 is sum pooling).
        kernel_size, stride, ceil_mode: as ``avg_pool1d``'s (stride defaults to kernel_size).
    """
    from . import avg_pool1d
    k = _tuple(kernel_size, 1, "kernel_size", "lp_pool1d")[0]
    avg = avg_pool1d(input.pow(norm_type), k, stride, 0, ceil_mode)
    return _lp_finish(avg, norm_type, k)


def lp_pool2d(input: Tensor, norm_type: float, kernel_size, stride=None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over ``(N, C, H, W)`` windows (see ``lp_pool1d``)."""
    from . import avg_pool2d
    kh, kw = _tuple(kernel_size, 2, "kernel_size", "lp_pool2d")
    avg = avg_pool2d(input.pow(norm_type), (kh, kw), stride, 0, ceil_mode)
    return _lp_finish(avg, norm_type, kh * kw)
