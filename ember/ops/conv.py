"""Convolution and pooling (NCHW / NCL), built on two primitives: ``unfold`` and ``fold``.

``unfold`` (im2col) turns every sliding window into a column; ``fold`` (col2im) sums columns
back into an image. They are each other's VJP. Everything else is a composite: a convolution
is ``weight @ unfold(x)``, a transposed convolution is ``fold(weight.T @ x)``, pooling reduces
the unfolded windows. Both primitives take per-side padding ``((top, bottom), (left, right))``
(a negative bottom/right value crops), which covers PyTorch's asymmetric ``padding="same"``,
``ceil_mode`` and ``output_padding`` without a separate pad op.
"""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from . import dispatch
from ._util import f32_to_lowp, is_lowp, lowp_to_f32
from . import batching_rules as _vb
from .registry import defop
from .dispatch import autocast_entry

__all__ = ['conv1d', 'conv2d', 'conv_transpose1d', 'conv_transpose2d', 'max_pool1d',
           'max_pool2d', 'avg_pool1d', 'avg_pool2d', 'adaptive_avg_pool1d',
           'adaptive_avg_pool2d', 'adaptive_max_pool1d', 'adaptive_max_pool2d']
# NOTE: fold/unfold are nn.functional names only (Tensor.unfold is a different op).
FUNCTIONAL = __all__ + ['fold', 'unfold']

_apply = dispatch.apply


# ------------------------------------------------------------------ primitives
def _blocks(size, k, d, pads, s):
    return (size + pads[0] + pads[1] - d * (k - 1) - 1) // s + 1


def _unfold_kernel(xp, x, kernel_size, dilation, padding, stride, pad_value):
    n, c, h, w = x.shape
    (kh, kw), (dh, dw), (sh, sw) = kernel_size, dilation, stride
    oh = _blocks(h, kh, dh, padding[0], sh)
    ow = _blocks(w, kw, dw, padding[1], sw)
    pads = ((0, 0), (0, 0)) + tuple((p0, max(p1, 0)) for p0, p1 in padding)
    if any(p for pr in pads for p in pr):
        x = xp.pad(x, pads, constant_values=pad_value)
    s0, s1, s2, s3 = x.strides
    win = xp.lib.stride_tricks.as_strided(          # zero-copy (N, C, kh, kw, oh, ow) view
        x, (n, c, kh, kw, oh, ow), (s0, s1, s2 * dh, s3 * dw, s2 * sh, s3 * sw))
    r = win.reshape(n, c * kh * kw, oh * ow)         # the one copy
    return r.copy() if xp.may_share_memory(r, x) else r


def _fold_kernel(xp, cols, output_size, kernel_size, dilation, padding, stride):
    if is_lowp(cols):
        # NOTE: overlapping windows are summed in float32 and rounded once, not rounded
        # to float16/bfloat16 after every one of the kh*kw adds (NumPy's loops would).
        r = _fold_kernel(xp, lowp_to_f32(cols), output_size, kernel_size, dilation,
                         padding, stride)
        return f32_to_lowp(r, cols.dtype)
    (h, w), (kh, kw), (dh, dw), (sh, sw) = output_size, kernel_size, dilation, stride
    (pt, pb), (pl, pr) = padding
    n, ck, _ = cols.shape
    oh, ow = _blocks(h, kh, dh, padding[0], sh), _blocks(w, kw, dw, padding[1], sw)
    c = cols.reshape(n, ck // (kh * kw), kh, kw, oh, ow)
    out = xp.zeros((n, ck // (kh * kw), pt + h + max(pb, 0), pl + w + max(pr, 0)), cols.dtype)
    # NOTE: windows that cannot overlap (pooling's stride == kernel) write each pixel at
    # most once: a copy, about 3x cheaper than the read-add-write of a strided add.
    disjoint = (kh == 1 or sh > dh * (kh - 1)) and (kw == 1 or sw > dw * (kw - 1))
    if oh > 0 and ow > 0 and sh == 1 and kh > 1 and not disjoint:
        _fold_rows(xp, out, c, dh, dw, sw)
    elif oh > 0 and ow > 0:
        for i in range(kh):          # NOTE: kh*kw strided adds, never a loop over pixels
            for j in range(kw):
                dst = out[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                          j * dw:j * dw + sw * (ow - 1) + 1:sw]
                if disjoint:
                    dst[...] = c[:, :, i, j]
                else:
                    dst += c[:, :, i, j]
    return xp.ascontiguousarray(out[:, :, pt:pt + h, pl:pl + w])


def _fold_rows(xp, out, c, dh, dw, sw):
    """Row-stride-1 fold (a convolution's input gradient) into ``out``, in place.

    NOTE: a strided add of (oh, ow) planes runs one short inner loop per row. Here the
    ``kh`` taps of each kernel column ``j`` are summed first into a buffer of rows as wide as
    the windows (``ow``): a tap is then a shift by whole rows, one contiguous add per plane.
    Only the ``kw`` buffers are added with strides: 1.5x faster for 3x3 kernels.
    """
    n, nc, kh, kw, oh, ow = c.shape
    span = oh * ow
    taps = c.reshape(n, nc, kh, kw, span)
    acc = xp.empty((n, nc, out.shape[2] * ow), c.dtype)
    for j in range(kw):
        acc[:, :, :span] = taps[:, :, 0, j]
        acc[:, :, span:] = 0
        for i in range(1, kh):
            acc[:, :, i * dh * ow:i * dh * ow + span] += taps[:, :, i, j]
        out[:, :, :, j * dw:j * dw + sw * (ow - 1) + 1:sw] += acc.reshape(
            n, nc, out.shape[2], ow)


def _unfold_shape(s, kernel_size, dilation, padding, stride, pad_value):
    return (s[0], s[1] * kernel_size[0] * kernel_size[1],
            _blocks(s[2], kernel_size[0], dilation[0], padding[0], stride[0])
            * _blocks(s[3], kernel_size[1], dilation[1], padding[1], stride[1]))


unfold_p = defop(
    "unfold", nin=1, dtype="same", save=None, kernel=_unfold_kernel, shape=_unfold_shape,
    batch=_vb.unfold,
    params={"kernel_size": (1, 1), "dilation": (1, 1), "padding": ((0, 0), (0, 0)),
            "stride": (1, 1), "pad_value": 0.0},
    vjp=lambda g, out, x, pad_value, **p: (_apply(fold_p, (g,), dict(p, output_size=tuple(
        x.shape[2:]))),),
    # NOTE: not "linear": the tangent of a -inf padded window is 0, not -inf.
    jvp=lambda t, out, x, **p: _apply(unfold_p, (t[0],), dict(p, pad_value=0.0)))

fold_p = defop(
    "fold", nin=1, dtype="same", save=None, kernel=_fold_kernel,
    batch=_vb.fold,
    params={"output_size": (1, 1), "kernel_size": (1, 1), "dilation": (1, 1),
            "padding": ((0, 0), (0, 0)), "stride": (1, 1)},
    shape=lambda s, output_size, kernel_size, **p: (
        s[0], s[1] // (kernel_size[0] * kernel_size[1])) + tuple(output_size),
    vjp=lambda g, out, x, output_size, **p: (_apply(unfold_p, (g,), dict(p, pad_value=0.0)),),
    jvp="linear")


# ------------------------------------------------------------------ argument helpers
def _tup(v, n, name, op, lo=1):
    t = (int(v),) * n if isinstance(v, int) or hasattr(v, "__index__") else tuple(int(a) for a in v)
    if len(t) == 1 and n > 1:
        t = t * n
    if len(t) != n or any(a < lo for a in t):
        raise ValueError(f"{op}: {name} must be {'a positive' if lo else 'a non-negative'} int "
                         f"or a tuple of {n} such ints, got {v!r}")
    return t


def _batched(x, nd, op, what="input"):
    """(x with a batch dim, whether one was added); ``nd`` is the batched rank."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected {what} to be a Tensor, got {type(x).__name__}")
    if x.ndim == nd:
        return x, False
    if x.ndim == nd - 1:
        return x.unsqueeze(0), True
    raise ShapeError(f"{op}: expected a {nd - 1}-D (unbatched) or {nd}-D (batched) {what}, got "
                     f"shape {tuple(x.shape)}")


def _unfold4(x, k, d, pads, s, pad_value=0.0, op="unfold"):
    for i, dim in enumerate("HW"):
        size = x.shape[2 + i] + pads[i][0] + pads[i][1]
        if size < d[i] * (k[i] - 1) + 1:
            raise ShapeError(f"{op}: the (dilated) kernel size {d[i] * (k[i] - 1) + 1} is larger "
                             f"than the padded input size {size} along {dim} (input shape "
                             f"{tuple(x.shape)})")
    return _apply(unfold_p, (x,), {"kernel_size": k, "dilation": d, "padding": pads,
                                   "stride": s, "pad_value": pad_value})


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding blocks as columns: (N, C, H, W) -> (N, C*kh*kw, L) (``F.unfold``, im2col).

    Example:
        >>> unfold(ember.ones(1, 2, 4, 4), kernel_size=3).shape
        ember.Size([1, 18, 4])
    """
    x, unb = _batched(input, 4, "unfold")
    k, d = _tup(kernel_size, 2, "kernel_size", "unfold"), _tup(dilation, 2, "dilation", "unfold")
    p, s = _tup(padding, 2, "padding", "unfold", 0), _tup(stride, 2, "stride", "unfold")
    r = _unfold4(x, k, d, ((p[0], p[0]), (p[1], p[1])), s)
    return r.squeeze(0) if unb else r


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sum columns back into an image: (N, C*kh*kw, L) -> (N, C, H, W) (``F.fold``, col2im)."""
    x, unb = _batched(input, 3, "fold")
    o = _tup(output_size, 2, "output_size", "fold", 0)
    k, d = _tup(kernel_size, 2, "kernel_size", "fold"), _tup(dilation, 2, "dilation", "fold")
    p, s = _tup(padding, 2, "padding", "fold", 0), _tup(stride, 2, "stride", "fold")
    pads = ((p[0], p[0]), (p[1], p[1]))
    blocks = [_blocks(o[i], k[i], d[i], pads[i], s[i]) for i in range(2)]
    if x.shape[1] % (k[0] * k[1]) or x.shape[2] != blocks[0] * blocks[1] or min(blocks) < 1:
        raise ShapeError(f"fold: input of shape {tuple(input.shape)} does not match "
                         f"output_size={o}, kernel_size={k}, dilation={d}, padding={p}, "
                         f"stride={s}: expected dim 1 divisible by {k[0] * k[1]} and "
                         f"{max(blocks[0], 0) * max(blocks[1], 0)} blocks (dim 2)")
    r = _apply(fold_p, (x,), {"output_size": o, "kernel_size": k, "dilation": d,
                              "padding": pads, "stride": s})
    return r.squeeze(0) if unb else r


# ------------------------------------------------------------------ convolution
def _conv_args(x, weight, bias, groups, op, transposed=False):
    if not isinstance(weight, Tensor) or weight.ndim != 4:
        raise ShapeError(f"{op}: expected a 4-D weight, got "
                         f"{tuple(weight.shape) if isinstance(weight, Tensor) else weight!r}")
    if x._dtype is not weight._dtype or (bias is not None and bias._dtype is not x._dtype):
        raise DTypeError(f"{op}: input ({x._dtype.name}), weight ({weight._dtype.name})"
                         f"{'' if bias is None else f' and bias ({bias._dtype.name})'} "
                         f"must have the same dtype")
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    cin = x.shape[1]
    wcin = weight.shape[0] if transposed else weight.shape[1] * groups
    cout = weight.shape[1] * groups if transposed else weight.shape[0]
    if cin != wcin or (weight.shape[0] % groups):
        raise ShapeError(
            f"{op}: input of shape {tuple(x.shape)} ({cin} channels) does not fit weight of "
            f"shape {tuple(weight.shape)} with groups={groups}: expected "
            + (f"weight.shape[0] == {cin} divisible by groups" if transposed else
               f"{cin} == weight.shape[1] * groups and weight.shape[0] divisible by groups"))
    if cin % groups:
        raise ShapeError(f"{op}: in_channels {cin} is not divisible by groups={groups}")
    if bias is not None and tuple(bias.shape) != (cout,):
        raise ShapeError(f"{op}: expected bias of shape ({cout},), got {tuple(bias.shape)}")
    return cout


def _same_pads(padding, k, d, s, op):
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding != "same":
            raise ValueError(f"{op}: padding must be 'valid', 'same', an int or a tuple, got "
                             f"{padding!r}")
        if s != (1, 1):
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions")
        tot = [d[i] * (k[i] - 1) for i in range(2)]   # the extra pad goes right, like PyTorch
        return tuple((t // 2, t - t // 2) for t in tot)
    p = _tup(padding, 2, "padding", op, 0)
    return ((p[0], p[0]), (p[1], p[1]))


@autocast_entry("conv2d")
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation) over NCHW input (``F.conv2d``), as im2col + matmul.

    Example:
        >>> conv2d(ember.ones(1, 3, 8, 8), ember.ones(4, 3, 3, 3), padding="same").shape
        ember.Size([1, 4, 8, 8])
    """
    x, unb = _batched(input, 4, "conv2d")
    cout = _conv_args(x, weight, bias, groups, "conv2d")
    k = tuple(weight.shape[2:])
    s, d = _tup(stride, 2, "stride", "conv2d"), _tup(dilation, 2, "dilation", "conv2d")
    pads = _same_pads(padding, k, d, s, "conv2d")
    n, cin, h, w = x.shape
    cols = _unfold4(x, k, d, pads, s, op="conv2d")                  # (N, Cin*K, L)
    oh, ow = (_blocks(x.shape[2 + i], k[i], d[i], pads[i], s[i]) for i in range(2))
    if groups == 1:
        out = weight.reshape(cout, -1) @ cols                        # (N, Cout, L)
    else:
        cols = cols.reshape(n, groups, cols.shape[1] // groups, cols.shape[2])
        out = weight.reshape(groups, cout // groups, -1) @ cols      # (N, g, Cout/g, L)
    out = out.reshape(n, cout, oh, ow)
    if bias is not None:
        out = out + bias.reshape(cout, 1, 1)
    return out.squeeze(0) if unb else out


@autocast_entry("conv1d")
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution over NCL input (``F.conv1d``): conv2d on a height-1 image."""
    x, unb = _batched(input, 3, "conv1d")
    if not isinstance(weight, Tensor) or weight.ndim != 3:
        raise ShapeError(f"conv1d: expected a 3-D weight (out, in/groups, k), got "
                         f"{tuple(getattr(weight, 'shape', ()))}")
    p = padding if isinstance(padding, str) else (0, _tup(padding, 1, "padding", "conv1d", 0)[0])
    out = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, _tup(stride, 1, "stride",
                 "conv1d")[0]), p, (1, _tup(dilation, 1, "dilation", "conv1d")[0]), groups)
    out = out.squeeze(2)
    return out.squeeze(0) if unb else out


@autocast_entry("conv_transpose2d")
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 2-D convolution (``F.conv_transpose2d``): matmul, then fold (col2im).

    ``weight`` has shape (in_channels, out_channels / groups, kh, kw).
    """
    op = "conv_transpose2d"
    x, unb = _batched(input, 4, op)
    cout = _conv_args(x, weight, bias, groups, op, transposed=True)
    k = tuple(weight.shape[2:])
    s, d = _tup(stride, 2, "stride", op), _tup(dilation, 2, "dilation", op)
    p, op_ = _tup(padding, 2, "padding", op, 0), _tup(output_padding, 2, "output_padding", op, 0)
    if any(op_[i] >= s[i] and op_[i] >= d[i] for i in range(2)):
        raise ValueError(f"{op}: output_padding {op_} must be smaller than either stride {s} "
                         f"or dilation {d}")
    n, cin, h, w = x.shape
    size = tuple((x.shape[2 + i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op_[i] + 1
                 for i in range(2))
    if min(size) < 1:
        raise ShapeError(f"{op}: the output size {size} is too small (input shape "
                         f"{tuple(x.shape)}, weight {tuple(weight.shape)}, padding {p})")
    xg = x.reshape(n, groups, cin // groups, h * w)
    wg = weight.reshape(groups, cin // groups, -1).mT                  # (g, Cout/g*K, Cin/g)
    cols = (wg @ xg).reshape(n, cout * k[0] * k[1], h * w)
    pads = tuple((p[i], p[i] - op_[i]) for i in range(2))   # output_padding: rows past the end
    out = _apply(fold_p, (cols,), {"output_size": size, "kernel_size": k, "dilation": d,
                                   "padding": pads, "stride": s})
    if bias is not None:
        out = out + bias.reshape(cout, 1, 1)
    return out.squeeze(0) if unb else out


@autocast_entry("conv_transpose1d")
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed 1-D convolution (``F.conv_transpose1d``) via the 2-D one."""
    x, unb = _batched(input, 3, "conv_transpose1d")
    if not isinstance(weight, Tensor) or weight.ndim != 3:
        raise ShapeError(f"conv_transpose1d: expected a 3-D weight, got "
                         f"{tuple(getattr(weight, 'shape', ()))}")
    one = [(1, _tup(v, 1, nm, "conv_transpose1d", lo)[0]) for v, nm, lo in
           ((stride, "stride", 1), (padding, "padding", 0), (output_padding, "output_padding", 0),
            (dilation, "dilation", 1))]
    one[1], one[2] = (0, one[1][1]), (0, one[2][1])
    out = conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), bias, one[0], one[1], one[2],
                           groups, one[3]).squeeze(2)
    return out.squeeze(0) if unb else out


from .pool import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool1d,  # noqa: E402
                   adaptive_max_pool2d, avg_pool1d, avg_pool2d, max_pool1d, max_pool2d)
