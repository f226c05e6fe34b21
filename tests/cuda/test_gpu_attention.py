"""The FlashAttention-style CUDA kernels on a real GPU (skip: "no CUDA GPU/CuPy").

Run on a GPU machine: ``python -m pytest -q tests/cuda/test_gpu_attention.py``. Checks the
kernels (``ember/codegen/cuda_attention.py``, the ``"cuda"`` kernels of ``sdpa`` /
``sdpa_grad``) against the CPU op, forward and gradients, float32 and float16 (bfloat16
where the backend stores it), causal or not, head dims 32-128 and odd lengths; and that
forward + backward memory grows linearly in T up to 4096 (``ember.cuda.max_memory_allocated``
and CuPy's pool), where the (T, T) scores would grow by 4x per doubling.
"""
import math

import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_attention as ca
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

F = em.nn.functional
TOL = {"float32": (2e-4, 2e-5), "float16": (1e-2, 2e-3), "bfloat16": (5e-2, 1e-2)}


def _run(dev, dtype, q, k, v, g, causal):
    ts = [em.tensor(a).to(dtype=getattr(em, dtype)).to(dev).requires_grad_()
          for a in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, is_causal=causal)
    out.backward(em.tensor(g).to(dtype=getattr(em, dtype)).to(dev))
    return [out.detach().float().cpu().numpy()] + [t.grad.float().cpu().numpy() for t in ts]


def _dtypes(be):
    return ["float32", "float16"] + (["bfloat16"] if be.has("bfloat16") else [])


@pytest.mark.parametrize("shape", [(2, 4, 128, 64), (1, 2, 100, 32), (1, 1, 257, 128),
                                   (2, 3, 64, 80)])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_forward_and_gradients_match_cpu(gpu, shape, causal):  # noqa: F811
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    ca._modules.clear()
    for dtype in _dtypes(gpu):
        want = _run("cpu", dtype, q, k, v, g, causal)
        got = _run("cuda", dtype, q, k, v, g, causal)
        rtol, atol = TOL[dtype]
        for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * max(1, np.abs(b).max()),
                                       err_msg=f"{dtype} {name}")
    assert ca._modules, "the flash kernels did not run"


def test_cross_attention_lengths_and_permuted_views(gpu):  # noqa: F811
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 50, 4, 32)).astype(np.float32)   # (B, T, H, D)
    mem = rng.standard_normal((2, 77, 4, 32)).astype(np.float32)
    res = {}
    for dev in ("cpu", "cuda"):
        q = em.tensor(x).to(dev).requires_grad_()
        kv = em.tensor(mem).to(dev).requires_grad_()
        out = F.scaled_dot_product_attention(q.transpose(1, 2), kv.transpose(1, 2),
                                             kv.transpose(1, 2))
        out.square().sum().backward()
        res[dev] = [out.detach().cpu().numpy(), q.grad.cpu().numpy(), kv.grad.cpu().numpy()]
    for a, b in zip(res["cuda"], res["cpu"]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def _peak(T, heads=4, d=64):
    import cupy
    pool = cupy.get_default_memory_pool()
    qkv = [em.randn(1, heads, T, d, device="cuda", requires_grad=True) for _ in range(3)]
    em.cuda.synchronize()
    pool.free_all_blocks()
    em.cuda.reset_peak_memory_stats()
    base, base_pool = em.cuda.memory_allocated(), pool.total_bytes()
    out = F.scaled_dot_product_attention(*qkv, is_causal=True)
    out.sum().backward()
    em.cuda.synchronize()
    return em.cuda.max_memory_allocated() - base, pool.total_bytes() - base_pool


def test_forward_and_backward_memory_is_linear_in_T(gpu):  # noqa: F811
    _peak(256)                                   # compile and load the kernels first
    peaks = {T: _peak(T) for T in (1024, 2048, 4096)}
    for which in (0, 1):                         # Ember's count, CuPy's pool
        p1, p2, p4 = (peaks[T][which] for T in (1024, 2048, 4096))
        assert p2 / p1 < 2.6 and p4 / p2 < 2.6, peaks     # (T, T) scores: 4x per doubling
    scores = 4 * 4096 * 4096 * 4                 # one float32 score matrix per head
    assert peaks[4096][1] < scores / 4, peaks


def test_long_causal_sequence_matches_cpu(gpu):  # noqa: F811
    rng = np.random.default_rng(2)
    q, k, v, g = (rng.standard_normal((1, 2, 2048, 64)).astype(np.float32) for _ in range(4))
    want = _run("cpu", "float32", q, k, v, g, True)
    got = _run("cuda", "float32", q, k, v, g, True)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    assert math.isfinite(float(np.abs(got[0]).max()))
