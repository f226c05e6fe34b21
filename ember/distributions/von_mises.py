"""The von Mises (circular normal) distribution (``torch.distributions.VonMises``)."""
from __future__ import annotations

import math

import ember
from ember.ops.random_dists import _sample_von_mises

from . import constraints
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["VonMises"]


def _log_i0(k):
    return ember.special.i0e(k).log() + k      # NOTE: i0e = exp(-k) I0(k): no overflow


class VonMises(Distribution):
    """Angles on [-pi, pi) with density ``exp(kappa cos(x - loc)) / (2 pi I0(kappa))``.

    ``variance`` is the circular variance ``1 - I1(kappa) / I0(kappa)``, as PyTorch's.

    Example:
        >>> round(float(VonMises(0.0, 1.0).log_prob(ember.tensor(0.0))), 4)
        -1.0738
    """

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.interval(-math.pi, math.pi)
    has_rsample = False

    def __init__(self, loc, concentration, validate_args=None):
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(VonMises, batch_shape, _instance,
                                   {"loc": (), "concentration": ()})

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (self.concentration * (value - self.loc).cos() - math.log(2 * math.pi)
                - _log_i0(self.concentration))

    def sample(self, sample_shape=()):
        return _sample_von_mises(self.loc, self.concentration, sample_shape)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        k = self.concentration
        return 1 - ember.special.i1e(k) / ember.special.i0e(k)
