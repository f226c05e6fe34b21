"""``Fold`` and ``Unfold`` (col2im / im2col, ``torch.nn.modules.fold``)."""
from __future__ import annotations

from ..module import Module

__all__ = ['Fold', 'Unfold']


class Fold(Module):
    """Sum sliding-block columns (N, C·kh·kw, L) back into an image (N, C, H, W).

    Example:
        >>> ember.nn.Fold(output_size=(4, 5), kernel_size=2)(ember.ones(1, 12, 12)).shape
        ember.Size([1, 3, 4, 5])
    """

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        from ..functional import fold
        return fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                    self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")


class Unfold(Module):
    """Extract sliding blocks of (N, C, H, W) input as columns (N, C·kh·kw, L).

    Example:
        >>> ember.nn.Unfold(kernel_size=3)(ember.ones(1, 2, 4, 4)).shape
        ember.Size([1, 18, 4])
    """

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input):
        from ..functional import unfold
        return unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")
