"""``PairwiseDistance`` and ``CosineSimilarity`` (``torch.nn.modules.distance``)."""
from __future__ import annotations

from ..module import Module

__all__ = ['PairwiseDistance', 'CosineSimilarity']


class PairwiseDistance(Module):
    """``||x1 - x2 + eps||_p`` along the last dim.

    Example:
        >>> ember.nn.PairwiseDistance()(ember.ones(2, 3), ember.zeros(2, 3)).shape
        ember.Size([2])
    """

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        from ..functional import pairwise_distance
        return pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CosineSimilarity(Module):
    """Cosine similarity of ``x1`` and ``x2`` along ``dim``.

    Example:
        >>> ember.nn.CosineSimilarity(dim=1)(ember.ones(2, 3), ember.ones(2, 3))
        tensor([1., 1.])
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        from ..functional import cosine_similarity
        return cosine_similarity(x1, x2, self.dim, self.eps)
