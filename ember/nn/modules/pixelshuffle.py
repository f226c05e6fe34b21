"""``PixelShuffle`` and ``PixelUnshuffle`` (``torch.nn.modules.pixelshuffle``)."""
from __future__ import annotations

from ..module import Module

__all__ = ['PixelShuffle', 'PixelUnshuffle']


class PixelShuffle(Module):
    """(*, C·r², H, W) -> (*, C, H·r, W·r).

    Example:
        >>> ember.nn.PixelShuffle(2)(ember.ones(1, 8, 2, 3)).shape
        ember.Size([1, 2, 4, 6])
    """

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        from ..functional import pixel_shuffle
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H·r, W·r) -> (*, C·r², H, W), the inverse of :class:`PixelShuffle`.

    Example:
        >>> ember.nn.PixelUnshuffle(2)(ember.ones(1, 2, 4, 6)).shape
        ember.Size([1, 8, 2, 3])
    """

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        from ..functional import pixel_unshuffle
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"
