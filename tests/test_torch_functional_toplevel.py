"""``torch.<nn op>`` top-level spellings with ATen's argument order (issue 17, item 2):
each wrapper's result equals PyTorch's for the same positional arguments."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em

torch = pytest.importorskip("torch")


def _pair(*arrays):
    return [em.from_numpy(a.copy()) for a in arrays], [torch.from_numpy(a.copy())
                                                       for a in arrays]


def _close(got, want, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=rtol,
                               atol=atol)


RNG = np.random.default_rng(0)


def test_norms_in_aten_order():
    x = RNG.standard_normal((4, 3, 5))
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    rm, rv = RNG.standard_normal(3), RNG.uniform(0.5, 2, 3)
    (ex, ew, eb, erm, erv), (tx, tw, tb, trm, trv) = _pair(x, w, b, rm, rv)
    for training in (False, True):
        _close(em.batch_norm(ex, ew, eb, erm.clone(), erv.clone(), training, 0.1, 1e-5, True),
               torch.batch_norm(tx, tw, tb, trm.clone(), trv.clone(), training, 0.1, 1e-5,
                                False))
    _close(em.instance_norm(ex, ew, eb, None, None, True, 0.1, 1e-5, True),
           torch.instance_norm(tx, tw, tb, None, None, True, 0.1, 1e-5, False))
    lw, lb = RNG.standard_normal(5), RNG.standard_normal(5)
    (elw, elb), (tlw, tlb) = _pair(lw, lb)
    _close(em.layer_norm(ex, (5,), elw, elb, 1e-5, True),
           torch.layer_norm(tx, (5,), tlw, tlb, 1e-5, False))
    _close(em.group_norm(ex, 3, ew, eb, 1e-5, True), torch.group_norm(tx, 3, tw, tb, 1e-5, False))
    _close(em.rms_norm(ex, (5,), elw, 1e-6), torch.rms_norm(tx, (5,), tlw, 1e-6))


def test_embedding_weight_first_and_dropout_train_flag():
    w = RNG.standard_normal((6, 3))
    idx = np.array([[0, 5], [2, 2]])
    (ew,), (tw,) = _pair(w)
    _close(em.embedding(ew, em.from_numpy(idx)), torch.embedding(tw, torch.from_numpy(idx)))
    _close(em.embedding(ew, em.from_numpy(idx), 2), torch.embedding(tw, torch.from_numpy(idx), 2))
    x = em.ones(5)
    assert em.dropout(x, 0.5, False).tolist() == [1.0] * 5
    y = em.dropout(x, 0.5, True).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0}
    assert em.alpha_dropout(x, 0.5, False).tolist() == [1.0] * 5


def test_losses_take_integer_reductions():
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    t = np.sign(RNG.standard_normal(4))
    (ea, eb, et), (ta, tb, tt) = _pair(a, b, t)
    p = RNG.uniform(0.1, 0.9, (4, 3))
    (ep,), (tp,) = _pair(p)
    for r in (0, 1, 2):
        _close(em.kl_div(ea, ep, r), torch.kl_div(ta, tp, r))
        _close(em.binary_cross_entropy_with_logits(ea, ep, None, None, r),
               torch.binary_cross_entropy_with_logits(ta, tp, None, None, r))
        _close(em.margin_ranking_loss(ea[:, 0], eb[:, 0], et, 0.1, r),
               torch.margin_ranking_loss(ta[:, 0], tb[:, 0], tt, 0.1, r))
        _close(em.cosine_embedding_loss(ea, eb, et, 0.2, r),
               torch.cosine_embedding_loss(ta, tb, tt, 0.2, r))
        _close(em.hinge_embedding_loss(ea, em.ones(4, 3), 1.0, r),
               torch.hinge_embedding_loss(ta, torch.ones(4, 3, dtype=torch.float64), 1.0, r))
        _close(em.triplet_margin_loss(ea, eb, ep, 1.0, 2.0, 1e-6, False, r),
               torch.triplet_margin_loss(ta, tb, tp, 1.0, 2.0, 1e-6, False, r))
        _close(em.poisson_nll_loss(ea, ep, True, False, 1e-8, r),
               torch.poisson_nll_loss(ta, tp, True, False, 1e-8, r))
    with pytest.raises(ValueError, match="reduction must be"):
        em.kl_div(ea, ep, 3)


def test_bilinear_and_inplace_aliases():
    x1, x2 = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 4))
    w, b = RNG.standard_normal((5, 3, 4)), RNG.standard_normal(5)
    (e1, e2, ew, eb), (t1, t2, tw, tb) = _pair(x1, x2, w, b)
    _close(em.bilinear(e1, e2, ew, eb), torch.bilinear(t1, t2, tw, tb))
    assert em.relu_ is em.nn.functional.relu_
