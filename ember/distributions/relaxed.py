"""Relaxed (concrete / Gumbel-softmax) distributions: ``RelaxedBernoulli``,
``RelaxedOneHotCategorical`` and their logit-space bases (``torch.distributions``)."""
from __future__ import annotations

import math
import numbers

import ember
from ember.tensor import Size

from . import constraints
from .distribution import Distribution
from .transformed_distribution import TransformedDistribution
from .transforms import ExpTransform, SigmoidTransform
from .utils import broadcast_all, clamp_probs, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["ExpRelaxedCategorical", "LogitRelaxedBernoulli", "RelaxedBernoulli",
           "RelaxedOneHotCategorical"]


def _as_tensor(x, like):
    return x if isinstance(x, ember.Tensor) else ember.tensor(float(x), dtype=like.dtype)


def _one_of(probs, logits):
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")


class LogitRelaxedBernoulli(Distribution):
    """Logits of a relaxed Bernoulli at ``temperature`` (Maddison et al. 2017)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self.temperature = temperature
        _one_of(probs, logits)
        if probs is not None:
            is_scalar = isinstance(probs, numbers.Number)
            (self.probs,) = broadcast_all(probs)
        else:
            is_scalar = isinstance(logits, numbers.Number)
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        super().__init__(Size() if is_scalar else self._param.shape,
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(LogitRelaxedBernoulli, batch_shape, _instance,
                                  {"probs": (), "logits": ()})
        new.temperature = self.temperature
        new._param = new.probs if "probs" in self.__dict__ else new.logits
        return new

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        probs = clamp_probs(self.probs.expand(shape))
        uniforms = clamp_probs(ember.rand(shape, dtype=probs.dtype, device=probs.device))
        return (uniforms.log() - (-uniforms).log1p() + probs.log()
                - (-probs).log1p()) / self.temperature

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        t = _as_tensor(self.temperature, logits)
        diff = logits - value * t
        return t.log() + diff - 2 * diff.exp().log1p()


class RelaxedBernoulli(TransformedDistribution):
    """Values in (0, 1) approaching Bernoulli(``probs``) as ``temperature`` -> 0
    (reparameterised).

    Example:
        >>> d = RelaxedBernoulli(ember.tensor(0.5), probs=ember.tensor([0.3]))
        >>> tuple(d.rsample((2,)).shape)
        (2, 1)
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base, SigmoidTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return super().expand(batch_shape,
                              self._get_checked_instance(RelaxedBernoulli, _instance))

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs


class ExpRelaxedCategorical(Distribution):
    """Log of a relaxed one-hot categorical (concrete) sample at ``temperature``."""

    arg_constraints = {"probs": constraints.simplex,
                       "logits": constraints.independent(constraints.real, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        from .categorical import Categorical
        self._categorical = Categorical(probs, logits)
        self.temperature = temperature
        batch_shape = self._categorical.batch_shape
        super().__init__(batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ExpRelaxedCategorical, _instance)
        new.temperature = self.temperature
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, Size(batch_shape), self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        uniforms = clamp_probs(ember.rand(shape, dtype=self.logits.dtype,
                                          device=self.logits.device))
        gumbels = -((-(uniforms.log())).log())
        scores = (self.logits + gumbels) / self.temperature
        return scores - scores.logsumexp(dim=-1, keepdim=True)

    def log_prob(self, value):
        k = self._categorical._num_events
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        t = _as_tensor(self.temperature, logits)
        log_scale = math.lgamma(k) + (k - 1) * t.log()
        score = logits - value * t
        score = (score - score.logsumexp(dim=-1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(TransformedDistribution):
    """Points of the simplex approaching OneHotCategorical(``probs``) as ``temperature``
    -> 0 (the Gumbel-softmax; reparameterised).

    Example:
        >>> d = RelaxedOneHotCategorical(ember.tensor(0.5), probs=ember.tensor([0.2, 0.8]))
        >>> round(float(d.rsample().sum()), 5)
        1.0
    """

    arg_constraints = {"probs": constraints.simplex,
                       "logits": constraints.independent(constraints.real, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return super().expand(batch_shape,
                              self._get_checked_instance(RelaxedOneHotCategorical, _instance))

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs
