"""Pooling modules: max, average, adaptive and power-average pooling, max unpooling
(PyTorch's surface)."""
from __future__ import annotations

from .. import functional as F
from ..module import Module

__all__ = ['MaxPool1d', 'MaxPool2d', 'AvgPool1d', 'AvgPool2d', 'AdaptiveAvgPool1d',
           'AdaptiveAvgPool2d', 'AdaptiveMaxPool1d', 'AdaptiveMaxPool2d', 'MaxUnpool1d',
           'MaxUnpool2d', 'MaxUnpool3d', 'LPPool1d', 'LPPool2d', 'LPPool3d', 'MaxPool3d',
           'AvgPool3d', 'AdaptiveAvgPool3d', 'AdaptiveMaxPool3d']


class _MaxPoolNd(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding, self.dilation,
                              ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, " \
               f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"


class MaxPool1d(_MaxPoolNd):
    """Max over sliding windows of (N, C, L) input."""
    _fn = staticmethod(F.max_pool1d)


class MaxPool2d(_MaxPoolNd):
    """Max over sliding windows of (N, C, H, W) input.

    Example:
        >>> ember.nn.MaxPool2d(2)(ember.ones(1, 1, 4, 4)).shape
        ember.Size([1, 1, 2, 2])
    """
    _fn = staticmethod(F.max_pool2d)


class AvgPool1d(Module):
    """Mean over sliding windows of (N, C, L) input."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        one = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,)  # noqa: E731
        self.kernel_size = one(kernel_size)
        self.stride = one(stride if stride is not None else kernel_size)
        self.padding = one(padding)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """Mean over sliding windows of (N, C, H, W) input.

    Example:
        >>> ember.nn.AvgPool2d(2)(ember.ones(1, 1, 4, 4)).shape
        ember.Size([1, 1, 2, 2])
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _Adaptive(Module):
    _fn = None

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return type(self)._fn(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_Adaptive):
    """Average pooling to a fixed output length."""
    _fn = staticmethod(F.adaptive_avg_pool1d)


class AdaptiveAvgPool2d(_Adaptive):
    """Average pooling to a fixed output size (``None`` keeps that dim).

    Example:
        >>> ember.nn.AdaptiveAvgPool2d(1)(ember.ones(2, 3, 5, 5)).shape
        ember.Size([2, 3, 1, 1])
    """
    _fn = staticmethod(F.adaptive_avg_pool2d)


class _AdaptiveMax(_Adaptive):
    def __init__(self, output_size, return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        return type(self)._fn(input, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMax):
    """Max pooling to a fixed output length."""
    _fn = staticmethod(F.adaptive_max_pool1d)


class AdaptiveMaxPool2d(_AdaptiveMax):
    """Max pooling to a fixed output size."""
    _fn = staticmethod(F.adaptive_max_pool2d)


class _MaxUnpoolNd(Module):
    _nd = 0

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        nd = type(self)._nd
        tup = lambda v: (v,) * nd if isinstance(v, int) else tuple(v)  # noqa: E731
        self.kernel_size = tup(kernel_size)
        self.stride = tup(stride if stride is not None else kernel_size)
        self.padding = tup(padding)

    def forward(self, input, indices, output_size=None):
        fn = getattr(F, f"max_unpool{type(self)._nd}d")
        return fn(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """Partial inverse of ``MaxPool1d``: ``forward(input, indices, output_size=None)``."""
    _nd = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """Partial inverse of ``MaxPool2d``: values go back to their indices, zeros elsewhere.

    Example:
        >>> pool, unpool = ember.nn.MaxPool2d(2, return_indices=True), ember.nn.MaxUnpool2d(2)
        >>> unpool(*pool(ember.ones(1, 1, 4, 4))).shape
        ember.Size([1, 1, 4, 4])
    """
    _nd = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """Partial inverse of a 3-D max pooling: ``forward(input, indices, output_size=None)``."""
    _nd = 3


class _LPPoolNd(Module):
    _fn = None

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, float(self.norm_type), self.kernel_size, self.stride,
                              self.ceil_mode)

    def extra_repr(self) -> str:
        return f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, " \
               f"stride={self.stride}, ceil_mode={self.ceil_mode}"


class LPPool1d(_LPPoolNd):
    """Power-average pooling ``(sum x ** p) ** (1 / p)`` over windows of (N, C, L) input."""
    _fn = staticmethod(F.lp_pool1d)


class LPPool2d(_LPPoolNd):
    """Power-average pooling over windows of (N, C, H, W) input (see ``LPPool1d``)."""
    _fn = staticmethod(F.lp_pool2d)


class LPPool3d(_LPPoolNd):
    """Power-average pooling over windows of (N, C, D, H, W) input (see ``LPPool1d``)."""
    _fn = staticmethod(F.lp_pool3d)


class MaxPool3d(_MaxPoolNd):
    """Max over sliding windows of (N, C, D, H, W) input (``return_indices`` unsupported)."""
    _fn = staticmethod(F.max_pool3d)


class AvgPool3d(AvgPool2d):
    """Mean over sliding windows of (N, C, D, H, W) input.

    Example:
        >>> ember.nn.AvgPool3d(2)(ember.ones(1, 1, 4, 4, 4)).shape
        ember.Size([1, 1, 2, 2, 2])
    """

    def forward(self, input):
        return F.avg_pool3d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class AdaptiveAvgPool3d(_Adaptive):
    """Average pooling of (N, C, D, H, W) input to a fixed output size (``None`` keeps a dim)."""
    _fn = staticmethod(F.adaptive_avg_pool3d)


class AdaptiveMaxPool3d(_AdaptiveMax):
    """Max pooling of (N, C, D, H, W) input to a fixed output size."""
    _fn = staticmethod(F.adaptive_max_pool3d)
