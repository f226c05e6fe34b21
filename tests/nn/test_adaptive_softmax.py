"""nn.AdaptiveLogSoftmaxWithLoss: a normalised distribution whose forward output is the
target's log-probability, its argmax, errors; parameters, outputs and gradients against
PyTorch's module when installed."""
import numpy as np
import pytest

import ember as em
import ember.nn as nn


def _asm(**kw):
    em.manual_seed(0)
    return nn.AdaptiveLogSoftmaxWithLoss(12, 15, cutoffs=[3, 7, 11], div_value=2.0,
                                         **kw).double()


def test_log_prob_is_a_distribution_and_forward_picks_the_target():
    asm = _asm(head_bias=True)
    x = em.tensor(np.random.default_rng(0).standard_normal((6, 12)))
    lp = asm.log_prob(x)
    assert lp.shape == (6, 15)
    np.testing.assert_allclose(lp.exp().sum(1).detach().numpy(), np.ones(6), rtol=1e-12)
    t = np.array([0, 2, 3, 8, 11, 14])
    out, loss = asm(x, em.tensor(t))
    want = lp.detach().numpy()[np.arange(6), t]
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12)
    assert float(loss) == pytest.approx(-want.mean(), rel=1e-12)
    np.testing.assert_array_equal(asm.predict(x).numpy(), lp.detach().numpy().argmax(1))
    single = asm(x[2], em.tensor(t[2]))
    assert single.output.shape == () and float(single.output) == pytest.approx(want[2])


def test_adaptive_softmax_trains():
    asm = _asm()
    x = em.tensor(np.random.default_rng(1).standard_normal((32, 12)))
    t = em.tensor(np.random.default_rng(2).integers(0, 15, 32))
    opt = em.optim.Adam(asm.parameters(), lr=0.05)
    first = None
    for _ in range(30):
        opt.zero_grad()
        loss = asm(x, t).loss
        first = float(loss) if first is None else first
        loss.backward()
        opt.step()
    assert float(loss) < 0.5 * first


@pytest.mark.parametrize("cutoffs", [[], [3, 3], [0, 4], [4, 15], [5, 2]])
def test_bad_cutoffs(cutoffs):
    with pytest.raises(ValueError, match="cutoffs"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 15, cutoffs)


def test_bad_targets_and_shapes():
    asm = _asm()
    x = em.randn(3, 12, dtype=em.float64)
    with pytest.raises(ValueError, match=r"Target values should be in \[0, 14\]"):
        asm(x, em.tensor([0, 15, 1]))
    with pytest.raises(ValueError, match="same size in the batch"):
        asm(x, em.tensor([0, 1]))
    with pytest.raises(ValueError, match="multi-target"):
        asm(x, em.tensor([[0], [1], [2]]))


def test_matches_pytorch():
    torch = pytest.importorskip("torch")
    asm = _asm(head_bias=True)
    ref = torch.nn.AdaptiveLogSoftmaxWithLoss(12, 15, cutoffs=[3, 7, 11], div_value=2.0,
                                              head_bias=True).double()
    sd = asm.state_dict()
    assert sorted(sd) == sorted(ref.state_dict())
    ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in sd.items()})
    x = np.random.default_rng(3).standard_normal((9, 12))
    t = np.array([0, 1, 3, 6, 7, 10, 11, 14, 2])
    xe, xt = em.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    oe, ot = asm(xe, em.tensor(t)), ref(xt, torch.tensor(t))
    np.testing.assert_allclose(oe.output.detach().numpy(), ot.output.detach().numpy(),
                               rtol=1e-12)
    oe.loss.backward()
    ot.loss.backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-14)
    for name, p in asm.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), dict(ref.named_parameters())[name].grad
                                   .numpy(), rtol=1e-10, atol=1e-14, err_msg=name)
    np.testing.assert_array_equal(asm.predict(em.tensor(x)).numpy(),
                                  ref.predict(torch.tensor(x)).numpy())
