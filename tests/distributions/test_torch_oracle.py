"""Optional oracle: PyTorch's torch.distributions with the same parameters gives the same
log_prob / entropy / cdf / icdf / mean / variance / kl_divergence, and the same errors."""
import numpy as np
import pytest

import ember as em
import ember.distributions as D

torch = pytest.importorskip("torch")
TD = torch.distributions

RNG = np.random.default_rng(7)
POS = RNG.uniform(0.5, 3.0, 3)
POS2 = RNG.uniform(0.5, 3.0, 3)
REAL = RNG.uniform(-1.0, 1.0, 3)
PROB = RNG.uniform(0.1, 0.9, 3)
SIMPLEX = RNG.dirichlet(np.ones(4), 3)


def _both(a):
    a = np.asarray(a, dtype=np.float64)
    return em.tensor(a), torch.tensor(a)


# name: (constructor name, parameters (arrays or numbers), keyword names or None)
FAMILIES = {
    "Normal": ("Normal", (REAL, POS), None),
    "Uniform": ("Uniform", (REAL, REAL + POS), None),
    "Bernoulli": ("Bernoulli", (PROB,), None),
    "Bernoulli(logits)": ("Bernoulli", (REAL,), ("logits",)),
    "Categorical": ("Categorical", (SIMPLEX,), None),
    "OneHotCategorical": ("OneHotCategorical", (SIMPLEX,), None),
    "Binomial": ("Binomial", (7.0, PROB), None),
    "Poisson": ("Poisson", (POS,), None),
    "Beta": ("Beta", (POS, POS2), None),
    "Gamma": ("Gamma", (POS, POS2), None),
    "Dirichlet": ("Dirichlet", (SIMPLEX * 3,), None),
    "Exponential": ("Exponential", (POS,), None),
    "Laplace": ("Laplace", (REAL, POS), None),
    "LogNormal": ("LogNormal", (REAL, POS), None),
    "StudentT": ("StudentT", (POS + 2, REAL, POS2), None),
    "Cauchy": ("Cauchy", (REAL, POS), None),
    "HalfNormal": ("HalfNormal", (POS,), None),
    "HalfCauchy": ("HalfCauchy", (POS,), None),
    "Geometric": ("Geometric", (PROB,), None),
    "Chi2": ("Chi2", (POS,), None),
    "Gumbel": ("Gumbel", (REAL, POS), None),
    "Multinomial": ("Multinomial", (5, SIMPLEX), None),
    "NegativeBinomial": ("NegativeBinomial", (POS, PROB), None),
    "MultivariateNormal": ("MultivariateNormal", (REAL, np.diag(POS) + 0.3), (
        None, "covariance_matrix")),
    "LowRankMultivariateNormal": ("LowRankMultivariateNormal", (REAL, RNG.standard_normal(
        (3, 2)), POS), None),
    "VonMises": ("VonMises", (REAL, POS), None),
    "Pareto": ("Pareto", (POS, POS2 + 2), None),
    "Weibull": ("Weibull", (POS, POS2), None),
    "InverseGamma": ("InverseGamma", (POS + 2, POS2), None),
    "FisherSnedecor": ("FisherSnedecor", (POS + 2, POS2 + 4), None),
    "LogisticNormal": ("LogisticNormal", (REAL, POS), None),
    "Kumaraswamy": ("Kumaraswamy", (POS, POS2), None),
    "LKJCholesky": ("LKJCholesky", (4, POS), None),
    "Wishart": ("Wishart", (POS + 3, np.diag(POS) + 0.3), (None, "covariance_matrix")),
    # NOTE: no GeneralizedPareto: PyTorch's log_prob fails on float64 parameters
    # (isclose against a float32 zero); test_vs_scipy.py checks it against scipy.stats.
    "ContinuousBernoulli": ("ContinuousBernoulli", (PROB,), None),
    "RelaxedBernoulli": ("RelaxedBernoulli", (np.array(0.7), PROB), None),
    "RelaxedOneHotCategorical": ("RelaxedOneHotCategorical", (np.array(0.7), SIMPLEX), None),
}


def _make(name):
    cls, params, kws = FAMILIES[name]
    ea, ta, ekw, tkw = [], [], {}, {}
    for i, p in enumerate(params):
        e, t = _both(p) if isinstance(p, np.ndarray) else (p, p)
        key = kws[i] if kws is not None and i < len(kws) else None
        if key is None:
            ea.append(e)
            ta.append(t)
        else:
            ekw[key], tkw[key] = e, t
    return getattr(D, cls)(*ea, **ekw), getattr(TD, cls)(*ta, **tkw)


# NOTE: PyTorch's Multinomial.entropy takes lgamma(total_count + 1) of an int64 tensor, i.e.
# in float32 (5e-8 off), and its VonMises takes log I0/I1 from Abramowitz-Stegun polynomials
# (~1e-8); Ember's match scipy.stats to 1e-9 (test_vs_scipy.py).
RTOL = {"Multinomial.entropy": 1e-7, "VonMises.log_prob": 1e-7, "VonMises.variance": 1e-7}
# NOTE: PyTorch's Kumaraswamy.mode is NaN wherever concentration0 > 1 (its formula takes
# log1p(-concentration0)); Ember's is the density's maximiser (test_more_families.py).
SKIP = {"Kumaraswamy.mode"}


def _close(e, t, what):
    np.testing.assert_allclose(e.detach().numpy(), t.detach().numpy(),
                               rtol=RTOL.get(what, 1e-9), atol=1e-12, err_msg=what)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_same_as_pytorch(name):
    d, td = _make(name)
    assert tuple(d.batch_shape) == tuple(td.batch_shape)
    assert tuple(d.event_shape) == tuple(td.event_shape)
    assert d.has_rsample == td.has_rsample
    assert d.has_enumerate_support == td.has_enumerate_support
    torch.manual_seed(0)
    value = td.sample((2,))
    _close(d.log_prob(em.tensor(value.numpy())), td.log_prob(value), f"{name}.log_prob")
    for attr in ("mean", "variance", "mode"):
        if f"{name}.{attr}" in SKIP:
            continue
        try:
            want = getattr(td, attr)
        except NotImplementedError:
            continue
        _close(getattr(d, attr), want, f"{name}.{attr}")
    for method in ("entropy",):
        try:
            want = getattr(td, method)()
        except NotImplementedError:
            with pytest.raises(NotImplementedError):
                getattr(d, method)()
            continue
        _close(getattr(d, method)(), want, f"{name}.{method}")
    try:
        want = td.cdf(value)
    except NotImplementedError:
        return
    _close(d.cdf(em.tensor(value.numpy())), want, f"{name}.cdf")
    try:
        q = torch.tensor(RNG.uniform(0.05, 0.95, tuple(value.shape)))
        want = td.icdf(q)
    except NotImplementedError:
        return
    _close(d.icdf(em.tensor(q.numpy())), want, f"{name}.icdf")


KL_PAIRS = [("Normal", "Normal"), ("Bernoulli", "Bernoulli"), ("Beta", "Beta"),
            ("Gamma", "Gamma"), ("Dirichlet", "Dirichlet"), ("Exponential", "Exponential"),
            ("Laplace", "Laplace"), ("Poisson", "Poisson"), ("Uniform", "Normal"),
            ("Categorical", "Categorical"), ("OneHotCategorical", "OneHotCategorical"),
            ("MultivariateNormal", "MultivariateNormal"), ("Geometric", "Geometric"),
            ("Binomial", "Binomial"), ("Gumbel", "Gumbel"), ("Cauchy", "Cauchy"),
            ("Exponential", "Gamma"), ("Gamma", "Normal"), ("Laplace", "Normal"),
            ("Normal", "Laplace"), ("HalfNormal", "HalfNormal"), ("LogNormal", "LogNormal")]


@pytest.mark.parametrize("p,q", KL_PAIRS, ids=[f"{p}-{q}" for p, q in KL_PAIRS])
def test_kl_same_as_pytorch(p, q):
    dp, tp = _make(p)
    dq, tq = _make(q)
    if q == p:    # a second parameter set: the parameters flipped along every axis
        cls, params, kws = FAMILIES[q]
        FAMILIES["_q"] = (cls, tuple(np.flip(x).copy() if isinstance(x, np.ndarray) else x
                                     for x in params), kws)
        dq, tq = _make("_q")
        del FAMILIES["_q"]
    _close(D.kl_divergence(dp, dq), TD.kl_divergence(tp, tq), f"kl({p}, {q})")


def test_error_messages_same_as_pytorch():
    cases = [lambda M, T: M.Normal(T.zeros(3), -T.ones(3)),
             lambda M, T: M.Poisson(T.ones(3)).log_prob(T.tensor([0.5, 1.0, 2.0])),
             lambda M, T: M.Normal(0.0, 1.0).log_prob(1.0)]
    for case in cases:
        with pytest.raises(ValueError) as te:
            case(TD, torch)
        with pytest.raises(ValueError) as ee:
            case(D, em)
        assert str(ee.value) == str(te.value).replace("torch.Size", "ember.Size")


def _registered_pairs():
    from ember.distributions.kl import _KL_REGISTRY
    pairs = sorted({(p.__name__, q.__name__) for p, q in _KL_REGISTRY})
    return [(p, q) for p, q in pairs if p in FAMILIES and q in FAMILIES]


@pytest.mark.parametrize("p,q", _registered_pairs(), ids=[f"{p}-{q}" for p, q in
                                                          _registered_pairs()])
def test_every_registered_kl_pair_same_as_pytorch(p, q):
    """Both frameworks' registries, every pair whose families this file builds (infinite
    pairs included: inf == inf)."""
    test_kl_same_as_pytorch(p, q)
