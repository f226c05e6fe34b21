"""ember.nn.grad (torch.nn.grad): convolution gradients w.r.t. input and weight — the
adjoint identity <conv(x', w), g> = <conv_input(g), x'> (convolution is linear in each
argument), errors, and equality with PyTorch where installed."""
import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.nn import grad as G

RNG = np.random.default_rng(1811)
CASES = [(1, (2, 4, 9), (6, 2, 3), dict(stride=2, padding=1, groups=2)),
         (2, (2, 4, 7, 6), (6, 2, 3, 2), dict(stride=(2, 1), padding=1, groups=2)),
         (3, (1, 2, 5, 4, 4), (3, 2, 2, 2, 2), dict(dilation=(1, 2, 1)))]


@pytest.mark.parametrize("nd,xs,ws,kw", CASES)
def test_adjoint_identity(nd, xs, ws, kw):
    conv = getattr(F, f"conv{nd}d")
    x, w = em.tensor(RNG.standard_normal(xs)), em.tensor(RNG.standard_normal(ws))
    g = em.tensor(RNG.standard_normal(tuple(conv(x, w, **kw).shape)))
    gx = getattr(G, f"conv{nd}d_input")(xs, w, g, **kw)
    gw = getattr(G, f"conv{nd}d_weight")(x, ws, g, **kw)
    x2, w2 = em.tensor(RNG.standard_normal(xs)), em.tensor(RNG.standard_normal(ws))
    np.testing.assert_allclose(float((conv(x2, w, **kw) * g).sum()), float((gx * x2).sum()),
                               rtol=1e-10)
    np.testing.assert_allclose(float((conv(x, w2, **kw) * g).sum()), float((gw * w2).sum()),
                               rtol=1e-10)


def test_shape_errors():
    w = em.randn(4, 3, 3, 3)
    with pytest.raises(ValueError, match="grad_output has shape"):
        G.conv2d_input((1, 3, 8, 8), w, em.randn(1, 4, 5, 5))
    with pytest.raises(ValueError, match="4-D grad_output"):
        G.conv2d_weight(em.randn(1, 3, 8, 8), (4, 3, 3, 3), em.randn(4, 6, 6))


@pytest.mark.parametrize("nd,xs,ws,kw", CASES)
def test_vs_torch(nd, xs, ws, kw):
    torch = pytest.importorskip("torch")
    conv = getattr(torch.nn.functional, f"conv{nd}d")
    x, w = RNG.standard_normal(xs), RNG.standard_normal(ws)
    g = RNG.standard_normal(tuple(conv(torch.tensor(x), torch.tensor(w), **kw).shape))
    a = getattr(torch.nn.grad, f"conv{nd}d_input")(xs, torch.tensor(w), torch.tensor(g), **kw)
    b = getattr(G, f"conv{nd}d_input")(xs, em.tensor(w), em.tensor(g), **kw)
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-10, atol=1e-12)
    a = getattr(torch.nn.grad, f"conv{nd}d_weight")(torch.tensor(x), ws, torch.tensor(g), **kw)
    b = getattr(G, f"conv{nd}d_weight")(em.tensor(x), ws, em.tensor(g), **kw)
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-10, atol=1e-12)
