"""F.linear_cross_entropy / nn.LinearCrossEntropyLoss / LinearCrossEntropyOptions: equal to
cross_entropy(linear(...)) (reference and chunked paths, values and gradients), the chunked
path's lower peak memory, K-dimensional weights, errors; PyTorch where installed."""
import numpy as np
import pytest

import ember as em
import ember.nn as nn
import ember.nn.functional as F

RNG = np.random.default_rng(1801)


def _case(n=10, c=7, d=6):
    x, w, b = RNG.standard_normal((n, d)), RNG.standard_normal((c, d)), RNG.standard_normal(c)
    t = RNG.integers(0, c, n)
    t[2] = -100
    return x, w, b, t, RNG.random(c)


@pytest.mark.parametrize("chunk", [None, 3, "auto"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_equals_cross_entropy_of_linear(chunk, reduction, weighted):
    x, w, b, t, cw = _case()
    opts = None if chunk is None else nn.LinearCrossEntropyOptions(
        batch_chunk_size=None if chunk == "auto" else chunk)
    cwt = em.tensor(cw) if weighted else None
    args = [em.tensor(a, requires_grad=True) for a in (x, w, b)]
    got = F.linear_cross_entropy(args[0], args[1], em.tensor(t), linear_bias=args[2],
                                 weight=cwt, reduction=reduction, options=opts)
    ref_args = [em.tensor(a, requires_grad=True) for a in (x, w, b)]
    want = F.cross_entropy(ref_args[0] @ ref_args[1].T + ref_args[2], em.tensor(t),
                           weight=cwt, reduction=reduction)
    g = em.tensor(RNG.standard_normal(tuple(want.shape)))
    (got * g).sum().backward()
    (want * g).sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    for a, r in zip(args, ref_args):
        np.testing.assert_allclose(a.grad.numpy(), r.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_chunked_path_lowers_peak_memory():
    x = em.randn(256, 8, dtype=em.float64, requires_grad=True)
    w = em.randn(4000, 8, dtype=em.float64, requires_grad=True)
    t = em.randint(0, 4000, (256,))

    def peak(options):
        em.reset_peak_memory_stats()
        base = em.memory_stats()["current_bytes"]
        F.linear_cross_entropy(x, w, t, options=options).backward()
        return em.memory_stats()["peak_bytes"] - base
    full = peak(None)
    chunked = peak(nn.LinearCrossEntropyOptions(batch_chunk_size=16))
    logits = 256 * 4000 * 8
    assert full >= logits and chunked < full / 4, (full, chunked)


def test_k_dimensional_weight_and_probability_targets():
    x = RNG.standard_normal((4, 6))
    w3 = RNG.standard_normal((5, 3, 6))
    t3 = RNG.integers(0, 5, (4, 3))
    logits = np.einsum("nd,ckd->nck", x, w3)
    got = F.linear_cross_entropy(em.tensor(x), em.tensor(w3), em.tensor(t3))
    want = F.cross_entropy(em.tensor(logits), em.tensor(t3))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    p = RNG.dirichlet(np.ones(5), 4)
    got = F.linear_cross_entropy(em.tensor(x), em.tensor(w3[:, 0]), em.tensor(p))
    lse = np.log(np.exp(x @ w3[:, 0].T).sum(1, keepdims=True))
    np.testing.assert_allclose(got.numpy(), -(p * (x @ w3[:, 0].T - lse)).sum(1).mean(),
                               rtol=1e-12)


def test_errors_and_options_validation():
    x, w = em.randn(3, 4), em.randn(5, 4)
    with pytest.raises(RuntimeError, match="in_features"):
        F.linear_cross_entropy(x, em.randn(5, 3), em.zeros(3, dtype=em.int64))
    with pytest.raises(RuntimeError, match="linear_bias shape"):
        F.linear_cross_entropy(x, w, em.zeros(3, dtype=em.int64), linear_bias=em.zeros(4))
    with pytest.raises(RuntimeError, match="requires batched"):
        F.linear_cross_entropy(em.randn(4), em.randn(5, 2, 4), em.zeros((), dtype=em.int64))
    with pytest.raises(RuntimeError, match="ignore_index cannot be specified"):
        F.linear_cross_entropy(x, w, em.rand(3, 5), ignore_index=1)
    with pytest.raises(ValueError, match="invalid acc_policy"):
        nn.LinearCrossEntropyOptions(acc_policy="fast")
    with pytest.raises(ValueError, match="batch_chunk_size"):
        nn.LinearCrossEntropyOptions(batch_chunk_size=0)
    with pytest.warns(UserWarning, match="options.. ignored"):
        F.linear_cross_entropy(x, w, em.zeros(3, dtype=em.int64), label_smoothing=0.1,
                               options=nn.LinearCrossEntropyOptions())


def test_module():
    loss = nn.LinearCrossEntropyLoss(6, 5, out_features=(2,), bias=True).double()
    assert tuple(loss.linear.weight.shape) == (10, 6)
    x, t = em.tensor(RNG.standard_normal((4, 6))), em.tensor(RNG.integers(0, 5, (4, 2)))
    logits = loss.linear(x).reshape(4, 5, 2)
    np.testing.assert_allclose(loss(x, t).detach().numpy(),
                               F.cross_entropy(logits, t).detach().numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="weight shape"):
        nn.LinearCrossEntropyLoss(6, 5, weight=em.ones(4))


def test_vs_torch():
    torch = pytest.importorskip("torch")
    x, w, b, t, cw = _case()
    for red in ("mean", "sum", "none"):
        a = torch.nn.functional.linear_cross_entropy(
            torch.tensor(x), torch.tensor(w), torch.tensor(t), linear_bias=torch.tensor(b),
            weight=torch.tensor(cw), reduction=red, label_smoothing=0.2)
        e = F.linear_cross_entropy(em.tensor(x), em.tensor(w), em.tensor(t),
                                   linear_bias=em.tensor(b), weight=em.tensor(cw),
                                   reduction=red, label_smoothing=0.2)
        np.testing.assert_allclose(e.numpy(), a.numpy(), rtol=1e-12)
