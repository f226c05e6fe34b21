"""Eager class-index cross-entropy/NLL with no ignored target takes a 4-op path (no mask):
the same bits as the masked composite, forward and backward."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.nn.functional import _loss


def _masked_path(monkeypatch):
    """Make the composite believe a target may be ignored (its general, masked path)."""
    orig = _loss._check_targets
    monkeypatch.setattr(_loss, "_check_targets", lambda *a: orig(*a)[:2] + (False,))


def _run(fn, logits, target, **kw):
    x = ember.tensor(logits, requires_grad=True)
    loss = fn(x, ember.tensor(target), **kw)
    loss.backward()
    return loss.detach().numpy().copy(), x.grad.numpy().copy()


CASES = [((64, 10), (64,)), ((10,), ()), ((6, 5, 3, 4), (6, 3, 4)), ((0, 4), (0,))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("shapes", CASES)
@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_same_bits_as_the_masked_path(monkeypatch, dtype, reduction, shapes, fn):
    rng = np.random.default_rng(0)
    xshape, tshape = shapes
    logits = (rng.standard_normal(xshape) * 4).astype(dtype)
    if fn == "nll_loss":
        logits = logits - np.log(np.exp(logits).sum(1 if len(xshape) > 1 else 0, keepdims=True))
    n = xshape[1] if len(xshape) > 1 else xshape[0]
    target = rng.integers(0, n, tshape)
    f = getattr(F, fn)
    fast = _run(f, logits, target, reduction=reduction)
    with monkeypatch.context() as m:
        _masked_path(m)
        slow = _run(f, logits, target, reduction=reduction)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
    # and against NumPy
    axis = 1 if len(xshape) > 1 else 0
    lp = logits - np.log(np.exp(logits).sum(axis, keepdims=True)) if fn == "cross_entropy" \
        else logits
    picked = np.take_along_axis(lp, np.expand_dims(target, axis), axis)
    if picked.size:
        ref = -picked.sum() / (picked.size if reduction == "mean" else 1)
        np.testing.assert_allclose(fast[0], ref, rtol=1e-5 if dtype == np.float32 else 1e-12)
    else:
        assert np.isnan(fast[0]) if reduction == "mean" else fast[0] == 0


def test_non_contiguous_logits_and_int32_targets(monkeypatch):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((10, 32)).astype(np.float32)
    target = rng.integers(0, 10, 32).astype(np.int32)
    outs = []
    for masked in (False, True):
        with monkeypatch.context() as m:
            if masked:
                _masked_path(m)
            xb = ember.tensor(base, requires_grad=True)
            loss = F.cross_entropy(xb.mT, ember.tensor(target))   # (32, 10), transposed
            loss.backward()
            outs.append((loss.detach().numpy().copy(), xb.grad.numpy().copy()))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_an_ignored_target_still_takes_the_masked_path(ignore_index):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((8, 5))
    target = rng.integers(0, 5, 8)
    target[[1, 6]] = ignore_index
    x = ember.tensor(logits, requires_grad=True)
    loss = F.cross_entropy(x, ember.tensor(target), ignore_index=ignore_index)
    loss.backward()
    lp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    keep = target != ignore_index
    ref = -lp[np.arange(8)[keep], target[keep]].mean()
    np.testing.assert_allclose(loss.item(), ref, rtol=1e-12)
    assert np.all(x.grad.numpy()[~keep] == 0)


def test_traced_call_keeps_the_mask():
    """Under ember.compile the trace must not depend on the batch's values: a graph traced
    on a batch with no ignored target still ignores one in a later batch."""
    rng = np.random.default_rng(3)
    logits = ember.tensor(rng.standard_normal((8, 5)))
    f = ember.compile(lambda x, t: F.cross_entropy(x, t))
    clean = rng.integers(0, 5, 8)
    f(logits, ember.tensor(clean))
    dirty = clean.copy()
    dirty[2] = -100
    got = f(logits, ember.tensor(dirty)).item()
    lp = logits.numpy() - np.log(np.exp(logits.numpy()).sum(1, keepdims=True))
    keep = dirty != -100
    np.testing.assert_allclose(got, -lp[np.arange(8)[keep], dirty[keep]].mean(), rtol=1e-5)
