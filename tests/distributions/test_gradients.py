"""Gradients: reparameterised samples vs finite differences (same seed at every
evaluation), Gamma's implicit gradient vs the quantile function's derivative
(scipy.special.gammaincinv), unbiasedness of Beta/Dirichlet/Chi2 pathwise gradients, and
gradcheck of log_prob / entropy / kl_divergence in the parameters."""
import numpy as np
import pytest
from scipy import special

import ember as em
import ember.distributions as D
from ember.autograd.gradcheck import gradcheck


def t(a, grad=False):
    return em.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


P1 = np.array([-0.7, 0.4, 1.3])
P2 = np.array([0.6, 1.1, 2.2])

# name: (parameters, distribution from those parameters)
RSAMPLE = {
    "Normal": ((P1, P2), lambda a, b: D.Normal(a, b)),
    "Uniform": ((P1, P1 + P2), lambda a, b: D.Uniform(a, b)),
    "Laplace": ((P1, P2), lambda a, b: D.Laplace(a, b)),
    "Cauchy": ((P1, P2), lambda a, b: D.Cauchy(a, b)),
    "Gumbel": ((P1, P2), lambda a, b: D.Gumbel(a, b)),
    "Exponential": ((P2,), lambda a: D.Exponential(a)),
    "LogNormal": ((P1, P2 / 3), lambda a, b: D.LogNormal(a, b)),
    "HalfNormal": ((P2,), lambda a: D.HalfNormal(a)),
    "RelaxedBernoulli": ((np.array([0.5]), P2 / 3), lambda tau, p: D.RelaxedBernoulli(tau, p)),
    "RelaxedOneHotCategorical": ((np.array(0.7), P1), lambda tau, lg: D.RelaxedOneHotCategorical(
        tau, logits=lg)),
    "Independent(Normal)": ((P1, P2), lambda a, b: D.Independent(D.Normal(a, b), 1)),
    "Pareto": ((P2, P2 + 1), lambda a, b: D.Pareto(a, b)),
    "Weibull": ((P2, P2 + 0.5), lambda a, b: D.Weibull(a, b)),
    "LogisticNormal": ((P1, P2), lambda a, b: D.LogisticNormal(a, b)),
    "GeneralizedPareto": ((P1, P2, np.array([-0.3, 0.1, 0.4])),
                          lambda a, b, c: D.GeneralizedPareto(a, b, c)),
}


@pytest.mark.parametrize("name", sorted(RSAMPLE))
def test_rsample_gradient_matches_finite_differences(name):
    params, make = RSAMPLE[name]
    w = np.random.default_rng(0).standard_normal((4,) + tuple(
        make(*[t(p) for p in params]).rsample().shape))

    def f(*ps):
        em.manual_seed(42)                       # NOTE: the same noise at every call
        return (make(*ps).rsample((4,)) * t(w)).sum()

    ts = [t(p, grad=True) for p in params]
    grads = em.autograd.grad(f(*ts), ts)
    h = 1e-6
    for i, p in enumerate(params):
        fd = np.zeros(p.shape)
        for j in np.ndindex(p.shape):
            up, dn = [q.copy() for q in params], [q.copy() for q in params]
            up[i][j] += h
            dn[i][j] -= h
            fd[j] = (float(f(*map(t, up))) - float(f(*map(t, dn)))) / (2 * h)
        np.testing.assert_allclose(grads[i].numpy(), fd, rtol=1e-6, atol=1e-8,
                                   err_msg=f"{name}: parameter {i}")


@pytest.mark.parametrize("alpha", [0.01, 0.2, 0.9, 1.0, 3.7, 12.0, 150.0, 1e4, 1e6])
def test_gamma_implicit_gradient_vs_quantile_derivative(alpha):
    em.manual_seed(0)
    a = t(np.full(2000, alpha), grad=True)
    x = em._standard_gamma(a)
    (g,) = em.autograd.grad(x.sum(), a)
    a64, x64 = np.full(2000, alpha), x.detach().numpy()
    u = special.gammainc(a64, x64)
    ok = (u > 1e-12) & (u < 1 - 1e-12)           # NOTE: gammaincinv is inaccurate at 0 / 1
    h = 1e-5 * min(alpha, np.sqrt(alpha))         # NOTE: F moves with alpha on this scale
    fd = (special.gammaincinv(a64 + h, u) - special.gammaincinv(a64 - h, u)) / (2 * h)
    assert ok.mean() > 0.9
    np.testing.assert_allclose(g.numpy()[ok], fd[ok], rtol=1e-5, atol=1e-300)


def test_gamma_rsample_gradient_in_rate_and_float32():
    em.manual_seed(1)
    c, r = t([2.0, 0.5], grad=True), t([3.0, 0.25], grad=True)
    x = D.Gamma(c, r).rsample()
    gc, gr = em.autograd.grad(x.sum(), [c, r])
    np.testing.assert_allclose(gr.numpy(), -x.detach().numpy() / r.detach().numpy(),
                               rtol=1e-12)
    assert bool((gc > 0).all())
    c32 = em.tensor([2.0, 0.5], dtype=em.float32, requires_grad=True)
    x32 = em._standard_gamma(c32)
    (g32,) = em.autograd.grad(x32.sum(), c32)
    assert x32.dtype == em.float32 and g32.dtype == em.float32 and bool((g32 > 0).all())


def _c(v):
    return t(np.broadcast_to(np.asarray(v, dtype=np.float64), (20000, len(v))).copy())


# name: (theta, sample of one draw per row of an (n, k) leaf, d E[sample] / d theta)
PATHWISE = {
    "Gamma": ([0.3, 2.5], lambda th: D.Gamma(th, 2.0).rsample(), lambda th: np.full(2, 0.5)),
    "Chi2": ([0.7, 3.0], lambda th: D.Chi2(th).rsample(), lambda th: np.ones(2)),
    "StudentT(loc)": ([0.5, -1.0], lambda th: D.StudentT(5.0, th, 2.0).rsample(),
                      lambda th: np.ones(2)),
    "Beta": ([0.5, 2.0], lambda th: D.Beta(th, _c([1.5, 3.0])).rsample(),
             lambda th: np.array([1.5, 3.0]) / (th + np.array([1.5, 3.0])) ** 2),
    "InverseGamma": ([4.0, 6.5], lambda th: D.InverseGamma(th, 2.0).rsample(),
                     lambda th: -2.0 / (th - 1) ** 2),
    "FisherSnedecor(df2)": ([7.0, 9.0], lambda th: D.FisherSnedecor(_c([3.0, 5.0]),
                                                                     th).rsample(),
                            lambda th: -2 / (th - 2) ** 2),
    "Dirichlet": ([0.5, 2.0, 1.0], lambda th: D.Dirichlet(th).rsample()[:, 0],  # x_0
                  lambda th: np.where(np.arange(3) == 0, th.sum() - th[0], -th[0]) / th.sum() ** 2),
}


@pytest.mark.parametrize("name", sorted(PATHWISE))
def test_pathwise_gradients_are_unbiased(name):
    """E[d sample / d theta] = d E[sample] / d theta, within 5 standard errors of the
    per-sample gradients' mean (one draw per row of an (n, k) parameter leaf)."""
    theta, sample, want = PATHWISE[name]
    em.manual_seed(2)
    th = _c(theta).requires_grad_(True)
    x = sample(th)
    (g,) = em.autograd.grad(x.sum(), th)
    g = g.numpy()
    se = g.std(0) / np.sqrt(len(g))
    expect = want(np.asarray(theta, dtype=np.float64))
    assert np.all(np.abs(g.mean(0) - expect) <= 5 * se + 1e-12), (g.mean(0), expect, se)


GRADCHECK = {
    "Normal.log_prob": lambda a, b: D.Normal(a, b.exp()).log_prob(t([0.3, -1.0, 2.0])),
    "Gamma.log_prob": lambda a, b: D.Gamma(a.exp(), b.exp()).log_prob(t([0.3, 1.0, 2.0])),
    "Beta.entropy": lambda a, b: D.Beta(a.exp(), b.exp()).entropy(),
    "StudentT.entropy": lambda a, b: D.StudentT(a.exp() + 1, a, b.exp()).entropy(),
    "Dirichlet.log_prob": lambda a, b: D.Dirichlet((a + b).exp()).log_prob(t([0.2, 0.3, 0.5])),
    "Binomial.log_prob": lambda a, b: D.Binomial(4, logits=a).log_prob(t([0.0, 2.0, 4.0])),
    "kl(Gamma, Gamma)": lambda a, b: D.kl_divergence(D.Gamma(a.exp(), b.exp()),
                                                      D.Gamma(b.exp(), a.exp())),
    "kl(Beta, Beta)": lambda a, b: D.kl_divergence(D.Beta(a.exp(), b.exp()),
                                                    D.Beta(b.exp(), 1.5)),
    "kl(Categorical)": lambda a, b: D.kl_divergence(D.Categorical(logits=a),
                                                     D.Categorical(logits=b)),
    "MixtureSameFamily.log_prob": lambda a, b: D.MixtureSameFamily(
        D.Categorical(logits=a), D.Normal(b, a.exp())).log_prob(t([0.3, -1.0])),
    "StudentT.log_prob": lambda a, b: D.StudentT(a.exp() + 0.5, b, a.exp()).log_prob(
        t([0.3, -1.0, 2.0])),
    "Laplace.cdf": lambda a, b: D.Laplace(a, b.exp()).cdf(t([0.3, -1.0, 2.0])),
    "VonMises.log_prob": lambda a, b: D.VonMises(a, b.exp()).log_prob(t([0.3, -1.0, 2.0])),
    "ContinuousBernoulli.log_prob": lambda a, b: D.ContinuousBernoulli(
        logits=a).log_prob(b.sigmoid()),
    "RelaxedBernoulli.log_prob": lambda a, b: D.RelaxedBernoulli(
        b.exp(), logits=a).log_prob(t([0.3, 0.6, 0.9])),
    "LKJCholesky.log_prob": lambda a, b: D.LKJCholesky(3, a.exp()).log_prob(
        D.transforms.CorrCholeskyTransform()(b)),
    "Kumaraswamy.entropy": lambda a, b: D.Kumaraswamy(a.exp(), b.exp()).entropy(),
    "kl(Pareto, Gamma)": lambda a, b: D.kl_divergence(D.Pareto(a.exp(), b.exp() + 2),
                                                       D.Gamma(b.exp(), a.exp())),
}


@pytest.mark.parametrize("name", sorted(GRADCHECK))
def test_gradcheck(name):
    a, b = t([0.1, -0.4, 0.8], grad=True), t([0.5, 0.2, -0.3], grad=True)
    assert gradcheck(GRADCHECK[name], (a, b))
