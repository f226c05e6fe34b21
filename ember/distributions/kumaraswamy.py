"""The Kumaraswamy distribution (``torch.distributions.Kumaraswamy``): a Beta look-alike on
[0, 1] with closed-form CDF ``1 - (1 - x^a)^b``, so its samples are reparameterised through a
uniform."""
from __future__ import annotations

import math

import ember

from . import constraints
from .transformed_distribution import TransformedDistribution
from .transforms import AffineTransform, PowerTransform
from .uniform import Uniform
from .utils import broadcast_all, euler_constant

__all__ = ["Kumaraswamy"]


def _moments(a, b, n):
    """E[X^n] = b B(1 + n/a, b)."""
    arg1 = 1 + n / a
    return b * (ember.lgamma(arg1) + ember.lgamma(b) - ember.lgamma(arg1 + b)).exp()


class Kumaraswamy(TransformedDistribution):
    """Kumaraswamy with ``concentration1`` (a) and ``concentration0`` (b): density
    ``a b x^(a-1) (1 - x^a)^(b-1)`` on [0, 1].

    Example:
        >>> Kumaraswamy(ember.tensor([1.0]), ember.tensor([1.0])).mean.tolist()
        [0.5]
    """

    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base = Uniform(ember.zeros_like(self.concentration0),
                       ember.ones_like(self.concentration0), validate_args=validate_args)
        # NOTE: x = (1 - u^(1/b))^(1/a) for u ~ U(0, 1)
        transforms = [PowerTransform(self.concentration0.reciprocal()),
                      AffineTransform(loc=1.0, scale=-1.0),
                      PowerTransform(self.concentration1.reciprocal())]
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Kumaraswamy, _instance)
        shape = tuple(batch_shape)
        Kumaraswamy.__init__(new, self.concentration1.expand(shape),
                             self.concentration0.expand(shape), validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return _moments(self.concentration1, self.concentration0, 1)

    @property
    def mode(self):
        """The density's maximiser ``((a - 1) / (a b - 1))^(1/a)`` (NaN where a < 1 or b < 1).
        PyTorch's returns NaN wherever b > 1 (its formula takes ``log1p(-b)``)."""
        a, b = self.concentration1, self.concentration0
        mode = ((a - 1) / (a * b - 1)).pow(a.reciprocal())
        return ember.where((a < 1) | (b < 1), math.nan, mode)

    @property
    def variance(self):
        a, b = self.concentration1, self.concentration0
        return _moments(a, b, 2) - _moments(a, b, 1).square()

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        h_b = ember.digamma(b + 1) + euler_constant      # harmonic number H_b
        return (1 - b.reciprocal()) + (1 - a.reciprocal()) * h_b - a.log() - b.log()
