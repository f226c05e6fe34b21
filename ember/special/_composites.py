"""``torch.special`` functions that are composites of Ember ops (no rules of their own)."""
from __future__ import annotations

from ..ops.inplace import copy_into_out
from ..ops.special_gamma import mvlgamma


def _out(r, out):
    return r if out is None else copy_into_out(out, r)


def multigammaln(input, p, *, out=None):
    """Multivariate log-gamma of dimension ``p`` (``torch.special.multigammaln``, which is
    ``torch.mvlgamma``).

    Example:
        >>> ember.special.multigammaln(ember.tensor([2.5]), 2)
        tensor([0.8570])
    """
    return _out(mvlgamma(input, p), out)
