"""Location-scale families with closed-form quantiles: ``Laplace``, ``Cauchy``, ``Gumbel``;
and ``StudentT`` (``torch.distributions``)."""
from __future__ import annotations

import math
import numbers

import ember
from ember.tensor import Size

from . import constraints
from .distribution import Distribution
from .gamma import Chi2
from .utils import _standard_normal, broadcast_all, euler_constant

__all__ = ["Cauchy", "Gumbel", "Laplace", "StudentT"]


class _LocScale(Distribution):
    """``loc``/``scale`` parameters broadcast together; real support."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        both = isinstance(loc, numbers.Number) and isinstance(scale, numbers.Number)
        super().__init__(Size() if both else self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(type(self), batch_shape, _instance, {"loc": (), "scale": ()})

    def _uniform(self, sample_shape, low=0.0):
        shape = tuple(self._extended_shape(sample_shape))
        u = ember.rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        return u if low == 0.0 else low + u * (1.0 - low)

    @property
    def mode(self):
        return self.loc

    def _z(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (value - self.loc) / self.scale


class Laplace(_LocScale):
    """Laplace (double exponential) with ``loc`` and ``scale``.

    Example:
        >>> Laplace(0.0, 1.0).variance.item()
        2.0
    """

    @property
    def mean(self):
        return self.loc

    @property
    def variance(self):
        return 2 * self.scale.square()

    @property
    def stddev(self):
        return math.sqrt(2) * self.scale

    def rsample(self, sample_shape=()):
        # NOTE: u in [eps - 1, 1): log1p(-|u|) stays finite (PyTorch's range).
        eps = ember.finfo(self.loc.dtype).eps
        u = 2 * self._uniform(sample_shape) - 1
        u = u.clamp(min=eps - 1)
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value):
        return -(2 * self.scale).log() - self._z(value).abs()

    def cdf(self, value):
        z = self._z(value)
        return 0.5 - 0.5 * z.sign() * (-z.abs()).expm1()

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * term.sign() * (-2 * term.abs()).log1p()

    def entropy(self):
        return 1 + (2 * self.scale).log()


class Cauchy(_LocScale):
    """Cauchy (Lorentz) with median ``loc`` and half-width ``scale``.

    Example:
        >>> Cauchy(0.0, 1.0).cdf(ember.tensor(1.0)).item()
        0.75
    """

    @property
    def mean(self):
        return ember.full(tuple(self._extended_shape()), float("nan"), dtype=self.loc.dtype)

    @property
    def variance(self):
        return ember.full(tuple(self._extended_shape()), float("inf"), dtype=self.loc.dtype)

    def rsample(self, sample_shape=()):
        u = self._uniform(sample_shape)
        return self.loc + self.scale * (math.pi * (u - 0.5)).tan()

    def log_prob(self, value):
        return -math.log(math.pi) - self.scale.log() - self._z(value).square().log1p()

    def cdf(self, value):
        return ember.atan(self._z(value)) / math.pi + 0.5

    def icdf(self, value):
        return (math.pi * (value - 0.5)).tan() * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()


class Gumbel(_LocScale):
    """Gumbel (type-I extreme value) with ``loc`` and ``scale``.

    Example:
        >>> round(Gumbel(0.0, 1.0).mean.item(), 4)
        0.5772
    """

    @property
    def mean(self):
        return self.loc + self.scale * euler_constant

    @property
    def stddev(self):
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self):
        return self.stddev.square()

    def rsample(self, sample_shape=()):
        fi = ember.finfo(self.loc.dtype)
        u = self._uniform(sample_shape).clamp(min=fi.tiny, max=1 - fi.eps)
        return self.loc - self.scale * (-u.log()).log()

    def log_prob(self, value):
        z = self._z(value)
        return -(z + (-z).exp()) - self.scale.log()

    def cdf(self, value):
        return (-(-self._z(value)).exp()).exp()

    def icdf(self, value):
        return self.loc - self.scale * (-value.log()).log()

    def entropy(self):
        return self.scale.log() + (1 + euler_constant)


class StudentT(Distribution):
    """Student's t with ``df`` degrees of freedom, location ``loc`` and scale ``scale``.

    Example:
        >>> StudentT(ember.tensor([3.0])).variance.tolist()
        [3.0]
    """

    arg_constraints = {"df": constraints.positive, "loc": constraints.real,
                       "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)
        super().__init__(self.df.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(StudentT, batch_shape, _instance,
                                  {"df": (), "loc": (), "scale": ()})
        new._chi2 = self._chi2.expand(batch_shape)
        return new

    @property
    def mean(self):
        return ember.where(self.df <= 1, float("nan"), self.loc)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        v = self.scale.square() * self.df / (self.df - 2)
        v = ember.where(self.df <= 2, float("inf"), v)
        return ember.where(self.df <= 1, float("nan"), v)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        x = _standard_normal(shape, self.df.dtype, self.df.device)
        z = self._chi2.rsample(sample_shape)
        y = x * (self.df / z).sqrt()
        return self.loc + self.scale * y

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        z = (self.scale.log() + 0.5 * self.df.log() + 0.5 * math.log(math.pi)
             + ember.lgamma(0.5 * self.df) - ember.lgamma(0.5 * (self.df + 1.0)))
        return -0.5 * (self.df + 1.0) * (y.square() / self.df).log1p() - z

    def entropy(self):
        lbeta = (ember.lgamma(0.5 * self.df) + math.lgamma(0.5)
                 - ember.lgamma(0.5 * (self.df + 1)))
        return (self.scale.log() + 0.5 * (self.df + 1) * (
            ember.digamma(0.5 * (self.df + 1)) - ember.digamma(0.5 * self.df))
            + 0.5 * self.df.log() + lbeta)
