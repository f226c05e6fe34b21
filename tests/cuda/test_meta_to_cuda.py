"""A model built on ``meta`` and given device memory with ``to_empty(device="cuda")`` (the
big-model recipe), on the strict stand-in: parameters land on the device uninitialised,
``reset_parameters``/``load_state_dict`` fill them, and training matches the CPU."""
import numpy as np

import ember as em
import ember.nn as nn
import ember.nn.functional as F


def _net():
    return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3))


def test_meta_model_to_empty_on_the_device_then_trained(fake_cuda):
    em.manual_seed(0)
    ref = _net()
    with em.device("meta"):
        m = _net()
    m.to_empty(device="cuda")
    assert all(p.device.type == "cuda" and not p.is_meta for p in m.parameters())
    before = fake_cuda.allocator.stats()["current_bytes"]
    m.load_state_dict(ref.state_dict())
    assert fake_cuda.allocator.stats()["current_bytes"] == before     # copied in place
    x, y = em.randn(5, 6), em.randint(0, 3, (5,))
    for model, xs, ys in ((ref, x, y), (m, x.cuda(), y.cuda())):
        opt = em.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(model(xs), ys).backward()
            opt.step()
    for a, b in zip(ref.parameters(), m.parameters()):
        np.testing.assert_allclose(b.detach().cpu().numpy(), a.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_meta_factories_and_device_context_nest(fake_cuda):
    with em.device("cuda"):
        with em.device("meta"):
            lin = nn.Linear(4, 4)
        assert em.ones(1).device.type == "cuda"
    assert lin.weight.is_meta
    lin.to_empty(device="cuda")
    with em.no_grad():
        lin.reset_parameters()
    assert lin.weight.device.type == "cuda"
    assert np.isfinite(lin.weight.detach().cpu().numpy()).all()
