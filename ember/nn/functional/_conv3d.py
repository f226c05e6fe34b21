"""``conv3d`` as a composite of ``conv2d``: the depth taps of the kernel are summed, each one
a 2-D convolution of the matching (strided, dilated) depth slices folded into the batch.
``conv_transpose3d`` likewise: each depth tap is a ``conv_transpose2d`` of every input depth
slice, added (``index_add``) at output depth ``i * stride + tap * dilation``, then cropped."""
from __future__ import annotations

from ...errors import ShapeError
from ...tensor import Tensor
from ...ops.dispatch import autocast_entry

__all__ = ['conv3d', 'conv_transpose3d']


def _triple(v, name, op):
    t = (int(v),) * 3 if isinstance(v, int) else tuple(int(e) for e in v)
    if len(t) != 3:
        raise ValueError(f"{op}: {name} must be an int or a tuple of 3 ints, got {v!r}")
    return t


def _pads(padding, k, d, s, op):
    """Per-side padding ((front, back), (top, bottom), (left, right))."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * 3
        if padding != "same":
            raise ValueError(f"{op}: invalid padding string {padding!r}, should be one of "
                             f"['valid', 'same']")
        if any(v != 1 for v in s):
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions")
        tot = [d[i] * (k[i] - 1) for i in range(3)]
        return tuple((t // 2, t - t // 2) for t in tot)
    p = _triple(padding, "padding", op)
    if any(v < 0 for v in p):
        raise ValueError(f"{op}: padding must be non-negative, got {p}")
    return tuple((v, v) for v in p)


def _batched(input, weight, op, layout):
    """Check a 4-/5-D input and a 5-D weight; return (unbatched?, the 5-D input)."""
    if not isinstance(input, Tensor) or input.ndim not in (4, 5):
        raise ShapeError(f"{op}: expected a 4-D (unbatched) or 5-D input, got shape "
                         f"{tuple(getattr(input, 'shape', ()))}")
    if not isinstance(weight, Tensor) or weight.ndim != 5:
        raise ShapeError(f"{op}: expected a 5-D weight ({layout}, kD, kH, kW), got "
                         f"{tuple(getattr(weight, 'shape', ()))}")
    unb = input.ndim == 4
    return unb, input.unsqueeze(0) if unb else input


def _finish(out, bias, c_out, unb, op):
    """Add the (checked ``(c_out,)``) bias and drop the batch dim of an unbatched call."""
    if bias is not None:
        if tuple(bias.shape) != (c_out,):
            raise ShapeError(f"{op}: expected bias of shape ({c_out},), got "
                             f"{tuple(bias.shape)}")
        out = out + bias.reshape(-1, 1, 1, 1)
    return out.squeeze(0) if unb else out


@autocast_entry("conv3d")
def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """3-D convolution (cross-correlation) over ``(N, C, D, H, W)`` input (``F.conv3d``).

    Args:
        input: ``(N, C_in, D, H, W)`` or unbatched ``(C_in, D, H, W)``.
        weight: ``(C_out, C_in / groups, kD, kH, kW)``.
        bias: optional ``(C_out,)``.
        stride, padding, dilation: ints or 3-tuples; padding may be ``'same'`` or ``'valid'``.
        groups: number of channel groups.

    Returns:
        ``(N, C_out, D_out, H_out, W_out)`` with PyTorch's output sizes.
    """
    from . import conv2d, pad
    op = "conv3d"
    unb, x = _batched(input, weight, op, "out, in/groups")
    k = tuple(weight.shape[2:])
    s, d = _triple(stride, "stride", op), _triple(dilation, "dilation", op)
    pads = _pads(padding, k, d, s, op)
    if any(a != b for a, b in pads[1:]):                       # asymmetric 'same' in H or W
        x = pad(x, (pads[2][0], pads[2][1], pads[1][0], pads[1][1], 0, 0))
        hw_pad = (0, 0)
    else:
        hw_pad = (pads[1][0], pads[2][0])
    if pads[0] != (0, 0):
        x = pad(x, (0, 0, 0, 0) + pads[0])
    n, c, depth = x.shape[:3]
    d_out = (depth - d[0] * (k[0] - 1) - 1) // s[0] + 1
    if d_out < 1:
        raise ShapeError(f"{op}: input of shape {tuple(input.shape)} is too small for kernel "
                         f"{k} with dilation {d} and padding {padding}")
    out = None
    for j in range(k[0]):
        start = j * d[0]
        sl = x[:, :, start:start + (d_out - 1) * s[0] + 1:s[0]]
        sl = sl.permute(0, 2, 1, 3, 4).reshape(n * d_out, c, *x.shape[3:])
        y = conv2d(sl, weight[:, :, j], None, s[1:], hw_pad, d[1:], groups)
        out = y if out is None else out + y
    out = out.reshape(n, d_out, *out.shape[1:]).permute(0, 2, 1, 3, 4)
    return _finish(out, bias, weight.shape[0], unb, op)


@autocast_entry("conv_transpose3d")
def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 3-D convolution over ``(N, C, D, H, W)`` input (``F.conv_transpose3d``).

    Args:
        input: ``(N, C_in, D, H, W)`` or unbatched ``(C_in, D, H, W)``.
        weight: ``(C_in, C_out / groups, kD, kH, kW)``.
        bias: optional ``(C_out,)``.
        stride, padding, output_padding, dilation: ints or 3-tuples.
        groups: number of channel groups.

    Returns:
        ``(N, C_out, D_out, H_out, W_out)``, ``D_out = (D - 1) * stride - 2 * padding +
        dilation * (kD - 1) + output_padding + 1`` (likewise for H and W).
    """
    from . import conv_transpose2d
    from ...ops.factories import tensor, zeros
    op = "conv_transpose3d"
    unb, x = _batched(input, weight, op, "in, out/groups")
    s, d = _triple(stride, "stride", op), _triple(dilation, "dilation", op)
    p, op_ = _triple(padding, "padding", op), _triple(output_padding, "output_padding", op)
    if any(op_[i] >= max(s[i], d[i]) for i in range(3)):
        raise ValueError(f"{op}: output_padding {op_} must be smaller than stride {s} or "
                         f"dilation {d}")
    n, c, depth = x.shape[:3]
    k = weight.shape[2]
    full = (depth - 1) * s[0] + d[0] * (k - 1) + 1 + op_[0]
    d_out = full - 2 * p[0]
    if d_out < 1:
        raise ShapeError(f"{op}: the output depth would be {d_out} (input {tuple(input.shape)}, "
                         f"weight {tuple(weight.shape)}, stride {s}, padding {p})")
    flat = x.permute(0, 2, 1, 3, 4).reshape(n * depth, c, *x.shape[3:])
    out = None
    for j in range(k):
        y = conv_transpose2d(flat, weight[:, :, j], None, s[1:], p[1:], op_[1:], groups, d[1:])
        y = y.reshape(n, depth, *y.shape[1:])
        if out is None:
            out = zeros(n, full, *y.shape[2:], dtype=y.dtype, device=y.device)
        pos = tensor([i * s[0] + j * d[0] for i in range(depth)], device=y.device)
        out = out.index_add(1, pos, y)
    out = out[:, p[0]:p[0] + d_out].permute(0, 2, 1, 3, 4)
    return _finish(out, bias, out.shape[1], unb, op)
