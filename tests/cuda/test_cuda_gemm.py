"""The cuBLAS call of low-precision GEMMs on a GPU (``ember/codegen/cuda_gemm.py``), on the CPU.

A NumPy model of ``cublasGemmEx`` / ``cublasGemmStridedBatchedEx`` (column-major operands
read from raw memory with their leading dims, ops and batch strides; float32 sums) runs
each :func:`gemm_plan`, so the row-major to column-major mapping is checked for every
layout a graph hands ``matmul``: contiguous, transposed views (``weight.mT``), stacks,
broadcast right operands, leading dims that do not merge — and the padded buffers of big
unaligned GEMMs (an LM head's odd vocabulary). On a GPU:
``tests/cuda/test_gpu_kernels.py::test_float16_gemm_accumulates_in_float32`` and
``tests/cuda/test_gpu_gemm_align.py``.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_gemm as cg
from ember.device.cuda_strict import host_view

BF16 = em.bfloat16.np


def _colmajor(a, op, ld, rows, cols, off):
    """op(M) (rows x cols) of the column-major matrix at element ``off`` of ``a``'s memory."""
    it = a.itemsize
    flat = np.lib.stride_tricks.as_strided(a, shape=(off + ld * max(rows, cols) + 1,),
                                           strides=(it,))
    if op == cg.OP_N:
        return np.lib.stride_tricks.as_strided(flat[off:], (rows, cols), (it, ld * it))
    return np.lib.stride_tricks.as_strided(flat[off:], (cols, rows), (it, ld * it)).T


def run_plan(p):
    """What cuBLAS would compute for plan ``p`` (float32 sums, rounded once into C)."""
    assert p["compute"] == cg.CUBLAS_COMPUTE_32F and p["type"] == cg.CUDA_TYPE[
        p["C"].dtype.name]
    m, n, k = p["m"], p["n"], p["k"]
    plan, p = p, dict(p, **{x: host_view(p[x]) for x in "ABC"})   # the strict stand-in's
    assert p["ldc"] >= max(m, 1) and (p["fn"] == "gemmEx") == (p["batch"] == 1)
    c = p["C"]
    it = c.itemsize
    extent = max(c.size, p["strideC"] * p["batch"])         # a padded C's rows run on
    cflat = np.lib.stride_tricks.as_strided(c, shape=(extent,), strides=(it,))
    for b in range(p["batch"]):
        a = _colmajor(p["A"], p["transa"], p["lda"], m, k, b * p["strideA"])
        bb = _colmajor(p["B"], p["transb"], p["ldb"], k, n, b * p["strideB"])
        r = a.astype(np.float32) @ bb.astype(np.float32)
        view = np.lib.stride_tricks.as_strided(cflat[b * p["strideC"]:], (m, n),
                                               (it, p["ldc"] * it))
        view[...] = r.astype(c.dtype)
    return cg.finish(plan)


def _layouts(dtype):
    rng = np.random.default_rng(0)

    def r(*s):
        return rng.standard_normal(s).astype(dtype)
    w = r(48, 32)
    z = r(3, 4, 20, 9)
    return {
        "2d": (r(17, 32), r(32, 24)),
        "linear_weight_mT": (r(17, 32), w.T),                 # F.linear: x @ weight.mT
        "x_transposed": (r(32, 17).T, r(32, 24)),
        "stack_shared_weight": (r(5, 17, 32), r(32, 24)),
        "stack_both": (r(5, 17, 32), r(5, 32, 24)),
        "stack_of_transposed": (r(5, 32, 17).transpose(0, 2, 1), r(5, 32, 24)),
        "4d_merging": (r(2, 3, 7, 9), r(2, 3, 9, 5)),
        "4d_permuted": (z.transpose(1, 0, 2, 3), r(4, 3, 9, 6)),   # leading dims won't merge
        "row_and_column": (r(1, 32), r(32, 1)),
    }


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(_layouts(np.float16)))
def test_plan_computes_the_product_in_float32(dtype, name):
    x, y = _layouts(dtype)[name]
    assert cg.supported(x, y)
    got = run_plan(cg.gemm_plan(x, y))
    exact = x.astype(np.float64) @ y.astype(np.float64)
    assert got.shape == exact.shape and got.dtype == dtype
    # float32 sums in another order than NumPy's, rounded once: within one ulp of the dtype
    ulp = {np.dtype(np.float16): 2.0 ** -10, np.dtype(BF16): 2.0 ** -7}[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=ulp, atol=1e-3)


def test_plan_writes_into_a_given_buffer_and_takes_tf32_only_when_asked():
    x, y = _layouts(np.float32)["2d"]
    assert not cg.supported(x, y) and cg.supported(x, y, tf32=True)
    p = cg.gemm_plan(x, y, tf32=True)
    assert p["compute"] == cg.CUBLAS_COMPUTE_32F_FAST_TF32
    x16, y16 = _layouts(np.float16)["stack_both"]
    buf = np.empty((5, 17, 24), np.float16)
    assert run_plan(cg.gemm_plan(x16, y16, out=buf)) is buf


def test_unsupported_pairs_stay_with_cupy():
    a = np.ones((4, 3), np.float16)
    assert not cg.supported(a, np.ones((3, 2), np.float32))          # mixed dtypes
    assert not cg.supported(np.ones(3, np.float16), np.ones(3, np.float16))   # vectors
    assert not cg.supported(np.ones((2, 4, 3), np.float16), np.ones((5, 3, 2), np.float16))


def test_matmul_on_a_gpu_like_device_takes_the_gemm_ex_path(fake_cuda, monkeypatch):
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    calls = []

    def fake_matmul(xp, x, y, tf32=False, out=None):
        calls.append((x.shape, y.shape))
        return run_plan(cg.gemm_plan(x, y, xp, tf32, out))
    monkeypatch.setattr(cg, "matmul", fake_matmul)
    em.manual_seed(0)
    lin = em.nn.Linear(32, 24).to(em.float16)
    x = em.randn(5, 17, 32).to(em.float16)
    res = {}
    for dev in ("cpu", "cuda"):
        m = lin.to(dev)
        xi = x.detach().to(dev).requires_grad_()
        y = m(xi)
        y.float().square().sum().backward()
        res[dev] = [y.detach().float().cpu().numpy(), xi.grad.float().cpu().numpy(),
                    m.weight.grad.float().cpu().numpy()]
        m.zero_grad()
    assert len(calls) >= 3                 # forward, dx and dW products
    for a, b in zip(res["cuda"], res["cpu"]):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-2)
    n = len(calls)
    em.ones(4, 3, device="cuda") @ em.ones(3, 2, device="cuda")     # float32: CuPy's matmul
    assert len(calls) == n


def _lm_head(dtype, vocab=67, rows=40, d=48):
    """An LM head's three products with an odd vocabulary: logits = x @ W.mT,
    dx = dlogits @ W, dW = dlogits.mT @ x (all as the eager VJPs hand them to matmul)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, d)).astype(dtype)
    w = rng.standard_normal((vocab, d)).astype(dtype)
    dl = rng.standard_normal((rows, vocab)).astype(dtype)
    return {"logits": (x, w.T), "dx": (dl, w), "dw": (dl.T, x),
            "batched": (rng.standard_normal((3, 17, 33)).astype(dtype),
                        rng.standard_normal((3, 33, 29)).astype(dtype)),
            "batched_shared_T": (rng.standard_normal((2, 3, 9, 21)).astype(dtype),
                                 rng.standard_normal((13, 21)).astype(dtype).T)}


def _exact_close(got, x, y, dtype):
    exact = x.astype(np.float64) @ y.astype(np.float64)
    assert got.shape == exact.shape and got.dtype == dtype and got.flags.c_contiguous
    ulp = {np.dtype(np.float16): 2.0 ** -10, np.dtype(BF16): 2.0 ** -7}[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=ulp, atol=1e-3)


def _aligned_plan(p):
    step = cg.ALIGN // p["C"].itemsize
    for a, ld, st in (("A", "lda", "strideA"), ("B", "ldb", "strideB"), ("C", "ldc", "strideC")):
        assert p[ld] % step == 0 and p[st] % step == 0 and cg._ptr(p[a]) % cg.ALIGN == 0, a
    assert p["k"] % 8 == 0


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(_lm_head(np.float16)))
def test_unaligned_big_gemms_run_on_aligned_padded_buffers(dtype, name, monkeypatch):
    x, y = _lm_head(dtype)[name]
    monkeypatch.setattr(cg, "PAD_MIN_FLOPS", float("inf"))
    plain = cg.gemm_plan(x, y)
    assert not plain["copy"] and plain["k"] == x.shape[-1]
    want = run_plan(plain)
    monkeypatch.setattr(cg, "PAD_MIN_FLOPS", 1)
    p = cg.gemm_plan(x, y)
    _aligned_plan(p)
    assert p["A"] is not y or p["B"] is not x or p["copy"]
    got = run_plan(p)
    _exact_close(got, x, y, dtype)
    # padded zeros add nothing: float32 sums rounded once, as unpadded up to the order of
    # the sums (BLAS's blocking may differ with k): at most one rounding step apart
    ulp = {np.dtype(np.float16): 2.0 ** -10, np.dtype(BF16): 2.0 ** -7}[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=2 * ulp, atol=1e-3)


def test_padded_gemm_writes_a_given_out_buffer(monkeypatch):
    monkeypatch.setattr(cg, "PAD_MIN_FLOPS", 1)
    x, y = _lm_head(np.float16)["logits"]
    out = np.full((x.shape[0], y.shape[1]), np.nan, np.float16)
    p = cg.gemm_plan(x, y, out=out)
    assert p["copy"] and p["ldc"] == 72 and p["C"].base is not out
    assert run_plan(p) is out
    _exact_close(out, x, y, np.float16)


def test_unaligned_base_pointer_is_copied(monkeypatch):
    monkeypatch.setattr(cg, "PAD_MIN_FLOPS", 1)
    rng = np.random.default_rng(2)
    flat = rng.standard_normal(40 * 32 + 16).astype(np.float16)
    skip = next(i for i in range(1, 9) if (flat.ctypes.data + 2 * i) % cg.ALIGN)
    x = flat[skip:skip + 40 * 32].reshape(40, 32)          # ld 32, but base off by 2*skip
    y = rng.standard_normal((32, 24)).astype(np.float16)
    p = cg.gemm_plan(x, y)
    assert p["B"] is not x and cg._ptr(p["B"]) % cg.ALIGN == 0 and p["A"] is y
    _aligned_plan(p)
    _exact_close(run_plan(p), x, y, np.float16)


def test_small_gemms_keep_the_unpadded_call_and_big_ones_pad_at_the_default():
    x, y = _lm_head(np.float16)["logits"]
    p = cg.gemm_plan(x, y)                        # 2*m*n*k far below PAD_MIN_FLOPS
    assert not p["copy"] and p["ldc"] == 67 and p["A"] is y and p["B"] is x
    rng = np.random.default_rng(3)
    xb = rng.standard_normal((1024, 64)).astype(np.float16)
    yb = rng.standard_normal((64, 8195)).astype(np.float16)      # 2*m*n*k just over 2^30
    assert 2 * 1024 * 64 * 8195 >= cg.PAD_MIN_FLOPS
    p = cg.gemm_plan(xb, yb)
    assert p["copy"] and p["ldc"] == 8200 and p["lda"] == 8200
    _exact_close(run_plan(p), xb, yb, np.float16)


def test_padding_copies_are_pitched_2d_copies_on_the_lm_head():
    """On a GPU the copies into and out of padded buffers are ``cudaMemcpy2DAsync``
    (``_pitched``): the LM head's (logits out, dlogits in either orientation) are."""
    dl = _lm_head(np.float16)["dx"][0]
    buf = np.empty((40, 72), np.float16)
    assert cg._pitched(buf[:, :67], dl) and cg._pitched(dl, buf[:, :67])
    assert cg._pitched(buf[:, :67], dl.T.swapaxes(-1, -2))         # dW's dlogits.mT
    assert not cg._pitched(buf[:, :40].T, dl[:, :40])            # columns: not rows
    assert not cg._pitched(buf[:, :67], dl[:, ::2][:, :34])       # shapes differ
    # (B, T, V) logits of a padded buffer: leading dims merge into the rows
    b3 = np.empty((2, 20, 72), np.float16)
    assert cg._pitched(b3[..., :67], dl.reshape(2, 20, 67)) == 40
    assert cg._pitched(np.empty((3, 4, 8), np.float16), np.empty((3, 4, 8), np.float16)) == 12
    assert cg._pitched(b3[:, :10, :67], dl[:20].reshape(2, 10, 67)) is None   # batch gap


def test_pitched_copy_calls_memcpy2d_with_pitches_in_bytes(monkeypatch):
    """``_copy``'s GPU branch, run on host memory: a stand-in ``cupy`` whose
    ``memcpy2DAsync`` copies ``height`` rows of ``width`` bytes with ctypes."""
    import ctypes
    import sys
    import types

    class Dev(np.ndarray):                    # a "device" array: .data.ptr like CuPy's
        @property
        def data(self):
            return types.SimpleNamespace(ptr=self.ctypes.data)

    calls = []

    def memcpy2d(dst, dpitch, src, spitch, width, height, kind, stream):
        assert kind == 3 and stream == 0
        calls.append((dpitch, spitch, width, height))
        for i in range(height):
            ctypes.memmove(dst + i * dpitch, src + i * spitch, width)
    rt = types.SimpleNamespace(memcpy2DAsync=memcpy2d, memcpyDeviceToDevice=3)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=rt, get_current_stream=lambda: types.SimpleNamespace(ptr=0)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    dl = _lm_head(np.float16)["dx"][0]
    buf = np.zeros((40, 72), np.float16).view(Dev)
    cg._copy(buf[:, :67], dl.view(Dev))
    np.testing.assert_array_equal(np.asarray(buf[:, :67]), dl)
    assert not np.asarray(buf[:, 67:]).any()
    back = np.empty((40, 67), np.float16).view(Dev)
    cg._copy(back, buf[:, :67])
    np.testing.assert_array_equal(np.asarray(back), dl)
    assert calls == [(144, 134, 134, 40), (134, 144, 134, 40)]
    b3 = np.zeros((2, 20, 72), np.float16).view(Dev)      # (B, T, V): one call, 40 rows
    cg._copy(b3[..., :67], dl.reshape(2, 20, 67).view(Dev))
    np.testing.assert_array_equal(np.asarray(b3[..., :67]).reshape(40, 67), dl)
    assert calls[-1] == (144, 134, 134, 40)


def test_odd_linear_on_a_gpu_like_device_pads_and_matches_cpu(fake_cuda, monkeypatch):
    """An odd Linear (33 -> 27, an LM head's odd vocabulary in small) with padding forced:
    forward, dx and dW products through padded plans, as on the CPU."""
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    monkeypatch.setattr(cg, "PAD_MIN_FLOPS", 1)
    padded = []

    def fake_matmul(xp, x, y, tf32=False, out=None):
        p = cg.gemm_plan(x, y, xp, tf32, out)
        padded.append(p["k"] % 8 == 0 and p["ldc"] % 8 == 0)
        return run_plan(p)
    monkeypatch.setattr(cg, "matmul", fake_matmul)
    em.manual_seed(0)
    lin = em.nn.Linear(33, 27, bias=False).to(em.float16)
    x = em.randn(3, 17, 33).to(em.float16)
    res = {}
    for dev in ("cpu", "cuda"):
        m = lin.to(dev)
        xi = x.detach().to(dev).requires_grad_()
        y = m(xi)
        y.float().square().sum().backward()
        res[dev] = [y.detach().float().cpu().numpy(), xi.grad.float().cpu().numpy(),
                    m.weight.grad.float().cpu().numpy()]
        m.zero_grad()
    assert len(padded) >= 3 and all(padded)
    for a, b in zip(res["cuda"], res["cpu"]):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-2)


# ------------------------------------------------------------ the plan cache (host time)
def _counting_plan(monkeypatch):
    calls = []
    real = cg.gemm_plan

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(cg, "gemm_plan", counting)
    monkeypatch.setattr(cg, "_plans", {})
    monkeypatch.setattr(cg, "_cublas", run_plan)     # the NumPy model of cuBLAS
    return calls


@pytest.mark.parametrize("name", list(_layouts(np.float16)))
def test_matmul_replays_its_plan_on_a_second_call_of_one_layout(name, monkeypatch):
    calls = _counting_plan(monkeypatch)
    for seed in range(3):           # new arrays (new values, new buffers), one layout
        x, y = _layouts(np.float16)[name]
        x = x.copy() if x.flags.c_contiguous else x      # a view keeps its strides
        x *= np.float16(seed + 1)
        got = cg.matmul(np, x, y)
        _exact_close(got, x, y, np.float16)
        fresh = cg.gemm_plan(x, y, np)
        calls.pop()
        direct = fresh["B"] is x and fresh["A"] is y       # else a copy: planned each call
        replay = cg.cached_plan(x, y, np)
        for f in ("fn", "transa", "transb", "m", "n", "k", "lda", "ldb", "ldc", "strideA",
                  "strideB", "strideC", "batch", "type", "compute", "copy"):
            assert replay[f] == fresh[f], f
    assert len(calls) == (1 if direct else 6)    # once, or at each matmul and cached_plan


def test_a_layout_change_plans_again_and_out_buffers_are_written(monkeypatch):
    calls = _counting_plan(monkeypatch)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((17, 32)).astype(np.float16)
    w = rng.standard_normal((24, 32)).astype(np.float16)
    _exact_close(cg.matmul(np, x, w.T), x, w.T, np.float16)          # transposed view
    _exact_close(cg.matmul(np, x, w.T.copy()), x, w.T, np.float16)   # contiguous: re-plan
    assert len(calls) == 2
    out = np.empty((17, 24), np.float16)
    assert cg.matmul(np, x, w.T, out=out) is out                     # out given: re-plan
    _exact_close(out, x, w.T, np.float16)
    out2 = np.empty((17, 24), np.float16)
    assert cg.matmul(np, x * 2, w.T, out=out2) is out2               # replayed into out2
    _exact_close(out2, x * 2, w.T, np.float16)
    assert len(calls) == 3


def test_padded_gemms_are_planned_at_every_call(monkeypatch):
    calls = _counting_plan(monkeypatch)
    monkeypatch.setattr(cg, "PAD_MIN_FLOPS", 1)
    x, y = _lm_head(np.float16)["logits"]
    for _ in range(2):
        _exact_close(cg.matmul(np, x, y), x, y, np.float16)
    assert len(calls) == 2 and not cg._plans
