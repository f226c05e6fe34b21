"""MultivariateNormal (three parameterisations) and LowRankMultivariateNormal vs
scipy.stats.multivariate_normal; sample moments; gradients; KL; validation."""
import numpy as np
import pytest
from scipy import stats

import ember as em
import ember.distributions as D
from ember.autograd.gradcheck import gradcheck

RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3, 3))
S = A @ A.transpose(0, 2, 1) + np.eye(3)           # two SPD covariances
LOC = RNG.standard_normal((2, 3))
X = RNG.standard_normal((4, 2, 3))
W = RNG.standard_normal((2, 3, 2))
DIAG = RNG.uniform(0.5, 2.0, (2, 3))
C_LR = W @ W.transpose(0, 2, 1) + np.stack([np.diag(d) for d in DIAG])


def t(a, grad=False):
    return em.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _scipy(cov):
    return [stats.multivariate_normal(LOC[b], cov[b]) for b in range(2)]


MAKERS = {
    "covariance_matrix": (lambda: D.MultivariateNormal(t(LOC), covariance_matrix=t(S)), S),
    "precision_matrix": (lambda: D.MultivariateNormal(t(LOC), precision_matrix=t(
        np.linalg.inv(S))), S),
    "scale_tril": (lambda: D.MultivariateNormal(t(LOC), scale_tril=t(np.linalg.cholesky(S))),
                   S),
    "lowrank": (lambda: D.LowRankMultivariateNormal(t(LOC), t(W), t(DIAG)), C_LR),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_vs_scipy(name):
    make, cov = MAKERS[name]
    d, sd = make(), _scipy(cov)
    assert tuple(d.batch_shape) == (2,) and tuple(d.event_shape) == (3,)
    want = np.stack([[sd[b].logpdf(X[i, b]) for b in range(2)] for i in range(4)])
    np.testing.assert_allclose(d.log_prob(t(X)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(d.entropy().numpy(), [s.entropy() for s in sd], rtol=1e-12)
    np.testing.assert_allclose(d.covariance_matrix.numpy(), cov, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(d.precision_matrix.numpy(), np.linalg.inv(cov), rtol=1e-9,
                               atol=1e-11)
    np.testing.assert_allclose(d.scale_tril.numpy(), np.linalg.cholesky(cov), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(d.variance.numpy(), np.diagonal(cov, axis1=-2, axis2=-1),
                               rtol=1e-12)
    assert d.mean is d.loc or np.array_equal(d.mean.numpy(), LOC)


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_sample_moments(name):
    make, cov = MAKERS[name]
    n = 40000
    em.manual_seed(8)
    x = make().sample((n,)).numpy()
    assert x.shape == (n, 2, 3)
    var = np.diagonal(cov, axis1=-2, axis2=-1)
    assert np.all(np.abs(x.mean(0) - LOC) <= 5 * np.sqrt(var / n))
    for b in range(2):
        emp = np.cov(x[:, b].T)
        se = np.sqrt((cov[b] ** 2 + np.outer(var[b], var[b])) / n)   # Var of a Wishart entry
        assert np.all(np.abs(emp - cov[b]) <= 5 * se)


def test_gradients():
    loc = t([0.2, -0.1], grad=True)
    raw = t([[1.0, 0.0], [0.3, 0.8]], grad=True)

    def f(loc, raw):
        L = raw.tril()
        cov = L @ L.mT + 0.5 * em.eye(2, dtype=em.float64)
        d = D.MultivariateNormal(loc, covariance_matrix=cov)
        return d.log_prob(t([[0.5, 0.5], [-1.0, 2.0]])), d.entropy()
    assert gradcheck(f, (loc, raw))

    def g(loc, raw):
        return D.MultivariateNormal(loc, precision_matrix=raw @ raw.mT + em.eye(
            2, dtype=em.float64)).log_prob(t([0.5, 0.5]))
    assert gradcheck(g, (loc, raw))

    def h(loc, raw):
        em.manual_seed(0)
        return D.LowRankMultivariateNormal(loc, raw, raw[:, 0].exp()).rsample((3,))
    assert gradcheck(h, (loc, raw))


def test_kl_multivariate():
    p = MAKERS["covariance_matrix"][0]()
    q = D.MultivariateNormal(t([0.0, 1.0, -1.0]), scale_tril=t(np.diag([1.0, 2.0, 0.5])))
    Sq = np.diag([1.0, 4.0, 0.25])
    want = [0.5 * (np.trace(np.linalg.solve(Sq, S[b])) + (LOC[b] - [0, 1, -1]) @ np.linalg.solve(
        Sq, LOC[b] - [0, 1, -1]) - 3 + np.linalg.slogdet(Sq)[1] - np.linalg.slogdet(S[b])[1])
        for b in range(2)]
    np.testing.assert_allclose(D.kl_divergence(p, q).numpy(), want, rtol=1e-10)
    with pytest.raises(ValueError, match="different event shapes"):
        D.kl_divergence(p, D.MultivariateNormal(em.zeros(2), covariance_matrix=em.eye(2)))


def test_validation():
    with pytest.raises(ValueError, match="Exactly one of covariance_matrix"):
        D.MultivariateNormal(em.zeros(2))
    with pytest.raises(ValueError, match="at least one-dimensional"):
        D.MultivariateNormal(em.tensor(0.0), covariance_matrix=em.eye(1))
    with pytest.raises(ValueError, match="constraint PositiveDefinite"):
        D.MultivariateNormal(em.zeros(2), covariance_matrix=t([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="constraint LowerCholesky"):
        D.MultivariateNormal(em.zeros(2), scale_tril=t([[1.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="cov_factor must be a batch of matrices"):
        D.LowRankMultivariateNormal(em.zeros(2), em.zeros(3, 1), em.ones(2))
    e = MAKERS["scale_tril"][0]().expand((5, 2))
    assert tuple(e.batch_shape) == (5, 2) and tuple(e.sample().shape) == (5, 2, 3)


DF = np.array([4.5, 7.0])
WISHART = {
    "covariance_matrix": lambda: D.Wishart(t(DF), covariance_matrix=t(S)),
    "precision_matrix": lambda: D.Wishart(t(DF), precision_matrix=t(np.linalg.inv(S))),
    "scale_tril": lambda: D.Wishart(t(DF), scale_tril=t(np.linalg.cholesky(S))),
}


@pytest.mark.parametrize("name", sorted(WISHART))
def test_wishart_vs_scipy(name):
    d = WISHART[name]()
    sd = [stats.wishart(DF[b], S[b]) for b in range(2)]
    X = np.stack([[sd[b].rvs(random_state=r) for b in range(2)] for r in range(3)])
    want = [[sd[b].logpdf(X[r, b]) for b in range(2)] for r in range(3)]
    np.testing.assert_allclose(d.log_prob(t(X)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(d.entropy().numpy(), [s.entropy() for s in sd], rtol=1e-12)
    np.testing.assert_allclose(d.mean.numpy(), [s.mean() for s in sd], rtol=1e-10)
    np.testing.assert_allclose(d.variance.numpy(), [s.var() for s in sd], rtol=1e-10)
    np.testing.assert_allclose(d.mode.numpy(), [s.mode() if DF[b] > 4 else np.full((3, 3),
                                                np.nan) for b, s in enumerate(sd)], rtol=1e-10)


def test_wishart_samples_and_gradients():
    n = 40000
    em.manual_seed(12)
    d = WISHART["scale_tril"]()
    x = d.sample((n,)).numpy()
    assert bool(D.constraints.positive_definite.check(t(x[:50])).all())
    mean, var = d.mean.numpy(), d.variance.numpy()
    assert np.all(np.abs(x.mean(0) - mean) <= 5 * np.sqrt(var / n))
    raw = t([[1.0, 0.0], [0.3, 0.8]], grad=True)
    df = t(3.5, grad=True)

    def f(df, raw):
        cov = raw @ raw.mT + 0.5 * em.eye(2, dtype=em.float64)
        w = D.Wishart(df, covariance_matrix=cov)
        return w.log_prob(t([[2.0, 0.3], [0.3, 1.0]])), w.entropy()
    assert gradcheck(f, (df, raw))
    # NOTE: the pathwise gradient is unbiased: E[d X / d df] = d (df Sigma) / d df = Sigma
    em.manual_seed(3)
    dfs = t(np.full(n, 3.5)).requires_grad_(True)
    cov = t([[2.0, 0.5], [0.5, 1.0]])
    xs = D.Wishart(dfs, covariance_matrix=cov).rsample()
    (g,) = em.autograd.grad(xs[:, 0, 0].sum(), dfs)
    g = g.numpy()
    assert abs(g.mean() - 2.0) <= 5 * g.std() / np.sqrt(n)


def test_wishart_validation():
    with pytest.raises(ValueError, match="expected to be greater than ndim - 1"):
        D.Wishart(t(1.5), covariance_matrix=em.eye(3, dtype=em.float64))
    with pytest.raises(ValueError, match="Exactly one of"):
        D.Wishart(t(4.0))
