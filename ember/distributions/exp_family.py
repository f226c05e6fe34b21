"""``ExponentialFamily``: the base PyTorch's exponential-family distributions derive from
(a marker here: Ember's families give closed-form entropies and KLs)."""
from __future__ import annotations

from .distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    """Distributions of the form ``p(x) = h(x) exp(<t(x), theta> - F(theta))``."""
