"""Golden examples from the seeds (SPEC.md), reproduced exactly as listed there."""
from __future__ import annotations

import math

import pytest

import ember as em
from ember.autograd import forward_ad as fwad


def _sigmoid(t):
    return 1 / (1 + em.exp(-t))


def test_two_layer_sigmoid_network_seed_000():
    x = em.tensor([0.02, 0.04, 0.01])
    y = em.tensor([0.9, 0.5])
    W1 = em.tensor([[0.25, 0.15, 0.30], [0.25, 0.20, 0.35], [0.10, 0.25, 0.15]],
                   requires_grad=True)
    W2 = em.tensor([[0.40, 0.25], [0.35, 0.30], [0.01, 0.35]], requires_grad=True)
    b1 = em.tensor([0.4, 0.4, 0.4], requires_grad=True)
    b2 = em.tensor([0.7, 0.7], requires_grad=True)
    v = W1.t() @ x + b1
    h = _sigmoid(v)
    z = W2.t() @ h + b2
    y_hat = _sigmoid(z)
    L = 0.5 * ((y - y_hat) ** 2).sum()
    assert y_hat.tolist() == pytest.approx([0.7609, 0.7760], abs=5e-5)
    assert L.item() == pytest.approx(0.0478, abs=5e-5)
    L.backward()
    assert W2.grad.tolist()[1][0] == pytest.approx(-0.0152, abs=5e-5)
    with em.no_grad():
        for p in (W1, W2, b1, b2):
            p -= 1.0 * p.grad            # one SGD step, lr = 1
    assert W2.tolist()[1][0] == pytest.approx(0.3652, abs=5e-5)


def test_reverse_mode_example_exp_product():
    x1 = em.tensor(3.0, dtype=em.float64, requires_grad=True)
    x2 = em.tensor(2.0, dtype=em.float64, requires_grad=True)
    f = (em.exp(x1) + x2) * (x2 + 1)
    assert f.item() == pytest.approx(66.2566, abs=5e-5)
    f.backward()
    assert x1.grad.item() == pytest.approx(60.2566, abs=5e-5)
    assert x2.grad.item() == pytest.approx(25.0855, abs=5e-5)


def _seed_y(x1, x2):
    return em.log(x1) + x1 * x2 - em.sin(x2)


def test_forward_and_reverse_mode_example_log_sin():
    x1 = em.tensor(2.0, dtype=em.float64)
    x2 = em.tensor(5.0, dtype=em.float64)
    with fwad.dual_level():
        y = _seed_y(fwad.make_dual(x1, em.tensor(1.0, dtype=em.float64)), x2)
        primal, dy_dx1 = fwad.unpack_dual(y)
    assert primal.item() == pytest.approx(11.652, abs=5e-4)
    assert dy_dx1.item() == pytest.approx(5.5, abs=1e-12)
    x1.requires_grad_()
    x2.requires_grad_()
    y = _seed_y(x1, x2)
    y.backward()
    assert y.item() == pytest.approx(11.652, abs=5e-4)
    assert x2.grad.item() == pytest.approx(1.7163, abs=5e-5)
    assert x1.grad.item() == pytest.approx(5.5, abs=1e-12)


def _final_over_initial_norm(c: float, depth: int = 50, width: int = 100) -> float:
    em.manual_seed(0)
    h = em.randn(32, width, dtype=em.float64)
    n0 = math.sqrt((h * h).sum().item())
    for _ in range(depth):
        W = em.randn(width, width, dtype=em.float64) * math.sqrt(c / width)
        h = em.relu(h @ W)
    return math.sqrt((h * h).sum().item()) / n0


def test_deep_relu_activation_norms_kaiming_seed_002():
    # 50 ReLU layers of width 100, W ~ N(0, c/n): each layer scales E|h|^2 by c/2.
    assert _final_over_initial_norm(3.0) > 1e3       # explodes (~1.5**25)
    assert 0.1 < _final_over_initial_norm(2.0) < 10  # Kaiming: stays ~constant
    assert _final_over_initial_norm(1.0) < 1e-3      # vanishes (~0.5**25)
