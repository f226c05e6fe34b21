"""torch.celu_/selu_/rrelu(_)/dropout_/alpha_dropout_/feature_alpha_dropout_/feature_dropout(_)
and F.celu_/F.selu_: in place, with the out-of-place function's values and autograd."""
import numpy as np
import pytest

import ember as em
import ember.nn.functional as F


@pytest.mark.parametrize("fn, ref", [
    (lambda x: em.celu_(x, 0.7), lambda x: F.celu(x, 0.7)),
    (lambda x: F.celu_(x, 0.7), lambda x: F.celu(x, 0.7)),
    (em.selu_, F.selu), (F.selu_, F.selu),
    (lambda x: em.rrelu_(x, 0.1, 0.3), lambda x: F.leaky_relu(x, 0.2)),
    (lambda x: em.dropout_(x, 0.5, False), lambda x: x),
    (lambda x: em.alpha_dropout_(x, 0.5, False), lambda x: x),
    (lambda x: em.feature_dropout_(x, 0.5, False), lambda x: x)])
def test_inplace_forms_match_out_of_place(fn, ref):
    x = em.tensor(np.random.default_rng(0).standard_normal((3, 4)))
    y = x.clone()
    assert fn(y) is y
    np.testing.assert_allclose(y.numpy(), ref(x).numpy(), rtol=1e-15)


def test_inplace_activation_backpropagates():
    w = em.tensor([-1.0, 0.5], dtype=em.float64, requires_grad=True)
    h = w * 1.0
    em.selu_(h)
    h.sum().backward()
    a, s = 1.6732632423543772, 1.0507009873554805
    np.testing.assert_allclose(w.grad.numpy(), [s * a * np.exp(-1.0), s], rtol=1e-12)


def test_feature_dropout_drops_whole_channels():
    em.manual_seed(0)
    x = em.ones(8, 6, 5, 2, dtype=em.float64)
    y = em.feature_dropout(x, 0.5, True)
    v = y.numpy()
    assert set(np.unique(v)) <= {0.0, 2.0}
    assert (v == v[:, :, :1, :1]).all()                     # one draw per (n, c)
    assert 0 < (v[:, :, 0, 0] == 0).sum() < 48
    np.testing.assert_array_equal(em.feature_dropout(x, 0.5, False).numpy(), x.numpy())
    with pytest.raises(ValueError):
        em.feature_dropout(x, 1.5, True)


def test_rrelu_training_slopes_in_range():
    em.manual_seed(1)
    x = -em.ones(1000, dtype=em.float64)
    y = em.rrelu(x, 0.1, 0.3, training=True).numpy()
    assert ((-y >= 0.1) & (-y <= 0.3)).all() and np.std(y) > 0.03
    with pytest.raises(NotImplementedError, match="generator"):
        em.rrelu(x, generator=em.Generator())


def test_match_pytorch_deterministic_forms():
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(2).standard_normal((3, 4))
    for name, args in (("celu_", (0.7,)), ("selu_", ()), ("rrelu_", (0.1, 0.3, False))):
        a, b = em.tensor(v), torch.tensor(v)
        getattr(em, name)(a, *args)
        getattr(torch, name)(b, *args)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-14, err_msg=name)
