"""Eager float32/float64 class-index cross-entropy runs the ``nll_loss`` primitive pair
(ops/nll.py): one node each, the masked composite's bits (signed zeros included), and
gradients of gradients through the same two ops."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.nn.functional import _loss


def _masked(monkeypatch):
    orig = _loss._check_targets
    monkeypatch.setattr(_loss, "_check_targets", lambda *a: orig(*a)[:2] + (False,))


def _run(logits, target, scale, reduction):
    x = ember.tensor(logits, requires_grad=True)
    loss = F.cross_entropy(x, ember.tensor(target), reduction=reduction)
    (loss * scale).backward()
    return loss, [loss.detach().numpy().copy(), x.grad.numpy().copy()]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("classes", [10, 40, 1])
@pytest.mark.parametrize("scale", [1.0, 0.0, -0.0])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_bits_of_the_masked_composite(monkeypatch, dtype, classes, scale, reduction):
    rng = np.random.default_rng(classes)
    logits = (rng.standard_normal((33, classes)) * 3).astype(dtype)
    target = rng.integers(0, classes, 33)
    loss, fast = _run(logits, target, scale, reduction)
    assert loss.grad_fn.name() == "NllLossBackward"
    with monkeypatch.context() as m:
        _masked(m)
        _, slow = _run(logits, target, scale, reduction)
    u = np.uint32 if dtype == np.float32 else np.uint64
    for a, b in zip(fast, slow):       # bit patterns: -0.0 and +0.0 differ
        np.testing.assert_array_equal(np.asarray(a).view(u), np.asarray(b).view(u))


def test_double_backward_stays_in_the_pair():
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.standard_normal((6, 4)), requires_grad=True)
    t = ember.tensor(rng.integers(0, 4, 6))
    (g,) = ember.autograd.grad(F.cross_entropy(x, t), x, create_graph=True)
    (gg,) = ember.autograd.grad((g * g).sum(), x)
    # d/dx sum(g^2), g = (softmax(x) - onehot) / n: 2 J^T g with J the softmax Jacobian / n
    xs = x.detach().numpy()
    p = np.exp(xs - xs.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    gn = (p - np.eye(4)[t.numpy()]) / 6
    ref = 2 * (p * gn - p * (p * gn).sum(1, keepdims=True)) / 6
    np.testing.assert_allclose(gg.numpy(), ref, rtol=1e-10, atol=1e-12)


def test_lowp_and_weighted_keep_the_composite():
    x = ember.randn(4, 3, requires_grad=True)
    t = ember.tensor([0, 1, 2, 0])
    assert F.cross_entropy(x.to(ember.bfloat16), t).grad_fn.name() != "NllLossBackward"
    assert F.cross_entropy(x, t, weight=ember.ones(3)).grad_fn.name() != "NllLossBackward"
    assert F.cross_entropy(x, t, ignore_index=0).grad_fn.name() != "NllLossBackward"
