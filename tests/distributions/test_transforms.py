"""Transforms: inverse round trips, log|det J| against a numerical Jacobian (float64),
caching, composition, shapes; biject_to / transform_to; TransformedDistribution."""
import numpy as np
import pytest

import ember as em
import ember.distributions as D
from ember.distributions import constraints
from ember.distributions import transforms as T

RNG = np.random.default_rng(3)


def t(a, grad=False):
    return em.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


# name: (transform, x in its domain (a batch of 2 events))
CASES = {
    "Exp": (T.ExpTransform(), RNG.standard_normal(2)),
    "Affine": (T.AffineTransform(t([1.0, -2.0]), t([0.5, -3.0])), RNG.standard_normal(2)),
    "Affine(number)": (T.AffineTransform(1.0, -3.0), RNG.standard_normal(2)),
    "Affine(event_dim=1)": (T.AffineTransform(t([1.0, -2.0, 0.5]), t([0.5, -3.0, 2.0]),
                                              event_dim=1), RNG.standard_normal((2, 3))),
    "Sigmoid": (T.SigmoidTransform(), RNG.standard_normal(2)),
    "Tanh": (T.TanhTransform(), RNG.standard_normal(2)),
    "Softplus": (T.SoftplusTransform(), RNG.standard_normal(2)),
    "Power": (T.PowerTransform(2.5), RNG.uniform(0.5, 2.0, 2)),
    "StickBreaking": (T.StickBreakingTransform(), RNG.standard_normal((2, 3))),
    "Compose": (T.ComposeTransform([T.AffineTransform(0.5, 2.0), T.ExpTransform(),
                                    T.PowerTransform(0.5)]), RNG.standard_normal(2)),
    "Independent(Sigmoid)": (T.IndependentTransform(T.SigmoidTransform(), 1),
                             RNG.standard_normal((2, 3))),
    "Reshape": (T.ReshapeTransform((4,), (2, 2)), RNG.standard_normal((2, 4))),
}


def _numeric_log_det(tr, x):
    """log|det dy/dx| per event, by central differences of the flattened event map."""
    ev = tr.domain.event_dim
    if ev == 0:                       # NOTE: elementwise: the Jacobian is diagonal
        f = lambda v: tr(t(v)).numpy()  # noqa: E731
        return np.log(np.abs((f(x + 1e-6) - f(x - 1e-6)) / 2e-6))
    out = []
    for b in range(x.shape[0]):
        xe = x[b].reshape(-1)
        f = lambda v: tr(t(v.reshape(x.shape[1:]))).numpy().reshape(-1)  # noqa: E731
        jac = np.stack([(f(xe + h) - f(xe - h)) / 2e-6 for h in np.eye(len(xe)) * 1e-6], -1)
        if isinstance(tr, T.StickBreakingTransform):
            out.append(np.linalg.slogdet(jac[:-1])[1])   # NOTE: drop the dependent coordinate
        else:
            out.append(np.linalg.slogdet(jac)[1])
    return np.stack(out)


@pytest.mark.parametrize("name", sorted(CASES))
def test_inverse_and_log_abs_det_jacobian(name):
    tr, x = CASES[name]
    y = tr(t(x))
    assert bool(tr.codomain.check(y).all())
    np.testing.assert_allclose(tr.inv(y).numpy(), x, rtol=1e-9, atol=1e-12)
    assert tuple(y.shape) == tuple(tr.forward_shape(x.shape))
    assert tuple(tr.inverse_shape(y.shape)) == x.shape
    lad = tr.log_abs_det_jacobian(t(x), y).numpy()
    np.testing.assert_allclose(lad, _numeric_log_det(tr, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(tr.inv.log_abs_det_jacobian(y, t(x)).numpy(), -lad, rtol=1e-12)
    assert tr.inv.inv is tr


def test_cache_returns_the_same_object():
    tr = T.ExpTransform(cache_size=1)
    x = t([0.5])
    y = tr(x)
    assert tr(x) is y and tr.inv(y) is x
    plain = T.ExpTransform()
    assert plain(x) is not plain(x)
    assert T.ExpTransform().with_cache(1)._cache_size == 1
    with pytest.raises(ValueError, match="cache_size must be 0 or 1"):
        T.ExpTransform(cache_size=2)


def test_non_bijective_transforms():
    x = t([[0.1, -0.3, 2.0]])
    y = T.SoftmaxTransform()(x)
    np.testing.assert_allclose(y.sum(-1).numpy(), 1.0)
    np.testing.assert_allclose(T.SoftmaxTransform()(T.SoftmaxTransform().inv(y)).numpy(),
                               y.numpy(), rtol=1e-12)
    assert T.AbsTransform()(t([-2.0])).item() == 2.0
    m = t(RNG.standard_normal((3, 3)))
    lc = T.LowerCholeskyTransform()(m)
    assert bool(constraints.lower_cholesky.check(lc))
    np.testing.assert_allclose(T.LowerCholeskyTransform().inv(lc).numpy(),
                               np.tril(m.numpy()), rtol=1e-12)
    assert T.ExpTransform().sign == 1 and T.AffineTransform(0.0, -2.0).sign == -1


@pytest.mark.parametrize("c", [constraints.real, constraints.positive, constraints.unit_interval,
                               constraints.interval(-1.0, 3.0), constraints.greater_than(2.0),
                               constraints.less_than(-1.0), constraints.simplex,
                               constraints.independent(constraints.positive, 1),
                               constraints.nonnegative, constraints.lower_cholesky])
def test_transform_to_and_biject_to_land_in_the_constraint(c):
    x = t(RNG.standard_normal((2, 3, 3)) * 3)
    y = D.transform_to(c)(x)
    assert bool(c.check(y).all()), c
    if c is not constraints.lower_cholesky:
        b = D.biject_to(c)
        z = b(x)
        assert bool(c.check(z).all()) and b.bijective
        np.testing.assert_allclose(b.inv(z).numpy(), x.numpy() if c is not constraints.simplex
                                   else b.inv(z).numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(NotImplementedError, match="Cannot transform"):
        D.biject_to(constraints.boolean)


def test_transformed_distribution_log_prob_and_cdf():
    base = D.Normal(t([0.3, -0.2]), t([1.2, 0.7]))
    tr = [T.AffineTransform(1.0, -2.0), T.ExpTransform()]
    d = D.TransformedDistribution(base, tr)
    y = t([0.5, 3.0])
    x = (y.log() - 1.0) / -2.0
    want = base.log_prob(x) - y.log() - np.log(2.0)
    np.testing.assert_allclose(d.log_prob(y).numpy(), want.numpy(), rtol=1e-12)
    # NOTE: a decreasing map flips the CDF
    np.testing.assert_allclose(d.cdf(y).numpy(), (1 - base.cdf(x)).numpy(), rtol=1e-12)
    np.testing.assert_allclose(d.icdf(d.cdf(y)).numpy(), y.numpy(), rtol=1e-9)
    assert tuple(d.sample((5,)).shape) == (5, 2) and d.has_rsample
    stick = D.TransformedDistribution(D.Normal(em.zeros(2, dtype=em.float64), 1.0),
                                      T.StickBreakingTransform())
    assert tuple(stick.event_shape) == (3,) and tuple(stick.batch_shape) == ()
    s = stick.sample((4,))
    np.testing.assert_allclose(s.sum(-1).numpy(), 1.0, rtol=1e-12)
    assert tuple(stick.log_prob(s).shape) == (4,)
    assert tuple(d.expand((3, 2)).sample().shape) == (3, 2)
