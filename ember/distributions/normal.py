"""The normal distribution (``torch.distributions.Normal``)."""
from __future__ import annotations

import math
import numbers

import ember
from ember.tensor import Size

from . import constraints
from .exp_family import ExponentialFamily
from .utils import _standard_normal, broadcast_all

__all__ = ["Normal"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _log(x):
    return math.log(x) if isinstance(x, numbers.Real) else x.log()


class Normal(ExponentialFamily):
    """Normal distribution with mean ``loc`` and standard deviation ``scale``.

    Example:
        >>> d = Normal(ember.tensor([0.0]), ember.tensor([1.0]))
        >>> round(float(d.log_prob(ember.tensor([0.0]))), 4)
        -0.9189
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        both_numbers = isinstance(loc, numbers.Number) and isinstance(scale, numbers.Number)
        super().__init__(Size() if both_numbers else self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Normal, batch_shape, _instance, {"loc": (), "scale": ()})

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale.square()

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(shape, self.loc.dtype, self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale.square()
        return -(value - self.loc).square() / (2 * var) - _log(self.scale) - _LOG_SQRT_2PI

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + ember.erf((value - self.loc) / (self.scale * math.sqrt(2))))

    def icdf(self, value):
        return self.loc + self.scale * ember.erfinv(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + _LOG_SQRT_2PI + self.scale.log()

    @property
    def _natural_params(self):
        return (self.loc / self.scale.square(), -0.5 * self.scale.square().reciprocal())

    def _log_normalizer(self, x, y):
        return -0.25 * x.square() / y + 0.5 * (-math.pi / y).log()
