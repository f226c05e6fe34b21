"""Samples: moments and CDFs within statistical bounds (fixed seed; bounds of 5 standard
errors derived from the sample size), reproducibility from ember.manual_seed, shapes,
and draws traced by ember.compile."""
import numpy as np
import pytest
from scipy import stats

import ember as em
import ember.distributions as D

N = 20000
Z = 5.0   # standard errors allowed


def t(a):
    return em.tensor(np.asarray(a, dtype=np.float64))


A = np.array([0.3, 1.0, 4.5])
LOC = np.array([-1.0, 0.5, 2.0])
P = np.array([0.15, 0.5, 0.8])

# name: (ember distribution, scipy frozen distribution)
CONTINUOUS = {
    "Normal": (lambda: D.Normal(t(LOC), t(A)), stats.norm(LOC, A)),
    "Uniform": (lambda: D.Uniform(t(LOC), t(LOC + A)), stats.uniform(LOC, A)),
    "Gamma": (lambda: D.Gamma(t(A), t([2.0, 1.0, 0.5])), stats.gamma(A, scale=[0.5, 1, 2])),
    "Beta": (lambda: D.Beta(t(A), t(A[::-1].copy())), stats.beta(A, A[::-1])),
    "Chi2": (lambda: D.Chi2(t(A + 1)), stats.chi2(A + 1)),
    "Exponential": (lambda: D.Exponential(t(A)), stats.expon(scale=1 / A)),
    "Laplace": (lambda: D.Laplace(t(LOC), t(A)), stats.laplace(LOC, A)),
    "LogNormal": (lambda: D.LogNormal(t(LOC), t(A / 2)), stats.lognorm(A / 2,
                                                                        scale=np.exp(LOC))),
    "StudentT": (lambda: D.StudentT(t(A + 4.5), t(LOC), t(A)), stats.t(A + 4.5, LOC, A)),
    "Cauchy": (lambda: D.Cauchy(t(LOC), t(A)), stats.cauchy(LOC, A)),
    "HalfNormal": (lambda: D.HalfNormal(t(A)), stats.halfnorm(scale=A)),
    "HalfCauchy": (lambda: D.HalfCauchy(t(A)), stats.halfcauchy(scale=A)),
    "Gumbel": (lambda: D.Gumbel(t(LOC), t(A)), stats.gumbel_r(LOC, A)),
    "Pareto": (lambda: D.Pareto(t(A), t(A + 8.5)), stats.pareto(A + 8.5, scale=A)),
    "Weibull": (lambda: D.Weibull(t(A), t(A + 0.5)), stats.weibull_min(A + 0.5, scale=A)),
    "InverseGamma": (lambda: D.InverseGamma(t(A + 8.5), t(A)), stats.invgamma(A + 8.5,
                                                                               scale=A)),
    "FisherSnedecor": (lambda: D.FisherSnedecor(t(A + 2), t(A + 10)), stats.f(A + 2, A + 10)),
    "GeneralizedPareto": (lambda: D.GeneralizedPareto(t(LOC), t(A), t([-0.3, 0.0, 0.1])),
                          stats.genpareto([-0.3, 0.0, 0.1], LOC, A)),
}
DISCRETE = {
    "Bernoulli": (lambda: D.Bernoulli(t(P)), stats.bernoulli(P)),
    "Binomial": (lambda: D.Binomial(t([3.0, 10.0, 7.0]), t(P)), stats.binom([3, 10, 7], P)),
    "Poisson": (lambda: D.Poisson(t(A * 2)), stats.poisson(A * 2)),
    "Geometric": (lambda: D.Geometric(t(P)), stats.geom(P, loc=-1)),
    "NegativeBinomial": (lambda: D.NegativeBinomial(t(A + 1), t(P)),
                         stats.nbinom(A + 1, 1 - P)),
}
HEAVY = {"Cauchy", "HalfCauchy"}   # no finite moments: only the CDF check applies


def _check_moments(x, sd, name):
    mean, var, kurt = (np.asarray(v, dtype=float) for v in sd.stats(moments="mvk"))
    m = x.mean(0)
    assert np.all(np.abs(m - mean) <= Z * np.sqrt(var / N)), f"{name}: mean {m} vs {mean}"
    s2 = x.var(0, ddof=1)
    se = np.sqrt((kurt + 2 + 2 / (N - 1)) * var ** 2 / N)   # exact Var(s^2)
    assert np.all(np.abs(s2 - var) <= Z * se), f"{name}: variance {s2} vs {var}"


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_continuous_samples(name):
    make, sd = CONTINUOUS[name]
    em.manual_seed(1234)
    d = make()
    x = d.sample((N,))
    assert tuple(x.shape) == (N, 3) and x.dtype == em.float64
    x = x.numpy()
    assert np.all(d.support.check(t(x)).numpy())
    for q in (0.1, 0.5, 0.9):          # empirical CDF at quantiles: Binomial(N, q) / N
        frac = (x <= sd.ppf(q)).mean(0)
        assert np.all(np.abs(frac - q) <= Z * np.sqrt(q * (1 - q) / N)), f"{name}: q={q}"
    if name not in HEAVY:
        _check_moments(x, sd, name)


@pytest.mark.parametrize("name", sorted(DISCRETE))
def test_discrete_samples(name):
    make, sd = DISCRETE[name]
    em.manual_seed(99)
    d = make()
    x = d.sample((N,)).numpy()
    assert np.all(x == np.round(x)) and np.all(x >= 0)
    for k in range(4):                 # frequency of each small value vs the pmf
        p = sd.pmf(k)
        freq = (x == k).mean(0)
        assert np.all(np.abs(freq - p) <= Z * np.sqrt(p * (1 - p) / N) + 1e-12), \
            f"{name}: P(X={k}) {freq} vs {p}"
    _check_moments(x, sd, name)


def test_categorical_multinomial_dirichlet_samples():
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]])
    em.manual_seed(5)
    c = D.Categorical(t(probs)).sample((N,)).numpy()
    assert c.shape == (N, 2) and c.dtype == np.int64
    freq = np.stack([(c == k).mean(0) for k in range(3)], -1)
    assert np.all(np.abs(freq - probs) <= Z * np.sqrt(probs * (1 - probs) / N))
    oh = D.OneHotCategorical(t(probs)).sample((N,)).numpy()
    assert np.all(oh.sum(-1) == 1)
    assert np.all(np.abs(oh.mean(0) - probs) <= Z * np.sqrt(probs * (1 - probs) / N))
    m = D.Multinomial(10, t(probs)).sample((N,)).numpy()
    assert np.all(m.sum(-1) == 10)
    assert np.all(np.abs(m.mean(0) - 10 * probs) <= Z * np.sqrt(10 * probs * (1 - probs) / N))
    alpha = np.array([[0.5, 1.0, 2.0], [3.0, 3.0, 1.0]])
    x = D.Dirichlet(t(alpha)).sample((N,)).numpy()
    np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-12)
    a0 = alpha.sum(-1, keepdims=True)
    mean, var = alpha / a0, alpha * (a0 - alpha) / (a0 ** 2 * (a0 + 1))
    assert np.all(np.abs(x.mean(0) - mean) <= Z * np.sqrt(var / N))


def test_mixture_and_relaxed_samples():
    em.manual_seed(3)
    mix = D.MixtureSameFamily(D.Categorical(t([0.3, 0.7])), D.Normal(t([-2.0, 1.0]),
                                                                     t([0.5, 1.0])))
    x = mix.sample((N,)).numpy()
    var = float(mix.variance)
    assert abs(x.mean() - float(mix.mean)) <= Z * np.sqrt(var / N)
    assert abs(x.var() - var) <= 0.05 * var
    rb = D.RelaxedBernoulli(t(0.1), probs=t([0.2, 0.9])).sample((N,)).numpy()
    assert np.all((rb > 0) & (rb < 1))
    assert np.all(np.abs((rb > 0.5).mean(0) - [0.2, 0.9]) < 0.02)   # nearly Bernoulli
    ro = D.RelaxedOneHotCategorical(t(0.1), probs=t([0.2, 0.8])).sample((N,)).numpy()
    np.testing.assert_allclose(ro.sum(-1), 1.0, rtol=1e-9)
    assert abs((ro.argmax(-1) == 1).mean() - 0.8) < 0.02


def test_reproducible_from_manual_seed():
    d = [D.Gamma(t(A), 1.0), D.Beta(t(A), t(A)), D.Poisson(t(A)), D.Categorical(t(P)),
         D.Binomial(5, t(P)), D.Normal(t(LOC), 1.0), D.Dirichlet(t([[1.0, 2.0]]))]
    em.manual_seed(7)
    first = [x.sample((4,)) for x in d]
    second = [x.sample((4,)) for x in d]
    em.manual_seed(7)
    again = [x.sample((4,)) for x in d]
    for a, b, c in zip(first, again, second):
        assert a.tolist() == b.tolist()
        assert a.tolist() != c.tolist()


def test_sample_shapes_and_expand():
    d = D.Normal(t(LOC), t(A))
    assert tuple(d.sample().shape) == (3,)
    assert tuple(d.rsample((2, 5)).shape) == (2, 5, 3)
    e = D.Gamma(t(A), 1.0).expand((4, 3))
    assert tuple(e.batch_shape) == (4, 3) and tuple(e.sample((2,)).shape) == (2, 4, 3)
    c = D.Categorical(t([[0.5, 0.5]])).expand((6,))
    assert tuple(c.sample((2,)).shape) == (2, 6)
    with pytest.warns(UserWarning, match="sample_n"):
        assert tuple(d.sample_n(3).shape) == (3, 3)


def test_compiled_sampling_draws_like_eager():
    a = em.tensor([1.0, 2.0, 3.0], requires_grad=True)

    def f(a):
        g = D.Gamma(a, 1.0, validate_args=False).rsample((2,))
        c = D.Categorical(em.ones(3), validate_args=False).sample((2, 3))
        return (g + c).sum()
    cf = em.compile(f)
    em.manual_seed(11)
    eager = [f(a) for _ in range(3)]
    ge = em.autograd.grad(f(a), a)[0]
    em.manual_seed(11)
    compiled = [cf(a) for _ in range(3)]
    gc = em.autograd.grad(cf(a), a)[0]
    assert [float(x) for x in eager] == [float(x) for x in compiled]
    assert len({float(x) for x in compiled}) == 3      # fresh draws at every run
    np.testing.assert_array_equal(ge.numpy(), gc.numpy())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_gamma_samples_stay_positive_in_every_dtype(dtype):
    """Tiny concentrations underflow; samples are clamped to the dtype's smallest normal
    number (as PyTorch), so log_prob stays finite."""
    dt = getattr(em, dtype)
    em.manual_seed(0)
    x = em._standard_gamma(em.full((200,), 0.01, dtype=dt))
    assert x.dtype == dt
    assert bool((x >= em.finfo(dt).tiny).all())
    wide = x if dt in (em.float32, em.float64) else x.float()
    assert bool(wide.log().isfinite().all())


def test_sampler_primitives_reject_bad_inputs_clearly():
    x = em._standard_gamma(t([-1.0, float("nan"), 0.0, 2.0]))
    assert np.isnan(x[0].item()) and np.isnan(x[1].item())
    assert x[2].item() == em.finfo(em.float64).tiny and x[3].item() > 0
    with pytest.raises(ValueError, match="poisson: invalid Poisson rate"):
        em.poisson(t([-1.0]))
    with pytest.raises(ValueError, match="binomial: shapes"):
        em.binomial(em.ones(3), em.full((2,), 0.5))
    with pytest.raises(TypeError, match="_standard_gamma: expected a floating point tensor"):
        em._standard_gamma(em.ones(2, dtype=em.int64))
    # NOTE: like torch.binomial, probabilities outside [0, 1] are clamped
    assert em.binomial(t([3.0, 3.0]), t([1.5, -0.5])).tolist() == [3.0, 0.0]
