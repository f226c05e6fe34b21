"""More registered KL pairs (imported by the package): families with different supports
(infinite where ``p`` has mass outside ``q``'s support), closed forms between families, the
continuous Bernoulli, Pareto and Gumbel pairs, and the low-rank normals."""
from __future__ import annotations

import math

import ember

from .bernoulli import Bernoulli
from .continuous_bernoulli import ContinuousBernoulli
from .dirichlet import Beta
from .gamma import Exponential, Gamma
from .kl import _kl_multivariatenormal_multivariatenormal, register_kl
from .laplace import Gumbel, Laplace
from .lowrank_multivariate_normal import LowRankMultivariateNormal
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .poisson import Poisson
from .transformed_families import Pareto
from .uniform import Uniform
from .utils import euler_constant

__all__: list = []


def _where_inf(cond, value):
    return ember.where(cond, math.inf, value)


def _batch_inf(p, q):
    shape = tuple(ember.broadcast_shapes(tuple(p.batch_shape), tuple(q.batch_shape)))
    return ember.full(shape, math.inf, dtype=p.mean.dtype)


# NOTE: p puts mass where q's density is zero (unbounded vs bounded or half-line supports,
# or Pareto's support starting above 0): KL(p || q) = inf.
for _p, _q in [(Beta, Pareto), (ContinuousBernoulli, Pareto),
               (Exponential, Beta), (Exponential, ContinuousBernoulli), (Exponential, Pareto),
               (Exponential, Uniform), (Gamma, Beta), (Gamma, ContinuousBernoulli),
               (Gamma, Pareto), (Gamma, Uniform), (Gumbel, Beta), (Gumbel, ContinuousBernoulli),
               (Gumbel, Exponential), (Gumbel, Gamma), (Gumbel, Pareto), (Gumbel, Uniform),
               (Laplace, Beta), (Laplace, ContinuousBernoulli), (Laplace, Exponential),
               (Laplace, Gamma), (Laplace, Pareto), (Laplace, Uniform), (Normal, Beta),
               (Normal, ContinuousBernoulli), (Normal, Exponential), (Normal, Gamma),
               (Normal, Pareto), (Pareto, Beta), (Pareto, ContinuousBernoulli),
               (Pareto, Uniform)]:
    register_kl(_p, _q)(_batch_inf)


@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p, q):
    # NOTE: {0, 1} lies in Poisson's support: -H(p) - E_p[x log(rate) - rate]
    return -p.entropy() - (p.probs * q.rate.log() - q.rate)


def _beta_mean(p):
    return p.concentration1 / (p.concentration1 + p.concentration0)


@register_kl(Beta, ContinuousBernoulli)
def _kl_beta_continuous_bernoulli(p, q):
    return (-p.entropy() - _beta_mean(p) * q.logits - (-q.probs).log1p()
            - q._cont_bern_log_norm())


@register_kl(Beta, Exponential)
def _kl_beta_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * _beta_mean(p)


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p, q):
    c1, c0 = p.concentration1, p.concentration0
    t2 = ember.lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (q.concentration - 1) * (ember.digamma(c1) - ember.digamma(c1 + c0))   # E log x
    return -p.entropy() + t2 - t3 + q.rate * _beta_mean(p)


@register_kl(Beta, Normal)
def _kl_beta_normal(p, q):
    return _kl_to_normal(p, q, p.variance + _beta_mean(p).square(), _beta_mean(p))


def _kl_to_normal(p, q, second_moment, mean):
    """-H(p) - E_p[log N(x; loc, scale)] from p's first two moments."""
    var = q.scale.square()
    return (-p.entropy() + 0.5 * (2 * math.pi * var).log()
            + (0.5 * second_moment - q.loc * mean + 0.5 * q.loc.square()) / var)


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_continuous_bernoulli_continuous_bernoulli(p, q):
    t1 = p.mean * (p.logits - q.logits)
    t2 = p._cont_bern_log_norm() + (-p.probs).log1p()
    t3 = -q._cont_bern_log_norm() - (-q.probs).log1p()
    return t1 + t2 + t3


@register_kl(ContinuousBernoulli, Exponential)
def _kl_continuous_bernoulli_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * p.mean


@register_kl(ContinuousBernoulli, Normal)
def _kl_continuous_bernoulli_normal(p, q):
    return _kl_to_normal(p, q, p.variance + p.mean.square(), p.mean)


@register_kl(ContinuousBernoulli, Uniform)
def _kl_continuous_bernoulli_uniform(p, q):
    # NOTE: finite when [0, 1] lies inside [low, high] (PyTorch's >=/<= also calls
    # U(0, 1) infinite)
    result = -p.entropy() + (q.high - q.low).log()
    return _where_inf((q.low > 0) | (q.high < 1), result)


@register_kl(Uniform, ContinuousBernoulli)
def _kl_uniform_continuous_bernoulli(p, q):
    result = (-p.entropy() - p.mean * q.logits - (-q.probs).log1p()
              - q._cont_bern_log_norm())
    return _where_inf((p.high > 1) | (p.low < 0), result)


@register_kl(Exponential, Gumbel)
def _kl_exponential_gumbel(p, q):
    prod = p.rate * q.scale
    ratio = q.loc / q.scale
    return prod.log() - 1 - ratio + ratio.exp() * prod / (prod + 1) + prod.reciprocal()


@register_kl(Gamma, Gumbel)
def _kl_gamma_gumbel(p, q):
    c = p.concentration
    prod = p.rate * q.scale
    ratio = q.loc / q.scale
    t1 = (c - 1) * ember.digamma(c) - ember.lgamma(c) - c
    t2 = prod.log() + c / prod
    t3 = ratio.exp() * (1 + prod.reciprocal()).pow(-c) - ratio
    return t1 + t2 + t3


@register_kl(Gumbel, Normal)
def _kl_gumbel_normal(p, q):
    ratio = p.scale / q.scale
    t1 = (ratio / math.sqrt(2 * math.pi)).log()
    t2 = (math.pi * ratio * 0.5).square() / 3
    t3 = ((p.loc + p.scale * euler_constant - q.loc) / q.scale).square() * 0.5
    return -t1 + t2 + t3 - (euler_constant + 1)


@register_kl(Normal, Gumbel)
def _kl_normal_gumbel(p, q):
    mean_ratio = p.loc / q.scale
    var_ratio = (p.scale / q.scale).square()
    loc_ratio = q.loc / q.scale
    t3 = (-mean_ratio + 0.5 * var_ratio + loc_ratio).exp()
    return -0.5 * var_ratio.log() + mean_ratio - loc_ratio + t3 - 0.5 * (1 + math.log(2 * math.pi))


@register_kl(Uniform, Gumbel)
def _kl_uniform_gumbel(p, q):
    common = q.scale / (p.high - p.low)
    hi = (p.high - q.loc) / q.scale
    lo = (p.low - q.loc) / q.scale
    return common.log() + 0.5 * (hi + lo) - common * ((-hi).exp() - (-lo).exp())


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p, q):
    prod = p.scale * q.rate
    result = ((p.alpha / prod).log() - p.alpha.reciprocal()
              + p.alpha * prod / (p.alpha - 1) - 1)
    return _where_inf(p.alpha <= 1, result)


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p, q):
    common = p.scale.log() + p.alpha.reciprocal()                       # E_p log x
    t2 = ember.lgamma(q.concentration) - q.concentration * q.rate.log()
    result = (p.alpha.log() - common + t2 + (1 - q.concentration) * common
              + q.rate * p.alpha * p.scale / (p.alpha - 1) - 1)
    return _where_inf(p.alpha <= 1, result)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p, q):
    var2 = 2 * q.scale.square()
    common = p.scale / (p.alpha - 1)
    t1 = (math.sqrt(2 * math.pi) * q.scale * p.alpha / p.scale).log()
    t3 = p.alpha * common.square() / (p.alpha - 2)
    t4 = (p.alpha * common - q.loc).square()
    result = t1 - p.alpha.reciprocal() + (t3 + t4) / var2 - 1
    return _where_inf(p.alpha <= 2, result)


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * (p.scale / q.scale).log() - alpha_ratio.log() + alpha_ratio - 1
    return _where_inf(p.scale < q.scale, result)


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    width = p.high - p.low
    e_log_x = (ember.xlogy(p.high, p.high) - ember.xlogy(p.low, p.low)) / width - 1
    result = (-width.log() - q.alpha.log() - q.alpha * q.scale.log()
              + (q.alpha + 1) * e_log_x)
    return _where_inf(p.low < q.scale, result)


def _as_mvn(d):
    """A dense MultivariateNormal with ``d``'s mean and covariance."""
    return MultivariateNormal(d.loc, covariance_matrix=d.covariance_matrix, validate_args=False)


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
@register_kl(LowRankMultivariateNormal, MultivariateNormal)
@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrank(p, q):
    # NOTE: through the dense covariance (O(n^3)); PyTorch keeps the low-rank structure
    p = _as_mvn(p) if isinstance(p, LowRankMultivariateNormal) else p
    q = _as_mvn(q) if isinstance(q, LowRankMultivariateNormal) else q
    return _kl_multivariatenormal_multivariatenormal(p, q)
