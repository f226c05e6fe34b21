"""``ember.channels_last``: a real NHWC layout under an NCHW shape — strides,
``is_contiguous(memory_format=)``, conversions, modules and gradients."""
import numpy as np
import pytest

import ember as em
import ember.nn as nn


def test_channels_last_strides_match_pytorchs():
    x = em.randn(2, 3, 4, 5)
    y = x.to(memory_format=em.channels_last)
    assert y.stride() == (60, 1, 15, 3) and not y.is_contiguous()
    assert y.is_contiguous(memory_format=em.channels_last)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    assert y.contiguous().stride() == (60, 20, 5, 1)
    assert y.contiguous(memory_format=em.channels_last) is y
    assert y.clone().stride() == y.stride()                      # preserve_format
    assert y.clone(memory_format=em.contiguous_format).is_contiguous()
    assert em.empty(2, 3, 4, 5, memory_format=em.channels_last).stride() == (60, 1, 15, 3)
    z = em.randn(2, 3, 4, 5, 6).to(memory_format=em.channels_last_3d)
    assert z.stride() == (360, 1, 90, 18, 3)
    assert z.is_contiguous(memory_format=em.channels_last_3d)
    assert em.randn(2, 3, 1, 1).is_contiguous(memory_format=em.channels_last)  # size-1 dims
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last"):
        em.randn(2, 3).contiguous(memory_format=em.channels_last)
    torch = pytest.importorskip("torch")
    t = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert t.stride() == y.stride()
    t3 = torch.randn(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d)
    assert t3.stride() == z.stride()


def test_gradients_flow_through_the_layout_change():
    x = em.randn(1, 2, 3, 3, dtype=em.float64, requires_grad=True)
    assert em.autograd.gradcheck(lambda a: a.to(memory_format=em.channels_last) * 2, (x,))
    assert em.autograd.gradcheck(lambda a: a.contiguous(memory_format=em.channels_last).sin(),
                                 (x,))


def test_modules_convert_their_conv_weights():
    em.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                        nn.Linear(8 * 2 * 3, 4))
    x = em.randn(2, 3, 4, 5)
    want = net(x).detach().numpy()
    net.to(memory_format=em.channels_last)
    w = net[0].weight
    assert w.is_contiguous(memory_format=em.channels_last) and isinstance(w, nn.Parameter)
    assert net[4].weight.is_contiguous()                           # 2-D: untouched
    out = net(x.to(memory_format=em.channels_last))
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert tuple(w.grad.shape) == (8, 3, 3, 3)
    from ember.nn.utils import convert_conv2d_weight_memory_format
    conv = convert_conv2d_weight_memory_format(nn.Conv2d(3, 4, 3), em.channels_last)
    assert conv.weight.stride() == (27, 1, 9, 3)
