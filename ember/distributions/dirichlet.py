"""Dirichlet and beta distributions (``torch.distributions.Dirichlet``, ``Beta``).

``rsample`` normalises Gamma(``concentration``) draws, each differentiable by implicit
reparameterisation, so the sample is differentiable in the concentrations (PyTorch differentiates
its Dirichlet sampler with a dedicated approximation, ``_dirichlet_grad``; the pathwise gradient
through the gammas is exact and has the same expectation)."""
from __future__ import annotations

import numbers

import ember
from ember.tensor import Size

from . import constraints
from .exp_family import ExponentialFamily
from .utils import broadcast_all

__all__ = ["Beta", "Dirichlet"]


class Dirichlet(ExponentialFamily):
    """Dirichlet over the simplex with ``concentration`` along the last dim.

    Example:
        >>> Dirichlet(ember.tensor([1.0, 3.0])).mean.tolist()
        [0.25, 0.75]
    """

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.ndim < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Dirichlet, batch_shape, _instance,
                                   {"concentration": tuple(self._event_shape)})

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        g = ember._standard_gamma(self.concentration.expand(shape))
        return g / g.sum(-1, keepdim=True)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        c = self.concentration
        return (ember.xlogy(c - 1.0, value).sum(-1) + ember.lgamma(c.sum(-1))
                - ember.lgamma(c).sum(-1))

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self):
        concm1 = (self.concentration - 1).clamp(min=0.0)
        mode = concm1 / concm1.sum(-1, keepdim=True)
        # NOTE: where some concentration < 1 the density peaks at a vertex (PyTorch's rule).
        mask = (self.concentration < 1).all(-1, keepdim=True)
        one_hot = ember.nn.functional.one_hot(self.concentration.argmax(-1),
                                              self.concentration.shape[-1]).to(mode.dtype)
        return ember.where(mask, one_hot, mode)

    @property
    def variance(self):
        con0 = self.concentration.sum(-1, keepdim=True)
        return self.concentration * (con0 - self.concentration) / (con0.square() * (con0 + 1))

    @property
    def _natural_params(self):
        return (self.concentration,)

    def _log_normalizer(self, x):
        return ember.lgamma(x).sum(-1) - ember.lgamma(x.sum(-1))

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        a0 = c.sum(-1)
        return (ember.lgamma(c).sum(-1) - ember.lgamma(a0) - (k - a0) * ember.digamma(a0)
                - ((c - 1.0) * ember.digamma(c)).sum(-1))


class Beta(ExponentialFamily):
    """Beta on [0, 1] with ``concentration1`` (alpha) and ``concentration0`` (beta).

    Example:
        >>> Beta(ember.tensor([1.0]), ember.tensor([3.0])).mean.tolist()
        [0.25]
    """

    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        if isinstance(concentration1, numbers.Real) and isinstance(concentration0,
                                                                   numbers.Real):
            conc = ember.tensor([float(concentration1), float(concentration0)])
        else:
            concentration1, concentration0 = broadcast_all(concentration1, concentration0)
            conc = ember.stack([concentration1, concentration0], -1)
        self._dirichlet = Dirichlet(conc, validate_args=validate_args)
        super().__init__(self._dirichlet._batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Beta, _instance)
        new._dirichlet = self._dirichlet.expand(batch_shape)
        super(Beta, new).__init__(Size(batch_shape), validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def concentration1(self):
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self):
        return self._dirichlet.concentration[..., 1]

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.square() * (total + 1))

    def rsample(self, sample_shape=()):
        return self._dirichlet.rsample(sample_shape).select(-1, 0)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        heads_tails = ember.stack([value, 1.0 - value], -1)
        return self._dirichlet.log_prob(heads_tails)

    def entropy(self):
        return self._dirichlet.entropy()

    @property
    def _natural_params(self):
        return (self.concentration1, self.concentration0)

    def _log_normalizer(self, x, y):
        return ember.lgamma(x) + ember.lgamma(y) - ember.lgamma(x + y)

    def __repr__(self) -> str:
        c = self._dirichlet.concentration
        if c.numel() == 2:
            return (f"Beta(concentration1: {self.concentration1}, "
                    f"concentration0: {self.concentration0})")
        return (f"Beta(concentration1: {self.concentration1.size()}, "
                f"concentration0: {self.concentration0.size()})")
