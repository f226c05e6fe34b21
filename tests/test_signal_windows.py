"""``ember.signal.windows`` against the closed forms, and PyTorch's where installed."""
import math

import numpy as np
import pytest

import ember as em
import ember.signal.windows as W

NAMES = W.__all__


def _kw(name, sym):
    return {"general_cosine": {"a": [0.5, 0.3, 0.2]}, "gaussian": {"std": 1.7},
            "kaiser": {"beta": 5.0}}.get(name, {"center": 1.5, "tau": 2.0}
                                         if name == "exponential" and not sym else {})


def test_closed_forms():
    n = np.arange(8)
    np.testing.assert_allclose(W.hann(8, dtype=em.float64).numpy(),
                               0.5 - 0.5 * np.cos(2 * np.pi * n / 7), atol=1e-12)
    np.testing.assert_allclose(W.hamming(8, sym=False, dtype=em.float64).numpy(),
                               0.54 - 0.46 * np.cos(2 * np.pi * n / 8), atol=1e-12)
    np.testing.assert_allclose(W.gaussian(8, std=2.0, dtype=em.float64).numpy(),
                               np.exp(-((n - 3.5) ** 2) / 8.0), atol=1e-12)
    np.testing.assert_allclose(W.exponential(1, center=1.5, tau=2.0, sym=False,
                                             dtype=em.float64).numpy(), [math.exp(-0.75)])
    assert W.hann(0).shape == (0,) and W.hann(1).tolist() == [1.0]
    assert W.hann(5).dtype == em.float32 and W.hann(5, dtype=em.float64).dtype == em.float64


def test_errors():
    with pytest.raises(ValueError, match="non-negative window length"):
        W.hann(-1)
    with pytest.raises(ValueError, match="Center must be None for symmetric windows"):
        W.exponential(5, center=1.0)
    with pytest.raises(ValueError, match="Standard deviation must be positive"):
        W.gaussian(5, std=0)
    with pytest.raises(ValueError, match="float32 or float64"):
        W.hann(5, dtype=em.int64)


@pytest.mark.parametrize("name", NAMES)
def test_every_window_matches_pytorch(name):
    torch = pytest.importorskip("torch")
    import torch.signal.windows as TW
    for M in (0, 1, 2, 5, 16):
        for sym in (True, False):
            want = getattr(TW, name)(M, sym=sym, dtype=torch.float64, **_kw(name, sym)).numpy()
            got = getattr(W, name)(M, sym=sym, dtype=em.float64, **_kw(name, sym)).numpy()
            np.testing.assert_allclose(got, want, atol=1e-12, rtol=1e-10,
                                       err_msg=f"{name} M={M} sym={sym}")
