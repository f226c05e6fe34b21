"""The continuous Bernoulli distribution (``torch.distributions.ContinuousBernoulli``;
Loaiza-Ganem & Cunningham, 2019): density ``C(l) l^x (1 - l)^(1 - x)`` on [0, 1] with the
normaliser ``C(l) = log((1 - l) / l) / (1 - 2 l)``. Near ``l = 1/2`` (inside ``lims``) the
closed forms cancel, so the log-normaliser, mean and variance use their Taylor series there,
as PyTorch's; the CDF and its inverse are written in the natural parameter
``eta = logit(l)`` with ``expm1``/``log1p``, exact everywhere; ``rsample`` is the inverse CDF
of a uniform."""
from __future__ import annotations

import math
import numbers

import ember
import ember.nn.functional as F
from ember.tensor import Size

from . import constraints
from .exp_family import ExponentialFamily
from .utils import broadcast_all, clamp_probs, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["ContinuousBernoulli"]


class ContinuousBernoulli(ExponentialFamily):
    """Continuous Bernoulli with ``probs`` (or ``logits``) ``l``.

    Example:
        >>> ContinuousBernoulli(ember.tensor([0.5])).mean.tolist()
        [0.5]
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        param = probs if probs is not None else logits
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
            # NOTE: checked before the clamp below, which would hide invalid values
            validate = self._validate_args if validate_args is None else validate_args
            if validate and not bool(constraints.unit_interval.check(self.probs).all()):
                raise ValueError("The parameter probs has invalid values")
            self.probs = clamp_probs(self.probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        self._lims = lims
        shape = Size() if isinstance(param, numbers.Number) else self._param.shape
        super().__init__(shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(ContinuousBernoulli, batch_shape, _instance,
                                  {"probs": (), "logits": ()})
        new._lims = self._lims
        new._param = new.probs if "probs" in self.__dict__ else new.logits
        return new

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    def _stable(self):
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self):
        """``probs`` outside the unstable band, a harmless constant inside it."""
        return ember.where(self._stable(), self.probs, self._lims[0])

    def _log_ratio(self, p):
        return (-p).log1p() - p.log()                     # log((1 - l) / l)

    def _cont_bern_log_norm(self):
        p = self._cut_probs()
        log_norm = self._log_ratio(p).abs().log() - (1 - 2 * p).abs().log()
        x = (self.probs - 0.5).square()
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return ember.where(self._stable(), log_norm, taylor)

    @property
    def mean(self):
        p = self._cut_probs()
        mus = p / (2 * p - 1) + 1 / self._log_ratio(p)
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x.square()) * x
        return ember.where(self._stable(), mus, taylor)

    @property
    def variance(self):
        p = self._cut_probs()
        var = p * (p - 1) / (1 - 2 * p).square() + 1 / self._log_ratio(p).square()
        x = (self.probs - 0.5).square()
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return ember.where(self._stable(), var, taylor)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        u = ember.rand(shape, dtype=self.probs.dtype, device=self.probs.device)
        return self.icdf(u)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return (-F.binary_cross_entropy_with_logits(logits, value, reduction="none")
                + self._cont_bern_log_norm())

    def _eta(self):
        """The natural parameter ``log(l / (1 - l))`` (0 replaced by 1 where it is exactly
        0, which the callers select away: no 0/0 in the unused branch's gradient)."""
        eta = self.logits
        return ember.where(eta == 0, 1.0, eta), eta == 0

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        # NOTE: F(x) = expm1(eta x) / expm1(eta) is exact and stable for every eta != 0
        # (PyTorch returns x itself inside ``lims``, up to ~1e-4 off there).
        eta, zero = self._eta()
        cdfs = ember.where(zero, value, (eta * value).expm1() / eta.expm1())
        return ember.where(value <= 0, 0.0, ember.where(value >= 1, 1.0, cdfs))

    def icdf(self, value):
        eta, zero = self._eta()
        return ember.where(zero, value, (value * eta.expm1()).log1p() / eta)

    def entropy(self):
        log_p0, log_p1 = (-self.probs).log1p(), self.probs.log()
        return self.mean * (log_p0 - log_p1) - self._cont_bern_log_norm() - log_p0
