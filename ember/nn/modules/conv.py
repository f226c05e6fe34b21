"""Convolution modules: Conv1d/2d/3d, ConvTranspose1d/2d/3d (PyTorch's surface)."""
from __future__ import annotations

from .. import functional as F
from ..module import Module
from ..parameter import Parameter
from .linear import _empty, default_init_

__all__ = ['Conv1d', 'Conv2d', 'Conv3d', 'ConvTranspose1d', 'ConvTranspose2d',
           'ConvTranspose3d']

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ntuple(v, n):
    return tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v),) * n


class _ConvNd(Module):
    """Shared state, init and repr of the convolution modules."""

    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 transposed, output_padding, groups, bias, padding_mode, device=None,
                 dtype=None):
        super().__init__()
        name, n = type(self).__name__, self._nd
        if groups <= 0:
            raise ValueError(f"{name}: groups must be a positive integer, got {groups}")
        if in_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) must be divisible by groups "
                             f"({groups})")
        if out_channels % groups:
            raise ValueError(f"{name}: out_channels ({out_channels}) must be divisible by "
                             f"groups ({groups})")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{name}: padding_mode must be one of {_PADDING_MODES}, got "
                             f"{padding_mode!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _ntuple(kernel_size, n)
        self.stride, self.dilation = _ntuple(stride, n), _ntuple(dilation, n)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"{name}: invalid padding string {padding!r}, should be one of "
                                 f"['valid', 'same']")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _ntuple(padding, n)
        self.transposed, self.output_padding = transposed, _ntuple(output_padding, n)
        self.groups, self.padding_mode = groups, padding_mode
        self._reversed_padding_repeated_twice = self._side_pads()
        shape = ((in_channels, out_channels // groups) if transposed else
                 (out_channels, in_channels // groups)) + self.kernel_size
        self.weight = Parameter(_empty(*shape, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _side_pads(self):
        """F.pad-style (last dim first) per-side padding for the non-'zeros' modes."""
        out = []
        for i in reversed(range(self._nd)):
            if self.padding == "valid":
                out += [0, 0]
            elif self.padding == "same":
                total = self.dilation[i] * (self.kernel_size[i] - 1)
                out += [total // 2, total - total // 2]
            else:
                out += [self.padding[i], self.padding[i]]
        return tuple(out)

    def reset_parameters(self) -> None:
        default_init_(self.weight, self.bias)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, " \
            f"stride={self.stride}"
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    _conv = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         False, 0, groups, bias, padding_mode, device, dtype)

    def _conv_forward(self, input, weight, bias):
        conv = type(self)._conv
        if self.padding_mode != "zeros":
            x = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(x, weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_Conv):
    """1-D convolution over (N, C, L) input.

    Example:
        >>> ember.nn.Conv1d(2, 4, 3, padding=1)(ember.ones(1, 2, 5)).shape
        ember.Size([1, 4, 5])
    """
    _nd = 1
    _conv = staticmethod(F.conv1d)


class Conv2d(_Conv):
    """2-D convolution over (N, C, H, W) input.

    Example:
        >>> ember.nn.Conv2d(3, 8, 3, padding="same")(ember.ones(1, 3, 5, 5)).shape
        ember.Size([1, 8, 5, 5])
    """
    _nd = 2
    _conv = staticmethod(F.conv2d)


class Conv3d(_Conv):
    """3-D convolution over (N, C, D, H, W) input.

    Example:
        >>> ember.nn.Conv3d(2, 4, 3, padding=1)(ember.ones(1, 2, 4, 5, 5)).shape
        ember.Size([1, 4, 4, 5, 5])
    """
    _nd = 3
    _conv = staticmethod(F.conv3d)


class _ConvTranspose(_ConvNd):
    _conv = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f'{type(self).__name__}')
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: string padding is not supported")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         True, output_padding, groups, bias, padding_mode, device, dtype)

    def _output_padding(self, input, output_size):
        """PyTorch's rule: the output_padding that makes the output ``output_size``."""
        if output_size is None:
            return self.output_padding
        n = self._nd
        lead = input.ndim - n
        size = list(output_size)
        if len(size) == lead + n:
            size = size[lead:]
        if len(size) != n:
            raise ValueError(f"{type(self).__name__}: output_size must have {n} or {lead + n} "
                             f"elements (got {len(size)})")
        res = []
        for d in range(n):
            lo = (input.shape[lead + d] - 1) * self.stride[d] - 2 * self.padding[d] + \
                self.dilation[d] * (self.kernel_size[d] - 1) + 1
            hi = lo + self.stride[d] - 1
            if not lo <= size[d] <= hi:
                raise ValueError(f"{type(self).__name__}: requested an output size of "
                                 f"{tuple(size)}, but valid sizes range from {lo} to {hi} "
                                 f"along spatial dim {d} (for an input of "
                                 f"{tuple(input.shape)})")
            res.append(size[d] - lo)
        return tuple(res)

    def forward(self, input, output_size=None):
        op = self._output_padding(input, output_size)
        return type(self)._conv(input, self.weight, self.bias, self.stride, self.padding, op,
                                self.groups, self.dilation)


class ConvTranspose1d(_ConvTranspose):
    """Transposed 1-D convolution; weight (in, out / groups, k)."""
    _nd = 1
    _conv = staticmethod(F.conv_transpose1d)


class ConvTranspose2d(_ConvTranspose):
    """Transposed 2-D convolution; weight (in, out / groups, kh, kw).

    Example:
        >>> ember.nn.ConvTranspose2d(4, 2, 2, stride=2)(ember.ones(1, 4, 3, 3)).shape
        ember.Size([1, 2, 6, 6])
    """
    _nd = 2
    _conv = staticmethod(F.conv_transpose2d)


class ConvTranspose3d(_ConvTranspose):
    """Transposed 3-D convolution; weight (in, out / groups, kd, kh, kw)."""
    _nd = 3
    _conv = staticmethod(F.conv_transpose3d)
