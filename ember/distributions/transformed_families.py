"""Families PyTorch defines by transforming a simpler one: ``Pareto``, ``Weibull``,
``InverseGamma`` and ``LogisticNormal`` (``torch.distributions``)."""
from __future__ import annotations

import math

import ember

from . import constraints
from .gamma import Exponential, Gamma
from .normal import Normal
from .transformed_distribution import TransformedDistribution
from .transforms import AffineTransform, ExpTransform, PowerTransform, StickBreakingTransform
from .utils import broadcast_all, euler_constant

__all__ = ["InverseGamma", "LogisticNormal", "Pareto", "Weibull"]


def _where_gt(x, bound, value, fill):
    return ember.where(x > bound, value, fill)


class _Transformed(TransformedDistribution):
    def expand(self, batch_shape, _instance=None):
        return super().expand(batch_shape, self._get_checked_instance(type(self), _instance))


class Pareto(_Transformed):
    """Pareto type I with minimum ``scale`` and tail index ``alpha``.

    Example:
        >>> Pareto(ember.tensor([1.0]), ember.tensor([3.0])).mean.tolist()
        [1.5]
    """

    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}

    def __init__(self, scale, alpha, validate_args=None):
        self.scale, self.alpha = broadcast_all(scale, alpha)
        super().__init__(Exponential(self.alpha, validate_args=validate_args),
                         [ExpTransform(), AffineTransform(loc=0, scale=self.scale)],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = super().expand(batch_shape, _instance)
        new.scale = self.scale.expand(tuple(batch_shape))
        new.alpha = self.alpha.expand(tuple(batch_shape))
        new.transforms = [ExpTransform(), AffineTransform(loc=0, scale=new.scale)]
        return new

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.greater_than_eq(self.scale)

    @property
    def mean(self):
        a = self.alpha.clamp(min=1)
        return _where_gt(self.alpha, 1, a * self.scale / (a - 1), math.inf)

    @property
    def mode(self):
        return self.scale

    @property
    def variance(self):
        a = self.alpha.clamp(min=2)
        v = self.scale.square() * a / ((a - 1).square() * (a - 2))
        return _where_gt(self.alpha, 2, v, math.inf)

    def entropy(self):
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())


class Weibull(_Transformed):
    """Weibull with ``scale`` and shape ``concentration``.

    Example:
        >>> Weibull(ember.tensor([2.0]), ember.tensor([1.0])).mean.tolist()
        [2.0]
    """

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive

    def __init__(self, scale, concentration, validate_args=None):
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        base = Exponential(ember.ones_like(self.scale), validate_args=validate_args)
        super().__init__(base, [PowerTransform(self.concentration_reciprocal),
                                AffineTransform(0, self.scale)], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = super().expand(batch_shape, _instance)
        new.scale = self.scale.expand(tuple(batch_shape))
        new.concentration = self.concentration.expand(tuple(batch_shape))
        new.concentration_reciprocal = new.concentration.reciprocal()
        new.transforms = [PowerTransform(new.concentration_reciprocal),
                          AffineTransform(0, new.scale)]
        return new

    @property
    def mean(self):
        return self.scale * ember.lgamma(1 + self.concentration_reciprocal).exp()

    @property
    def mode(self):
        k = self.concentration
        return self.scale * ((k - 1) / k) ** k.reciprocal()

    @property
    def variance(self):
        r = self.concentration_reciprocal
        return self.scale.square() * (ember.lgamma(1 + 2 * r).exp()
                                      - ember.lgamma(1 + r).exp().square())

    def entropy(self):
        return (euler_constant * (1 - self.concentration_reciprocal)
                + (self.scale * self.concentration_reciprocal).log() + 1)


class InverseGamma(_Transformed):
    """``1 / X`` for ``X ~ Gamma(concentration, rate)``.

    Example:
        >>> InverseGamma(ember.tensor([3.0]), ember.tensor([4.0])).mean.tolist()
        [2.0]
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        base = Gamma(concentration, rate, validate_args=validate_args)
        super().__init__(base, PowerTransform(-1.0), validate_args=validate_args)

    @property
    def concentration(self):
        return self.base_dist.concentration

    @property
    def rate(self):
        return self.base_dist.rate

    @property
    def mean(self):
        c = self.concentration
        return _where_gt(c, 1, self.rate / (c - 1), math.inf)

    @property
    def mode(self):
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        c = self.concentration
        return _where_gt(c, 2, self.rate.square() / ((c - 1).square() * (c - 2)), math.inf)

    def entropy(self):
        c = self.concentration
        return c + self.rate.log() + ember.lgamma(c) - (1 + c) * ember.digamma(c)


class LogisticNormal(_Transformed):
    """The simplex-valued ``StickBreakingTransform(X)`` for ``X ~ Normal(loc, scale)``
    (event size one more than ``loc``'s last dim).

    Example:
        >>> LogisticNormal(ember.zeros(2), ember.ones(2)).sample().shape
        ember.Size([3])
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        base = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:
            base = base.expand((1,))
        super().__init__(base, StickBreakingTransform(), validate_args=validate_args)

    @property
    def loc(self):
        return self.base_dist.base_dist.loc

    @property
    def scale(self):
        return self.base_dist.base_dist.scale
