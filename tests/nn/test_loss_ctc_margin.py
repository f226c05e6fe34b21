"""Issue 17 leftovers: CTCLoss / F.ctc_loss, MultiMarginLoss, MultiLabelMarginLoss and
TripletMarginWithDistanceLoss — closed forms and errors without PyTorch, values and
gradients against PyTorch when it is installed (the primitive's own generated tests are in
tests/opinfo/ctc.py)."""
import math

import numpy as np
import pytest

import ember as em
import ember.nn as nn
import ember.nn.functional as F


def _log_softmax(x):
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


# ------------------------------------------------------------------ CTC, no PyTorch
def test_ctc_single_frame_closed_form():
    lp = _log_softmax(np.array([[[0.3, 1.2, -0.5]]]))           # T=1, N=1, C=3
    got = F.ctc_loss(em.tensor(lp), em.tensor([[2]]), [1], [1], reduction="sum")
    assert float(got) == pytest.approx(-lp[0, 0, 2], rel=1e-14)


def test_ctc_two_frames_sums_the_alignments():
    lp = _log_softmax(np.random.default_rng(0).standard_normal((2, 1, 3)))
    p = np.exp(lp[:, 0])
    # target [1]: paths (1,1), (0,1), (1,0)
    want = -math.log(p[0, 1] * p[1, 1] + p[0, 0] * p[1, 1] + p[0, 1] * p[1, 0])
    got = F.ctc_loss(em.tensor(lp), em.tensor([1]), [2], [1], reduction="none")
    np.testing.assert_allclose(got.numpy(), [want], rtol=1e-13)


def test_ctc_reductions_and_forms_agree():
    rng = np.random.default_rng(1)
    lp = em.tensor(_log_softmax(rng.standard_normal((8, 3, 4))))
    padded = em.tensor([[1, 2, 3], [3, 3, 0], [2, 0, 0]])
    lens = em.tensor([3, 2, 1])
    none = F.ctc_loss(lp, padded, em.tensor([8, 7, 5]), lens, reduction="none")
    concat = F.ctc_loss(lp, em.tensor([1, 2, 3, 3, 3, 2]), (8, 7, 5), (3, 2, 1),
                        reduction="none")
    np.testing.assert_array_equal(none.numpy(), concat.numpy())
    np.testing.assert_allclose(F.ctc_loss(lp, padded, [8, 7, 5], lens, reduction="sum").numpy(),
                               none.numpy().sum(), rtol=1e-6)
    np.testing.assert_allclose(F.ctc_loss(lp, padded, [8, 7, 5], lens).numpy(),
                               (none.numpy() / np.array([3, 2, 1])).mean(), rtol=1e-6)
    one = F.ctc_loss(lp[:, 1], em.tensor([3, 3]), [7], [2], reduction="none")
    assert one.shape == () and float(one) == pytest.approx(float(none[1]), rel=1e-6)


def test_ctc_infeasible_and_zero_infinity():
    lp = em.tensor(_log_softmax(np.zeros((2, 1, 3))), requires_grad=True)
    loss = F.ctc_loss(lp, em.tensor([[1, 1]]), [2], [2], reduction="sum")   # needs 3 frames
    assert math.isinf(float(loss))
    z = F.ctc_loss(lp, em.tensor([[1, 1]]), [2], [2], reduction="sum", zero_infinity=True)
    z.backward()
    assert float(z) == 0.0 and not lp.grad.numpy().any()


def test_ctc_gradient_is_minus_the_posterior():
    """d nll / d log_probs = -gamma: each frame's posterior sums to one within the input
    length, and the gradient is zero past it."""
    lp = em.tensor(_log_softmax(np.random.default_rng(2).standard_normal((6, 2, 4))),
                   requires_grad=True)
    F.ctc_loss(lp, em.tensor([[1, 2], [3, 0]]), [6, 4], [2, 1], reduction="sum").backward()
    g = lp.grad.numpy()
    np.testing.assert_allclose(g[:, 0].sum(-1), -np.ones(6), rtol=1e-12)
    np.testing.assert_allclose(g[:4, 1].sum(-1), -np.ones(4), rtol=1e-12)
    assert not g[4:, 1].any() and (g <= 0).all()


@pytest.mark.parametrize("kwargs, match", [
    (dict(il=[9, 3]), "at most 8"), (dict(il=[-1, 3]), "at least 0"),
    (dict(blank=4), "blank must be in label range"), (dict(tg=[[1, 5], [2, 0]]), r"\[0, 4\)"),
    (dict(tl=[3, 1]), "at least 3"), (dict(tg=[1.0, 2.0]), "integers")])
def test_ctc_errors(kwargs, match):
    lp = em.tensor(_log_softmax(np.zeros((8, 2, 4))))
    tg = em.tensor(kwargs.get("tg", [[1, 2], [2, 0]]))
    with pytest.raises((ValueError, TypeError), match=match):
        F.ctc_loss(lp, tg, kwargs.get("il", [8, 3]), kwargs.get("tl", [2, 1]),
                   blank=kwargs.get("blank", 0))


def test_ctc_module():
    loss_fn = nn.CTCLoss(blank=3, zero_infinity=True)
    assert repr(loss_fn) == "CTCLoss(blank=3, zero_infinity=True)"
    lp = em.tensor(_log_softmax(np.zeros((5, 1, 4))))
    np.testing.assert_array_equal(
        loss_fn(lp, em.tensor([[1, 2]]), [5], [2]).numpy(),
        F.ctc_loss(lp, em.tensor([[1, 2]]), [5], [2], blank=3, zero_infinity=True).numpy())


# ------------------------------------------------------------------ margins, no PyTorch
def test_multi_margin_closed_form():
    x = em.tensor([[0.1, 0.2, 0.4, 0.8]])
    want = (max(0, 1 - 0.8 + 0.1) + max(0, 1 - 0.8 + 0.2) + max(0, 1 - 0.8 + 0.4)) / 4
    assert float(F.multi_margin_loss(x, em.tensor([3]))) == pytest.approx(want, rel=1e-6)
    assert float(nn.MultiMarginLoss(p=2)(x, em.tensor([3]))) == pytest.approx(
        (0.3 ** 2 + 0.4 ** 2 + 0.6 ** 2) / 4, rel=1e-6)
    with pytest.raises(ValueError, match="only p == 1 and p == 2"):
        F.multi_margin_loss(x, em.tensor([3]), p=3)
    with pytest.raises(IndexError, match="out of range"):
        F.multi_margin_loss(x, em.tensor([4]))
    with pytest.raises(ValueError, match="weight size"):
        F.multi_margin_loss(x, em.tensor([3]), weight=em.ones(3))


def test_multilabel_margin_closed_form():
    x = em.tensor([[0.1, 0.2, 0.4, 0.8]])
    # targets {3, 0}; non-targets {1, 2}
    want = sum(max(0, 1 - (x[0, j] - x[0, i]).item()) for j in (3, 0) for i in (1, 2)) / 4
    got = nn.MultiLabelMarginLoss()(x, em.tensor([[3, 0, -1, 1]]))
    assert float(got) == pytest.approx(want, rel=1e-6)
    with pytest.raises(ValueError, match="inconsistent target size"):
        F.multilabel_margin_loss(x, em.tensor([[3, 0, -1]]))
    with pytest.raises(TypeError, match="integer"):
        F.multilabel_margin_loss(x, em.tensor([[3.0, 0, -1, 1]]))


def test_triplet_with_distance_module():
    a = em.tensor([[0.0, 0.0], [1.0, 1.0]])
    loss = nn.TripletMarginWithDistanceLoss(distance_function=lambda u, v: (u - v).abs().sum(-1),
                                            margin=2.0, reduction="none")
    np.testing.assert_allclose(loss(a, a + 1, a - 0.5).numpy(), [2.0 + 2.0 - 1.0] * 2)
    with pytest.raises(ValueError, match="margin"):
        nn.TripletMarginWithDistanceLoss(margin=0)
    with pytest.raises(ValueError, match="same number of dimensions"):
        F.triplet_margin_with_distance_loss(a, a, a[0])


# ------------------------------------------------------------------ PyTorch as an oracle
def _both(torch, arrays, grad_first=True):
    e = [em.tensor(a) for a in arrays]
    t = [torch.tensor(a) for a in arrays]
    if grad_first:
        e[0].requires_grad_()
        t[0].requires_grad_()
    return e, t


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_ctc_matches_pytorch(dtype, reduction):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((30, 4, 6)).astype(dtype)
    tg = rng.integers(1, 6, (4, 10))
    tg[0, 3] = tg[0, 2]                                            # a repeated label
    il, tl = np.array([30, 25, 17, 30]), np.array([10, 6, 0, 12 - 2])
    (xe,), (xt,) = _both(torch, [logits])
    le = F.ctc_loss(xe.log_softmax(2), em.tensor(tg), em.tensor(il), em.tensor(tl),
                    reduction=reduction)
    lt = torch.nn.functional.ctc_loss(xt.log_softmax(2), torch.tensor(tg), torch.tensor(il),
                                      torch.tensor(tl), reduction=reduction)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(le.detach().numpy(), lt.detach().numpy(), rtol=tol)
    w = rng.standard_normal(le.shape)
    (le * em.tensor(w.astype(dtype))).sum().backward()
    (lt * torch.tensor(w.astype(dtype))).sum().backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=tol * 10, atol=tol)


def test_ctc_log_probs_gradient_relation_to_pytorch():
    """PyTorch's log_probs gradient is Ember's plus ``exp(log_probs)`` (within each length)."""
    torch = pytest.importorskip("torch")
    lp = _log_softmax(np.random.default_rng(4).standard_normal((7, 2, 5)))
    (e,), (t,) = _both(torch, [lp])
    args = ([[1, 2, 2], [4, 1, 0]], [7, 5], [3, 2])
    F.ctc_loss(e, em.tensor(args[0]), args[1], args[2], reduction="sum", blank=0).backward()
    torch.nn.functional.ctc_loss(t, torch.tensor(args[0]), torch.tensor(args[1]),
                                 torch.tensor(args[2]), reduction="sum").backward()
    inside = np.arange(7)[:, None] < np.array(args[1])[None, :]
    want = t.grad.numpy() - np.where(inside[..., None], np.exp(lp), 0.0)
    np.testing.assert_allclose(e.grad.numpy(), want, atol=1e-12)


def test_ctc_blank_and_unbatched_match_pytorch():
    torch = pytest.importorskip("torch")
    lp = _log_softmax(np.random.default_rng(5).standard_normal((9, 5)))
    got = F.ctc_loss(em.tensor(lp), em.tensor([0, 1, 1, 3]), [9], [4], blank=2)
    want = torch.nn.functional.ctc_loss(torch.tensor(lp), torch.tensor([0, 1, 1, 3]), (9,),
                                        (4,), blank=2)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("kw", [{}, {"p": 2, "margin": 0.5}, {"weight": [1.0, 2.0, 0.5, 3.0]},
                                {"reduction": "none"}, {"reduction": "sum"}])
def test_multi_margin_matches_pytorch(kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((6, 4)), rng.integers(0, 4, 6)
    (xe, ye), (xt, yt) = _both(torch, [x, y])
    ke = {k: em.tensor(v, dtype=em.float64) if isinstance(v, list) else v
          for k, v in kw.items()}
    kt = {k: torch.tensor(v, dtype=torch.float64) if isinstance(v, list) else v
          for k, v in kw.items()}
    le, lt = F.multi_margin_loss(xe, ye, **ke), torch.nn.functional.multi_margin_loss(xt, yt,
                                                                                        **kt)
    np.testing.assert_allclose(le.detach().numpy(), lt.detach().numpy(), rtol=1e-12)
    le.sum().backward()
    lt.sum().backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_multilabel_margin_matches_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 4))
    y = np.array([[3, 0, -1, 1], [1, 2, 3, -1], [-1, 0, 0, 0], [2, 2, -1, 0], [0, 1, 2, 3]])
    (xe, ye), (xt, yt) = _both(torch, [x, y])
    for red in ("none", "mean"):
        le = F.multilabel_margin_loss(xe, ye, reduction=red)
        lt = torch.nn.functional.multilabel_margin_loss(xt, yt, reduction=red)
        np.testing.assert_allclose(le.detach().numpy(), lt.detach().numpy(), rtol=1e-12)
    le.backward()
    lt.backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("kw", [{}, {"swap": True, "margin": 2.0}])
def test_triplet_with_distance_matches_pytorch(kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    a, p, n = (rng.standard_normal((4, 3)) for _ in range(3))
    (ae, pe, ne), (at, pt, nt) = _both(torch, [a, p, n])
    le = nn.TripletMarginWithDistanceLoss(**kw)(ae, pe, ne)
    lt = torch.nn.TripletMarginWithDistanceLoss(**kw)(at, pt, nt)
    np.testing.assert_allclose(le.detach().numpy(), lt.detach().numpy(), rtol=1e-12)
    le.backward()
    lt.backward()
    np.testing.assert_allclose(ae.grad.numpy(), at.grad.numpy(), rtol=1e-10)


def test_ctc_target_equal_to_blank_matches_pytorch_value():
    """PyTorch's docs forbid blank in targets but don't check; its recursion treats every odd
    position as a target (skip transitions by position, not by label). Regression: the
    value agrees (the gradient is the true derivative of that value; PyTorch's is not)."""
    torch = pytest.importorskip("torch")
    lp = _log_softmax(np.random.default_rng(14).standard_normal((13, 2, 3)))
    args = ([[2, 0, 1], [1, 1, 2]], [3, 11], [1, 3])
    got = F.ctc_loss(em.tensor(lp), em.tensor(args[0]), args[1], args[2], blank=2,
                     reduction="none")
    want = torch.nn.functional.ctc_loss(torch.tensor(lp), torch.tensor(args[0]),
                                        torch.tensor(args[1]), torch.tensor(args[2]), blank=2,
                                        reduction="none")
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_ctc_random_shapes_match_pytorch(seed):
    """Random T, N, C, lengths (incl. 0 and infeasible ones), blank and zero_infinity."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(100 + seed)
    t, n, c, s = (int(rng.integers(lo, hi)) for lo, hi in ((1, 15), (1, 5), (2, 6), (0, 6)))
    blank = int(rng.integers(0, c))
    logits = rng.standard_normal((t, n, c))
    tg = rng.integers(0, c, (n, max(s, 1)))
    tg = np.where(tg == blank, (blank + 1) % c, tg)
    il, tl = rng.integers(0, t + 1, n), rng.integers(0, s + 1, n)
    zi = bool(seed % 2)
    (xe,), (xt,) = _both(torch, [logits])
    le = F.ctc_loss(xe.log_softmax(2), em.tensor(tg), em.tensor(il), em.tensor(tl),
                    blank=blank, reduction="sum", zero_infinity=zi)
    lt = torch.nn.functional.ctc_loss(xt.log_softmax(2), torch.tensor(tg), torch.tensor(il),
                                      torch.tensor(tl), blank=blank, reduction="sum",
                                      zero_infinity=zi)
    np.testing.assert_allclose(le.detach().numpy(), lt.detach().numpy(), rtol=1e-10)
    if np.isfinite(lt.item()):
        le.backward()
        lt.backward()
        np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-8, atol=1e-10)
