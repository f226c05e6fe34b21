"""Categorical and one-hot categorical distributions (``torch.distributions.Categorical``,
``OneHotCategorical``)."""
from __future__ import annotations

import ember
import ember.nn.functional as F
from ember.ops.random_dists import _sample_categorical
from ember.tensor import Size

from . import constraints
from .distribution import Distribution
from .utils import lazy_property, logits_to_probs, probs_to_logits

__all__ = ["Categorical", "OneHotCategorical", "OneHotCategoricalStraightThrough"]


class Categorical(Distribution):
    """Indices ``0 .. K-1`` with (unnormalised) ``probs`` or ``logits`` along the last dim.

    Example:
        >>> d = Categorical(probs=ember.tensor([0.25, 0.75]))
        >>> round(float(d.log_prob(ember.tensor(1))), 4)
        -0.2877
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(
        constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.ndim < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.ndim < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.shape[-1]
        batch_shape = self._param.shape[:-1] if self._param.ndim > 1 else Size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        k = (self._num_events,)
        new = self._expand_params(Categorical, batch_shape, _instance,
                                  {"probs": k, "logits": k})
        new._param = new.probs if "probs" in self.__dict__ else new.logits
        new._num_events = self._num_events
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self):
        return self._param.shape

    @property
    def mean(self):
        return ember.full(tuple(self._extended_shape()), float("nan"), dtype=self._param.dtype)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        return ember.full(tuple(self._extended_shape()), float("nan"), dtype=self._param.dtype)

    def sample(self, sample_shape=()):
        return _sample_categorical(self.probs, Size(sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = ember.broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self):
        min_real = ember.finfo(self.logits.dtype).min
        logits = self.logits.clamp(min=min_real)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True):
        values = ember.arange(self._num_events, dtype=ember.int64)
        values = values.reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + tuple(self._batch_shape)) if expand else values


class OneHotCategorical(Distribution):
    """One-hot vectors of length ``K`` with the probabilities of a :class:`Categorical`.

    Example:
        >>> OneHotCategorical(probs=ember.tensor([0.0, 1.0])).sample().tolist()
        [0.0, 1.0]
    """

    arg_constraints = {"probs": constraints.simplex,
                       "logits": constraints.independent(constraints.real, 1)}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        param = self._categorical._param
        super().__init__(self._categorical.batch_shape, param.shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(OneHotCategorical, _instance)
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, Size(batch_shape), self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def _param(self):
        return self._categorical._param

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def mean(self):
        return self._categorical.probs

    @property
    def mode(self):
        probs = self._categorical.probs
        return F.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)

    @property
    def variance(self):
        p = self._categorical.probs
        return p * (1 - p)

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=()):
        probs = self._categorical.probs
        idx = self._categorical.sample(Size(sample_shape))
        return F.one_hot(idx, probs.shape[-1]).to(probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self._categorical.log_prob(value.argmax(-1))

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True):
        n = self.event_shape[0]
        values = ember.eye(n, dtype=self._param.dtype)
        values = values.reshape((n,) + (1,) * len(self.batch_shape) + (n,))
        return values.expand((n,) + tuple(self.batch_shape) + (n,)) if expand else values

    def __repr__(self) -> str:
        c = self._categorical
        names = [k for k in ("probs", "logits") if k in c.__dict__]
        args = ", ".join(f"{p}: {c.__dict__[p].size()}" for p in names)
        return f"{self.__class__.__name__}({args})"


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """One-hot samples whose gradient is the straight-through estimator ``probs``'s."""

    has_rsample = True

    def rsample(self, sample_shape=()):
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())
