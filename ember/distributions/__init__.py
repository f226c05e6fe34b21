"""Probability distributions with PyTorch's API (``torch.distributions``).

``sample``/``rsample`` draw from Ember's generators (seeded by ``ember.manual_seed``,
traced as random nodes by ``ember.compile``); ``rsample`` is reparameterised (Normal,
Uniform, Laplace... by location-scale; Gamma, Beta, Dirichlet, Chi2, StudentT by implicit
reparameterisation through ``ember._standard_gamma``). ``log_prob``, ``entropy``, ``cdf``,
``icdf`` and ``kl_divergence`` are compositions of Ember ops, so they differentiate in every
parameter. Arguments are validated by default (PyTorch's error messages); validation reads
values into Python, so under ``ember.compile`` pass ``validate_args=False`` (or
``Distribution.set_default_validate_args(False)``) to capture one graph instead of breaking it.

Example:
    >>> import ember.distributions as D
    >>> q = D.Normal(ember.zeros(2), ember.ones(2))
    >>> D.kl_divergence(q, D.Normal(0.0, 1.0)).tolist()
    [0.0, 0.0]
"""
from . import constraints, transforms
from .bernoulli import Bernoulli, Geometric
from .binomial import Binomial, Multinomial, NegativeBinomial
from .categorical import Categorical, OneHotCategorical, OneHotCategoricalStraightThrough
from .constraint_registry import biject_to, transform_to
from .continuous_bernoulli import ContinuousBernoulli
from .dirichlet import Beta, Dirichlet
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .gamma import Chi2, Exponential, FisherSnedecor, Gamma
from .generalized_pareto import GeneralizedPareto
from .independent import Independent
from .kl import kl_divergence, register_kl
from . import _kl_mixed  # noqa: F401,E402 - registers the mixed-family KL pairs
from .kumaraswamy import Kumaraswamy
from .laplace import Cauchy, Gumbel, Laplace, StudentT
from .lkj_cholesky import LKJCholesky
from .lowrank_multivariate_normal import LowRankMultivariateNormal
from .mixture_same_family import MixtureSameFamily
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .poisson import Poisson
from .relaxed import (ExpRelaxedCategorical, LogitRelaxedBernoulli, RelaxedBernoulli,
                      RelaxedOneHotCategorical)
from .transformed_families import InverseGamma, LogisticNormal, Pareto, Weibull
from .transformed_distribution import HalfCauchy, HalfNormal, LogNormal, TransformedDistribution
from .transforms import *  # noqa: F401,F403
from .uniform import Uniform
from .von_mises import VonMises
from .wishart import Wishart

__all__ = ["Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2",
           "ContinuousBernoulli", "Dirichlet", "Distribution", "ExpRelaxedCategorical",
           "Exponential", "ExponentialFamily", "FisherSnedecor", "Gamma", "GeneralizedPareto",
           "Geometric", "Gumbel", "HalfCauchy", "HalfNormal", "Independent", "InverseGamma",
           "Kumaraswamy", "LKJCholesky", "Laplace", "LogNormal", "LogisticNormal",
           "LogitRelaxedBernoulli", "LowRankMultivariateNormal", "MixtureSameFamily",
           "Multinomial", "MultivariateNormal", "NegativeBinomial", "Normal",
           "OneHotCategorical", "OneHotCategoricalStraightThrough", "Pareto", "Poisson",
           "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT",
           "TransformedDistribution", "Uniform", "VonMises", "Weibull", "Wishart",
           "biject_to", "constraints", "kl_divergence", "register_kl", "transform_to",
           "transforms"]

# NOTE: PyTorch keeps one module per family (``torch.distributions.beta.Beta``); Ember groups
# small families in one module, and these aliases make PyTorch's module paths import.
_MODULE_ALIASES = {
    "beta": "dirichlet", "cauchy": "laplace", "chi2": "gamma", "exponential": "gamma",
    "fishersnedecor": "gamma", "geometric": "bernoulli", "gumbel": "laplace",
    "half_cauchy": "transformed_distribution", "half_normal": "transformed_distribution",
    "inverse_gamma": "transformed_families", "log_normal": "transformed_distribution",
    "logistic_normal": "transformed_families", "multinomial": "binomial",
    "negative_binomial": "binomial", "one_hot_categorical": "categorical",
    "pareto": "transformed_families", "relaxed_bernoulli": "relaxed",
    "relaxed_categorical": "relaxed", "studentT": "laplace", "weibull": "transformed_families",
}


def _install_module_aliases() -> None:
    import importlib
    import sys
    for alias, target in _MODULE_ALIASES.items():
        module = importlib.import_module(f"{__name__}.{target}")
        sys.modules[f"{__name__}.{alias}"] = module
        globals()[alias] = module


_install_module_aliases()
