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


# ------------------------------------------- tensor-core forward (cuda_attention_mma_c)
def _ref_heads(q, k, v, scale, causal):
    """float64 ``(O, lse)`` head by head (finite inputs), shaped like q's rows."""
    q3, k3, v3 = (a.astype(np.float64).reshape((-1,) + a.shape[-2:]) for a in (q, k, v))
    tq, tk = q3.shape[1], k3.shape[1]
    mask = np.tri(tq, tk, dtype=bool) if causal else np.ones((tq, tk), bool)
    o, lse = np.empty(q3.shape[:2] + v3.shape[2:]), np.empty(q3.shape[:2])
    for h in range(q3.shape[0]):
        s = np.where(mask, q3[h] @ k3[h].T * scale, -np.inf)
        m = s.max(1, keepdims=True)
        p = np.exp(s - m)
        lsum = p.sum(1, keepdims=True)
        o[h], lse[h] = p @ v3[h] / lsum, (m + np.log(lsum))[:, 0]
    return o.reshape(q.shape[:-1] + v.shape[-1:]), lse.reshape(q.shape[:-1])


def _mma_fwd(q, k, v, scale, causal, kernel_dtype=None):
    """``(kernel name, O, lse)`` of the forward on CuPy copies of q, k, v; ``kernel_dtype``
    "bfloat16": q, k, v are bfloat16 bit patterns (uint16) run by the bf16 kernel."""
    import cupy
    dq = (cupy.asarray(a).view(cupy.float16) if kernel_dtype else cupy.asarray(a)
          for a in (q, k, v))
    name, grid, block, args, o, lse = ca.forward_plan(*dq, scale, causal, cupy)
    if kernel_dtype:
        name = name.replace("_mma_f16_", "_mma_bf16_")
    mod = ca._fwd_module(name, kernel_dtype or q.dtype.name, q.shape[-1], v.shape[-1])
    ca._launch(mod, name, grid, block, args)
    return name, cupy.asnumpy(o), cupy.asnumpy(lse).reshape(q.shape[:-1])


MMA_SHAPES = [(8, 12, 1024, 1024, 64, 64, True), (2, 4, 128, 128, 64, 64, False),
              (1, 2, 100, 100, 32, 32, True), (1, 1, 257, 257, 128, 128, True),
              (2, 3, 1, 1, 64, 64, True), (1, 2, 70, 333, 64, 32, True),
              (1, 2, 333, 70, 64, 64, False), (1, 2, 333, 70, 128, 64, True)]


@pytest.mark.parametrize("b,h,tq,tk,d,dv,causal", MMA_SHAPES)
def test_mma_forward_matches_float64_reference(gpu, b, h, tq, tk, d, dv, causal):  # noqa: F811
    rng = np.random.default_rng(tq + tk + d)
    q = rng.standard_normal((b, h, tq, d)).astype(np.float16)
    k = rng.standard_normal((b, h, tk, d)).astype(np.float16)
    v = rng.standard_normal((b, h, tk, dv)).astype(np.float16)
    scale = 1 / math.sqrt(d)
    name, o, lse = _mma_fwd(q, k, v, scale, causal)
    assert name == f"ember_flash_fwd_mma_f16_d{d}_v{dv}"
    want, wlse = _ref_heads(q, k, v, scale, causal)
    np.testing.assert_allclose(o.astype(np.float64), want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(lse, wlse, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("d", [32, 64, 128])
def test_mma_forward_bfloat16_kernel(gpu, d):  # noqa: F811
    import ml_dtypes
    rng = np.random.default_rng(d)
    q, k, v = (rng.standard_normal((2, 3, 200, d)).astype(ml_dtypes.bfloat16)
               for _ in range(3))
    name, o, lse = _mma_fwd(*(a.view(np.uint16) for a in (q, k, v)), 0.1, True, "bfloat16")
    assert name == f"ember_flash_fwd_mma_bf16_d{d}_v{d}"
    want, wlse = _ref_heads(q, k, v, 0.1, True)
    got = o.view(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1.6e-2, atol=1.6e-2)
    np.testing.assert_allclose(lse, wlse, rtol=2e-5, atol=2e-5)


def test_mma_forward_nan_behind_the_mask_and_misaligned_views(gpu):  # noqa: F811
    from test_cuda_attention_mma_emu import reference
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((1, 1, 100, 64)).astype(np.float16) for _ in range(3))
    k[0, 0, 39], v[0, 0, 39] = np.nan, np.nan        # only rows >= 39 see key 39
    v[0, 0, 70, 3] = np.inf
    q[0, 0, 5] = np.nan
    _, o, lse = _mma_fwd(q, k, v, 0.125, True)
    want, wlse = reference(q, k, v, 0.125, True)
    np.testing.assert_array_equal(np.isnan(o), np.isnan(want))
    np.testing.assert_allclose(o.astype(np.float64), want, rtol=2e-3, atol=2e-3, equal_nan=True)
    np.testing.assert_allclose(lse, wlse, rtol=2e-5, atol=2e-5, equal_nan=True)
    import cupy                                      # element loads: row stride 65
    big = cupy.asarray(rng.standard_normal((3, 2, 90, 65)).astype(np.float16))
    qv, kv, vv = big[0, ..., 1:], big[1, ..., 1:], big[2, ..., :64]
    out = ca.forward(cupy, qv, kv, vv, 0.125, True)
    want, _ = _ref_heads(*(cupy.asnumpy(a) for a in (qv, kv, vv)), 0.125, True)
    np.testing.assert_allclose(cupy.asnumpy(out).astype(np.float64), want, rtol=2e-3,
                               atol=2e-3)


def test_gpt_layout_sdpa_takes_the_mma_forward_and_matches_the_scalar_kernel(gpu):  # noqa: F811
    import cupy
    rng = np.random.default_rng(10)
    qkv = cupy.asarray(rng.standard_normal((8, 1024, 3, 12, 64)).astype(np.float16))
    q, k, v = (qkv[:, :, n].transpose(0, 2, 1, 3) for n in range(3))   # GPT's views
    ca._modules.clear()
    fast = ca.forward(cupy, q, k, v, 0.125, True)
    assert any(key.startswith("mma_f16_d64") for key in ca._modules)
    old, ca.MMA_FORWARD = ca.MMA_FORWARD, False
    try:
        slow = ca.forward(cupy, q, k, v, 0.125, True)
    finally:
        ca.MMA_FORWARD = old
    np.testing.assert_allclose(cupy.asnumpy(fast).astype(np.float32),   # P in f16: ~1 ulp
                               cupy.asnumpy(slow).astype(np.float32), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("pipe", ["none", "regs", "cp.async"])
@pytest.mark.parametrize("shape", [(8, 12, 1024, 1024, 64, True), (1, 2, 333, 70, 64, False),
                                   (1, 3, 200, 200, 32, True)])
def test_every_mma_pipeline_matches_float64_reference(gpu, pipe, shape):  # noqa: F811
    import cupy
    from ember.codegen import cuda_attention_mma_c as mc
    from ember.codegen.cuda_cache import load_module
    from ember.codegen.cuda_mma import MMA
    b, h, tq, tk, d, causal = shape
    rng = np.random.default_rng(tq + d)
    q = rng.standard_normal((b, h, tq, d)).astype(np.float16)
    k, v = (rng.standard_normal((b, h, tk, d)).astype(np.float16) for _ in range(2))
    mod = load_module(mc.render(ca.HEAD, MMA, "float16", d, d, pipe),
                      f"ember_flash_fwd_mma_test_{pipe.replace('.', '_')}")
    name, grid, block, args, o, lse = ca.forward_plan(
        *(cupy.asarray(a) for a in (q, k, v)), 0.125, causal, cupy)
    mod.get_function(name)(grid, block, args)
    want, wlse = _ref_heads(q, k, v, 0.125, causal)
    np.testing.assert_allclose(cupy.asnumpy(o).astype(np.float64), want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(cupy.asnumpy(lse).reshape(wlse.shape), wlse, rtol=2e-5,
                               atol=2e-5)


@pytest.mark.parametrize("rows,full_tiles", [(16, False), (32, True)])
@pytest.mark.parametrize("shape", [(8, 12, 1024, 1024, 64, True), (1, 2, 333, 70, 64, False),
                                   (1, 3, 200, 200, 32, True)])
def test_mma_forward_old_path_and_128_row_blocks_match_float64_reference(  # noqa: F811
        gpu, rows, full_tiles, shape):
    """The all-masked old path (FULL_TILES off) and 32 rows a warp (128-row blocks): on
    the emulator bitwise the default's results; here against float64."""
    import cupy
    from ember.codegen import cuda_attention_mma_c as mc
    from ember.codegen.cuda_cache import load_module
    from ember.codegen.cuda_mma import MMA
    b, h, tq, tk, d, causal = shape
    rng = np.random.default_rng(tq + d + 1)
    q = rng.standard_normal((b, h, tq, d)).astype(np.float16)
    k, v = (rng.standard_normal((b, h, tk, d)).astype(np.float16) for _ in range(2))
    mod = load_module(mc.render(ca.HEAD, MMA, "float16", d, d, None, rows, full_tiles),
                      f"ember_flash_fwd_mma_test_r{rows}_{int(full_tiles)}")
    old = mc.ROWS, mc.FULL_TILES
    mc.ROWS, mc.FULL_TILES = rows, full_tiles
    try:
        name, grid, block, args, o, lse = ca.forward_plan(
            *(cupy.asarray(a) for a in (q, k, v)), 0.125, causal, cupy)
    finally:
        mc.ROWS, mc.FULL_TILES = old
    assert grid[0] == -(-tq // (4 * rows))
    mod.get_function(name)(grid, block, args)
    want, wlse = _ref_heads(q, k, v, 0.125, causal)
    np.testing.assert_allclose(cupy.asnumpy(o).astype(np.float64), want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(cupy.asnumpy(lse).reshape(wlse.shape), wlse, rtol=2e-5,
                               atol=2e-5)


# ------------------------------------- tensor-core backward (cuda_attention_mma_bwd_c)
def _ref_grads(q, k, v, g, scale, causal):
    """float64 ``(O, lse, dq, dk, dv)`` head by head (finite inputs), FlashAttention-2's
    formulas on the exact softmax."""
    q3, k3, v3, g3 = (a.astype(np.float64).reshape((-1,) + a.shape[-2:]) for a in (q, k, v, g))
    tq, tk = q3.shape[1], k3.shape[1]
    mask = np.tri(tq, tk, dtype=bool) if causal else np.ones((tq, tk), bool)
    o, lse = np.empty(g3.shape), np.empty(q3.shape[:2])
    dq, dk, dv = np.empty(q3.shape), np.empty(k3.shape), np.empty(v3.shape)
    for h in range(q3.shape[0]):
        s = np.where(mask, q3[h] @ k3[h].T * scale, -np.inf)
        m = s.max(1, keepdims=True)
        p = np.exp(s - m)
        p /= p.sum(1, keepdims=True)
        lse[h] = m[:, 0] + np.log(np.exp(s - m).sum(1))
        o[h] = p @ v3[h]
        dv[h] = p.T @ g3[h]
        ds = p * (g3[h] @ v3[h].T - (g3[h] * o[h]).sum(1, keepdims=True))
        dq[h], dk[h] = ds @ k3[h] * scale, ds.T @ q3[h] * scale
    return (o.reshape(g.shape), lse, dq.reshape(q.shape), dk.reshape(k.shape),
            dv.reshape(v.shape))


def _mma_bwd(q, k, v, g, vals, scale, causal, kernel_dtype=None):
    """``(kernel names, dq, dk, dv)`` of the tensor-core dk/dv and dq kernels alone, given
    O, lse and delta from the float64 reference of ``vals`` (q, k, v, g as float64);
    ``kernel_dtype`` "bfloat16": the arrays are bfloat16 bit patterns (uint16) run by the
    bf16 kernels (CuPy has no bfloat16)."""
    import cupy
    from ember.codegen import cuda_attention_mma_bwd as mb
    o64, lse64 = _ref_grads(*vals, scale, causal)[:2]
    if kernel_dtype:
        import ml_dtypes
        o_low = o64.astype(ml_dtypes.bfloat16)
        arrs = [cupy.asarray(a).view(cupy.float16) for a in (q, k, v, g, o_low.view(np.uint16))]
    else:
        o_low = o64.astype(np.float16)
        arrs = [cupy.asarray(a) for a in (q, k, v, g, o_low)]
    cq, ck, cv, cg, co = arrs
    lse = cupy.asarray(lse64.reshape(-1, q.shape[-2]).astype(np.float32))
    launches, outs = ca.backward_plans(cg, cq, ck, cv, co, lse, scale, causal, cupy)
    delta = launches[0][3][2]
    delta[...] = cupy.asarray((vals[3] * o_low.astype(np.float64)).sum(-1)
                              .reshape(delta.shape).astype(np.float32))
    cache, names = {}, []
    for mod, name, grid, block, args in mb.route(None, launches, cq, ck, cv, cache)[1:]:
        if kernel_dtype:
            name = name.replace("_mma_f16_", "_mma_bf16_")
            mod = mb._module("bfloat16", q.shape[-1], v.shape[-1], cache)
        ca._launch(mod, name, grid, block, args)
        names.append(name)
    res = [cupy.asnumpy(x) for x in outs]
    if kernel_dtype:
        import ml_dtypes
        res = [x.view(np.uint16).view(ml_dtypes.bfloat16) for x in res]
    return names, [x.astype(np.float64) for x in res]


def _close(got, want, rtol, atol):
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * max(1.0, np.abs(b).max()),
                                   err_msg=name)


MMA_BWD_SHAPES = [(1, 12, 1024, 1024, 64, 64, True), (2, 4, 128, 128, 64, 64, False),
                  (1, 2, 100, 100, 32, 32, True), (2, 3, 1, 1, 64, 64, True),
                  (1, 2, 70, 333, 64, 32, True), (1, 2, 333, 70, 64, 64, False),
                  (1, 2, 333, 70, 48, 40, True)]


@pytest.mark.parametrize("b,h,tq,tk,d,dv,causal", MMA_BWD_SHAPES)
def test_mma_backward_matches_float64_reference(gpu, b, h, tq, tk, d, dv, causal):  # noqa: F811
    rng = np.random.default_rng(tq + tk + d)
    q = rng.standard_normal((b, h, tq, d)).astype(np.float16)
    k = rng.standard_normal((b, h, tk, d)).astype(np.float16)
    v = rng.standard_normal((b, h, tk, dv)).astype(np.float16)
    g = rng.standard_normal((b, h, tq, dv)).astype(np.float16)
    scale = 1 / math.sqrt(d)
    vals = [a.astype(np.float64) for a in (q, k, v, g)]
    names, got = _mma_bwd(q, k, v, g, vals, scale, causal)
    assert [n.split("_mma_")[1] for n in names] == [
        f"f16_d{32 * -(-d // 32)}_v{32 * -(-dv // 32)}_s{_sub()}"] * 2
    _close(got, _ref_grads(*vals, scale, causal)[2:], 4e-3, 2e-3)


def _sub():
    """The kernels' name suffix: score columns held at once, ``a`` when tiles go by cp.async."""
    from ember.codegen import cuda_attention_mma_bwd as mb
    return f"{mb.SUB}" + ("a" if mb.ASYNC else "")


@pytest.mark.parametrize("d", [32, 64])
def test_mma_backward_bfloat16_kernels(gpu, d):  # noqa: F811
    import ml_dtypes
    rng = np.random.default_rng(d)
    arrs = [rng.standard_normal((2, 3, 200, d)).astype(ml_dtypes.bfloat16) for _ in range(4)]
    vals = [a.astype(np.float64) for a in arrs]
    names, got = _mma_bwd(*(a.view(np.uint16) for a in arrs), vals, 0.1, True, "bfloat16")
    assert names[0].startswith(f"ember_flash_dkdv_mma_bf16_d{d}_v{d}")
    _close(got, _ref_grads(*vals, 0.1, True)[2:], 3e-2, 1.6e-2)


def test_mma_backward_inf_nan_behind_the_mask(gpu):  # noqa: F811
    """Masked pairs never enter a sum on the hardware either (the mixed diagonal blocks'
    scalar path): the finite pattern and values match Ember's CPU op in float64."""
    rng = np.random.default_rng(11)
    for setup in ("key", "rows"):
        q, k, v, g = (rng.standard_normal((1, 1, 100, 64)).astype(np.float16) for _ in range(4))
        if setup == "key":
            k[0, 0, 39], v[0, 0, 39] = np.nan, np.nan
        else:
            q[0, 0, 33, 0], g[0, 0, 5, 7] = np.nan, np.inf
        want = _run("cpu", "float64", q, k, v, g, True)[1:]
        import cupy
        ts = [cupy.asarray(a) for a in (q, k, v, g)]
        flat = cupy.asnumpy(ca.backward(cupy, ts[3], *ts[:3], 0.125, True)).astype(np.float64)
        got = np.split(flat, [q.size, 2 * q.size])
        for name, a, b in zip(("dq", "dk", "dv"), got, want):
            a, fin = a.reshape(b.shape), np.isfinite(b)
            np.testing.assert_array_equal(np.isfinite(a), fin, err_msg=f"{setup} {name}")
            np.testing.assert_allclose(a[fin], b[fin], rtol=4e-3,
                                       atol=2e-3 * np.abs(b[fin]).max(initial=1.0))


def test_gpt_layout_backward_takes_the_mma_kernels_and_matches_the_scalar_ones(gpu):  # noqa: F811
    import cupy
    from ember.codegen import cuda_attention_mma_bwd as mb
    rng = np.random.default_rng(12)
    qkv = cupy.asarray(rng.standard_normal((8, 1024, 3, 12, 64)).astype(np.float16))
    q, k, v = (qkv[:, :, n].transpose(0, 2, 1, 3) for n in range(3))   # GPT's views
    g = cupy.asarray(rng.standard_normal((8, 12, 1024, 64)).astype(np.float16))
    ca._modules.clear()
    fast = cupy.asnumpy(ca.backward(cupy, g, q, k, v, 0.125, True)).astype(np.float32)
    assert any(key.startswith("bwd_mma_f16_d64_v64") for key in ca._modules)
    old, mb.enabled = mb.enabled, False
    try:
        slow = cupy.asnumpy(ca.backward(cupy, g, q, k, v, 0.125, True)).astype(np.float32)
    finally:
        mb.enabled = old
    # P and dS rounded to float16 before their products: a few float16 ulps of the largest
    np.testing.assert_allclose(fast, slow, rtol=1e-2, atol=4e-3 * np.abs(slow).max())


@pytest.mark.parametrize("sub,async_", [(16, False), (32, False), (64, False), (16, True),
                                        (32, True)])
def test_every_mma_backward_config_matches_float64_reference(gpu, monkeypatch, sub,  # noqa: F811
                                                             async_):
    """Each score-chunk width and tile pipeline (cp.async for real here) of the tensor-core
    backward, on 4 GPT heads (T 1024, causal) and a cross-attention shape."""
    from ember.codegen import cuda_attention_mma_bwd as mb
    monkeypatch.setattr(mb, "SUB", sub)
    monkeypatch.setattr(mb, "ASYNC", async_)
    for b, h, tq, tk, d, causal in [(1, 4, 1024, 1024, 64, True), (1, 2, 333, 70, 64, False)]:
        rng = np.random.default_rng(tq + sub)
        q = rng.standard_normal((b, h, tq, d)).astype(np.float16)
        k, v = (rng.standard_normal((b, h, tk, d)).astype(np.float16) for _ in range(2))
        g = rng.standard_normal((b, h, tq, d)).astype(np.float16)
        vals = [a.astype(np.float64) for a in (q, k, v, g)]
        names, got = _mma_bwd(q, k, v, g, vals, 0.125, causal)
        assert names[0].endswith(f"_s{sub}" + ("a" if async_ else ""))
        _close(got, _ref_grads(*vals, 0.125, causal)[2:], 4e-3, 2e-3)
