"""Gamma, chi-squared and exponential distributions (``torch.distributions.Gamma``, ``Chi2``,
``Exponential``). Gamma's ``rsample`` is differentiable in ``concentration`` by implicit
reparameterisation (``ember._standard_gamma``) and in ``rate`` by the scaling."""
from __future__ import annotations

import numbers

import ember
from ember.tensor import Size

from . import constraints
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .utils import broadcast_all

__all__ = ["Chi2", "Exponential", "FisherSnedecor", "Gamma"]


class Gamma(ExponentialFamily):
    """Gamma with shape ``concentration`` and inverse scale ``rate``.

    Example:
        >>> Gamma(ember.tensor([2.0]), ember.tensor([4.0])).mean.tolist()
        [0.5]
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        both = isinstance(concentration, numbers.Number) and isinstance(rate, numbers.Number)
        super().__init__(Size() if both else self.concentration.shape,
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Gamma, batch_shape, _instance,
                                   {"concentration": (), "rate": ()})

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.square()

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        return ember._standard_gamma(self.concentration.expand(shape)) / self.rate.expand(shape)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value if isinstance(value, ember.Tensor) else ember.tensor(
            float(value), dtype=self.rate.dtype)
        return (ember.xlogy(self.concentration, self.rate)
                + ember.xlogy(self.concentration - 1, value)
                - self.rate * value - ember.lgamma(self.concentration))

    def entropy(self):
        c = self.concentration
        return c - self.rate.log() + ember.lgamma(c) + (1.0 - c) * ember.digamma(c)

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return ember.lgamma(x + 1) + (x + 1) * (-y.reciprocal()).log()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        from ember import special
        return special.gammainc(self.concentration, self.rate * value)


class Chi2(Gamma):
    """Chi-squared with ``df`` degrees of freedom: ``Gamma(df / 2, 1 / 2)``.

    Example:
        >>> Chi2(ember.tensor([3.0])).mean.tolist()
        [3.0]
    """

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args=None):
        (df,) = broadcast_all(df)
        super().__init__(0.5 * df, ember.full_like(df, 0.5), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Chi2, _instance)
        return super().expand(batch_shape, new)

    @property
    def df(self):
        return self.concentration * 2


class Exponential(ExponentialFamily):
    """Exponential with ``rate`` (mean ``1 / rate``).

    Example:
        >>> Exponential(ember.tensor([2.0])).mean.tolist()
        [0.5]
    """

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        shape = Size() if isinstance(rate, numbers.Number) else self.rate.shape
        super().__init__(shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Exponential, batch_shape, _instance, {"rate": ()})

    @property
    def mean(self):
        return self.rate.reciprocal()

    @property
    def mode(self):
        return ember.zeros_like(self.rate)

    @property
    def stddev(self):
        return self.rate.reciprocal()

    @property
    def variance(self):
        return self.rate.pow(-2)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        u = ember.rand(shape, dtype=self.rate.dtype, device=self.rate.device)
        return -(-u).log1p() / self.rate

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 1 - (-self.rate * value).exp()

    def icdf(self, value):
        return -(-value).log1p() / self.rate

    def entropy(self):
        return 1.0 - self.rate.log()

    @property
    def _natural_params(self):
        return (-self.rate,)

    def _log_normalizer(self, x):
        return -(-x).log()


class FisherSnedecor(Distribution):
    """Fisher-Snedecor F with ``df1`` and ``df2`` degrees of freedom (a ratio of scaled
    chi-squared variables; reparameterised through the Gammas).

    Example:
        >>> FisherSnedecor(ember.tensor([3.0]), ember.tensor([6.0])).mean.tolist()
        [1.5]
    """

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args=None):
        self.df1, self.df2 = broadcast_all(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        both = isinstance(df1, numbers.Number) and isinstance(df2, numbers.Number)
        super().__init__(Size() if both else self.df1.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(FisherSnedecor, batch_shape, _instance, {"df1": (), "df2": ()})
        new._gamma1 = self._gamma1.expand(batch_shape)
        new._gamma2 = self._gamma2.expand(batch_shape)
        return new

    @property
    def mean(self):
        df2 = self.df2.clamp(min=2 + 1e-12)
        return ember.where(self.df2 > 2, df2 / (df2 - 2), float("nan"))

    @property
    def mode(self):
        mode = (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2)
        return ember.where(self.df1 > 2, mode, float("nan"))

    @property
    def variance(self):
        df1, df2 = self.df1, self.df2.clamp(min=4 + 1e-12)
        v = 2 * df2.square() * (df1 + df2 - 2) / (df1 * (df2 - 2).square() * (df2 - 4))
        return ember.where(self.df2 > 4, v, float("nan"))

    def rsample(self, sample_shape=()):
        # NOTE: Gamma(df / 2, rate=df) is chi2(df) / (2 df): the 2s cancel in the ratio.
        x1 = self._gamma1.rsample(sample_shape)
        x2 = self._gamma2.rsample(sample_shape)
        tiny = ember.finfo(x2.dtype).tiny
        return (x1 / x2.clamp(min=tiny)).clamp(min=tiny)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        ct1, ct2 = self.df1 * 0.5, self.df2 * 0.5
        ct3 = self.df1 / self.df2
        t1 = ember.lgamma(ct1 + ct2) - ember.lgamma(ct1) - ember.lgamma(ct2)
        t2 = ct1 * ct3.log() + (ct1 - 1) * value.log()
        t3 = (ct1 + ct2) * (ct3 * value).log1p()
        return t1 + t2 - t3
