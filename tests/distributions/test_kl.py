"""kl_divergence: every registered pair against a Monte-Carlo estimate E_p[log p - log q]
(5 standard errors, fixed seed) or, for discrete p, the exact sum over the support; the
registry's dispatch rules."""
import warnings

import numpy as np
import pytest

import ember as em
import ember.distributions as D
from ember.distributions.kl import _KL_REGISTRY


def t(a):
    return em.tensor(np.asarray(a, dtype=np.float64))


LOWRANK = D.LowRankMultivariateNormal(t([[0.0, 1.0, 0.5]]), t([[[1.0], [0.5], [0.2]]]),
                                      t([[1.0, 2.0, 0.5]]))
LOWRANK2 = D.LowRankMultivariateNormal(t([[0.5, 0.0, 0.0]]), t([[[0.3], [0.1], [1.0]]]),
                                       t([[2.0, 1.0, 1.0]]))
MVN = D.MultivariateNormal(t([[0.5, 0.0, 0.0]]), scale_tril=t([[[1.0, 0.0, 0.0],
                                                               [0.3, 2.0, 0.0],
                                                               [0.0, 0.5, 1.0]]]))

# (p, q) pairs, each batched over 2 parameter sets.
PAIRS = {
    "Normal-Normal": (D.Normal(t([0.0, 1.0]), t([1.0, 0.5])),
                      D.Normal(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Laplace-Laplace": (D.Laplace(t([0.0, 1.0]), t([1.0, 0.5])),
                        D.Laplace(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Gamma-Gamma": (D.Gamma(t([2.0, 0.7]), t([1.0, 3.0])), D.Gamma(t([1.5, 1.0]), t([2.0, 1.0]))),
    "Beta-Beta": (D.Beta(t([2.0, 0.7]), t([1.0, 3.0])), D.Beta(t([1.5, 1.0]), t([2.0, 1.0]))),
    "Exponential-Exponential": (D.Exponential(t([2.0, 0.7])), D.Exponential(t([1.0, 3.0]))),
    "Uniform-Uniform": (D.Uniform(t([0.0, 1.0]), t([1.0, 2.0])),
                        D.Uniform(t([-1.0, 0.5]), t([2.0, 3.0]))),
    "Dirichlet-Dirichlet": (D.Dirichlet(t([[1.0, 2.0, 3.0], [0.5, 0.5, 2.0]])),
                            D.Dirichlet(t([[2.0, 2.0, 1.0], [1.0, 1.0, 1.0]]))),
    "Gumbel-Gumbel": (D.Gumbel(t([0.0, 1.0]), t([1.0, 0.5])),
                      D.Gumbel(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Cauchy-Cauchy": (D.Cauchy(t([0.0, 1.0]), t([1.0, 0.5])),
                      D.Cauchy(t([0.5, -1.0]), t([2.0, 1.5]))),
    "LogNormal-LogNormal": (D.LogNormal(t([0.0, 1.0]), t([1.0, 0.5])),
                            D.LogNormal(t([0.5, -1.0]), t([2.0, 1.5]))),
    "HalfNormal-HalfNormal": (D.HalfNormal(t([1.0, 0.5])), D.HalfNormal(t([2.0, 0.3]))),
    "Independent-Independent": (D.Independent(D.Normal(t([0.0, 1.0]), t([1.0, 0.5])), 1),
                                D.Independent(D.Normal(t([0.5, 0.0]), t([2.0, 1.5])), 1)),
    "Uniform-Normal": (D.Uniform(t([0.0, 1.0]), t([1.0, 3.0])),
                       D.Normal(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Uniform-Gamma": (D.Uniform(t([0.5, 1.0]), t([1.0, 3.0])),
                      D.Gamma(t([1.5, 2.0]), t([2.0, 1.5]))),
    "Uniform-Exponential": (D.Uniform(t([0.5, 1.0]), t([1.0, 3.0])), D.Exponential(t([2.0, 0.4]))),
    "Uniform-Beta": (D.Uniform(t([0.1, 0.3]), t([0.5, 0.9])),
                     D.Beta(t([1.5, 2.0]), t([2.0, 1.5]))),
    "Exponential-Normal": (D.Exponential(t([2.0, 0.7])), D.Normal(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Exponential-Gamma": (D.Exponential(t([2.0, 0.7])), D.Gamma(t([1.5, 1.0]), t([2.0, 1.0]))),
    "Gamma-Exponential": (D.Gamma(t([2.0, 0.7]), t([1.0, 3.0])), D.Exponential(t([1.0, 3.0]))),
    "Gamma-Normal": (D.Gamma(t([2.0, 0.7]), t([1.0, 3.0])),
                     D.Normal(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Laplace-Normal": (D.Laplace(t([0.0, 1.0]), t([1.0, 0.5])),
                       D.Normal(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Normal-Laplace": (D.Normal(t([0.0, 1.0]), t([1.0, 0.5])),
                       D.Laplace(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Beta-Uniform": (D.Beta(t([2.0, 0.7]), t([1.0, 3.0])),
                     D.Uniform(t([-0.5, 0.0]), t([1.0, 2.0]))),
    "Beta-Exponential": (D.Beta(t([2.0, 0.7]), t([1.0, 3.0])), D.Exponential(t([1.0, 3.0]))),
    "Beta-Gamma": (D.Beta(t([2.0, 0.7]), t([1.0, 3.0])), D.Gamma(t([1.5, 0.8]), t([2.0, 1.0]))),
    "Beta-Normal": (D.Beta(t([2.0, 0.7]), t([1.0, 3.0])), D.Normal(t([0.5, -1.0]), t([2.0, 0.5]))),
    "Beta-ContinuousBernoulli": (D.Beta(t([2.0, 0.7]), t([1.0, 3.0])),
                                 D.ContinuousBernoulli(t([0.3, 0.8]))),
    "ContinuousBernoulli-ContinuousBernoulli": (D.ContinuousBernoulli(t([0.2, 0.6])),
                                                D.ContinuousBernoulli(t([0.7, 0.4999]))),
    "ContinuousBernoulli-Exponential": (D.ContinuousBernoulli(t([0.2, 0.6])),
                                        D.Exponential(t([1.0, 3.0]))),
    "ContinuousBernoulli-Normal": (D.ContinuousBernoulli(t([0.2, 0.6])),
                                   D.Normal(t([0.5, -1.0]), t([2.0, 0.5]))),
    "ContinuousBernoulli-Uniform": (D.ContinuousBernoulli(t([0.2, 0.6])),
                                    D.Uniform(t([-0.5, 0.0]), t([1.0, 2.0]))),
    "Uniform-ContinuousBernoulli": (D.Uniform(t([0.1, 0.3]), t([0.5, 1.0])),
                                    D.ContinuousBernoulli(t([0.2, 0.6]))),
    "Exponential-Gumbel": (D.Exponential(t([2.0, 0.7])), D.Gumbel(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Gamma-Gumbel": (D.Gamma(t([2.0, 0.7]), t([1.0, 3.0])),
                     D.Gumbel(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Gumbel-Normal": (D.Gumbel(t([0.0, 1.0]), t([1.0, 0.5])),
                      D.Normal(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Normal-Gumbel": (D.Normal(t([0.0, 1.0]), t([1.0, 0.5])),
                      D.Gumbel(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Uniform-Gumbel": (D.Uniform(t([0.0, 1.0]), t([1.0, 3.0])),
                       D.Gumbel(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Pareto-Exponential": (D.Pareto(t([1.0, 0.5]), t([3.0, 5.0])), D.Exponential(t([1.0, 3.0]))),
    "Pareto-Gamma": (D.Pareto(t([1.0, 0.5]), t([3.0, 5.0])), D.Gamma(t([1.5, 0.8]), t([2.0, 1.0]))),
    "Pareto-Normal": (D.Pareto(t([1.0, 0.5]), t([5.0, 6.0])),
                      D.Normal(t([0.5, -1.0]), t([2.0, 1.5]))),
    "Pareto-Pareto": (D.Pareto(t([1.0, 0.5]), t([3.0, 5.0])),
                      D.Pareto(t([0.5, 0.4]), t([2.0, 6.0]))),
    "Uniform-Pareto": (D.Uniform(t([1.0, 0.6]), t([2.0, 3.0])),
                       D.Pareto(t([0.5, 0.4]), t([2.0, 6.0]))),
    "LowRank-LowRank": (LOWRANK, LOWRANK2),
    "LowRank-MVN": (LOWRANK, MVN),
    "MVN-LowRank": (MVN, LOWRANK),
}

DISCRETE = {
    "Bernoulli-Bernoulli": (D.Bernoulli(t([0.2, 0.7])), D.Bernoulli(t([0.5, 0.1])), range(2)),
    "Poisson-Poisson": (D.Poisson(t([2.0, 0.7])), D.Poisson(t([1.0, 3.0])), range(80)),
    "Geometric-Geometric": (D.Geometric(t([0.3, 0.7])), D.Geometric(t([0.5, 0.2])), range(200)),
    "Binomial-Binomial": (D.Binomial(6, t([0.3, 0.7])), D.Binomial(6, t([0.5, 0.2])), range(7)),
    "Bernoulli-Poisson": (D.Bernoulli(t([0.2, 0.7])), D.Poisson(t([0.5, 3.0])), range(2)),
    "Categorical-Categorical": (D.Categorical(t([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])),
                                D.Categorical(t([[0.4, 0.4, 0.2], [0.1, 0.1, 0.8]])), range(3)),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_kl_matches_monte_carlo(name):
    p, q = PAIRS[name]
    n = 200000
    em.manual_seed(2024)
    x = p.sample((n,))
    d = (p.log_prob(x) - q.log_prob(x)).numpy()
    mc, se = d.mean(0), d.std(0) / np.sqrt(n)
    kl = D.kl_divergence(p, q)
    assert tuple(kl.shape) == tuple(p.batch_shape)
    np.testing.assert_array_less(np.abs(kl.numpy() - mc), 5 * se + 1e-9, err_msg=name)


@pytest.mark.parametrize("name", sorted(DISCRETE))
def test_kl_matches_exact_sum(name):
    p, q, support = DISCRETE[name]
    xs = t(list(support)).reshape(-1, 1)
    lp, lq = p.log_prob(xs), q.log_prob(xs)
    exact = (lp.exp() * (lp - lq)).sum(0)
    np.testing.assert_allclose(D.kl_divergence(p, q).numpy(), exact.numpy(), rtol=1e-10)


def test_onehot_and_infinite_cases():
    a, b = t([[0.2, 0.8]]), t([[0.5, 0.5]])
    np.testing.assert_allclose(
        D.kl_divergence(D.OneHotCategorical(a), D.OneHotCategorical(b)).numpy(),
        D.kl_divergence(D.Categorical(a), D.Categorical(b)).numpy())
    assert D.kl_divergence(D.Normal(0.0, 1.0), D.Uniform(0.0, 1.0)).item() == float("inf")
    outside = D.kl_divergence(D.Uniform(t([0.0]), t([2.0])), D.Uniform(t([0.5]), t([3.0])))
    assert outside.item() == float("inf")
    zero_q = D.kl_divergence(D.Bernoulli(t([0.5])), D.Bernoulli(t([0.0])))
    assert zero_q.item() == float("inf")
    assert D.kl_divergence(D.Poisson(t([1.0])), D.Bernoulli(t([0.5]))).item() == float("inf")
    assert D.kl_divergence(D.Normal(t([0.3]), t([2.0])),
                           D.Normal(t([0.3]), t([2.0]))).item() == 0.0


def test_registry_dispatch_not_implemented_and_ambiguity():
    with pytest.raises(NotImplementedError, match="No KL.*Cauchy.*Normal"):
        D.kl_divergence(D.Cauchy(0.0, 1.0), D.Normal(0.0, 1.0))
    with pytest.raises(NotImplementedError, match="different exponential families"):
        D.kl_divergence(D.Poisson(t([1.0])), D.Normal(0.0, 1.0))     # as PyTorch

    class MyNormal(D.Normal):
        pass

    class MyUniform(D.Uniform):
        pass
    # NOTE: a subclass pair dispatches to its parents' rule
    np.testing.assert_allclose(D.kl_divergence(MyNormal(0.0, 1.0), MyNormal(1.0, 1.0)).item(),
                               0.5)
    try:
        @D.register_kl(MyNormal, D.Distribution)
        def _a(p, q):
            return "a"

        @D.register_kl(D.Distribution, MyUniform)
        def _b(p, q):
            return "b"
        with pytest.warns(RuntimeWarning, match="Ambiguous kl_divergence"):
            assert D.kl_divergence(MyNormal(0.0, 1.0), MyUniform(0.0, 1.0)) == "a"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert D.kl_divergence(MyNormal(0.0, 1.0), D.Cauchy(0.0, 1.0)) == "a"
    finally:
        _KL_REGISTRY.pop((MyNormal, D.Distribution), None)
        _KL_REGISTRY.pop((D.Distribution, MyUniform), None)
        D.kl.__dict__["_KL_MEMOIZE"].clear()
    with pytest.raises(TypeError, match="Distribution subclass"):
        D.register_kl(int, D.Normal)


@pytest.mark.parametrize("p,q", [(D.Normal(0.0, 1.0), D.Exponential(1.0)),
                                 (D.Gamma(2.0, 1.0), D.Beta(2.0, 2.0)),
                                 (D.Exponential(1.0), D.Pareto(0.5, 3.0)),
                                 (D.Gumbel(0.0, 1.0), D.Uniform(0.0, 1.0)),
                                 (D.Pareto(1.0, 3.0), D.Uniform(0.0, 9.0)),
                                 (D.Pareto(0.5, 3.0), D.Pareto(1.0, 3.0)),
                                 (D.Laplace(0.0, 1.0), D.ContinuousBernoulli(0.3))])
def test_kl_infinite_where_p_leaves_q_support(p, q):
    assert D.kl_divergence(p, q).item() == float("inf")


def test_exponential_family_bregman_forms_match_closed_forms():
    """ExponentialFamily's generic entropy and KL (Bregman divergences of the log-normaliser,
    by autograd) agree with each family's closed form; a user subclass inherits them."""
    from ember.distributions.exp_family import _kl_expfamily_expfamily
    pairs = [(D.Normal(t([0.0, 1.0]), t([1.0, 0.5])), D.Normal(t([0.5, -1.0]), t([2.0, 1.5]))),
             (D.Bernoulli(t([0.2, 0.7])), D.Bernoulli(t([0.5, 0.1]))),
             (D.Gamma(t([2.0, 0.7]), t([1.0, 3.0])), D.Gamma(t([1.5, 1.0]), t([2.0, 1.0]))),
             (D.Exponential(t([2.0, 0.7])), D.Exponential(t([1.0, 3.0]))),
             (D.Poisson(t([2.0, 0.7])), D.Poisson(t([1.0, 3.0]))),
             (D.Beta(t([2.0, 0.7]), t([1.0, 3.0])), D.Beta(t([1.5, 1.0]), t([2.0, 1.0]))),
             (D.Dirichlet(t([[1.0, 2.0, 3.0]])), D.Dirichlet(t([[2.0, 2.0, 1.0]])))]
    for p, q in pairs:
        np.testing.assert_allclose(_kl_expfamily_expfamily(p, q).detach().numpy(),
                                   D.kl_divergence(p, q).numpy(), rtol=1e-9, err_msg=repr(p))
        if isinstance(p, (D.Normal, D.Bernoulli, D.Gamma, D.Exponential)):
            np.testing.assert_allclose(D.ExponentialFamily.entropy(p).detach().numpy(),
                                       p.entropy().numpy(), rtol=1e-9, err_msg=repr(p))
    with pytest.raises(NotImplementedError, match="different exponential families"):
        _kl_expfamily_expfamily(D.Normal(0.0, 1.0), D.Exponential(1.0))

    class Scaled(D.ExponentialFamily):       # Exponential again, with only the Bregman parts
        arg_constraints = {}

        def __init__(self, rate):
            self.rate = rate
            super().__init__(rate.shape)

        @property
        def _natural_params(self):
            return (-self.rate,)

        def _log_normalizer(self, x):
            return -(-x).log()

        _mean_carrier_measure = 0
    np.testing.assert_allclose(D.kl_divergence(Scaled(t([2.0])), Scaled(t([0.5]))).detach().numpy(),
                               D.kl_divergence(D.Exponential(t([2.0])),
                                               D.Exponential(t([0.5]))).numpy(), rtol=1e-12)
    np.testing.assert_allclose(Scaled(t([2.0])).entropy().detach().numpy(), 1 - np.log(2.0),
                               rtol=1e-12)
