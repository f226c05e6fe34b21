"""ember.nn.utils (gradient clipping, parameter vectors) and Module.summary."""
import math

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn.utils import (clip_grad_norm_, clip_grad_value_, get_total_norm,
                            parameters_to_vector, vector_to_parameters)


def _params_with_grads(seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    ps = []
    for shape in [(3, 4), (5,), (2, 2, 2)]:
        p = nn.Parameter(em.tensor(rng.standard_normal(shape)))
        p.grad = em.tensor(scale * rng.standard_normal(shape))
        ps.append(p)
    ps.append(nn.Parameter(em.zeros(2, dtype=em.float64)))   # no grad: skipped
    return ps


def _np_total_norm(grads, p):
    flat = np.concatenate([g.reshape(-1) for g in grads])
    return np.abs(flat).max() if math.isinf(p) else (np.abs(flat) ** p).sum() ** (1.0 / p)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_clip_grad_norm_matches_numpy(norm_type):
    ps = _params_with_grads()
    before = [p.grad.numpy().copy() for p in ps[:3]]
    total = clip_grad_norm_(ps, max_norm=1.5, norm_type=norm_type)
    ref = _np_total_norm(before, norm_type)
    assert float(total) == pytest.approx(ref, rel=1e-12)
    coef = min(1.0, 1.5 / (ref + 1e-6))
    for p, g in zip(ps, before):
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-12)
    assert ps[3].grad is None


def test_clip_grad_norm_no_clip_when_small_and_single_tensor():
    p = nn.Parameter(em.tensor([3.0, 4.0]))
    p.grad = em.tensor([0.3, 0.4])
    total = clip_grad_norm_(p, max_norm=10.0)
    assert float(total) == pytest.approx(0.5, rel=1e-6)
    np.testing.assert_allclose(p.grad.numpy(), [0.3, 0.4], rtol=1e-6)
    assert float(clip_grad_norm_([nn.Parameter(em.zeros(1))], 1.0)) == 0.0


def test_clip_grad_norm_nonfinite():
    p = nn.Parameter(em.zeros(2))
    p.grad = em.tensor([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert math.isinf(float(clip_grad_norm_([p], 1.0)))


def test_get_total_norm():
    assert float(get_total_norm([em.tensor([3.0]), em.tensor([4.0])])) == 5.0


def test_clip_grad_norm_matches_torch():
    torch = pytest.importorskip("torch")
    ps = _params_with_grads(1)
    tps = [torch.nn.Parameter(torch.tensor(p.detach().numpy())) for p in ps]
    for tp, p in zip(tps, ps):
        tp.grad = None if p.grad is None else torch.tensor(p.grad.numpy())
    t = torch.nn.utils.clip_grad_norm_(tps, 0.7, norm_type=2.0)
    e = clip_grad_norm_(ps, 0.7, norm_type=2.0)
    assert float(e) == pytest.approx(t.item(), rel=1e-12)
    for tp, p in zip(tps[:3], ps):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12)


def test_clip_grad_value():
    ps = _params_with_grads(2)
    before = [p.grad.numpy().copy() for p in ps[:3]]
    assert clip_grad_value_(ps, 0.5) is None
    for p, g in zip(ps, before):
        np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -0.5, 0.5))


def test_parameters_to_vector_and_back():
    m = nn.Linear(3, 2)
    v = parameters_to_vector(m.parameters())
    ref = np.concatenate([p.detach().numpy().reshape(-1) for p in m.parameters()])
    np.testing.assert_array_equal(v.detach().numpy(), ref)
    assert v.requires_grad   # differentiable (a cat)
    new = em.arange(8, dtype=em.float32)
    w = m.weight
    vector_to_parameters(new, m.parameters())
    assert m.weight is w and w.shape == (2, 3)
    np.testing.assert_array_equal(m.weight.detach().numpy(), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(m.bias.detach().numpy(), [6, 7])
    with pytest.raises(TypeError, match="expected ember.Tensor"):
        vector_to_parameters([1.0], m.parameters())
    with pytest.raises(ValueError, match="8 elements"):
        vector_to_parameters(em.zeros(5), m.parameters())


# ---------------------------------------------------------------- summary
def test_summary_mlp_hand_computed():
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 2, bias=False))
    net[2].weight.requires_grad_(False)
    s = net.summary(em.randn(3, 5))
    # Linear(5,7) on 3 rows: 3·5·7 = 105 MACs, 2·105 + 21 bias adds; Tanh: 21;
    # Linear(7,2, no bias): 3·7·2 = 42 MACs, 84 FLOPs.
    assert s.total_params == 5 * 7 + 7 + 7 * 2 == 56
    assert s.trainable_params == 42 and s.non_trainable_params == 14
    assert s.total_macs == 105 + 42
    assert s.total_flops == 231 + 21 + 84
    assert s.activation_bytes == (21 + 21 + 6) * 4
    assert s.input_bytes == 60 and s.param_bytes == 56 * 4
    assert [r.output_shapes for r in s.layers] == [[[3, 2]], [[3, 7]], [[3, 7]], [[3, 2]]]
    assert [r.depth for r in s.layers] == [0, 1, 1, 1]
    assert [r.macs for r in s.layers] == [147, 105, 0, 42]
    text = str(s)
    assert "Total params: 56" in text and "Trainable params: 42" in text
    assert "Linear (0)" in text and "Total FLOPs: 336" in text


def test_summary_cnn_hand_computed():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64, 10))
    s = net.summary(em.randn(2, 1, 8, 8))
    # Conv: 2·4·8·8 = 512 outputs × 1·3·3 = 4608 MACs, +512 bias; ReLU 512;
    # MaxPool 2×2 over 128 outputs = 512; Flatten 0; Linear 20 outputs × 64 = 1280 MACs.
    assert s.total_params == (4 * 9 + 4) + (64 * 10 + 10)
    assert s.total_macs == 4608 + 1280
    assert s.total_flops == (2 * 4608 + 512) + 512 + 512 + 0 + (2 * 1280 + 20)
    assert s.activation_bytes == (512 + 512 + 128 + 128 + 20) * 4
    assert s.layers[4].type == "Flatten" and s.layers[4].output_shapes == [[2, 64]]


def test_summary_has_no_side_effects():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", em.zeros(()))

        def forward(self, x):
            self.n.add_(1)
            return x * em.rand(x.shape)

    m = nn.Sequential(Counter(), nn.BatchNorm1d(3))
    x = em.randn(5, 3) + 7
    em.manual_seed(0)
    expected = em.rand(4)
    em.manual_seed(0)
    rm = m[1].running_mean.numpy().copy()
    s = m.summary(x)
    assert float(m[0].n) == 0.0
    np.testing.assert_array_equal(m[1].running_mean.numpy(), rm)
    np.testing.assert_array_equal(em.rand(4).numpy(), expected.numpy())   # RNG restored
    assert not m[0]._forward_hooks and not m[0]._forward_pre_hooks
    assert s.total_params == 6


def test_summary_nested_rows_and_reuse():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(self.fc(x))   # called twice: two rows, params counted once

    net = nn.Sequential(Block(), nn.ReLU())
    s = net.summary(em.randn(1, 4))
    assert [r.name for r in s.layers] == ["Sequential", "0", "0.fc", "0.fc", "1"]
    assert s.layers[1].macs == 32 and s.total_macs == 32 and s.total_params == 20
    assert [r.depth for r in net.summary(em.randn(1, 4), depth=1).layers] == [0, 1, 1]
