"""Eager ``F.linear`` on a ``cuda`` device is the ``linear`` primitive (ops/linear.py) for
float32, float16, bfloat16 and float64 operands, under autocast too: one autograd node
whose forward and gradients are the bits of ``matmul(x, w.mT) + b`` on that device (the
same matmul kernel, the bias added after). On the CPU stand-in (``fake_cuda``) and on a
real GPU (``gpu``: skips with "no CUDA GPU/CuPy" without one)."""
import numpy as np
import pytest

import ember as em
from ember.nn.functional import _layers
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

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


@pytest.mark.parametrize("dtype, autocast", CASES)
def test_same_bits_as_the_composite_on_the_gpu(gpu, monkeypatch, dtype, autocast):  # noqa: F811
    _check(monkeypatch, dtype, autocast)
