"""The autocast weight-cast cache (``amp/autocast_mode._cached_cast``) beyond the basics of
``test_autocast.py``: a cast first made under ``no_grad`` still carries gradients later in
the region (PyTorch 2.10+), a weight written in place inside the region is cast again
(Ember keys the cache by the storage's version), inference mode does not cache, and a
weight shared by several ops in one region is cast once with gradients reaching it."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.amp import autocast_mode


def _lin(seed=0):
    em.manual_seed(seed)
    return em.nn.Linear(8, 4)


def _cast_count(fn):
    """How many ``cast`` primitives ``fn`` runs (an ember.profiler op table)."""
    with em.profiler.profile() as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key == "cast")


def test_cast_cached_under_no_grad_still_gets_gradients():
    lin = _lin()
    x = em.randn(3, 8)
    with em.autocast("cpu"):
        with em.no_grad():
            lin(x)                                 # caches the weight's bfloat16 copy
        y = lin(x)
    assert y.grad_fn is not None
    y.float().sum().backward()
    want = np.broadcast_to(x.to(em.bfloat16).float().numpy().sum(0), (4, 8))
    np.testing.assert_allclose(lin.weight.grad.numpy(), want, rtol=2 ** -7)


def test_cast_cached_under_no_grad_matches_torch():
    torch = pytest.importorskip("torch")
    lin, tlin = _lin(), torch.nn.Linear(8, 4)
    with torch.no_grad():
        tlin.weight.copy_(torch.tensor(lin.weight.detach().numpy()))
        tlin.bias.copy_(torch.tensor(lin.bias.detach().numpy()))
    a = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    with em.autocast("cpu"):
        with em.no_grad():
            lin(em.tensor(a))
        y = lin(em.tensor(a))
    with torch.autocast("cpu"):
        with torch.no_grad():
            tlin(torch.tensor(a))
        ty = tlin(torch.tensor(a))
    y.float().sum().backward()
    ty.float().sum().backward()
    assert (y.grad_fn is None) == (ty.grad_fn is None) and y.dtype.name == "bfloat16"
    np.testing.assert_allclose(lin.weight.grad.numpy(), tlin.weight.grad.numpy(), rtol=2 ** -7)


def test_weight_written_in_place_inside_the_region_is_cast_again():
    lin = _lin()
    x = em.randn(3, 8)
    with em.autocast("cpu"):
        a = lin(x).float()
        with em.no_grad():
            lin.weight.mul_(2.0)
        b = lin(x).float()
    a, b = a.detach(), b.detach()
    bias = lin.bias.detach().to(em.bfloat16).float()
    # NOTE: doubling is exact in bfloat16, so fresh casts give b - bias == 2 (a - bias)
    # up to the two outputs' rounding; a stale copy would give b == a
    np.testing.assert_allclose((b - bias).numpy(), 2 * (a - bias).numpy(), rtol=2 ** -6,
                               atol=2 ** -6)
    assert not np.allclose(b.numpy(), a.numpy())


def test_no_caching_in_inference_mode():
    lin = _lin()
    with em.autocast("cpu"):
        with em.inference_mode():
            lin(em.randn(3, 8))
        assert not autocast_mode._sw.cache


def test_shared_weight_cast_once_per_region():
    lin = _lin()
    x = em.randn(3, 8)

    def two_uses():
        with em.autocast("cpu"):
            (lin(x).float().sum() + lin(x * 2).float().sum()).backward()
    casts = _cast_count(two_uses)
    lin.weight.grad = lin.bias.grad = None

    def uncached():
        with em.autocast("cpu", cache_enabled=False):
            (lin(x).float().sum() + lin(x * 2).float().sum()).backward()
    # the uncached region casts weight and bias again for the second use, and each extra
    # cast's VJP casts its gradient back to float32: 2 + 2 more
    assert _cast_count(uncached) == casts + 4
    assert lin.weight.grad is not None and lin.weight.grad.dtype == em.float32
