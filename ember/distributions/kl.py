"""``kl_divergence(p, q)`` and its registry (``torch.distributions.kl``).

Implementations are registered per pair of classes with :func:`register_kl`; a call
dispatches on the most specific registered pair for ``(type(p), type(q))`` (by the classes'
MRO), warns when two registered pairs are equally specific, and raises
``NotImplementedError`` when none applies — as PyTorch.

Example:
    >>> p = ember.distributions.Normal(0.0, 1.0)
    >>> q = ember.distributions.Normal(1.0, 1.0)
    >>> float(kl_divergence(p, q))
    0.5
"""
from __future__ import annotations

import functools
import math
import warnings

import ember

from .bernoulli import Bernoulli, Geometric
from .binomial import Binomial
from .categorical import Categorical, OneHotCategorical
from .dirichlet import Beta, Dirichlet
from .distribution import Distribution
from .exp_family import ExponentialFamily, _kl_expfamily_expfamily
from .gamma import Exponential, Gamma
from .independent import Independent
from .laplace import Cauchy, Gumbel, Laplace
from .multivariate_normal import MultivariateNormal, _batch_mahalanobis
from .normal import Normal
from .poisson import Poisson
from .transformed_distribution import HalfNormal, LogNormal, TransformedDistribution
from .uniform import Uniform
from .utils import _sum_rightmost, euler_constant

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict = {}
_KL_MEMOIZE: dict = {}


def register_kl(type_p, type_q):
    """Decorator registering ``fn(p, q)`` as the KL divergence of the pair of classes.

    Example:
        >>> @register_kl(Normal, Normal)   # doctest: +SKIP
        ... def kl_normal_normal(p, q): ...
    """
    if not (isinstance(type_p, type) and issubclass(type_p, Distribution)):
        raise TypeError(f"Expected type_p to be a Distribution subclass but got {type_p}")
    if not (isinstance(type_q, type) and issubclass(type_q, Distribution)):
        raise TypeError(f"Expected type_q to be a Distribution subclass but got {type_q}")

    def decorator(fun):
        _KL_REGISTRY[type_p, type_q] = fun
        _KL_MEMOIZE.clear()
        return fun
    return decorator


@functools.total_ordering
class _Match:
    __slots__ = ["types"]

    def __init__(self, *types):
        self.types = types

    def __eq__(self, other):
        return self.types == other.types

    def __le__(self, other):
        for x, y in zip(self.types, other.types):
            if not issubclass(x, y):
                return False
            if x is not y:
                break
        return True


def _dispatch_kl(type_p, type_q):
    matches = [(sp, sq) for sp, sq in _KL_REGISTRY
               if issubclass(type_p, sp) and issubclass(type_q, sq)]
    if not matches:
        return NotImplemented
    left_p, left_q = min(_Match(*m) for m in matches).types
    right_q, right_p = min(_Match(*reversed(m)) for m in matches).types
    left_fun = _KL_REGISTRY[left_p, left_q]
    right_fun = _KL_REGISTRY[right_p, right_q]
    if left_fun is not right_fun:
        warnings.warn(f"Ambiguous kl_divergence({type_p.__name__}, {type_q.__name__}). "
                      f"Please register_kl({left_p.__name__}, {right_q.__name__})",
                      RuntimeWarning)
    return left_fun


def kl_divergence(p, q):
    """``KL(p || q) = E_p[log p(x) - log q(x)]``, of shape ``batch_shape``.

    Raises:
        NotImplementedError: no implementation is registered for the pair.
    """
    try:
        fun = _KL_MEMOIZE[type(p), type(q)]
    except KeyError:
        fun = _dispatch_kl(type(p), type(q))
        _KL_MEMOIZE[type(p), type(q)] = fun
    if fun is NotImplemented:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type "
                                  f"{p.__class__.__name__} and q type "
                                  f"{q.__class__.__name__}")
    return fun(p, q)


def _inf_like(x):
    return ember.full_like(x, math.inf)


def _x_log_x(x):
    return ember.xlogy(x, x)


register_kl(ExponentialFamily, ExponentialFamily)(_kl_expfamily_expfamily)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    t1 = p.probs * (ember.nn.functional.softplus(-q.logits)
                    - ember.nn.functional.softplus(-p.logits))
    t1 = ember.where(q.probs == 0, math.inf, t1)
    t1 = ember.where(p.probs == 0, 0.0, t1)
    t2 = (1 - p.probs) * (ember.nn.functional.softplus(q.logits)
                          - ember.nn.functional.softplus(p.logits))
    t2 = ember.where(q.probs == 1, math.inf, t2)
    t2 = ember.where(p.probs == 1, 0.0, t2)
    return t1 + t2


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    sum_p = p.concentration1 + p.concentration0
    sum_q = q.concentration1 + q.concentration0
    t1 = ember.lgamma(q.concentration1) + ember.lgamma(q.concentration0) + ember.lgamma(sum_p)
    t2 = ember.lgamma(p.concentration1) + ember.lgamma(p.concentration0) + ember.lgamma(sum_q)
    t3 = (p.concentration1 - q.concentration1) * ember.digamma(p.concentration1)
    t4 = (p.concentration0 - q.concentration0) * ember.digamma(p.concentration0)
    t5 = (sum_q - sum_p) * ember.digamma(sum_p)
    return t1 - t2 + t3 + t4 + t5


@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p, q):
    if bool((p.total_count < q.total_count).any()):
        raise NotImplementedError("KL between Binomials where q.total_count > p.total_count "
                                  "is not implemented")
    kl = p.total_count * (p.probs * (p.logits - q.logits) + (-p.probs).log1p()
                          - (-q.probs).log1p())
    return ember.where(p.total_count > q.total_count, math.inf, kl)


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = ember.where(q.probs == 0, math.inf, t)
    t = ember.where(p.probs == 0, 0.0, t)
    return t.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical_onehotcategorical(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    sum_p = p.concentration.sum(-1)
    sum_q = q.concentration.sum(-1)
    t1 = ember.lgamma(sum_p) - ember.lgamma(sum_q)
    t2 = (ember.lgamma(p.concentration) - ember.lgamma(q.concentration)).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = ember.digamma(p.concentration) - ember.digamma(sum_p).unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    rate_ratio = q.rate / p.rate
    return rate_ratio - 1 - rate_ratio.log()


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    t1 = q.concentration * (p.rate / q.rate).log()
    t2 = ember.lgamma(q.concentration) - ember.lgamma(p.concentration)
    t3 = (p.concentration - q.concentration) * ember.digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p, q):
    ct1 = p.scale / q.scale
    ct2 = q.loc / q.scale
    ct3 = p.loc / q.scale
    t1 = -ct1.log() - ct2 + ct3
    t2 = ct1 * euler_constant
    t3 = (ct2 + ember.lgamma(1 + ct1) - ct3).exp()
    return t1 + t2 + t3 - (1 + euler_constant)


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p, q):
    return -p.entropy() - (-q.probs).log1p() / p.probs - q.logits


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p, q):
    return _kl_normal_normal(p.base_dist, q.base_dist)


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    t1 = -scale_ratio.log()
    t2 = loc_abs_diff / q.scale
    t3 = scale_ratio * (-loc_abs_diff / p.scale).exp()
    return t1 + t2 + t3 - 1


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).square()
    t1 = ((p.loc - q.loc) / q.scale).square()
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p, q):
    return ember.xlogy(p.rate, p.rate) - ember.xlogy(p.rate, q.rate) - (p.rate - q.rate)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p, q):
    if p.transforms != q.transforms:
        raise NotImplementedError
    if p.event_shape != q.event_shape:
        raise NotImplementedError
    return kl_divergence(p.base_dist, q.base_dist)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return ember.where((q.low > p.low) | (q.high < p.high), math.inf, result)


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p, q):
    t1 = ((p.scale + q.scale).square() + (p.loc - q.loc).square()).log()
    t2 = (4 * p.scale * q.scale).log()
    return t1 - t2


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError
    return _sum_rightmost(kl_divergence(p.base_dist, q.base_dist),
                          p.reinterpreted_batch_ndims)


@register_kl(LogNormal, LogNormal)
def _kl_lognormal_lognormal(p, q):
    return _kl_normal_normal(p.base_dist, q.base_dist)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_multivariatenormal_multivariatenormal(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError("KL-divergence between two Multivariate Normals with different "
                         "event shapes cannot be computed")
    Lp, Lq = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    half_term1 = (Lq.diagonal(dim1=-2, dim2=-1).log().sum(-1)
                  - Lp.diagonal(dim1=-2, dim2=-1).log().sum(-1))
    n = p.event_shape[0]
    batch = tuple(ember.broadcast_shapes(tuple(Lq.shape[:-2]), tuple(Lp.shape[:-2])))
    X = ember.linalg.solve_triangular(Lq.expand(batch + (n, n)), Lp.expand(batch + (n, n)),
                                      upper=False)
    term2 = X.square().sum((-2, -1))
    term3 = _batch_mahalanobis(Lq, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - n)


# ------------------------------------------------------------------ mixed families
@register_kl(Normal, Uniform)
def _kl_normal_uniform(p, q):
    return _inf_like(p.loc)


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    common_term = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / common_term).log()
    t2 = common_term.square() / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2).square()
    return t1 + 0.5 * (t2 + t3) / q.scale.square()


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p, q):
    common_term = p.high - p.low
    t1 = ember.lgamma(q.concentration) - q.concentration * q.rate.log()
    t2 = (q.concentration - 1) * (_x_log_x(p.high) - _x_log_x(p.low) - common_term) \
        / common_term
    t3 = q.rate * (p.high + p.low) / 2
    result = -common_term.log() + t1 - t2 + t3
    return ember.where(p.low < 0, math.inf, result)


@register_kl(Uniform, Exponential)
def _kl_uniform_exponetial(p, q):
    result = q.rate * (p.high + p.low) / 2 - ((p.high - p.low) * q.rate).log()
    return ember.where(p.low < 0, math.inf, result)


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p, q):
    common_term = p.high - p.low
    t1 = _x_log_x(1 - p.high) - _x_log_x(1 - p.low) + common_term
    t2 = _x_log_x(p.high) - _x_log_x(p.low) - common_term
    t3 = (ember.lgamma(q.concentration1) + ember.lgamma(q.concentration0)
          - ember.lgamma(q.concentration1 + q.concentration0))
    result = (-common_term.log() - (q.concentration1 - 1) * t2 / common_term
              + (q.concentration0 - 1) * t1 / common_term + t3)
    return ember.where((p.high > 1) | (p.low < 0), math.inf, result)


@register_kl(Exponential, Normal)
def _kl_exponential_normal(p, q):
    var_normal = q.scale.square()
    rate_sqr = p.rate.square()
    t1 = 0.5 * (rate_sqr * var_normal * 2 * math.pi).log()
    t2 = rate_sqr.reciprocal()
    t3 = q.loc / p.rate
    t4 = q.loc.square() * 0.5
    return t1 - 1 + (t2 - t3 + t4) / var_normal


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p, q):
    ratio = q.rate / p.rate
    t1 = -q.concentration * ratio.log()
    return t1 + ratio + ember.lgamma(q.concentration) + q.concentration * euler_constant \
        - (1 + euler_constant)


@register_kl(Gamma, Exponential)
def _kl_gamma_exponential(p, q):
    return _kl_gamma_gamma(p, Gamma(ember.ones_like(q.rate), q.rate))


@register_kl(Gamma, Normal)
def _kl_gamma_normal(p, q):
    var_normal = q.scale.square()
    beta_sqr = p.rate.square()
    t1 = (0.5 * (beta_sqr * var_normal * 2 * math.pi).log() - p.concentration
          - ember.lgamma(p.concentration))
    t2 = 0.5 * (p.concentration.square() + p.concentration) / beta_sqr
    t3 = q.loc * p.concentration / p.rate
    t4 = 0.5 * q.loc.square()
    return (t1 + (p.concentration - 1) * ember.digamma(p.concentration)
            + (t2 - t3 + t4) / var_normal)


@register_kl(Laplace, Normal)
def _kl_laplace_normal(p, q):
    var_normal = q.scale.square()
    scale_sqr_var_ratio = p.scale.square() / var_normal
    t1 = 0.5 * (2 * scale_sqr_var_ratio / math.pi).log()
    t2 = 0.5 * p.loc.square()
    t3 = p.loc * q.loc
    t4 = 0.5 * q.loc.square()
    return -t1 + scale_sqr_var_ratio + (t2 - t3 + t4) / var_normal - 1


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    return ember.where((q.low > 0) | (q.high < 1), math.inf, result)


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p, q):
    loc_diff = p.loc - q.loc
    scale_ratio = p.scale / q.scale
    loc_diff_scale_ratio = loc_diff / p.scale
    t1 = scale_ratio.log()
    t2 = math.sqrt(2 / math.pi) * p.scale * (-0.5 * loc_diff_scale_ratio.square()).exp()
    t3 = loc_diff * ember.erf(math.sqrt(0.5) * loc_diff_scale_ratio)
    return -t1 + (t2 + t3) / q.scale - (0.5 * (1 + math.log(0.5 * math.pi)))


@register_kl(Poisson, Bernoulli)
@register_kl(Poisson, Binomial)
def _kl_poisson_infinity(p, q):
    return _inf_like(p.rate)
