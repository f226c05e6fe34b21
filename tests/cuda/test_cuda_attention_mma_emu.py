"""The tensor-core flash-attention forward (``ember/codegen/cuda_attention_mma_c.py``) without
a GPU: its CUDA text run on the CPU emulator (``_cuda_emu``: a thread per CUDA thread, the
``mma``/``ldmatrix`` fragments from their documented layouts) against a float64 NumPy
reference (O and the float32 log-sum-exp per row), causal or not, lengths that are not
multiples of 64, cross-attention, GPT-style permuted heads (16-byte loads) and misaligned
views (element loads), NaN keys/values behind the causal mask and NaN rows; the full-tile
path and the 128-row blocks bitwise against the old kernel; the scalar backward (either)
reading its O and lse; and NVRTC + ptxas for sm_80/sm_90 without spills.
Shapes stay tiny: the emulator runs 128 OS threads a block. On a GPU:
``tests/cuda/test_gpu_attention.py``.
"""
import math
import re

import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_attention as ca
from ember.codegen import cuda_attention_mma_c as mc
from ember.codegen import cuda_cache, nvrtc

import _cuda_emu

EMU = _cuda_emu.available()
NVRTC = nvrtc.available() and bool(nvrtc.include_dirs())
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cuda_mma_emu"))


@pytest.fixture
def emu(workdir, monkeypatch):
    if not EMU:
        pytest.skip("no g++ with C++20 <barrier> to run the CUDA text on")
    mods = []

    def loader(source, name):
        mods.append(_cuda_emu.EmuModule(source, workdir))
        return mods[-1]
    monkeypatch.setattr(cuda_cache, "module_loader", loader)
    monkeypatch.setattr(ca, "_modules", {})
    return mods


def _low(x, dtype):
    return x.astype(getattr(em, dtype).np)


def reference(q, k, v, scale, causal):
    """float64 ``(O, lse)`` of one batch of heads (..., T, D): a masked key never enters a
    sum (not even 0 * NaN); no visible key: O = 0, lse = -inf."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    tq, tk = q.shape[-2], k.shape[-2]
    ok = np.ones((tq, tk), bool) if not causal else np.tri(tq, tk, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.where(ok, q @ np.swapaxes(k, -1, -2) * scale, -np.inf)
        m = s.max(-1, keepdims=True)
        p = np.where(ok, np.exp(s - m), 0.0)
        lsum = p.sum(-1, keepdims=True)
        pv = np.where(ok[..., None], p[..., None] * v[..., None, :, :], 0.0).sum(-2)
        o = np.where(lsum > 0, pv / np.where(lsum > 0, lsum, 1), pv * 0)
        return o, (m + np.log(lsum))[..., 0]


def _run(q, k, v, scale, causal):
    """``(O, lse, kernel name)`` through ``forward_plan`` and the emulated module."""
    name, grid, block, args, o, lse = ca.forward_plan(q, k, v, scale, causal, np)
    ca._launch(ca._fwd_module(name, q.dtype.name, q.shape[-1], v.shape[-1]), name, grid,
               block, args)
    return o, lse.reshape(o.shape[:-1]), name


def _check(got, lse, want, wlse, dtype):
    tol = TOL[dtype]
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), np.isnan(want))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol, equal_nan=True)
    np.testing.assert_allclose(lse, wlse, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t", [1, 17, 64, 80])
def test_forward_matches_float64_reference(emu, dtype, causal, t):
    rng = np.random.default_rng(t)
    q, k, v = (_low(rng.standard_normal((1, 2, t, 32)), dtype) for _ in range(3))
    got, lse, name = _run(q, k, v, 1 / math.sqrt(32), causal)
    assert name == f"ember_flash_fwd_mma_{mc.TYPES[dtype]}_d32_v32"
    assert got.dtype == q.dtype and lse.dtype == np.float32
    _check(got, lse, *reference(q, k, v, 1 / math.sqrt(32), causal), dtype)


@pytest.mark.parametrize("tq,tk,causal", [(17, 80, True), (80, 17, True), (17, 80, False),
                                          (70, 3, False)])
def test_cross_attention_lengths(emu, tq, tk, causal):
    rng = np.random.default_rng(tq * 100 + tk)
    q = _low(rng.standard_normal((2, tq, 32)), "float16")
    k, v = (_low(rng.standard_normal((2, tk, 32)), "float16") for _ in range(2))
    got, lse, _ = _run(q, k, v, 0.3, causal)
    _check(got, lse, *reference(q, k, v, 0.3, causal), "float16")


def test_gpt_permuted_heads_d64_and_v_dim_other_than_q(emu):
    rng = np.random.default_rng(5)
    qkv = _low(rng.standard_normal((1, 72, 3, 2, 64)), "float16")   # (B, T, 3, H, D)
    q, k, v = (qkv[:, :, n].transpose(0, 2, 1, 3) for n in range(3))
    assert q.strides[-2] == 3 * 2 * 64 * 2 and q.ctypes.data % 16 == 0
    got, lse, name = _run(q, k, v, 0.125, True)
    assert name.endswith("_d64_v64")
    _check(got, lse, *reference(q, k, v, 0.125, True), "float16")
    v32 = _low(rng.standard_normal((1, 2, 72, 32)), "bfloat16")
    q, k = q.astype(v32.dtype), k.astype(v32.dtype)
    got, lse, name = _run(q, k, v32, 0.125, False)
    assert name.endswith("bf16_d64_v32")
    _check(got, lse, *reference(q, k, v32, 0.125, False), "bfloat16")


def test_head_dim_128_and_every_pipeline(emu, workdir):
    rng = np.random.default_rng(11)
    q, k, v = (_low(rng.standard_normal((1, 1, 70, 128)), "float16") for _ in range(3))
    got, lse, name = _run(q, k, v, 0.09, True)           # d=128: "none"
    assert name == "ember_flash_fwd_mma_f16_d128_v128"
    _check(got, lse, *reference(q, k, v, 0.09, True), "float16")
    from ember.codegen.cuda_mma import MMA
    q, k, v = (a[..., :32].copy() for a in (q, k, v))
    big = _low(rng.standard_normal((3, 1, 1, 70, 33)), "float16")
    for pipe in mc.PIPELINES:
        mod = _cuda_emu.EmuModule(mc.render(ca.HEAD, MMA, "float16", 32, 32, pipe), workdir)
        for x in ((q, k, v), (big[0, ..., 1:], big[1, ..., 1:], big[2, ..., :32])):
            name, grid, block, args, o, lse = ca.forward_plan(*x, 0.2, True, np)
            mod.get_function(name)(grid, block, args)       # aligned, then element loads
            _check(o, lse.reshape(o.shape[:-1]), *reference(*x, 0.2, True), "float16")
    with pytest.raises(ValueError, match="cp.async"):
        mc.render(ca.HEAD, MMA, "float16", 128, 128, "cp.async")


def test_misaligned_views_take_element_loads(emu):
    rng = np.random.default_rng(6)
    big = _low(rng.standard_normal((3, 2, 45, 33)), "float16")
    q, k, v = big[0, ..., 1:], big[1, ..., 1:], big[2, ..., :32]   # row stride 33
    assert q.strides[-1] == 2 and q.ctypes.data % 16 != 0
    got, lse, _ = _run(q, k, v, 0.2, True)
    _check(got, lse, *reference(q, k, v, 0.2, True), "float16")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_nan_keys_behind_the_mask_stay_out_and_nan_rows_poison(emu, dtype):
    rng = np.random.default_rng(7)
    q, k, v = (_low(rng.standard_normal((1, 1, 40, 32)), dtype) for _ in range(3))
    k[0, 0, 39], v[0, 0, 39] = np.nan, np.nan      # only query row 39 sees key 39
    v[0, 0, 20, 3] = np.inf                          # rows 20.. see an Inf value
    q[0, 0, 5] = np.nan                              # a NaN row
    got, lse, _ = _run(q, k, v, 0.5, True)
    want, wlse = reference(q, k, v, 0.5, True)
    assert np.isnan(got[0, 0, 39].astype(np.float32)).all() and np.isnan(lse[0, 0, 5])
    assert np.isfinite(got[0, 0, :5].astype(np.float32)).all()
    assert np.isfinite(got[0, 0, 6:20].astype(np.float32)).all()
    _check(got, lse, want, wlse, dtype)


def test_no_keys_gives_zeros_and_scalar_fallbacks(emu):
    q = _low(np.ones((1, 3, 32)), "float16")
    k = v = _low(np.ones((1, 0, 32)), "float16")
    o = ca.forward(np, q, k, v, 0.5, False)
    assert (o == 0).all()
    assert mc.variant("float32", 64, 64) is None and mc.variant("float16", 80, 80) is None
    assert mc.variant("float16", 64, 48) is None
    x = np.ones((1, 5, 64), np.float16)
    assert ca.forward_plan(x, x, x, 0.1, True)[0] == "ember_flash_fwd_mma_f16_d64_v64"
    old, ca.MMA_FORWARD = ca.MMA_FORWARD, False
    try:
        assert ca.forward_plan(x, x, x, 0.1, True)[0].startswith("ember_flash_fwd_f16_")
    finally:
        ca.MMA_FORWARD = old


def test_the_backward_reads_the_mma_forwards_o_and_lse(emu):
    rng = np.random.default_rng(8)
    q, k, v, g = (_low(rng.standard_normal((1, 2, 33, 32)), "float16") for _ in range(4))
    ts = [em.tensor(a.astype(np.float32)).requires_grad_() for a in (q, k, v)]
    out = em.ops.attention.sdpa(*ts, scale=0.25, is_causal=True)
    out.backward(em.tensor(g.astype(np.float32)))
    o = ca.forward(np, q, k, v, 0.25, True, save=True)
    flat = ca.backward(np, g, q, k, v, 0.25, True)
    names = [n for m in emu for n in m.launches]
    assert names[0].startswith("ember_flash_fwd_mma_") and "ember_flash_fwd_f16" not in \
        " ".join(names)
    a, b = q.size, q.size + k.size
    np.testing.assert_allclose(o.astype(np.float32), out.detach().numpy(), rtol=2e-3, atol=2e-3)
    for got, t in zip((flat[:a], flat[a:b], flat[b:]), ts):
        np.testing.assert_allclose(got.reshape(t.shape).astype(np.float32), t.grad.numpy(),
                                   rtol=1e-2, atol=1e-2)


def test_full_tiles_and_128_row_blocks_give_the_old_kernels_results_bitwise(emu, workdir):
    """The unguarded path for whole tiles (the default) and the 128-row blocks (32 rows a
    warp) run the old kernel's operations in its order on every row: the same bits of O
    and lse. Tq, Tk of 2-3 tiles: whole tiles, the causal diagonal (of both m-tiles), Tk
    and Tq tails, cross-attention, 16-byte and element loads, an Inf/NaN V on the
    diagonal (the exact path), a NaN key and a NaN row; the "regs" pipeline once. The
    variants of a dtype and head dim share one emulated module (one g++ run)."""
    from ember.codegen.cuda_mma import MMA
    rng = np.random.default_rng(13)

    def arrays(tq, tk, d=32, dtype="float16"):
        return tuple(_low(rng.standard_normal((1, 1, t, d)), dtype) for t in (tq, tk, tk))
    nan = arrays(130, 130)
    nan[2][0, 0, 100, 3], nan[2][0, 0, 120, 0] = np.inf, np.nan     # V on the diagonal
    nan[1][0, 0, 129], nan[0][0, 0, 70] = np.nan, np.nan
    big = _low(rng.standard_normal((3, 1, 1, 90, 33)), "float16")
    qkv = _low(rng.standard_normal((1, 130, 3, 1, 64)), "bfloat16")   # (B, T, 3, H, D)
    old = [(16, False), (32, True)]       # (rows, full_tiles) vs the default (16, True)
    groups = [("cp.async", old, [(arrays(130, 130), True), (arrays(70, 130), False),
                                 (arrays(130, 70), True), (nan, True),
                                 ((big[0, ..., 1:], big[1, ..., 1:], big[2, ..., :32]), True)]),
              ("cp.async", old, [(tuple(qkv[:, :, n].transpose(0, 2, 1, 3)
                                            for n in range(3)), True)]),
              ("regs", old[:1], [(arrays(130, 130), False)])]
    saved = mc.ROWS, mc.FULL_TILES
    try:
        for pipe, kws, cases in groups:
            q, k, v = cases[0][0]
            dt, d = q.dtype.name, q.shape[-1]
            src = mc.render(ca.HEAD, MMA, dt, d, d, pipe, 16, True) + "".join(
                mc.entry(dt, d, d, pipe, r, f) for r, f in kws)
            mod = _cuda_emu.EmuModule(src, workdir)
            for x, causal in cases:
                outs = []
                for rows, full in [(16, True)] + kws:
                    mc.ROWS, mc.FULL_TILES = rows, full
                    name, grid, block, args, o, lse = ca.forward_plan(*x, 0.2, causal, np)
                    mod.get_function(name)(grid, block, args)
                    outs.append(o.tobytes() + lse.tobytes())
                want = o.astype(np.float64), lse.reshape(o.shape[:-1])
                _check(*want, *reference(*x, 0.2, causal), dt)
                assert outs[1:] == outs[:1] * len(kws), (x[0].shape, x[1].shape, causal, pipe)
    finally:
        mc.ROWS, mc.FULL_TILES = saved
    assert mc.variant("float16", 64, 64, 32, False) == "f16_d64_v64_r32_m"
    assert mc.variant("float16", 128, 128, 32) == "f16_d128_v128"      # 16 rows: d > 64
    with pytest.raises(ValueError, match="32 rows"):
        mc.render(ca.HEAD, "", "float16", 128, 64, "none", 32)


@pytest.mark.skipif(not NVRTC, reason="NVRTC or the CUDA headers are not installed "
                    "(pip install 'ember[nvrtc]')")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_mma_variant_compiles_without_spills(arch, dtype):
    from ember.codegen.cuda_mma import MMA
    # NOTE: the defaults (full tiles; cp.async up to d=64, "none" above) and, for sm_90 (the
    # GPU that times it), the 128-row blocks: 255 registers with __launch_bounds__(128, 2),
    # at the limit, no spills. Each variant costs ~1-3 s of ptxas.
    for d, dv, pipe, rows in [(32, 32, None, 16), (64, 64, None, 16), (128, 128, None, 16),
                              (64, 32, None, 16), (64, 64, "none", 16)] + \
            [(64, 64, None, 32)] * (arch == "sm_90"):
        s = mc.variant(dtype, d, dv, rows)
        cubin, log = nvrtc.compile_sass(mc.render(ca.HEAD, MMA, dtype, d, dv, pipe, rows),
                                        f"fwd_{s}", arch=arch)
        assert re.findall(r"Compiling entry function '(\w+)'", log) == \
            [f"ember_flash_fwd_mma_{s}"]
        assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log
        assert not re.search(r"[1-9]\d* bytes stack frame", log), log
        smem = [int(x) for x in re.findall(r"(\d+) bytes smem", log)]
        assert smem and max(smem) <= 48 * 1024, smem
        assert len(cubin) > 1000
    with pytest.raises(ValueError, match="float16/bfloat16"):
        mc.render(ca.HEAD, MMA, "float32", 64, 64)


def test_float16_sdpa_on_a_gpu_like_device_runs_the_mma_forward(fake_cuda, monkeypatch, emu):
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    rng = np.random.default_rng(12)
    x0 = rng.standard_normal((1, 40, 2, 32)).astype(np.float16)     # (B, T, H, D)
    F = em.nn.functional

    def loss(dev):
        x = em.tensor(x0, device=dev, requires_grad=True)
        h = x.transpose(1, 2)
        out = F.scaled_dot_product_attention(h, h * 0.5, h, is_causal=True)
        (out.float() * out.float()).sum().backward()
        return out.detach().float().cpu().numpy(), x.grad.float().cpu().numpy()
    want = loss("cpu")
    got = loss("cuda")
    names = [n for m in emu for n in m.launches]
    assert sum(n.startswith("ember_flash_fwd_mma_f16_d32_v32") for n in names) == 1, names
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-2)
