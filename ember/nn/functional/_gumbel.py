"""``gumbel_softmax``: samples from the Gumbel-softmax (Concrete) distribution
(``torch.nn.functional.gumbel_softmax``), a composite of Ember ops."""
from __future__ import annotations

from ...ops.factories import empty_like, zeros_like
from ...ops.softmax import softmax

__all__ = ["gumbel_softmax"]


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """``softmax((logits + g) / tau)`` with ``g`` standard Gumbel noise drawn from the global
    generator; ``hard=True`` returns the one-hot of the argmax in the forward pass with the
    soft sample's gradient (straight-through), as PyTorch. ``eps`` is unused (deprecated in
    PyTorch too).

    Example:
        >>> y = F.gumbel_softmax(ember.zeros(2, 5), tau=0.5, hard=True)
        >>> y.sum(-1).tolist()
        [1.0, 1.0]
    """
    gumbels = -empty_like(logits).exponential_().log()
    y_soft = softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    index = y_soft.argmax(dim, keepdim=True)
    y_hard = zeros_like(logits).scatter_(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft
