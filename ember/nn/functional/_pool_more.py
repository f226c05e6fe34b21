"""More pooling functionals: ``max_unpool1d/2d/3d`` (a ``scatter`` of the pooled values to
the positions ``max_pool``'s indices name) and ``lp_pool1d/2d`` (power-average pooling built
on ``avg_pool``), and 3-D max/average/adaptive-average pooling as the 2-D pooling of each
depth slice reduced across the depth window, with PyTorch's signatures and output sizes."""
from __future__ import annotations

from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from ...ops.dispatch import autocast_entry

__all__ = ['max_unpool1d', 'max_unpool2d', 'max_unpool3d', 'lp_pool1d', 'lp_pool2d', 'lp_pool3d',
           'max_pool3d', 'avg_pool3d', 'adaptive_avg_pool3d', 'adaptive_max_pool3d',
           'max_pool1d_with_indices', 'max_pool2d_with_indices', 'max_pool3d_with_indices',
           'adaptive_max_pool1d_with_indices', 'adaptive_max_pool2d_with_indices',
           'adaptive_max_pool3d_with_indices']


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


@autocast_entry("max_unpool2d")
def max_unpool2d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,
                 output_size=None) -> Tensor:
    """Partial inverse of ``max_pool2d`` (see ``max_unpool1d``), ``(N, C, H, W)`` input."""
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2)


@autocast_entry("max_unpool3d")
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



def lp_pool3d(input: Tensor, norm_type: float, kernel_size, stride=None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over ``(N, C, D, H, W)`` windows (see ``lp_pool1d``)."""
    kd, kh, kw = _tuple(kernel_size, 3, "kernel_size", "lp_pool3d")
    avg = avg_pool3d(input.pow(norm_type), (kd, kh, kw), stride, 0, ceil_mode)
    return _lp_finish(avg, norm_type, kd * kh * kw)

def _pool3d_args(input, kernel_size, stride, padding, dilation, op):
    if not isinstance(input, Tensor) or input.ndim not in (4, 5):
        raise ShapeError(f"{op}: expected a 4-D (unbatched) or 5-D input, got shape "
                         f"{tuple(getattr(input, 'shape', ()))}")
    k = _tuple(kernel_size, 3, "kernel_size", op)
    s = k if stride is None or stride == [] or stride == () else _tuple(stride, 3, "stride", op)
    p, d = _tuple(padding, 3, "padding", op), _tuple(dilation, 3, "dilation", op)
    if any(p[i] * 2 > k[i] for i in range(3)):
        raise ValueError(f"{op}: padding {p} should be at most half of the kernel size {k}")
    x = input.unsqueeze(0) if input.ndim == 4 else input
    return x, input.ndim == 4, k, s, p, d


def _depth_windows(x, k, s, p, d, ceil_mode, fill, op):
    """(depth-padded x, number of output depths) as PyTorch's pooling geometry."""
    from ...ops.index import pad
    size, span = x.shape[2], d * (k - 1) + 1
    num = size + 2 * p - span
    o = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (o - 1) * s >= size + p:
        o -= 1
    if o < 1:
        raise ShapeError(f"{op}: the output depth would be {o} (input shape {tuple(x.shape)}, "
                         f"kernel_size {k}, stride {s}, padding {p}); it must be positive")
    back = max(0, (o - 1) * s + span - size - p)
    if p or back:
        x = pad(x, (0, 0, 0, 0, p, back), value=fill)
    return x, o


def _slices(x, j, k_d, s_d, d_d, o):
    """The depth slices of tap ``j``, folded into the batch: (N * o, C, H, W)."""
    n, c = x.shape[:2]
    sl = x[:, :, j * d_d:j * d_d + (o - 1) * s_d + 1:s_d]
    return sl.permute(0, 2, 1, 3, 4).reshape(n * o, c, *x.shape[3:])


def _unfold_depth(y, n, o):
    return y.reshape(n, o, *y.shape[1:]).permute(0, 2, 1, 3, 4)


@autocast_entry("max_pool3d")
def max_pool3d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """3-D max pooling over ``(N, C, D, H, W)`` input (``F.max_pool3d``).

    Args:
        input: ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)``, floating point.
        kernel_size, stride, padding, dilation, ceil_mode: as ``max_pool2d``'s, per 3 dims.
        return_indices: also return each maximum's flat index into its ``D * H * W`` volume
            (the first maximum in scan order, as PyTorch), for ``max_unpool3d``.
    """
    from . import max_pool2d
    from ...ops.join import stack
    op = "max_pool3d"
    x, unb, k, s, p, d = _pool3d_args(input, kernel_size, stride, padding, dilation, op)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point input, got {x.dtype}")
    h, w = x.shape[3:]
    x, o = _depth_windows(x, k[0], s[0], p[0], d[0], ceil_mode, float("-inf"), op)
    taps = [max_pool2d(_slices(x, j, k[0], s[0], d[0], o), k[1:], s[1:], p[1:], d[1:],
                       ceil_mode, return_indices=True) for j in range(k[0])]
    vals, tap = stack([t[0] for t in taps]).max(dim=0)        # first maximal tap: lowest depth
    n = x.shape[0]
    out = _unfold_depth(vals, n, o)
    out = out.squeeze(0) if unb else out
    if not return_indices:
        return out
    from ...ops.factories import arange
    from ...ops.sort import take_along_dim
    hw = take_along_dim(stack([t[1] for t in taps]), tap.unsqueeze(0), dim=0)[0]
    od = arange(o, device=x.device).repeat(n).reshape(n * o, 1, 1, 1)
    ind = _unfold_depth((od * s[0] + tap * d[0] - p[0]) * (h * w) + hw, n, o)
    return out, (ind.squeeze(0) if unb else ind)


@autocast_entry("avg_pool3d")
def avg_pool3d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """3-D average pooling over ``(N, C, D, H, W)`` input (``F.avg_pool3d``).

    Args:
        input: ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)``.
        kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override: as
            ``avg_pool2d``'s, per 3 dims.
    """
    from . import avg_pool2d
    from ...ops.factories import tensor
    from ...ops.pool import _avg_divisor
    op = "avg_pool3d"
    x, unb, k, s, p, _ = _pool3d_args(input, kernel_size, stride, padding, 1, op)
    sizes = tuple(x.shape[2:])
    x, o = _depth_windows(x, k[0], s[0], p[0], 1, ceil_mode, 0.0, op)
    tot = None
    for j in range(k[0]):
        y = avg_pool2d(_slices(x, j, k[0], s[0], 1, o), k[1:], s[1:], p[1:], ceil_mode,
                       True, 1)
        tot = y if tot is None else tot + y
    out = _unfold_depth(tot, x.shape[0], o)
    if divisor_override is not None:
        if not divisor_override:
            raise ValueError(f"{op}: divisor_override must be non-zero")
        out = out / divisor_override
    else:
        outs = (o,) + tuple(out.shape[3:])
        dv = [_avg_divisor(sizes[i], k[i], s[i], p[i], outs[i], count_include_pad)
              for i in range(3)]
        div = tensor([[[a * b * c for c in dv[2]] for b in dv[1]] for a in dv[0]],
                     dtype=out.dtype, device=out.device)
        out = out / div
    return out.squeeze(0) if unb else out


@autocast_entry("adaptive_avg_pool3d")
def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:
    """Adaptive 3-D average pooling (``F.adaptive_avg_pool3d``): PyTorch's
    ``[floor(i*D/oD), ceil((i+1)*D/oD))`` cells, ``None`` keeping a dim's size.

    Args:
        input: ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)``.
        output_size: an int or a 3-tuple of ints / None.
    """
    from . import adaptive_avg_pool2d
    from ...ops.pool import _adaptive_size, _pool_matrix
    op = "adaptive_avg_pool3d"
    if not isinstance(input, Tensor) or input.ndim not in (4, 5):
        raise ShapeError(f"{op}: expected a 4-D (unbatched) or 5-D input, got shape "
                         f"{tuple(getattr(input, 'shape', ()))}")
    x = input.unsqueeze(0) if input.ndim == 4 else input
    od, oh, ow = _adaptive_size(x, output_size, 3, op)
    n, c, depth, h, w = x.shape
    y = adaptive_avg_pool2d(x.reshape(n, c * depth, h, w), (oh, ow)).reshape(n, c, depth, oh, ow)
    pd = _pool_matrix(depth, od, y)                                   # (od, D)
    out = (y.permute(0, 1, 3, 4, 2) @ pd.transpose(0, 1)).permute(0, 1, 4, 2, 3)
    return out.squeeze(0) if input.ndim == 4 else out


@autocast_entry("adaptive_max_pool3d")
def adaptive_max_pool3d(input: Tensor, output_size, return_indices: bool = False):
    """Adaptive 3-D max pooling (``F.adaptive_max_pool3d``), PyTorch's cells.

    Windows of unequal sizes are gathered padded to the largest one with repeats of their
    first element (a repeat never changes the max; ``max`` picks the first index).

    Args:
        input: ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)``, floating point.
        output_size: an int or a 3-tuple of ints / None.
        return_indices: also return the flat ``D * H * W`` index of each maximum.
    """
    from ...ops.factories import tensor
    from ...ops.pool import _adaptive_size, _cells
    from ...ops.sort import take_along_dim
    op = "adaptive_max_pool3d"
    if not isinstance(input, Tensor) or input.ndim not in (4, 5):
        raise ShapeError(f"{op}: expected a 4-D (unbatched) or 5-D input, got shape "
                         f"{tuple(getattr(input, 'shape', ()))}")
    if not input.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point input, got {input.dtype}")
    x = input.unsqueeze(0) if input.ndim == 4 else input
    n, c, sizes = x.shape[0], x.shape[1], tuple(x.shape[2:])
    outs = _adaptive_size(x, output_size, 3, op)
    taps = []                                   # per dim: (o, k) indices, padded with repeats
    for size, o in zip(sizes, outs):
        cells = _cells(size, o)
        k = max(e - b for b, e in cells)
        taps.append([[min(b + i, e - 1) for i in range(k)] for b, e in cells])
    hw = sizes[1] * sizes[2]
    flat = [[a * hw + b * sizes[2] + q for a in ta for b in tb for q in tc]
            for ta in taps[0] for tb in taps[1] for tc in taps[2]]      # (L, K)
    num, k = len(flat), len(flat[0])
    idx = tensor(flat, device=x.device).reshape(1, num * k)
    xf = x.reshape(n * c, -1)
    win = take_along_dim(xf, idx.expand(n * c, -1), dim=1).reshape(n * c, num, k)
    vals, arg = win.max(dim=2, keepdim=True)
    unb = input.ndim == 4
    out = vals.reshape(n, c, *outs)
    out = out.squeeze(0) if unb else out
    if not return_indices:
        return out
    ind = take_along_dim(idx.reshape(1, num, k).expand(n * c, -1, -1), arg, dim=2)
    ind = ind.reshape(n, c, *outs)
    return out, (ind.squeeze(0) if unb else ind)


def _with_indices(name):
    def fn(input, *args, **kwargs):
        from .. import functional
        kwargs.pop("return_indices", None)
        return getattr(functional, name)(input, *args, return_indices=True, **kwargs)
    fn.__name__ = fn.__qualname__ = f"{name}_with_indices"
    fn.__doc__ = f"``{name}(..., return_indices=True)``: (values, flat indices), as PyTorch's."
    return fn


max_pool1d_with_indices = _with_indices("max_pool1d")
max_pool2d_with_indices = _with_indices("max_pool2d")
max_pool3d_with_indices = _with_indices("max_pool3d")
adaptive_max_pool1d_with_indices = _with_indices("adaptive_max_pool1d")
adaptive_max_pool2d_with_indices = _with_indices("adaptive_max_pool2d")
adaptive_max_pool3d_with_indices = _with_indices("adaptive_max_pool3d")
