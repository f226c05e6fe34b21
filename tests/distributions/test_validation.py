"""Argument and sample validation (PyTorch's messages), the default switch, reprs,
constraints, enumerate_support and the Distribution API's defaults."""
import numpy as np
import pytest

import ember as em
import ember.distributions as D
from ember.distributions import constraints


def t(a):
    return em.tensor(np.asarray(a, dtype=np.float64))


def test_parameter_error_message_as_pytorch():
    with pytest.raises(ValueError) as e:
        D.Normal(em.zeros(3), -em.ones(3))
    assert str(e.value).startswith(
        "Expected parameter scale (Tensor of shape (3,)) of distribution Normal(loc: "
        "ember.Size([3]), scale: ember.Size([3])) to satisfy the constraint "
        "GreaterThan(lower_bound=0.0), but found invalid values:\ntensor([-1., -1., -1.])")


@pytest.mark.parametrize("make,constraint", [
    (lambda: D.Bernoulli(probs=t([1.5])), "Interval(lower_bound=0.0, upper_bound=1.0)"),
    (lambda: D.Gamma(t([-1.0]), 1.0), "GreaterThan(lower_bound=0.0)"),
    (lambda: D.Categorical(probs=t([-0.5, 1.5])), "Simplex()"),
    (lambda: D.Dirichlet(t([1.0, 0.0])),
     "IndependentConstraint(GreaterThan(lower_bound=0.0), 1)"),
    (lambda: D.Poisson(t([-1.0])), "GreaterThanEq(lower_bound=0.0)"),
    (lambda: D.Normal(t([float("nan")]), 1.0), "Real()"),
    (lambda: D.Binomial(t([2.5]), t([0.5])), "IntegerGreaterThan(lower_bound=0)"),
])
def test_invalid_parameters_name_the_constraint(make, constraint):
    with pytest.raises(ValueError, match="to satisfy the constraint " + constraint.replace(
            "(", r"\(").replace(")", r"\)")):
        make()


def test_sample_validation():
    with pytest.raises(ValueError, match="The value argument to log_prob must be a Tensor"):
        D.Normal(0.0, 1.0).log_prob(1.0)
    with pytest.raises(ValueError) as e:
        D.Poisson(em.ones(3)).log_prob(t([0.5, 1.0, 2.0]))
    assert str(e.value).startswith(
        "Expected value argument (Tensor of shape (3,)) to be within the support "
        "(IntegerGreaterThan(lower_bound=0)) of the distribution Poisson(rate: "
        "ember.Size([3])), but found invalid values:")
    with pytest.raises(ValueError, match="right-most size of value must match event_shape"):
        D.Dirichlet(em.ones(3)).log_prob(t([0.5, 0.5]))
    with pytest.raises(ValueError, match="not broadcastable with batch_shape"):
        D.Normal(em.zeros(3), 1.0).log_prob(em.zeros(4))
    with pytest.raises(ValueError, match="within the support"):
        D.Uniform(0.0, 1.0).log_prob(t(1.5))
    with pytest.raises(ValueError, match="Uniform is not defined when low>= high"):
        D.Uniform(1.0, 0.0)
    with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified"):
        D.Bernoulli(probs=t(0.5), logits=t(0.0))


def test_validate_args_switches():
    lp = D.Normal(0.0, 1.0, validate_args=False).log_prob(0.0)    # a number is fine then
    assert lp.item() == pytest.approx(-0.5 * np.log(2 * np.pi))
    d = D.Normal(t([0.0]), t([-1.0]), validate_args=False)     # no error
    assert tuple(d.batch_shape) == (1,)
    D.Distribution.set_default_validate_args(False)
    try:
        D.Normal(t([0.0]), t([-1.0]))
        assert D.Poisson(t([1.0])).log_prob(t([0.5])).shape == (1,)
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        D.Normal(t([0.0]), t([-1.0]))
    with pytest.raises(ValueError, match="True or False"):
        D.Distribution.set_default_validate_args(2)


def test_reprs():
    assert repr(D.Normal(0.0, 1.0)) == "Normal(loc: 0.0, scale: 1.0)"
    assert repr(D.Gamma(em.ones(2), 1.0)) == \
        "Gamma(concentration: ember.Size([2]), rate: ember.Size([2]))"
    assert repr(D.Categorical(logits=em.zeros(3))) == "Categorical(logits: ember.Size([3]))"
    assert repr(D.Independent(D.Normal(em.zeros(3), 1.0), 1)) == \
        "Independent(Normal(loc: ember.Size([3]), scale: ember.Size([3])), 1)"
    assert repr(constraints.interval(0, 2)) == "Interval(lower_bound=0, upper_bound=2)"
    assert repr(constraints.positive) == "GreaterThan(lower_bound=0.0)"
    assert repr(constraints.simplex) == "Simplex()"


def test_constraints_check():
    assert constraints.simplex.check(t([[0.2, 0.8], [0.5, 0.6]])).tolist() == [True, False]
    assert constraints.lower_cholesky.check(t([[[1.0, 0.0], [2.0, 3.0]],
                                               [[1.0, 1.0], [0.0, 1.0]]])).tolist() == \
        [True, False]
    assert constraints.positive_definite.check(t([[[2.0, 1.0], [1.0, 2.0]],
                                                  [[1.0, 2.0], [2.0, 1.0]]])).tolist() == \
        [True, False]
    assert constraints.integer_interval(0, 3).check(t([0.0, 3.0, 4.0, 1.5])).tolist() == \
        [True, True, False, False]
    assert constraints.boolean.check(t([0.0, 1.0, 0.5])).tolist() == [True, True, False]
    assert constraints.one_hot.check(t([[0.0, 1.0], [1.0, 1.0]])).tolist() == [True, False]
    assert constraints.independent(constraints.real, 1).check(
        t([[1.0, float("nan")], [1.0, 2.0]])).tolist() == [False, True]
    assert constraints.greater_than(1.0).check(t([1.0, 1.5])).tolist() == [False, True]
    assert constraints.half_open_interval(0, 1).check(t([0.0, 1.0])).tolist() == [True, False]
    assert constraints.is_dependent(D.Uniform.arg_constraints["low"])
    with pytest.raises(ValueError, match="dependent constraint"):
        constraints.dependent.check(t(1.0))


def test_api_defaults_and_enumerate_support():
    d = D.Bernoulli(t([0.3, 0.6]))
    s = d.enumerate_support()
    assert s.tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert d.enumerate_support(expand=False).shape == (2, 1)
    assert D.Categorical(t([[0.5, 0.5, 0.0]])).enumerate_support().tolist() == [[0], [1], [2]]
    assert D.Binomial(2, t([0.5])).enumerate_support().tolist() == [[0.0], [1.0], [2.0]]
    assert D.OneHotCategorical(t([0.2, 0.8])).enumerate_support().tolist() == \
        [[1.0, 0.0], [0.0, 1.0]]
    assert D.Bernoulli(t(0.5)).has_enumerate_support
    assert not D.Normal(0.0, 1.0).has_enumerate_support
    assert D.Normal(0.0, 1.0).has_rsample and not D.Poisson(t(1.0)).has_rsample
    np.testing.assert_allclose(D.Normal(0.0, 2.0).perplexity().item(),
                               np.exp(0.5 + 0.5 * np.log(2 * np.pi) + np.log(2.0)), rtol=1e-6)
    with pytest.raises(NotImplementedError):
        D.Poisson(t(1.0)).rsample()
    with pytest.raises(NotImplementedError):
        D.Poisson(t(1.0)).entropy()
    with pytest.raises(NotImplementedError):
        D.Normal(0.0, 1.0).enumerate_support()
    e = D.Normal(t([0.0]), t([1.0])).expand((3, 1))
    assert tuple(e.batch_shape) == (3, 1) and tuple(e.loc.shape) == (3, 1)
    assert D.Gamma(t([2.0]), t([1.0])).stddev.item() == pytest.approx(np.sqrt(2.0))


def test_pytorch_module_paths_import():
    import importlib
    for path, name in [("beta", "Beta"), ("studentT", "StudentT"), ("half_normal", "HalfNormal"),
                       ("one_hot_categorical", "OneHotCategorical"), ("normal", "Normal"),
                       ("relaxed_categorical", "RelaxedOneHotCategorical"), ("kl", "register_kl"),
                       ("utils", "broadcast_all"), ("constraint_registry", "biject_to")]:
        module = importlib.import_module(f"ember.distributions.{path}")
        assert getattr(module, name) is getattr(D, name, getattr(module, name))
    assert D.studentT.StudentT is D.StudentT
