"""The generalized Pareto distribution (``torch.distributions.GeneralizedPareto``): the
limit law of threshold exceedances, with location ``loc``, ``scale`` and shape
``concentration`` (xi); xi = 0 is the exponential, xi < 0 has a bounded support."""
from __future__ import annotations

import math

import ember

from . import constraints
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["GeneralizedPareto"]


class GeneralizedPareto(Distribution):
    """Generalized Pareto: ``F(x) = 1 - (1 + xi z)^(-1/xi)`` for ``z = (x - loc) / scale``
    (``1 - exp(-z)`` at xi = 0); samples by inverting F (reparameterised).

    Example:
        >>> d = GeneralizedPareto(ember.tensor([0.0]), ember.tensor([1.0]), ember.tensor([0.0]))
        >>> d.mean.tolist()
        [1.0]
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive,
                       "concentration": constraints.real}
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args=None):
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        super().__init__(self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(GeneralizedPareto, batch_shape, _instance,
                                   {"loc": (), "scale": (), "concentration": ()})

    def _xi(self):
        """xi with 0 replaced by 1 (for the unused branch of a where: no 0/0) and the mask."""
        zero = self.concentration == 0
        return ember.where(zero, 1.0, self.concentration), zero

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        xi = self.concentration
        upper = ember.where(xi < 0, self.loc - self.scale / xi.clamp(max=-1e-300), math.inf)
        return constraints.interval(self.loc, upper)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        u = ember.rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.icdf(u)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        xi, zero = self._xi()
        lp = ember.where(zero, -z, -(1 + 1 / xi) * (xi * z).log1p())
        return lp - self.scale.log()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = ((value - self.loc) / self.scale).clamp(min=0)
        xi, zero = self._xi()
        log_sf = ember.where(zero, -z, -(xi * z).log1p() / xi)
        return -log_sf.expm1()

    def icdf(self, value):
        log_sf = (-value).log1p()                       # log(1 - u)
        xi, zero = self._xi()
        z = ember.where(zero, -log_sf, (-xi * log_sf).expm1() / xi)
        return self.loc + self.scale * z

    @property
    def mean(self):
        xi = self.concentration
        return ember.where(xi < 1, self.loc + self.scale / (1 - xi).clamp(min=1e-300),
                           math.inf)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        xi = self.concentration
        v = self.scale.square() / ((1 - xi).square() * (1 - 2 * xi).clamp(min=1e-300))
        return ember.where(xi < 0.5, v, math.inf)

    def entropy(self):
        return self.scale.log() + self.concentration + 1
