"""F.gumbel_softmax (Gumbel-max statistics, straight-through gradient, seeding) and the
deprecated nn.NLLLoss2d alias."""
import numpy as np
import pytest

import ember as em
import ember.nn as nn
import ember.nn.functional as F


def test_gumbel_softmax_hard_samples_follow_the_softmax():
    """Gumbel-max: argmax(logits + g) ~ Categorical(softmax(logits)); 20000 draws, every
    frequency within 5 standard errors."""
    em.manual_seed(0)
    logits = em.tensor([1.0, 0.0, -1.0, 2.0])
    n = 20000
    y = F.gumbel_softmax(logits.expand(n, 4), tau=0.7, hard=True)
    assert set(np.unique(y.numpy())) <= {0.0, 1.0}
    np.testing.assert_array_equal(y.numpy().sum(1), np.ones(n))
    p = np.exp(logits.numpy()) / np.exp(logits.numpy()).sum()
    freq = y.numpy().mean(0)
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n)), (freq, p)


def test_gumbel_softmax_soft_and_straight_through():
    em.manual_seed(1)
    x = em.randn(3, 5, requires_grad=True)
    w = em.randn(3, 5)
    em.manual_seed(2)
    soft = F.gumbel_softmax(x, tau=0.5)
    np.testing.assert_allclose(soft.detach().numpy().sum(1), np.ones(3), rtol=1e-6)
    (g_soft,) = em.autograd.grad((soft * w).sum(), x)
    em.manual_seed(2)                                 # same noise: same soft sample
    hard = F.gumbel_softmax(x, tau=0.5, hard=True)
    np.testing.assert_array_equal(hard.detach().numpy().argmax(1),
                                  soft.detach().numpy().argmax(1))
    (g_hard,) = em.autograd.grad((hard * w).sum(), x)
    np.testing.assert_allclose(g_hard.numpy(), g_soft.numpy(), rtol=1e-5, atol=1e-7)


def test_gumbel_softmax_dim():
    em.manual_seed(3)
    y = F.gumbel_softmax(em.zeros(4, 3), dim=0, hard=True)
    np.testing.assert_array_equal(y.numpy().sum(0), np.ones(3))


def test_nllloss2d_is_nllloss_with_a_deprecation_warning():
    with pytest.warns(UserWarning, match="NLLLoss2d has been deprecated"):
        loss = nn.NLLLoss2d(ignore_index=1)
    x = em.randn(2, 3, 4, 4).log_softmax(1)
    t = em.randint(0, 3, (2, 4, 4))
    np.testing.assert_array_equal(loss(x, t).numpy(), nn.NLLLoss(ignore_index=1)(x, t).numpy())
