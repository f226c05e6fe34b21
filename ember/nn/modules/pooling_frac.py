"""``FractionalMaxPool2d`` / ``FractionalMaxPool3d`` (``torch.nn.modules.pooling``'s)."""
from __future__ import annotations

from .. import functional as F
from ..module import Module

__all__ = ["FractionalMaxPool2d", "FractionalMaxPool3d"]


def _ntuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _FractionalMaxPoolNd(Module):
    _nd = 2

    def __init__(self, kernel_size, output_size=None, output_ratio=None,
                 return_indices: bool = False, _random_samples=None):
        super().__init__()
        nd, name = self._nd, type(self).__name__
        self.kernel_size = _ntuple(kernel_size, nd)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _ntuple(output_size, nd) if output_size is not None else None
        self.output_ratio = _ntuple(output_ratio, nd) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling "
                             f"ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):
        fn = F.fractional_max_pool2d if self._nd == 2 else F.fractional_max_pool3d
        return fn(input, self.kernel_size, self.output_size, self.output_ratio,
                  self.return_indices, _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """2-D fractional max pooling; the windows are drawn anew each call unless
    ``_random_samples`` (``(N, C, 2)`` in [0, 1)) is given. See
    :func:`ember.nn.functional.fractional_max_pool2d`.

    Example:
        >>> pool = ember.nn.FractionalMaxPool2d(3, output_ratio=(0.5, 0.5))
        >>> pool(ember.randn(2, 4, 10, 10)).shape
        ember.Size([2, 4, 5, 5])
    """
    _nd = 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """3-D fractional max pooling over ``(N, C, T, H, W)`` input (samples ``(N, C, 3)``)."""
    _nd = 3
