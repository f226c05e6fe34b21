"""``conv3d`` as a composite of ``conv2d``: the depth taps of the kernel are summed, each one
a 2-D convolution of the matching (strided, dilated) depth slices folded into the batch."""
from __future__ import annotations

from ...errors import ShapeError
from ...tensor import Tensor

__all__ = ['conv3d']


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
    if not isinstance(input, Tensor) or input.ndim not in (4, 5):
        raise ShapeError(f"{op}: expected a 4-D (unbatched) or 5-D input, got shape "
                         f"{tuple(getattr(input, 'shape', ()))}")
    if not isinstance(weight, Tensor) or weight.ndim != 5:
        raise ShapeError(f"{op}: expected a 5-D weight (out, in/groups, kD, kH, kW), got "
                         f"{tuple(getattr(weight, 'shape', ()))}")
    unb = input.ndim == 4
    x = input.unsqueeze(0) if unb else input
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
    if bias is not None:
        if tuple(bias.shape) != (weight.shape[0],):
            raise ShapeError(f"{op}: expected bias of shape ({weight.shape[0]},), got "
                             f"{tuple(bias.shape)}")
        out = out + bias.reshape(-1, 1, 1, 1)
    return out.squeeze(0) if unb else out
