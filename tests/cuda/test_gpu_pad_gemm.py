"""An LM head's values padded once (``cuda_gemm.zero_padded``, the ``pad_gemm`` pass) on
a real GPU: the same cuBLAS calls, the same bits, fewer copies.

Skips with "no CUDA GPU/CuPy" elsewhere. Run: ``python -m pytest -q
tests/cuda/test_gpu_pad_gemm.py``. The CPU's checks: ``test_pad_gemm.py`` (plans, NumPy
model of cuBLAS) and ``test_pad_gemm_emu.py`` (the compiled step on the emulator).
"""
import gc

import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_gemm as cg
from ember.graph.passes import DEFAULT_PASSES
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

# NOTE: 2 * N * V * D = 2.1 GFLOP >= PAD_MIN_FLOPS: the default threshold pads
N, V, D = 4096, 1025, 256


def _counting(monkeypatch):
    copies = []
    real = cg._copy

    def copy(dst, src):
        copies.append(dst.nbytes)
        real(dst, src)
    monkeypatch.setattr(cg, "_copy", copy)
    return copies


def test_cupy_views_of_padded_buffers_widen_and_drop_with_them(gpu):  # noqa: F811
    import cupy
    dl = cupy.arange(40 * 67, dtype=cupy.float32).reshape(40, 67).astype(cupy.float16)
    v = cg.zero_padded(dl, cupy)
    assert v.strides == (144, 2) and bool((v == dl).all())
    w = cg._widen(v.reshape(2, 20, 67), 20, 72)
    assert w.shape == (2, 20, 72) and not bool(w[..., 67:].any())
    assert cg._widen(v.T, 72, 40).shape == (72, 40)
    assert cg._widen(v[1:], 39, 72) is None
    key = id(v.base)
    del v, w
    gc.collect()
    assert key not in cg._ZERO_PADDED


def test_padded_once_operands_give_the_copies_bits(gpu, monkeypatch):  # noqa: F811
    import cupy
    copies = _counting(monkeypatch)
    rng = cupy.random.default_rng(0)

    def r(*s):
        return (rng.standard_normal(s, dtype=cupy.float32) * 0.5).astype(cupy.float16)
    x, w, dl = r(N, D), r(V, D), r(N, V)
    pairs = {"logits": (x, w.T), "dx": (dl, w), "dw": (dl.T, x)}
    want = {k: cg.matmul(cupy, a, b) for k, (a, b) in pairs.items()}
    n_before = len(copies)
    wp, dlp = cg.zero_padded(w, cupy, rows=True), cg.zero_padded(dl, cupy)
    copies.clear()
    pairs = {"logits": (x, wp.T), "dx": (dlp, wp), "dw": (dlp.T, x)}
    for k, (a, b) in pairs.items():
        got = cg.matmul(cupy, a, b)
        assert bool((got.view(cupy.uint16) == want[k].view(cupy.uint16)).all()), k
    assert n_before == 5 and len(copies) == 1           # only the logits out, here


def _step_results(passes, copies):
    em.manual_seed(0)
    head = em.nn.Linear(D, V, bias=False).cuda()
    x = (em.randn(N // 8, 8, D) * 0.5).cuda().requires_grad_()
    tgt = em.randint(0, V, (N // 8, 8)).cuda()

    def step(x, tgt):
        with em.autocast("cuda", dtype=em.float16):
            loss = em.nn.functional.cross_entropy(head(x).view(-1, V), tgt.view(-1))
        loss.backward()
        return loss
    fn = em.compile(step, passes=passes)
    for _ in range(3):
        x.grad, head.weight.grad = None, None
        copies.clear()
        loss = fn(x, tgt)
    em.cuda.synchronize()
    return [loss.detach().cpu().numpy(), x.grad.cpu().numpy(),
            head.weight.grad.cpu().numpy()], len(copies)


def test_compiled_lm_head_step_pads_once_with_the_same_bits(gpu, monkeypatch):  # noqa: F811
    copies = _counting(monkeypatch)
    without = [p for p in DEFAULT_PASSES if p != "pad_gemm"]
    want, n_before = _step_results(without, copies)
    got, n_after = _step_results(DEFAULT_PASSES, copies)
    assert n_before == 5 and n_after == 3
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert np.isfinite(got[0]).all()
