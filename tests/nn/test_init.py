"""ember.nn.init: formulas, bounds and statistics (plus torch.nn.init as an optional oracle)."""
import math

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import init
from ember.nn.init import _calculate_fan_in_and_fan_out


def _np(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


@pytest.mark.parametrize("name,param,expected", [
    ("linear", None, 1.0), ("conv2d", None, 1.0), ("conv_transpose1d", None, 1.0),
    ("sigmoid", None, 1.0), ("tanh", None, 5 / 3), ("relu", None, math.sqrt(2)),
    ("leaky_relu", None, math.sqrt(2 / (1 + 0.01 ** 2))),
    ("leaky_relu", 0.2, math.sqrt(2 / 1.04)), ("leaky_relu", 0, math.sqrt(2)),
    ("selu", None, 0.75)])
def test_calculate_gain_formula(name, param, expected):
    assert init.calculate_gain(name, param) == pytest.approx(expected, rel=1e-15)


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")
    with pytest.raises(ValueError, match="not a valid number"):
        init.calculate_gain("leaky_relu", True)


def test_calculate_gain_matches_torch():
    torch = pytest.importorskip("torch")
    for name in ["linear", "conv1d", "conv3d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"]:
        assert init.calculate_gain(name) == torch.nn.init.calculate_gain(name)
    assert init.calculate_gain("leaky_relu", 0.3) == torch.nn.init.calculate_gain(
        "leaky_relu", 0.3)


def test_fans_include_receptive_field():
    assert _calculate_fan_in_and_fan_out(em.empty(5, 3)) == (3, 5)
    assert _calculate_fan_in_and_fan_out(em.empty(8, 4, 3, 2)) == (24, 48)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        _calculate_fan_in_and_fan_out(em.empty(4))


@pytest.mark.parametrize("mode,a,nonlin", [("fan_in", 0, "relu"), ("fan_out", 0, "relu"),
                                           ("fan_in", math.sqrt(5), "leaky_relu"),
                                           ("fan_in", 0, "tanh")])
def test_kaiming_uniform_bound_and_std(mode, a, nonlin):
    w = em.empty(256, 64, 3, 3)   # fan_in 576, fan_out 2304
    out = init.kaiming_uniform_(w, a=a, mode=mode, nonlinearity=nonlin)
    assert out is w
    fan = 64 * 9 if mode == "fan_in" else 256 * 9
    gain = init.calculate_gain(nonlin, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
    x = _np(w)
    assert np.all(np.abs(x) <= bound) and np.abs(x).max() > 0.99 * bound
    assert x.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    assert abs(x.mean()) < 0.02 * bound


def test_kaiming_normal_std_and_mode_error():
    w = em.empty(128, 1000)
    init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert _np(w).std() == pytest.approx(math.sqrt(2.0 / 128), rel=0.02)
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_normal_(w, mode="fan_avg")
    with pytest.warns(UserWarning, match="no-op"):
        init.kaiming_uniform_(em.empty(0, 3))


def test_xavier_uniform_and_normal():
    w = em.empty(300, 500)
    init.xavier_uniform_(w, gain=2.0)
    a = 2.0 * math.sqrt(6.0 / 800)
    x = _np(w)
    assert np.all(np.abs(x) <= a) and x.std() == pytest.approx(a / math.sqrt(3), rel=0.02)
    init.xavier_normal_(w, gain=0.5)
    assert _np(w).std() == pytest.approx(0.5 * math.sqrt(2 / 800), rel=0.02)


def test_uniform_normal_constant_family():
    w = em.empty(200, 200)
    init.uniform_(w, -2.0, 4.0)
    x = _np(w)
    assert x.min() >= -2.0 and x.max() < 4.0 and x.mean() == pytest.approx(1.0, abs=0.05)
    init.normal_(w, mean=3.0, std=0.5)
    assert _np(w).mean() == pytest.approx(3.0, abs=0.01)
    assert _np(w).std() == pytest.approx(0.5, rel=0.02)
    assert np.all(_np(init.constant_(w, 0.25)) == 0.25)
    assert np.all(_np(init.ones_(w)) == 1.0) and np.all(_np(init.zeros_(w)) == 0.0)


def test_trunc_normal_bounds_and_std():
    w = em.empty(400, 400)
    init.trunc_normal_(w, mean=0.5, std=1.0, a=-0.5, b=1.5)
    x = _np(w)
    assert x.min() >= -0.5 and x.max() <= 1.5
    # std of N(0,1) truncated to [-1, 1]: sqrt(1 - 2 φ(1) / (2 Φ(1) - 1))
    phi = math.exp(-0.5) / math.sqrt(2 * math.pi)
    big_phi = 0.5 * (1 + math.erf(1 / math.sqrt(2)))
    expected = math.sqrt(1 - 2 * phi / (2 * big_phi - 1))
    assert x.std() == pytest.approx(expected, rel=0.02)
    assert x.mean() == pytest.approx(0.5, abs=0.01)


def test_eye_and_dirac():
    np.testing.assert_array_equal(_np(init.eye_(em.empty(2, 3))), np.eye(2, 3))
    with pytest.raises(ValueError, match="2 dimensions"):
        init.eye_(em.empty(2, 2, 2))
    w = init.dirac_(em.empty(3, 3, 3, 3))
    x = em.randn(1, 3, 5, 5)
    np.testing.assert_allclose(em.conv2d(x, w, padding=1).numpy(), x.numpy(), atol=1e-6)
    w2 = init.dirac_(em.empty(4, 2, 3), groups=2)
    assert _np(w2).sum() == 4 and _np(w2)[2, 0, 1] == 1


@pytest.mark.parametrize("shape", [(4, 4), (3, 7), (8, 2), (6, 2, 3)])
def test_orthogonal(shape):
    w = init.orthogonal_(em.empty(*shape, dtype=em.float64), gain=2.0)
    q = _np(w).reshape(shape[0], -1)
    if q.shape[0] <= q.shape[1]:
        np.testing.assert_allclose(q @ q.T, 4.0 * np.eye(q.shape[0]), atol=1e-10)
    else:
        np.testing.assert_allclose(q.T @ q, 4.0 * np.eye(q.shape[1]), atol=1e-10)
    with pytest.raises(ValueError, match="2 or more dimensions"):
        init.orthogonal_(em.empty(3))


def test_sparse():
    w = init.sparse_(em.empty(10, 6), sparsity=0.3, std=0.01)
    zeros_per_col = (_np(w) == 0).sum(axis=0)
    assert np.all(zeros_per_col >= 3)


def test_generator_reproducible_and_parameters_in_place():
    p = nn.Parameter(em.empty(5, 4))
    init.kaiming_uniform_(p, generator=em.Generator().manual_seed(3))
    a = _np(p).copy()
    init.kaiming_uniform_(p, generator=em.Generator().manual_seed(3))
    np.testing.assert_array_equal(a, _np(p))
    init.kaiming_uniform_(p, generator=em.Generator().manual_seed(4))
    assert not np.array_equal(a, _np(p))
    assert p.requires_grad and p.grad_fn is None and isinstance(p, nn.Parameter)
    for fn in (init.xavier_normal_, init.trunc_normal_, init.orthogonal_, init.normal_):
        assert fn(p) is p and p.grad_fn is None


def test_init_statistics_match_torch():
    torch = pytest.importorskip("torch")
    tw = torch.empty(64, 32, 3)
    torch.nn.init.kaiming_uniform_(tw, a=math.sqrt(5))
    ew = init.kaiming_uniform_(em.empty(64, 32, 3), a=math.sqrt(5))
    assert _np(ew).max() <= tw.abs().max().item() * 1.05 + 1e-3   # same bound
    assert _np(ew).std() == pytest.approx(tw.std().item(), rel=0.05)
