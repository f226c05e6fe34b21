"""Pooling (NCHW / NCL), as composites over the ``unfold`` primitive of :mod:`.conv`.

Max pooling unfolds -inf-padded windows and takes ``max(dim)`` (argmax + gather), so that,
like PyTorch, the gradient goes to ONE maximal element per window. Average pooling sums the
windows and divides by PyTorch's per-window count. Adaptive pooling uses PyTorch's
``start = floor(i*H/OH)``, ``end = ceil((i+1)*H/OH)`` windows.
"""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from .conv import _batched, _tup, _unfold4

__all__ = ['max_pool1d', 'max_pool2d', 'avg_pool1d', 'avg_pool2d', 'adaptive_avg_pool1d',
           'adaptive_avg_pool2d', 'adaptive_max_pool1d', 'adaptive_max_pool2d']


def _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, op):
    """(k, s, d, pads, (oh, ow)); pads carry ceil_mode's extra bottom/right windows."""
    k = _tup(kernel_size, 2, "kernel_size", op)
    s = k if stride is None or stride == [] or stride == () else _tup(stride, 2, "stride", op)
    p, d = _tup(padding, 2, "padding", op, 0), _tup(dilation, 2, "dilation", op)
    if any(p[i] * 2 > k[i] for i in range(2)):
        raise ValueError(f"{op}: padding {p} should be at most half of the kernel size {k}")
    pads, outs = [], []
    for i in range(2):
        size, span = x.shape[2 + i], d[i] * (k[i] - 1) + 1
        num = size + 2 * p[i] - span
        o = (-(-num // s[i]) if ceil_mode else num // s[i]) + 1
        if ceil_mode and (o - 1) * s[i] >= size + p[i]:
            o -= 1          # the last window must start inside the input or the left padding
        if o < 1:
            raise ShapeError(f"{op}: the output size would be {o} along dim {2 + i} (input "
                             f"shape {tuple(x.shape)}, kernel_size {k}, stride {s}, padding "
                             f"{p}, dilation {d}); it must be positive")
        pads.append((p[i], (o - 1) * s[i] + span - size - p[i]))
        outs.append(o)
    return k, s, d, tuple(pads), tuple(outs)


def _windows(x, k, s, d, pads, pad_value, op):
    """(N*C, kh*kw, L) windows of (N, C, H, W) ``x``."""
    n, c, h, w = x.shape
    return _unfold4(x.reshape(n * c, 1, h, w), k, d, pads, s, pad_value, op)


def _flat_index_windows(x, k, s, d, pads, op):
    from .factories import arange
    h, w = x.shape[2:]
    idx = arange(h * w, device=x.device).reshape(1, 1, h, w)
    return _unfold4(idx, k, d, pads, s, -1, op)


def _max_pool(x, k, s, d, pads, outs, return_indices, op, unb):
    n, c = x.shape[:2]
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point input, got {x.dtype.name}")
    win = _windows(x, k, s, d, pads, float("-inf"), op)
    vals, arg = win.max(dim=1, keepdim=True)            # gradient to one element per window
    out = vals.reshape(n, c, *outs)
    out = out.squeeze(0) if unb else out
    if not return_indices:
        return out
    from .sort import take_along_dim
    imap = _flat_index_windows(x, k, s, d, pads, op).expand(n * c, -1, -1)
    ind = take_along_dim(imap, arg, dim=1).reshape(n, c, *outs)
    return out, (ind.squeeze(0) if unb else ind)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-D max pooling (``F.max_pool2d``); indices are flat positions in each H*W plane.

    Example:
        >>> max_pool2d(ember.ones(1, 1, 4, 4), 2).shape
        ember.Size([1, 1, 2, 2])
    """
    x, unb = _batched(input, 4, "max_pool2d")
    k, s, d, pads, outs = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode,
                                         "max_pool2d")
    return _max_pool(x, k, s, d, pads, outs, return_indices, "max_pool2d", unb)


def _one(v, name, op, lo=1):
    return (1, _tup(v, 1, name, op, lo)[0])


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """1-D max pooling over NCL input (``F.max_pool1d``)."""
    op = "max_pool1d"
    x, unb = _batched(input, 3, op)
    st = None if stride is None or stride == [] or stride == () else _one(stride, "stride", op)
    r = max_pool2d(x.unsqueeze(2), _one(kernel_size, "kernel_size", op), st,
                   (0, _one(padding, "padding", op, 0)[1]), _one(dilation, "dilation", op),
                   ceil_mode, return_indices)
    if return_indices:
        v, i = r[0].squeeze(2), r[1].squeeze(2)
        return (v.squeeze(0), i.squeeze(0)) if unb else (v, i)
    r = r.squeeze(2)
    return r.squeeze(0) if unb else r


def _avg_divisor(size, k, s, p, o, include_pad):
    """PyTorch's per-output-position divisor along one dim."""
    out = []
    for i in range(o):
        start = i * s - p
        end = min(start + k, size + p)
        n = end - start
        if not include_pad:
            n = min(end, size) - max(start, 0)
        out.append(n)
    return out


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """2-D average pooling (``F.avg_pool2d``).

    Example:
        >>> avg_pool2d(ember.ones(1, 1, 4, 4), 2, padding=1, count_include_pad=False)[0, 0, 0, 0]
        tensor(1.)
    """
    op = "avg_pool2d"
    x, unb = _batched(input, 4, op)
    k, s, d, pads, outs = _pool_geometry(x, kernel_size, stride, padding, 1, ceil_mode, op)
    n, c = x.shape[:2]
    tot = _windows(x, k, s, d, pads, 0.0, op).sum(dim=1)              # (N*C, L)
    if divisor_override is not None:
        if not divisor_override:
            raise ValueError(f"{op}: divisor_override must be non-zero")
        out = tot / divisor_override
    else:
        from .factories import tensor
        dh, dw = (_avg_divisor(x.shape[2 + i], k[i], s[i], pads[i][0], outs[i],
                               count_include_pad) for i in range(2))
        div = tensor([a * b for a in dh for b in dw], dtype=x.dtype, device=x.device)
        out = tot / div
    out = out.reshape(n, c, *outs)
    return out.squeeze(0) if unb else out


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """1-D average pooling over NCL input (``F.avg_pool1d``)."""
    op = "avg_pool1d"
    x, unb = _batched(input, 3, op)
    st = None if stride is None or stride == [] or stride == () else _one(stride, "stride", op)
    r = avg_pool2d(x.unsqueeze(2), _one(kernel_size, "kernel_size", op), st,
                   (0, _one(padding, "padding", op, 0)[1]), ceil_mode, count_include_pad)
    r = r.squeeze(2)
    return r.squeeze(0) if unb else r


def _adaptive_size(x, output_size, nd, op):
    o = (output_size,) * nd if isinstance(output_size, int) else tuple(output_size)
    if len(o) != nd:
        raise ValueError(f"{op}: output_size must be an int or a tuple of {nd}, got "
                         f"{output_size!r}")
    o = tuple(x.shape[x.ndim - nd + i] if v is None else int(v) for i, v in enumerate(o))
    if any(v < 1 for v in o) or any(x.shape[x.ndim - nd + i] < 1 for i in range(nd)):
        raise ShapeError(f"{op}: output_size {o} and the input's spatial dims "
                         f"{tuple(x.shape[-nd:])} must be positive")
    return o


def _cells(size, o):
    return [(i * size // o, -(-(i + 1) * size // o)) for i in range(o)]


def _pool_matrix(size, o, like):
    from .factories import tensor
    rows = [[1.0 / (e - b) if b <= j < e else 0.0 for j in range(size)] for b, e in
            _cells(size, o)]
    return tensor(rows, dtype=like.dtype, device=like.device)


def adaptive_avg_pool2d(input, output_size):
    """Adaptive 2-D average pooling (``F.adaptive_avg_pool2d``): ``P_h @ x @ P_w.T``.

    Example:
        >>> adaptive_avg_pool2d(ember.ones(1, 3, 7, 5), (3, 2)).shape
        ember.Size([1, 3, 3, 2])
    """
    x, unb = _batched(input, 4, "adaptive_avg_pool2d")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"adaptive_avg_pool2d: expected a floating point input, got "
                         f"{x.dtype.name}")
    oh, ow = _adaptive_size(x, output_size, 2, "adaptive_avg_pool2d")
    h, w = x.shape[2:]
    out = _pool_matrix(h, oh, x) @ x @ _pool_matrix(w, ow, x).mT
    return out.squeeze(0) if unb else out


def adaptive_avg_pool1d(input, output_size):
    """Adaptive 1-D average pooling (``F.adaptive_avg_pool1d``)."""
    x, unb = _batched(input, 3, "adaptive_avg_pool1d")
    o = _adaptive_size(x, output_size, 1, "adaptive_avg_pool1d")[0]
    out = adaptive_avg_pool2d(x.unsqueeze(2), (1, o)).squeeze(2)
    return out.squeeze(0) if unb else out


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Adaptive 2-D max pooling (``F.adaptive_max_pool2d``).

    Windows of unequal sizes are gathered padded to the largest one with repeats of their
    first element (a repeat never changes the max, and ``max`` picks the first index).
    """
    op = "adaptive_max_pool2d"
    x, unb = _batched(input, 4, op)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point input, got {x.dtype.name}")
    n, c, h, w = x.shape
    oh, ow = _adaptive_size(x, output_size, 2, op)
    ch, cw = _cells(h, oh), _cells(w, ow)
    kh, kw = max(e - b for b, e in ch), max(e - b for b, e in cw)
    rows = [[min(b + i, e - 1) for i in range(kh)] for b, e in ch]
    cols = [[min(b + j, e - 1) for j in range(kw)] for b, e in cw]
    flat = [[r * w + q for r in rr for q in cc] for rr in rows for cc in cols]   # (L, K)
    from .factories import tensor
    from .sort import take_along_dim
    idx = tensor(flat, device=x.device).reshape(1, oh * ow * kh * kw)
    xf = x.reshape(n * c, h * w)
    win = take_along_dim(xf, idx.expand(n * c, -1), dim=1).reshape(n * c, oh * ow, kh * kw)
    vals, arg = win.max(dim=2, keepdim=True)
    out = vals.reshape(n, c, oh, ow)
    out = out.squeeze(0) if unb else out
    if not return_indices:
        return out
    ind = take_along_dim(idx.reshape(1, oh * ow, kh * kw).expand(n * c, -1, -1), arg, dim=2)
    ind = ind.reshape(n, c, oh, ow)
    return out, (ind.squeeze(0) if unb else ind)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Adaptive 1-D max pooling (``F.adaptive_max_pool1d``)."""
    x, unb = _batched(input, 3, "adaptive_max_pool1d")
    o = _adaptive_size(x, output_size, 1, "adaptive_max_pool1d")[0]
    r = adaptive_max_pool2d(x.unsqueeze(2), (1, o), return_indices)
    if return_indices:
        v, i = r[0].squeeze(2), r[1].squeeze(2)
        return (v.squeeze(0), i.squeeze(0)) if unb else (v, i)
    r = r.squeeze(2)
    return r.squeeze(0) if unb else r

