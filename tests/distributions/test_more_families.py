"""Kumaraswamy and ContinuousBernoulli (no scipy.stats counterpart): against their closed-form
densities and numerical integration, samples, gradients; and the structured transforms
(Cat/Stack/CumulativeDistribution/PositiveDefinite)."""
import numpy as np
import pytest
from scipy import integrate

import ember as em
import ember.distributions as D
from ember.distributions import constraints
from ember.distributions import transforms as T


def t(a, grad=False):
    return em.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _quad(f):
    return integrate.quad(f, 0.0, 1.0, epsabs=1e-13, epsrel=1e-12, limit=200)[0]


KUMA = [(0.5, 2.0), (2.0, 0.7), (3.0, 4.0), (1.5, 1.5)]


@pytest.mark.parametrize("a,b", KUMA)
def test_kumaraswamy_against_density_and_integrals(a, b):
    d = D.Kumaraswamy(t(a), t(b))
    x = np.array([0.05, 0.3, 0.5, 0.8, 0.97])
    pdf = a * b * x ** (a - 1) * (1 - x ** a) ** (b - 1)
    np.testing.assert_allclose(d.log_prob(t(x)).numpy(), np.log(pdf), rtol=1e-10)
    np.testing.assert_allclose(d.cdf(t(x)).numpy(), 1 - (1 - x ** a) ** b, rtol=1e-10)
    dens = lambda v: a * b * v ** (a - 1) * (1 - v ** a) ** (b - 1)  # noqa: E731
    mean = _quad(lambda v: v * dens(v))
    np.testing.assert_allclose(d.mean.item(), mean, rtol=1e-8)
    np.testing.assert_allclose(d.variance.item(), _quad(lambda v: v * v * dens(v)) - mean ** 2,
                               rtol=1e-7)
    ent = -_quad(lambda v: dens(v) * np.log(dens(v)) if dens(v) > 0 else 0.0)
    np.testing.assert_allclose(d.entropy().item(), ent, rtol=1e-7, atol=1e-9)
    if a >= 1 and b >= 1:
        grid = np.linspace(1e-4, 1 - 1e-4, 200001)
        np.testing.assert_allclose(d.mode.item(), grid[np.argmax(dens(grid))], atol=1e-4)
    else:
        assert np.isnan(d.mode.item())


CB = [0.02, 0.3, 0.4995, 0.5, 0.5008, 0.8, 0.99]


@pytest.mark.parametrize("lam", CB)
def test_continuous_bernoulli_against_integrals(lam):
    d = D.ContinuousBernoulli(t(lam))
    dens = lambda v: float(d.log_prob(t(v)).exp())  # noqa: E731
    np.testing.assert_allclose(_quad(dens), 1.0, rtol=1e-9)
    mean = _quad(lambda v: v * dens(v))
    np.testing.assert_allclose(d.mean.item(), mean, rtol=1e-8)
    np.testing.assert_allclose(d.variance.item(), _quad(lambda v: v * v * dens(v)) - mean ** 2,
                               rtol=1e-6)
    np.testing.assert_allclose(d.entropy().item(),
                               -_quad(lambda v: dens(v) * np.log(dens(v))), rtol=1e-7,
                               atol=1e-9)
    for x in (0.1, 0.6, 0.93):
        np.testing.assert_allclose(d.cdf(t(x)).item(), integrate.quad(dens, 0, x)[0],
                                   rtol=1e-8)
        np.testing.assert_allclose(d.icdf(d.cdf(t(x))).item(), x, rtol=1e-9)
    with pytest.raises(ValueError, match="probs has invalid values"):
        D.ContinuousBernoulli(t(1.5))


def test_samples_and_reparameterised_gradients():
    n = 20000
    em.manual_seed(6)
    for d in (D.Kumaraswamy(t([0.5, 3.0]), t([2.0, 4.0])),
              D.ContinuousBernoulli(t([0.2, 0.5, 0.9]))):
        x = d.sample((n,)).numpy()
        assert np.all((x >= 0) & (x <= 1))
        var = d.variance.numpy()
        assert np.all(np.abs(x.mean(0) - d.mean.numpy()) <= 5 * np.sqrt(var / n))
    a, b = t([0.7, 2.5], grad=True), t([1.5, 3.0], grad=True)

    def f(a, b):
        em.manual_seed(1)
        return D.Kumaraswamy(a, b).rsample((3,))
    assert em.autograd.gradcheck(f, (a, b))

    def g(p):
        em.manual_seed(1)
        return D.ContinuousBernoulli(p).rsample((3,))
    assert em.autograd.gradcheck(g, (t([0.2, 0.7], grad=True),))


def test_structured_transforms():
    x = t(np.random.default_rng(0).standard_normal((4, 3)))
    cat = T.CatTransform([T.ExpTransform(), T.AffineTransform(1.0, -2.0)], dim=-1,
                         lengths=[2, 1])
    y = cat(x)
    np.testing.assert_allclose(y.numpy()[:, :2], np.exp(x.numpy()[:, :2]))
    np.testing.assert_allclose(y.numpy()[:, 2], 1 - 2 * x.numpy()[:, 2])
    np.testing.assert_allclose(cat.inv(y).numpy(), x.numpy(), rtol=1e-12)
    lad = cat.log_abs_det_jacobian(x, y).numpy()
    np.testing.assert_allclose(lad, np.concatenate([x.numpy()[:, :2], np.full((4, 1), np.log(2))],
                                                   1), rtol=1e-12)
    assert bool(cat.codomain.check(y).all()) and cat.bijective
    st = T.StackTransform([T.ExpTransform(), T.SigmoidTransform(), T.TanhTransform()], dim=1)
    y = st(x)
    np.testing.assert_allclose(st.inv(y).numpy(), x.numpy(), rtol=1e-9)
    np.testing.assert_allclose(st.log_abs_det_jacobian(x, y)[:, 0].numpy(), x.numpy()[:, 0])
    with pytest.raises(ValueError, match="StackTransform: expected size 3"):
        st(em.zeros(4, 2))
    cdf = T.CumulativeDistributionTransform(D.Normal(t(0.0), t(1.0)))
    u = cdf(x)
    assert bool(constraints.unit_interval.check(u).all())
    np.testing.assert_allclose(cdf.inv(u).numpy(), x.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cdf.log_abs_det_jacobian(x, u).numpy(),
                               D.Normal(t(0.0), t(1.0)).log_prob(x).numpy())
    pd = T.PositiveDefiniteTransform()
    m = t(np.random.default_rng(1).standard_normal((2, 3, 3)))
    s = pd(m)
    assert bool(constraints.positive_definite.check(s).all())
    np.testing.assert_allclose(pd(pd.inv(s)).numpy(), s.numpy(), rtol=1e-10)


def test_corr_cholesky_transform():
    from ember.distributions.utils import tril_matrix_to_vec
    tr = T.CorrCholeskyTransform()
    x = t(np.random.default_rng(2).standard_normal((2, 6)))
    L = tr(x)
    assert tuple(L.shape) == (2, 4, 4) and bool(constraints.corr_cholesky.check(L).all())
    np.testing.assert_allclose((L @ L.mT).diagonal(dim1=-2, dim2=-1).numpy(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(tr.inv(L).numpy(), x.numpy(), rtol=1e-9, atol=1e-12)
    # NOTE: log|det| with respect to L's free (strictly lower) coordinates
    for b in range(2):
        f = lambda v: tril_matrix_to_vec(tr(t(v)), diag=-1).numpy()  # noqa: E731
        h = 1e-6
        jac = np.stack([(f(x.numpy()[b] + e) - f(x.numpy()[b] - e)) / (2 * h)
                        for e in np.eye(6) * h], -1)
        np.testing.assert_allclose(tr.log_abs_det_jacobian(x, L).numpy()[b],
                                   np.linalg.slogdet(jac)[1], rtol=1e-6)
    assert isinstance(D.biject_to(constraints.corr_cholesky), T.CorrCholeskyTransform)
    assert tuple(tr.inverse_shape((5, 4, 4))) == (5, 6)


@pytest.mark.parametrize("eta", [0.5, 1.0, 3.0])
def test_lkj_cholesky(eta):
    d2 = D.LKJCholesky(2, t(eta))
    dens = lambda r: float(d2.log_prob(t([[1.0, 0.0], [r, np.sqrt(1 - r * r)]])).exp())  # noqa
    np.testing.assert_allclose(integrate.quad(dens, -1, 1)[0], 1.0, rtol=1e-8)
    n, dim = 20000, 4
    em.manual_seed(9)
    L = D.LKJCholesky(dim, t(eta)).sample((n,))
    assert bool(constraints.corr_cholesky.check(L[:100]).all())
    C = (L @ L.mT).numpy()
    r = C[:, np.tril_indices(dim, -1)[0], np.tril_indices(dim, -1)[1]]
    # NOTE: each correlation r of an LKJ(eta) matrix has (r + 1) / 2 ~ Beta(b, b),
    # b = eta - 1 + dim / 2: E r = 0, E r^2 = 1 / (2 b + 1)
    b = eta - 1 + dim / 2
    m2, v4 = 1 / (2 * b + 1), 3 / ((2 * b + 1) * (2 * b + 3))
    assert np.all(np.abs(r.mean(0)) <= 5 * np.sqrt(m2 / n))
    assert np.all(np.abs((r ** 2).mean(0) - m2) <= 5 * np.sqrt((v4 - m2 ** 2) / n))
    with pytest.raises(ValueError, match="greater than or equal to 2"):
        D.LKJCholesky(1, 1.0)
