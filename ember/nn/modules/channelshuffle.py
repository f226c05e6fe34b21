"""``ChannelShuffle`` (``torch.nn.modules.channelshuffle``)."""
from __future__ import annotations

from ..module import Module

__all__ = ['ChannelShuffle']


class ChannelShuffle(Module):
    """Split the channels of ``(N, C, *)`` input into ``groups`` and interleave them.

    Example:
        >>> ember.nn.ChannelShuffle(2)(ember.arange(4.).reshape(1, 4, 1)).flatten()
        tensor([0., 2., 1., 3.])
    """

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        from ..functional import channel_shuffle
        return channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
