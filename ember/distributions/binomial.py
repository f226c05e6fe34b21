"""Counting distributions built on Bernoulli trials: ``Binomial``, ``NegativeBinomial`` and
``Multinomial`` (``torch.distributions``)."""
from __future__ import annotations

import ember
import ember.nn.functional as F
from ember.ops.random_dists import _sample_multinomial
from ember.tensor import Size

from . import constraints
from .categorical import Categorical
from .distribution import Distribution
from .gamma import Gamma
from .utils import broadcast_all, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["Binomial", "Multinomial", "NegativeBinomial"]


def _clamp_by_zero(x):
    # NOTE: max(x, 0) whose gradient at 0 is 1/2, as PyTorch's.
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


def _one_of(probs, logits):
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")


def _set_count_and_param(d, total_count, probs, logits):
    """Sets ``d.total_count`` and ``d.probs`` or ``d.logits`` (exactly one given), broadcast
    together, the count in the parameter's dtype; ``d._param`` is the one given."""
    _one_of(probs, logits)
    if probs is not None:
        d.total_count, d.probs = broadcast_all(total_count, probs)
        d._param = d.probs
    else:
        d.total_count, d.logits = broadcast_all(total_count, logits)
        d._param = d.logits
    d.total_count = d.total_count.type_as(d._param)


class Binomial(Distribution):
    """Number of successes in ``total_count`` Bernoulli(``probs``) trials.

    Example:
        >>> Binomial(10, ember.tensor([0.5])).mean.tolist()
        [5.0]
    """

    arg_constraints = {"total_count": constraints.nonnegative_integer,
                       "probs": constraints.unit_interval, "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        _set_count_and_param(self, total_count, probs, logits)
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(Binomial, batch_shape, _instance,
                                  {"total_count": (), "probs": (), "logits": ()})
        new._param = new.probs if "probs" in self.__dict__ else new.logits
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.shape

    def sample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        with ember.no_grad():
            return ember.binomial(self.total_count.expand(shape), self.probs.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_factorial_n = ember.lgamma(self.total_count + 1)
        log_factorial_k = ember.lgamma(value + 1)
        log_factorial_nmk = ember.lgamma(self.total_count - value + 1)
        normalize_term = (self.total_count * _clamp_by_zero(self.logits)
                          + self.total_count * (-self.logits.abs()).exp().log1p()
                          - log_factorial_n)
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def entropy(self):
        total_count = int(self.total_count.max())
        if not bool((self.total_count == total_count).all()):
            raise NotImplementedError("Inhomogeneous total count not supported by "
                                      "`entropy`.")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(log_prob.exp() * log_prob).sum(0)

    def enumerate_support(self, expand: bool = True):
        total_count = int(self.total_count.max())
        if not bool((self.total_count == total_count).all()):
            raise NotImplementedError("Inhomogeneous total count not supported by "
                                      "`enumerate_support`.")
        values = ember.arange(1 + total_count, dtype=self._param.dtype)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + tuple(self._batch_shape)) if expand else values


class NegativeBinomial(Distribution):
    """Number of successes before ``total_count`` failures of Bernoulli(``probs``) trials.

    Example:
        >>> NegativeBinomial(2.0, ember.tensor([0.5])).mean.tolist()
        [2.0]
    """

    arg_constraints = {"total_count": constraints.greater_than_eq(0),
                       "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        _set_count_and_param(self, total_count, probs, logits)
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(NegativeBinomial, batch_shape, _instance,
                                  {"total_count": (), "probs": (), "logits": ()})
        new._param = new.probs if "probs" in self.__dict__ else new.logits
        return new

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def mean(self):
        return self.total_count * self.logits.exp()

    @property
    def mode(self):
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self):
        return self.mean / ember.sigmoid(-self.logits)

    def sample(self, sample_shape=()):
        with ember.no_grad():
            rate = Gamma(self.total_count, (-self.logits).exp(),
                         validate_args=False).sample(sample_shape)
            return ember.poisson(rate)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_unnormalized = (self.total_count * F.logsigmoid(-self.logits)
                            + value * F.logsigmoid(self.logits))
        log_normalization = (-ember.lgamma(self.total_count + value)
                             + ember.lgamma(1.0 + value) + ember.lgamma(self.total_count))
        # NOTE: total_count + value == 0 is a point mass at 0 (lgamma(0) would be inf).
        log_normalization = ember.where(self.total_count + value == 0, 0.0, log_normalization)
        return log_unnormalized - log_normalization


class Multinomial(Distribution):
    """Counts of ``total_count`` draws from a :class:`Categorical` (event dim ``K``).

    Example:
        >>> Multinomial(4, probs=ember.tensor([0.0, 1.0])).sample().tolist()
        [0.0, 4.0]
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(
        constraints.real, 1)}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        param = self._categorical._param
        super().__init__(self._categorical.batch_shape, param.shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        new._binomial = self._binomial.expand(tuple(batch_shape) + tuple(self._event_shape))
        Distribution.__init__(new, Size(batch_shape), self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=()):
        return _sample_multinomial(self.total_count, self.probs, Size(sample_shape))

    def entropy(self):
        n = ember.tensor(float(self.total_count), dtype=self.probs.dtype)
        support = self._binomial.enumerate_support()
        binomial_probs = self._binomial.log_prob(support).exp()
        weights = ember.lgamma(support + 1)
        return (n * self._categorical.entropy() - ember.lgamma(n + 1)
                + (binomial_probs * weights).sum([0, -1]))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = ember.broadcast_tensors(self.logits, value)
        log_factorial_n = ember.lgamma(value.sum(-1) + 1)
        log_factorial_xs = ember.lgamma(value + 1).sum(-1)
        logits = ember.where((value == 0) & (logits == float("-inf")), 0.0, logits)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)

    def __repr__(self) -> str:
        c = self._categorical
        names = [k for k in ("probs", "logits") if k in c.__dict__]
        args = ", ".join(f"{p}: {c.__dict__[p].size()}" for p in names)
        return f"{self.__class__.__name__}({args})"
