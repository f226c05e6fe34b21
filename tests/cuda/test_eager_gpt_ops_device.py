"""A GPT layer's eager ops on a ``cuda`` device, on the CPU stand-in (``fake_cuda``), the
CUDA emulator (the flash kernels from their text) and a real GPU
(``test_gpu_eager_gpt_ops.py``):

* ``F.linear`` is the ``linear`` primitive (ops/linear.py) for float32, float16, bfloat16
  and float64 operands, under autocast too: one autograd node whose forward and gradients
  are the bits of ``matmul(x, w.mT) + b`` on that device (the same matmul kernel, the bias
  added after);
* attention's VJP over ``q, k, v = qkv...unbind(0)`` writes dq, dk, dv into the slots of
  the unbind input's gradient (``sdpa_grad_slots``): the bits of the flat ``sdpa_grad``
  and the unbind's stack, ``-0.0`` made ``+0.0`` as the stack's ``add_(0.0)`` makes it;
* the loss's compiled form (``eager_composite``) names an out-of-range class target."""
import numpy as np
import pytest

import ember as em
from ember.nn.functional import _layers
from ember.ops import attention

import _cuda_emu
from test_cuda_fusion_emu import emu_gpu  # noqa: F401 - the fixture

F = em.nn.functional


def _run(monkeypatch, dtype, autocast, primitive):
    """``(output's node name, [out, dx, dw, db] as float64 arrays)`` of one linear layer
    on ``cuda``, with the primitive allowed or (``primitive=False``) the composite."""
    monkeypatch.setattr(_layers, "_LINEAR_DTYPES", _layers._LINEAR_DTYPES if primitive
                        else frozenset())
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s, dtype=np.float32)
              for s in ((2, 24, 64), (48, 64), (48,))]
    dt = em.float32 if autocast else dtype
    ts = [em.tensor(a, device="cuda").to(dt).requires_grad_() for a in arrays]
    with em.autocast("cuda", dtype=dtype, enabled=autocast):
        out = F.linear(*ts)
    assert out.device.type == "cuda" and out.dtype == dtype
    out.float().square().sum().backward()
    return out.grad_fn.name(), [t.detach().cpu().to(em.float64).numpy()
                                for t in (out, *[t.grad for t in ts])]


CASES = [("float32", False), ("float64", False), ("float16", False), ("bfloat16", False),
         ("float16", True), ("bfloat16", True)]


def _check(monkeypatch, dtype, autocast):
    dt = getattr(em, dtype)
    name, fast = _run(monkeypatch, dt, autocast, True)
    assert name == "LinearBackward"
    name, slow = _run(monkeypatch, dt, autocast, False)
    assert name == "AddBackward"
    for a, r in zip(fast, slow):
        np.testing.assert_array_equal(a, r)


@pytest.mark.parametrize("dtype, autocast", CASES)
def test_same_bits_as_the_composite_on_the_stand_in(fake_cuda, monkeypatch, dtype, autocast):
    _check(monkeypatch, dtype, autocast)


def _attention_grads(monkeypatch, dtype, slots):
    real = attention.unbind_slots
    monkeypatch.setattr(attention, "unbind_slots", real if slots else lambda *ts: None)
    b, t, h, d = 2, 64, 2, 32
    rng = np.random.default_rng(3)
    qkv = em.tensor(rng.standard_normal((b, t, 3 * h * d), dtype=np.float32),
                    device="cuda").to(dtype).requires_grad_()
    q, k, v = qkv.view(b, t, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    seen = []
    real_apply = attention._apply
    monkeypatch.setattr(attention, "_apply", lambda op, *a: seen.append(op.name) or
                        real_apply(op, *a))
    y.float().square().sum().backward()
    return seen, qkv.grad.cpu().to(em.float64).numpy()


def _check_attention(monkeypatch, dtype):
    dt = getattr(em, dtype)
    seen, fast = _attention_grads(monkeypatch, dt, True)
    assert seen == ["sdpa_grad_slots"]
    seen, slow = _attention_grads(monkeypatch, dt, False)
    assert seen == ["sdpa_grad"]
    np.testing.assert_array_equal(fast, slow)
    assert not np.signbit(fast[fast == 0]).any()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_attention_gradient_into_the_unbind_slots_on_the_stand_in(fake_cuda, monkeypatch,
                                                                   dtype):
    _check_attention(monkeypatch, dtype)


@pytest.mark.skipif(not _cuda_emu.available(),
                    reason="no g++ with C++20 <barrier> to run the CUDA text on")
def test_attention_gradient_into_the_unbind_slots_on_the_emulator(emu_gpu, monkeypatch):
    """The flash backward's kernels from their text (the emulator) writing the strided
    slots of one buffer, then ``+ 0.0``: the flat result and the stack's bits."""
    from ember.codegen import cuda_attention
    before = cuda_attention.stats["lse_reused"]
    _check_attention(monkeypatch, "float16")
    assert cuda_attention.stats["lse_reused"] - before == 2      # both ran the flash kernels


def _check_targets_on_cuda():
    """Eager cross_entropy on ``cuda`` past the warm-up (the compiled form: on a GPU its
    kernels read the targets unchecked) still names an out-of-range target."""
    from ember.codegen import eager_composite
    x = em.randn(512, 100, device="cuda", requires_grad=True)
    t = em.randint(0, 100, (512,), device="cuda")
    runs = eager_composite.stats["runs"]
    for _ in range(eager_composite.WARMUP + 2):
        F.cross_entropy(x, t).backward()
    assert eager_composite.stats["runs"] - runs == 2
    bad = t.clone()
    bad[9] = 100
    with pytest.raises(IndexError, match=r"cross_entropy: target 100 is out of bounds"):
        F.cross_entropy(x, bad)


@pytest.mark.skipif(not _cuda_emu.available(),
                    reason="no g++ with C++20 <barrier> to run the CUDA text on")
def test_out_of_range_targets_on_the_emulator(emu_gpu):
    _check_targets_on_cuda()
