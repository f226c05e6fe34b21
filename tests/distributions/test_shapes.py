"""Every family: sample/rsample/log_prob/entropy shapes, expand (same log_prob as
broadcasting), sample validity (in the support), repr, and float32 parameters staying
float32."""
import numpy as np
import pytest

import ember as em
import ember.distributions as D

RNG = np.random.default_rng(11)


def t(a, dtype=em.float64):
    return em.tensor(np.asarray(a, dtype=np.float64), dtype=dtype)


def pos(dt):
    return t(RNG.uniform(0.5, 3.0, 3), dt)


def real(dt):
    return t(RNG.uniform(-1.0, 1.0, 3), dt)


def prob(dt):
    return t(RNG.uniform(0.1, 0.9, 3), dt)


def simplex(dt):
    return t(RNG.dirichlet(np.ones(4), 3), dt)


FAMILIES = {
    "Normal": lambda dt: D.Normal(real(dt), pos(dt)),
    "Uniform": lambda dt: D.Uniform(real(dt) - 2, pos(dt)),
    "Bernoulli": lambda dt: D.Bernoulli(prob(dt)),
    "Categorical": lambda dt: D.Categorical(simplex(dt)),
    "OneHotCategorical": lambda dt: D.OneHotCategorical(simplex(dt)),
    "Binomial": lambda dt: D.Binomial(5, prob(dt)),
    "Poisson": lambda dt: D.Poisson(pos(dt)),
    "Beta": lambda dt: D.Beta(pos(dt), pos(dt)),
    "Gamma": lambda dt: D.Gamma(pos(dt), pos(dt)),
    "Dirichlet": lambda dt: D.Dirichlet(simplex(dt) + 0.5),
    "Exponential": lambda dt: D.Exponential(pos(dt)),
    "Laplace": lambda dt: D.Laplace(real(dt), pos(dt)),
    "LogNormal": lambda dt: D.LogNormal(real(dt), pos(dt)),
    "StudentT": lambda dt: D.StudentT(pos(dt), real(dt), pos(dt)),
    "Cauchy": lambda dt: D.Cauchy(real(dt), pos(dt)),
    "HalfNormal": lambda dt: D.HalfNormal(pos(dt)),
    "HalfCauchy": lambda dt: D.HalfCauchy(pos(dt)),
    "Geometric": lambda dt: D.Geometric(prob(dt)),
    "Chi2": lambda dt: D.Chi2(pos(dt)),
    "Gumbel": lambda dt: D.Gumbel(real(dt), pos(dt)),
    "Multinomial": lambda dt: D.Multinomial(6, simplex(dt)),
    "NegativeBinomial": lambda dt: D.NegativeBinomial(pos(dt), prob(dt)),
    "VonMises": lambda dt: D.VonMises(real(dt), pos(dt)),
    "MultivariateNormal": lambda dt: D.MultivariateNormal(
        real(dt), covariance_matrix=t(np.diag([1.0, 2.0, 0.5]) + 0.2, dt)),
    "LowRankMultivariateNormal": lambda dt: D.LowRankMultivariateNormal(
        real(dt), t(RNG.standard_normal((3, 2)), dt), pos(dt)),
    "Independent": lambda dt: D.Independent(D.Normal(real(dt), pos(dt)), 1),
    "MixtureSameFamily": lambda dt: D.MixtureSameFamily(
        D.Categorical(simplex(dt)), D.Normal(t(RNG.standard_normal((3, 4)), dt), 1.0)),
    "RelaxedBernoulli": lambda dt: D.RelaxedBernoulli(t(0.5, dt), prob(dt)),
    "RelaxedOneHotCategorical": lambda dt: D.RelaxedOneHotCategorical(t(0.5, dt),
                                                                       simplex(dt)),
    "TransformedDistribution": lambda dt: D.TransformedDistribution(
        D.Normal(real(dt), pos(dt)), [D.transforms.TanhTransform()]),
    "Pareto": lambda dt: D.Pareto(pos(dt), pos(dt)),
    "Weibull": lambda dt: D.Weibull(pos(dt), pos(dt)),
    "InverseGamma": lambda dt: D.InverseGamma(pos(dt), pos(dt)),
    "FisherSnedecor": lambda dt: D.FisherSnedecor(pos(dt), pos(dt)),
    "LogisticNormal": lambda dt: D.LogisticNormal(real(dt), pos(dt)),
    "Kumaraswamy": lambda dt: D.Kumaraswamy(pos(dt), pos(dt)),
    "ContinuousBernoulli": lambda dt: D.ContinuousBernoulli(prob(dt)),
    "GeneralizedPareto": lambda dt: D.GeneralizedPareto(real(dt), pos(dt), real(dt) / 3),
    "LKJCholesky": lambda dt: D.LKJCholesky(3, pos(dt)),
    "Wishart": lambda dt: D.Wishart(pos(dt) + 3, covariance_matrix=t(
        np.diag([1.0, 2.0, 0.5]) + 0.2, dt)),
}


def test_every_exported_family_is_listed():
    exported = {n for n in D.__all__ if isinstance(getattr(D, n), type)
                and issubclass(getattr(D, n), D.Distribution)}
    base = {"Distribution", "ExponentialFamily", "ExpRelaxedCategorical",
            "LogitRelaxedBernoulli", "OneHotCategoricalStraightThrough"}
    assert exported - base - set(FAMILIES) == set()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_shapes_expand_and_support(name):
    em.manual_seed(0)
    d = FAMILIES[name](em.float64)
    batch, event = tuple(d.batch_shape), tuple(d.event_shape)
    x = d.sample((5,))
    assert tuple(x.shape) == (5,) + batch + event
    assert bool(d.support.check(x).all()), name
    lp = d.log_prob(x)
    assert tuple(lp.shape) == (5,) + batch and bool(lp.isfinite().all())
    if d.has_rsample:
        assert tuple(d.rsample((2, 1)).shape) == (2, 1) + batch + event
    e = d.expand((4,) + batch)
    assert tuple(e.batch_shape) == (4,) + batch and tuple(e.event_shape) == event
    assert tuple(e.sample().shape) == (4,) + batch + event
    np.testing.assert_allclose(e.log_prob(x[:1]).numpy(),
                               np.broadcast_to(lp[:1].numpy(), (4,) + batch), rtol=1e-12)
    assert repr(d).startswith(type(d).__name__ + "(")
    try:
        h = d.entropy()
    except NotImplementedError:
        return
    assert tuple(h.shape) == batch


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_float32_parameters_give_float32(name):
    em.manual_seed(0)
    d = FAMILIES[name](em.float32)
    x = d.sample((2,))
    if x.dtype.is_floating_point:
        assert x.dtype == em.float32, name
    assert d.log_prob(x).dtype == em.float32, name
