"""Every family's log_prob / entropy / cdf / icdf / mean / variance against scipy.stats in
float64, on a batch of parameters (and values broadcast against it)."""
import numpy as np
import pytest
from scipy import special, stats

import ember as em
import ember.distributions as D

RTOL, ATOL = 1e-9, 1e-12
RNG = np.random.default_rng(18)
A = RNG.uniform(0.6, 4.0, 4)         # positive parameters
B = RNG.uniform(0.6, 4.0, 4)
LOC = RNG.uniform(-2.0, 2.0, 4)
P = RNG.uniform(0.1, 0.9, 4)
U = RNG.uniform(0.05, 0.95, (2, 4))   # quantile levels
REAL = RNG.uniform(-3.0, 3.0, (2, 4))
POS = RNG.uniform(0.05, 4.0, (2, 4))
UNIT = RNG.uniform(0.02, 0.98, (2, 4))
COUNTS = RNG.integers(0, 6, (2, 4)).astype(float)
SIMPLEX_P = RNG.dirichlet(np.ones(3), 4)   # (4, 3)
XI = np.array([-0.4, 0.0, 0.2, 0.45])     # generalized Pareto shapes (bounded .. heavy)


def t(a):
    return em.tensor(np.asarray(a, dtype=np.float64))


# name: (ember distribution, scipy frozen distribution, values, methods checked)
CASES = {
    "Normal": (lambda: D.Normal(t(LOC), t(A)), stats.norm(LOC, A), REAL,
               "log_prob entropy cdf icdf mean variance stddev"),
    "Uniform": (lambda: D.Uniform(t(LOC), t(LOC + A)), stats.uniform(LOC, A),
                LOC + UNIT * A, "log_prob entropy cdf icdf mean variance"),
    "Bernoulli": (lambda: D.Bernoulli(probs=t(P)), stats.bernoulli(P),
                  (UNIT > 0.5).astype(float), "log_prob entropy mean variance"),
    "Bernoulli(logits)": (lambda: D.Bernoulli(logits=t(np.log(P / (1 - P)))),
                          stats.bernoulli(P), (UNIT > 0.5).astype(float),
                          "log_prob entropy mean variance"),
    "Binomial": (lambda: D.Binomial(5, t(P)), stats.binom(5, P), COUNTS,
                 "log_prob entropy mean variance"),
    "Poisson": (lambda: D.Poisson(t(A)), stats.poisson(A), COUNTS, "log_prob mean variance"),
    "Geometric": (lambda: D.Geometric(t(P)), stats.geom(P, loc=-1), COUNTS,
                  "log_prob entropy mean variance"),
    "NegativeBinomial": (lambda: D.NegativeBinomial(t(A), t(P)), stats.nbinom(A, 1 - P),
                         COUNTS, "log_prob mean variance"),
    "Beta": (lambda: D.Beta(t(A), t(B)), stats.beta(A, B), UNIT,
             "log_prob entropy mean variance"),
    "Gamma": (lambda: D.Gamma(t(A), t(B)), stats.gamma(A, scale=1 / B), POS,
              "log_prob entropy cdf mean variance"),
    "Chi2": (lambda: D.Chi2(t(A)), stats.chi2(A), POS, "log_prob entropy mean variance"),
    "Exponential": (lambda: D.Exponential(t(A)), stats.expon(scale=1 / A), POS,
                    "log_prob entropy cdf icdf mean variance stddev"),
    "Laplace": (lambda: D.Laplace(t(LOC), t(A)), stats.laplace(LOC, A), REAL,
                "log_prob entropy cdf icdf mean variance stddev"),
    "LogNormal": (lambda: D.LogNormal(t(LOC), t(A / 4)), stats.lognorm(A / 4,
                                                                        scale=np.exp(LOC)),
                  POS, "log_prob entropy cdf icdf mean variance"),
    "StudentT": (lambda: D.StudentT(t(A + 2), t(LOC), t(B)), stats.t(A + 2, LOC, B), REAL,
                 "log_prob entropy mean variance"),
    "Cauchy": (lambda: D.Cauchy(t(LOC), t(A)), stats.cauchy(LOC, A), REAL,
               "log_prob entropy cdf icdf"),
    "HalfNormal": (lambda: D.HalfNormal(t(A)), stats.halfnorm(scale=A), POS,
                   "log_prob entropy cdf icdf mean variance"),
    "HalfCauchy": (lambda: D.HalfCauchy(t(A)), stats.halfcauchy(scale=A), POS,
                   "log_prob entropy cdf icdf"),
    "Gumbel": (lambda: D.Gumbel(t(LOC), t(A)), stats.gumbel_r(LOC, A), REAL,
               "log_prob entropy cdf icdf mean variance"),
    "Pareto": (lambda: D.Pareto(t(B), t(A + 2)), stats.pareto(A + 2, scale=B), B + POS,
               "log_prob entropy cdf icdf mean variance"),
    "Weibull": (lambda: D.Weibull(t(B), t(A)), stats.weibull_min(A, scale=B), POS,
                "log_prob entropy cdf icdf mean variance"),
    "InverseGamma": (lambda: D.InverseGamma(t(A + 2), t(B)), stats.invgamma(A + 2, scale=B),
                     POS, "log_prob entropy mean variance"),
    "FisherSnedecor": (lambda: D.FisherSnedecor(t(A + 2), t(B + 4)), stats.f(A + 2, B + 4),
                       POS, "log_prob mean variance"),
    "GeneralizedPareto": (lambda: D.GeneralizedPareto(t(LOC), t(A), t(XI)),
                          stats.genpareto(XI, LOC, A), LOC + UNIT * A,
                          "log_prob entropy cdf icdf mean variance"),
}

SCIPY_NAME = {"log_prob": None, "entropy": "entropy", "cdf": "cdf", "icdf": "ppf",
              "mean": "mean", "variance": "var", "stddev": "std"}

PAIRS = [(name, m) for name, case in CASES.items() for m in case[3].split()]


def _scipy_log_prob(sd, v):
    return sd.logpmf(v) if hasattr(sd.dist, "pmf") else sd.logpdf(v)


@pytest.mark.parametrize("name,method", PAIRS, ids=[f"{n}-{m}" for n, m in PAIRS])
def test_matches_scipy(name, method):
    make, sd, values, _ = CASES[name]
    d = make()
    if method == "log_prob":
        got, want = d.log_prob(t(values)), _scipy_log_prob(sd, values)
    elif method == "cdf":
        got, want = d.cdf(t(values)), sd.cdf(values)
    elif method == "icdf":
        got, want = d.icdf(t(U)), sd.ppf(U)
    elif method == "entropy":
        got, want = d.entropy(), sd.entropy()
    else:
        got, want = getattr(d, method), getattr(sd, SCIPY_NAME[method])()
    assert got.dtype == em.float64
    np.testing.assert_allclose(got.numpy(), np.broadcast_to(want, got.shape), rtol=RTOL,
                               atol=ATOL, err_msg=f"{name}.{method}")


def test_categorical_and_onehot_vs_scipy_multinomial():
    probs = t(SIMPLEX_P)
    idx = RNG.integers(0, 3, (2, 4))
    one_hot = np.eye(3)[idx]
    sd = [stats.multinomial(1, SIMPLEX_P[i]) for i in range(4)]
    want_lp = np.array([[sd[i].logpmf(one_hot[r, i]) for i in range(4)] for r in range(2)])
    want_h = np.array([s.entropy() for s in sd])
    for d in (D.Categorical(probs), D.Categorical(logits=t(np.log(SIMPLEX_P) + 3.0))):
        np.testing.assert_allclose(d.log_prob(em.tensor(idx)).numpy(), want_lp, rtol=RTOL)
        np.testing.assert_allclose(d.entropy().numpy(), want_h, rtol=RTOL)
    oh = D.OneHotCategorical(probs)
    np.testing.assert_allclose(oh.log_prob(t(one_hot)).numpy(), want_lp, rtol=RTOL)
    np.testing.assert_allclose(oh.entropy().numpy(), want_h, rtol=RTOL)
    np.testing.assert_allclose(oh.variance.numpy(), SIMPLEX_P * (1 - SIMPLEX_P), rtol=RTOL)


def test_multinomial_vs_scipy():
    counts = np.array([[2.0, 0.0, 3.0], [1.0, 1.0, 3.0], [0.0, 5.0, 0.0], [4.0, 1.0, 0.0]])
    d = D.Multinomial(5, t(SIMPLEX_P))
    sd = [stats.multinomial(5, SIMPLEX_P[i]) for i in range(4)]
    np.testing.assert_allclose(d.log_prob(t(counts)).numpy(),
                               [s.logpmf(c) for s, c in zip(sd, counts)], rtol=RTOL)
    np.testing.assert_allclose(d.entropy().numpy(), [s.entropy() for s in sd], rtol=RTOL)
    np.testing.assert_allclose(d.mean.numpy(), 5 * SIMPLEX_P, rtol=RTOL)
    np.testing.assert_allclose(d.variance.numpy(), [np.diag(s.cov()) for s in sd], rtol=RTOL)


def test_dirichlet_vs_scipy():
    alpha = RNG.uniform(0.5, 3.0, (4, 3))
    x = RNG.dirichlet(np.ones(3), 4)
    d = D.Dirichlet(t(alpha))
    sd = [stats.dirichlet(a) for a in alpha]
    np.testing.assert_allclose(d.log_prob(t(x)).numpy(),
                               [s.logpdf(v) for s, v in zip(sd, x)], rtol=RTOL)
    np.testing.assert_allclose(d.entropy().numpy(), [s.entropy() for s in sd], rtol=RTOL)
    np.testing.assert_allclose(d.mean.numpy(), [s.mean() for s in sd], rtol=RTOL)
    np.testing.assert_allclose(d.variance.numpy(), [s.var() for s in sd], rtol=RTOL)


def test_modes():
    np.testing.assert_allclose(D.Gamma(t(A), t(B)).mode.numpy(),
                               np.maximum((A - 1) / B, 0), rtol=RTOL)
    np.testing.assert_allclose(D.LogNormal(t(LOC), t(A)).mode.numpy(),
                               np.exp(LOC - A ** 2), rtol=RTOL)
    np.testing.assert_allclose(D.Beta(t(A + 1), t(B + 1)).mode.numpy(),
                               A / (A + B), rtol=RTOL)
    np.testing.assert_allclose(D.Binomial(5, t(P)).mode.numpy(),
                               np.minimum(np.floor(6 * P), 5), rtol=RTOL)
    assert D.Categorical(t(SIMPLEX_P)).mode.tolist() == SIMPLEX_P.argmax(-1).tolist()
    assert np.isnan(D.Uniform(0.0, 1.0).mode.item())


def test_von_mises_vs_scipy_and_samples():
    d = D.VonMises(t(LOC), t(A))
    sd = stats.vonmises(A, loc=LOC)
    x = RNG.uniform(-np.pi, np.pi, (2, 4))
    np.testing.assert_allclose(d.log_prob(t(x)).numpy(), sd.logpdf(x), rtol=RTOL, atol=ATOL)
    r = special.i1e(A) / special.i0e(A)               # mean resultant length
    np.testing.assert_allclose(d.variance.numpy(), 1 - r, rtol=RTOL)
    em.manual_seed(4)
    n = 20000
    s = d.sample((n,)).numpy()
    assert np.all((s >= -np.pi) & (s < np.pi))
    c = np.cos(s - LOC)
    var_c = 0.5 * (1 + special.i0e(A) ** -1 * special.ive(2, A)) - r ** 2   # Var cos(x - loc)
    assert np.all(np.abs(c.mean(0) - r) <= 5 * np.sqrt(var_c / n))
