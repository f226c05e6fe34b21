"""The ``meta`` device: models built without memory, moved to real storage with
``to_empty``, filled by ``reset_parameters`` or ``load_state_dict(assign=True)``."""
import tracemalloc
import warnings

import numpy as np
import pytest

import ember as em
import ember.nn as nn
import ember.nn.functional as F
from ember.training.models import GPT


def _cpu_bytes():
    return em.memory_stats()["current_bytes"]


def test_device_and_factories():
    d = em.device("meta")
    assert (str(d), repr(d), d.index) == ("meta", "device(type='meta')", None)
    before = _cpu_bytes()
    x = em.empty(1 << 20, 1 << 20, device="meta")    # 4 TiB of float32, on paper
    assert x.is_meta and not em.ones(1).is_meta
    assert tuple(x.shape) == (1 << 20, 1 << 20) and x.dtype == em.float32
    assert x.stride() == (1 << 20, 1) and x.is_contiguous() and x.data_ptr() == 0
    assert x.untyped_storage().nbytes() == 4 << 40
    assert _cpu_bytes() == before
    for t in (em.zeros(2, 3, device="meta"), em.ones(2, 3, device="meta"),
              em.full((2, 3), 7.0, device="meta"), em.rand(2, 3, device="meta"),
              em.randn(2, 3, device="meta"), em.ones(2, 3).to("meta"),
              em.zeros_like(em.ones(2, 3), device="meta")):
        assert t.device == d and tuple(t.shape) == (2, 3) and t.dtype == em.float32
    assert em.arange(5, device="meta").dtype == em.int64
    assert tuple(em.randperm(7, device="meta").shape) == (7,)
    assert tuple(em.randint(0, 9, (4, 2), device="meta").shape) == (4, 2)


def test_repr_is_pytorchs():
    assert repr(em.empty(2, 3, device="meta")) == "tensor(..., device='meta', size=(2, 3))"
    assert repr(em.empty(3, dtype=em.int64, device="meta")) == \
        "tensor(..., device='meta', size=(3,), dtype=ember.int64)"
    x = em.empty(2, device="meta", requires_grad=True)
    assert repr(x) == "tensor(..., device='meta', size=(2,), requires_grad=True)"
    assert repr(x * 2) == "tensor(..., device='meta', size=(2,), grad_fn=<MulBackward>)"
    assert repr(nn.Linear(3, 4, device="meta").bias) == \
        "Parameter containing:\ntensor(..., device='meta', size=(4,), requires_grad=True)"


def test_reading_values_raises_as_in_pytorch():
    x = em.empty(2, 3, device="meta")
    one = x[0, 0]
    for read in (one.item, lambda: bool(one), lambda: int(one), lambda: float(one),
                 lambda: [0, 1][one.long()]):
        with pytest.raises(RuntimeError, match="cannot be called on meta tensors"):
            read()
    for read in (x.tolist, x.cpu, lambda: np.asarray(x), lambda: x.to("cpu")):
        with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
            read()
    with pytest.raises(TypeError, match="can't convert meta device type tensor to numpy"):
        x.numpy()
    with pytest.raises(NotImplementedError, match="nonzero: the output's shape depends"):
        x[x > 0]
    with pytest.raises(em.DeviceError, match="meta and cpu"):
        x + em.ones(2, 3)
    assert (x + em.tensor(1.0)).is_meta          # a 0-d CPU tensor mixes in, as a number


def test_shape_errors_and_promotion_match_eager():
    a, b = em.empty(2, 3, device="meta"), em.empty(4, 5, device="meta")
    with pytest.raises(em.ShapeError, match="matmul: shapes"):
        a @ b
    with pytest.raises(em.ShapeError, match="cannot be broadcast"):
        a + b
    i = em.empty(3, dtype=em.int64, device="meta")
    cases = [(i / 2, em.zeros(3, dtype=em.int64) / 2),
             (i + 1.5, em.zeros(3, dtype=em.int64) + 1.5), (i > 0, em.zeros(3) > 0),
             (a.to(em.float64) + a.half(), em.zeros(2, 3, dtype=em.float64) +
              em.zeros(2, 3).half()), (a.sum(1).argmax(), em.zeros(2, 3).sum(1).argmax())]
    for meta, cpu in cases:
        assert (tuple(meta.shape), meta.dtype) == (tuple(cpu.shape), cpu.dtype)


def _net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.5), nn.Linear(8 * 4 * 4, 10))


def test_training_step_on_meta_mirrors_cpu():
    x = em.randn(4, 3, 8, 8)
    y = em.randint(0, 10, (4,))
    cpu = _net()
    with em.device("meta"):
        meta = _net()
    grads = {}
    for name, m, xs, ys in (("cpu", cpu, x, y), ("meta", meta, x.to("meta"), y.to("meta"))):
        opt = em.optim.AdamW(m.parameters(), lr=1e-3)
        loss = F.cross_entropy(m(xs), ys)
        loss.backward()
        nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        grads[name] = [(tuple(p.grad.shape), p.grad.dtype, p.grad.device.type)
                       for p in m.parameters()]
        assert loss.device.type == name and tuple(loss.shape) == ()
    assert [g[:2] for g in grads["meta"]] == [g[:2] for g in grads["cpu"]]
    assert {g[2] for g in grads["meta"]} == {"meta"}


def test_to_empty_then_reset_parameters_is_the_eager_init():
    em.manual_seed(0)
    ref = nn.Linear(5, 3)
    em.manual_seed(0)
    with em.device("meta"):
        m = nn.Linear(5, 3)
    with pytest.raises(NotImplementedError, match="use ember.nn.Module.to_empty"):
        m.to("cpu")
    assert m.to_empty(device="cpu") is m
    assert m.weight.device.type == "cpu" and isinstance(m.weight, nn.Parameter)
    m.reset_parameters()   # the meta init drew no random numbers: the same stream as ref's
    np.testing.assert_array_equal(m.weight.detach().numpy(), ref.weight.detach().numpy())
    np.testing.assert_array_equal(m.bias.detach().numpy(), ref.bias.detach().numpy())


def test_random_draws_on_meta_consume_no_numbers():
    em.manual_seed(3)
    want = em.randn(4).numpy()
    em.manual_seed(3)
    em.randn(100, device="meta")
    em.empty(10, 10, device="meta").uniform_()
    nn.init.kaiming_uniform_(em.empty(8, 8, device="meta"))
    np.testing.assert_array_equal(em.randn(4).numpy(), want)


def test_load_state_dict_assign_and_the_no_op_warning():
    src = nn.Linear(4, 2)
    sd = src.state_dict()
    with em.device("meta"):
        m = nn.Linear(4, 2)
    with pytest.warns(UserWarning, match="meta parameter in the current model, which is a no-op"):
        m.load_state_dict(sd)
    assert m.weight.is_meta
    m.load_state_dict(sd, assign=True)
    assert not m.weight.is_meta and m.weight.requires_grad
    x = em.randn(3, 4)
    np.testing.assert_array_equal(m(x).detach().numpy(), src(x).detach().numpy())


def test_a_large_gpt_costs_no_memory():
    tracemalloc.start()
    try:
        with em.device("meta"):
            m = GPT(vocab_size=50257, block_size=1024, d_model=1024, n_heads=16, n_layers=24)
        idx = em.randint(0, 50257, (2, 1024), device="meta")
        logits = m(idx)
        F.cross_entropy(logits.view(-1, 50257), idx.view(-1)).backward()
        em.optim.AdamW(m.parameters()).step()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    n = sum(p.numel() for p in m.parameters())
    assert n > 300_000_000 and tuple(logits.shape) == (2, 1024, 50257)
    assert peak < 20 << 20, f"building and stepping a meta GPT traced {peak >> 20} MiB"


def test_in_place_writes_and_views_keep_shapes():
    x = em.zeros(3, 4, device="meta", requires_grad=True)
    v = em.zeros(2, device="meta", requires_grad=True)
    y = x.clone()
    y[1:, 0] = v
    y.view(12).mul_(2)
    y.t()[0].add_(1.0)
    y.sum().backward()
    assert tuple(x.grad.shape) == (3, 4) and tuple(v.grad.shape) == (2,)
    assert x.grad.is_meta and v.grad.is_meta
    z = em.empty(4, device="meta")
    assert z.fill_(1.0) is z and z.zero_() is z and z.copy_(em.ones(4)) is z
    assert tuple(z.as_strided((2, 2), (2, 1)).shape) == (2, 2)


def test_compile_and_checkpoint_run_meta_programs_eagerly():
    with em.device("meta"):
        m = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.GELU(), nn.Linear(8, 2))
    x = em.empty(4, 8, device="meta")
    opt = em.optim.AdamW(m.parameters())

    def step(x):
        opt.zero_grad()
        loss = m(x).sum()
        loss.backward()
        opt.step()
        return loss.detach()
    cs = em.compile(step)
    for _ in range(3):
        out = cs(x)
    assert out.is_meta and tuple(m[0].weight.grad.shape) == (8, 8)
    assert any("meta tensors" in n for n in cs.explain().notes)
    assert tuple(em.compile(m)(x).shape) == (4, 2)
    from ember.utils.checkpoint import checkpoint
    y = checkpoint(m, em.empty(4, 8, device="meta", requires_grad=True), use_reentrant=False)
    y.sum().backward()
    assert y.is_meta and tuple(y.shape) == (4, 2)
