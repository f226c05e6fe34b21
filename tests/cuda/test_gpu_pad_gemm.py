"""An LM head's values padded once (``cuda_gemm.zero_padded``, the ``pad_gemm`` pass) or
made padded (``cuda_pitch``'s ``NAME_rp`` entry) on a real GPU: the same cuBLAS calls, the
same bits, fewer copies.

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
    names = [n.op.name for e in fn._cache.values() if getattr(e, "program", None) is not None
             for n in e.program.graph.nodes]
    return [loss.detach().cpu().numpy(), x.grad.cpu().numpy(),
            head.weight.grad.cpu().numpy()], len(copies), names


def test_compiled_lm_head_step_copies_once_with_the_same_bits(gpu, monkeypatch):  # noqa: F811
    """Without the pass: the weight twice, dlogits twice, the logits out (5 copies); with
    it: the weight once (the loss's backward kernel reads the padded logits and writes
    dlogits padded: ``NAME_rp``). Loss, dx and dW: the same bits."""
    copies = _counting(monkeypatch)
    without = [p for p in DEFAULT_PASSES if p != "pad_gemm"]
    want, n_before, _ = _step_results(without, copies)
    got, n_after, names = _step_results(DEFAULT_PASSES, copies)
    assert n_before == 5 and n_after == 1
    assert "fused_pitched" in names and "matmul_pitched" in names
    for a, b in zip(got, want):
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).max()
        assert a.tobytes() == b.tobytes(), f"not the same bits: max |diff| {diff}"
    assert np.isfinite(got[0]).all()


@pytest.mark.parametrize("cols", [37, 36])
def test_pitched_entry_gives_the_row_entrys_bits_on_the_gpu(gpu, cols):  # noqa: F811
    """``NAME_rp`` (pitched logits in, pitched outputs) against ``NAME_r`` on contiguous
    copies, compiled by NVRTC and run on the GPU (the emulator's check:
    ``test_cuda_pitch_emu.py``)."""
    import cupy
    from ember.codegen.cuda_launch import row_plan
    from ember.codegen.cuda_pitch import pitched_module, pitched_plan
    from test_cuda_index_emu import _hot_arrays, _one_hot
    rows = 4099                       # > 2 blocks' worth of elements
    k = _one_hot((rows, cols), f"gpu_pt_{cols}")
    mod = pitched_module(k)
    t, x, b = (cupy.asarray(a) for a in _hot_arrays(k, np.random.default_rng(0)))
    name, grid, block, args, want = row_plan(k, [t, x, b], k.out.shape, cupy)
    mod.function(name)(grid, block, args)
    pad = -(-cols // 8) * 8

    def pitched(a, fill):
        buf = cupy.full((rows, pad), fill, a.dtype)
        buf[:, :cols] = a
        return buf[:, :cols]
    outs = [pitched(cupy.zeros((rows, cols), cupy.float32), 0),
            pitched(cupy.zeros((rows, cols), cupy.int64), 0)]
    name, grid, block, args = pitched_plan(k, [t, pitched(x, 0), b], (rows, cols), cupy, outs)
    assert name.endswith("_rp")
    mod.function(name)(grid, block, args)
    for g, w in zip(outs, want):
        assert bool((cupy.ascontiguousarray(g).view(cupy.uint8) ==
                     cupy.ascontiguousarray(w).view(cupy.uint8)).all())
