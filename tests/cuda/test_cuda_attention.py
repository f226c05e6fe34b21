"""The FlashAttention-style CUDA kernels of ``sdpa``/``sdpa_grad``, checked without a GPU.

* Every variant (dtype x head dims) goes through NVRTC and ptxas (``compile_sass``): no
  spills, shared memory within the 48 KiB static limit, the four entry points.
* The algorithm: a NumPy model of the kernels' tiling (keys by tiles of 32 with an online
  softmax saving only the log-sum-exp per row; the backward's delta, dk/dv over query
  tiles and dq over key tiles from that log-sum-exp) against Ember's CPU ``sdpa`` and its
  gradients.
* The launches: a fake module runs that model from each launch's argument list (head
  index ``(p // b1, p % b1)``, element strides, grid), so ``cuda_attention.forward`` /
  ``backward`` and the op's ``"cuda"`` kernels are checked end to end on NumPy arrays.

On a GPU: ``tests/cuda/test_gpu_attention.py``.
"""
import math

import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_attention as ca
from ember.codegen import cuda_cache, nvrtc
from ember.device.cuda_strict import host_view

TILE = 32


# ------------------------------------------------------------------ the NumPy model
def _visible(i, j, tk, causal):
    return (j < tk) & ((~causal) | (j <= i))


def _mm(a, b, ok):
    """``a @ b`` over the visible pairs only: a masked key never enters, not even 0 * NaN
    (the kernels loop over the ballot of visible lanes)."""
    return np.where(ok[:, :, None], a[:, :, None] * b[None], 0.0).sum(1)


def flash_forward(q, k, v, scale, causal):
    """One head: ``(O, lse)`` by key tiles with the online softmax (the fwd kernel)."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    tq, tk = q.shape[0], k.shape[0]
    m = np.full(tq, -np.inf)
    l = np.zeros(tq)
    acc = np.zeros((tq, v.shape[1]))
    i = np.arange(tq)[:, None]
    for j0 in range(0, tk, TILE):
        j = np.arange(j0, min(j0 + TILE, tk))[None, :]
        ok = _visible(i, j, tk, causal)
        s = np.where(ok, q @ k[j0:j0 + TILE].T * scale, -np.inf)
        mnew = np.maximum(m, s.max(1))
        with np.errstate(invalid="ignore"):
            p = np.where(ok, np.exp(s - mnew[:, None]), 0.0)
            alpha = np.where(m == -np.inf, 0.0, np.exp(m - mnew))
        l = l * alpha + p.sum(1)
        acc = acc * alpha[:, None] + _mm(p, v[j0:j0 + TILE], ok)
        m = mnew
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(l > 0, 1 / np.where(l > 0, l, 1), 0.0)   # Tk == 0: zeros; NaN stays
        return acc * inv[:, None], m + np.log(l)


def flash_backward(g, q, k, v, o, lse, scale, causal):
    """One head: ``(dq, dk, dv)`` from the log-sum-exp (delta, dkdv and dq kernels)."""
    g, q, k, v, o = (a.astype(np.float64) for a in (g, q, k, v, o))
    tq, tk = q.shape[0], k.shape[0]
    delta = (g * o).sum(1)
    dk, dv, dq = np.zeros(k.shape), np.zeros(v.shape), np.zeros(q.shape)
    j = np.arange(tk)[None, :]
    for i0 in range(0, tq, TILE):            # dkdv: query tiles against every key
        i = np.arange(i0, min(i0 + TILE, tq))[:, None]
        ok = _visible(i, j, tk, causal)
        p = np.where(ok, np.exp(q[i0:i0 + TILE] @ k.T * scale - lse[i0:i0 + TILE, None]), 0)
        ds = np.where(ok, p * (g[i0:i0 + TILE] @ v.T - delta[i0:i0 + TILE, None]), 0)
        dv += _mm(p.T, g[i0:i0 + TILE], ok.T)
        dk += _mm(ds.T, q[i0:i0 + TILE], ok.T) * scale
    i = np.arange(tq)[:, None]
    for j0 in range(0, tk, TILE):            # dq: key tiles
        jt = np.arange(j0, min(j0 + TILE, tk))[None, :]
        ok = _visible(i, jt, tk, causal)
        p = np.where(ok, np.exp(q @ k[j0:j0 + TILE].T * scale - lse[:, None]), 0)
        ds = np.where(ok, p * (g @ v[j0:j0 + TILE].T - delta[:, None]), 0)
        dq += _mm(ds, k[j0:j0 + TILE], ok) * scale
    return dq, dk, dv


def _ember_sdpa(q, k, v, causal, scale):
    ts = [em.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = em.ops.attention.sdpa(*ts, scale=scale, is_causal=causal)
    return out, ts


CASES = [(2, 3, 37, 37, 16, 16, True), (1, 2, 64, 80, 32, 24, False),
         (2, 1, 70, 45, 8, 40, True), (1, 1, 5, 100, 64, 64, False)]


@pytest.mark.parametrize("b,h,tq,tk,d,dv,causal", CASES)
def test_the_tiled_algorithm_matches_cpu_sdpa_and_its_gradients(b, h, tq, tk, d, dv, causal):
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((b, h, tq, d)), rng.standard_normal((b, h, tk, d))
    v, g = rng.standard_normal((b, h, tk, dv)), rng.standard_normal((b, h, tq, dv))
    scale = 1 / math.sqrt(d)
    out, ts = _ember_sdpa(q, k, v, causal, scale)
    out.backward(em.tensor(g))
    for bi in range(b):
        for hi in range(h):
            o, lse = flash_forward(q[bi, hi], k[bi, hi], v[bi, hi], scale, causal)
            np.testing.assert_allclose(o, out.detach().numpy()[bi, hi], rtol=1e-10, atol=1e-12)
            grads = flash_backward(g[bi, hi], q[bi, hi], k[bi, hi], v[bi, hi], o, lse, scale,
                                   causal)
            for got, t in zip(grads, ts):
                np.testing.assert_allclose(got, t.grad.numpy()[bi, hi], rtol=1e-9,
                                           atol=1e-11)


def test_the_tiled_algorithm_keeps_nan_in_masked_keys_out_and_empty_keys_zero():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((40, 8)) for _ in range(3))
    k[39], v[39] = np.nan, np.nan          # only the last row sees key 39
    o, lse = flash_forward(q, k, v, 0.5, True)
    assert np.isfinite(o[:39]).all() and np.isnan(o[39]).all()
    grads = flash_backward(np.ones((40, 8)), q, k, v, o, lse, 0.5, True)
    out, ts = _ember_sdpa(q, k, v, True, 0.5)
    out.sum().backward()
    assert np.isfinite(grads[0][:39]).all()
    for got, t in zip(grads, ts):                  # NaN exactly where the CPU op has NaN
        np.testing.assert_array_equal(np.isnan(got), np.isnan(t.grad.numpy()))
    o, lse = flash_forward(q, k[:0], v[:0], 0.5, False)
    assert (o == 0).all() and (lse == -np.inf).all()


# ------------------------------------------------------------------ launches, faked
def _head(a, p, b1, s0, s1, s2, t, d):
    """The (t, d) view the kernel addresses for head p of the array passed as ``a``."""
    it = a.itemsize
    off = (p // b1) * s0 + (p % b1) * s1
    base = np.lib.stride_tricks.as_strided(a, shape=(max(off + 1, 1),), strides=(it,))
    return np.lib.stride_tricks.as_strided(base[off:], shape=(t, d), strides=(s2 * it, it))


class FlashModule:
    """Runs the NumPy model for each launch, reading everything from the argument list."""

    def __init__(self, source):
        self.source, self.calls = source, []

    def get_function(self, name):
        kind = name.split("_")[2]
        return lambda grid, block, args: (self.calls.append(kind), getattr(self, kind)(
            grid, block, [host_view(a) for a in args]))

    def fwd(self, grid, block, args):
        q, k, v, o, lse, b1, tq, tk, d, dv, causal, scale = args[:12]
        st = [int(x) for x in args[12:]]
        rows = int(ca.variant(q.dtype.name, int(d), int(dv))[4])
        assert block == (128, 1, 1) and grid[0] * 4 * rows >= tq and grid[1] == lse.shape[0]
        for p in range(grid[1]):
            hv = [_head(a, p, int(b1), *st[3 * n:3 * n + 3], int(t), int(w)) for n, (a, t, w)
                  in enumerate(((q, tq, d), (k, tk, d), (v, tk, dv), (o, tq, dv)))]
            res, lse[p] = flash_forward(*hv[:3], float(scale), bool(causal))
            hv[3][...] = res

    def delta(self, grid, block, args):
        g, o, delta, b1, tq, dv = args[:6]
        st = [int(x) for x in args[6:]]
        for p in range(grid[1]):
            gh = _head(g, p, int(b1), *st[:3], int(tq), int(dv)).astype(np.float64)
            oh = _head(o, p, int(b1), *st[3:], int(tq), int(dv)).astype(np.float64)
            delta[p] = (gh * oh).sum(1)

    def _backward(self, grid, args, outs):
        q, k, v, g, lse, delta = args[:6]
        b1, tq, tk, d, dv, causal, scale = args[6 + len(outs):13 + len(outs)]
        st = [int(x) for x in args[-1]]
        shapes = [(tq, d), (tk, d), (tk, dv), (tq, dv)]
        res = []
        for p in range(lse.shape[0]):
            hv = [_head(a, p, int(b1), *st[3 * n:3 * n + 3], *map(int, sh))
                  for n, (a, sh) in enumerate(zip((q, k, v, g), shapes))]
            o, lse_p = flash_forward(*hv[:3], float(scale), bool(causal))
            np.testing.assert_allclose(lse[p], lse_p, rtol=1e-5)       # the forward's lse
            np.testing.assert_allclose(delta[p], (hv[3].astype(np.float64) * o).sum(1),
                                       rtol=1e-3, atol=1e-4)
            res.append((p, hv, flash_backward(hv[3], *hv[:3], o, lse_p, float(scale),
                                              bool(causal))))
        return res, st, (b1, tq, tk, d, dv)

    def dkdv(self, grid, block, args):
        res, st, (b1, tq, tk, d, dv) = self._backward(grid, args, args[6:8])
        for p, _, (_, dk, dvv) in res:
            _head(args[6], p, int(b1), *st[12:15], int(tk), int(d))[...] = dk
            _head(args[7], p, int(b1), *st[15:18], int(tk), int(dv))[...] = dvv

    def dq(self, grid, block, args):
        res, st, (b1, tq, tk, d, dv) = self._backward(grid, args, args[6:7])
        for p, _, (dq, _, _) in res:
            _head(args[6], p, int(b1), *st[12:15], int(tq), int(d))[...] = dq


@pytest.fixture
def fake_flash(monkeypatch):
    mods = []

    def loader(source, name):
        mods.append(FlashModule(source))
        return mods[-1]
    monkeypatch.setattr(cuda_cache, "module_loader", loader)
    monkeypatch.setattr(ca, "_modules", {})
    return mods


def _arrays(shape_q, shape_k, shape_v, dtype, permuted):
    rng = np.random.default_rng(2)
    if permuted:        # the GPT's (B, T, H, D) projections viewed as (B, H, T, D)
        mk = [rng.standard_normal((s[0], s[2], s[1], s[3])).astype(dtype).transpose(0, 2, 1, 3)
              for s in (shape_q, shape_k, shape_v)]
    else:
        mk = [rng.standard_normal(s).astype(dtype) for s in (shape_q, shape_k, shape_v)]
    return mk


@pytest.mark.parametrize("shape,permuted,causal", [
    (((2, 3, 40, 16), (2, 3, 40, 16), (2, 3, 40, 16)), True, True),
    (((4, 33, 32), (4, 70, 32), (4, 70, 8)), False, False),
    (((2, 2, 2, 9, 8), (2, 2, 2, 9, 8), (2, 2, 2, 9, 8)), False, True),
    (((17, 64), (17, 64), (17, 64)), False, True)])
def test_launch_plans_through_a_fake_module_match_cpu(fake_flash, shape, permuted, causal):
    q, k, v = _arrays(*shape, np.float32, permuted)
    scale = 1 / math.sqrt(q.shape[-1])
    out, ts = _ember_sdpa(q, k, v, causal, scale)
    g = np.random.default_rng(3).standard_normal(out.shape).astype(np.float32)
    out.backward(em.tensor(g))
    got = ca.forward(np, q, k, v, scale, causal)
    np.testing.assert_allclose(got, out.detach().numpy(), rtol=1e-5, atol=1e-6)
    flat = ca.backward(np, g, q, k, v, scale, causal)
    a, b = q.size, q.size + k.size
    for part, t in zip((flat[:a], flat[a:b], flat[b:]), ts):
        np.testing.assert_allclose(part.reshape(t.shape), t.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert fake_flash[-1].calls[-4:] == ["fwd", "delta", "dkdv", "dq"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_launches_round_once(fake_flash, dtype):
    npd = getattr(em, dtype).np
    q, k, v = _arrays((2, 20, 16), (2, 20, 16), (2, 20, 16), np.float32, False)
    lq, lk, lv = (a.astype(npd) for a in (q, k, v))
    got = ca.forward(np, lq, lk, lv, 0.25, True)
    assert got.dtype == npd
    want = np.stack([flash_forward(lq[i], lk[i], lv[i], 0.25, True)[0] for i in range(2)])
    np.testing.assert_array_equal(got, want.astype(npd))


def test_the_ops_cuda_kernels_take_the_flash_path_on_a_gpu_like_device(fake_cuda, fake_flash,
                                                                        monkeypatch):
    F = em.nn.functional
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    q, k, v = _arrays((2, 2, 24, 16), (2, 2, 24, 16), (2, 2, 24, 16), np.float32, True)
    res = {}
    for dev in ("cpu", "cuda"):
        ts = [em.tensor(a).to(dev).requires_grad_() for a in (q, k, v)]
        out = F.scaled_dot_product_attention(*ts, is_causal=True)
        (out * out).sum().backward()
        res[dev] = [out.detach().cpu().numpy()] + [t.grad.cpu().numpy() for t in ts]
    # the backward takes the forward's saved O and lse: no second forward kernel
    assert fake_flash and fake_flash[-1].calls[:4] == ["fwd", "delta", "dkdv", "dq"]
    for a, b in zip(res["cuda"], res["cpu"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    em.backends.cuda.enable_flash_sdp(False)        # PyTorch's switch: the math kernels
    try:
        n = len(fake_flash[-1].calls)
        ts = [em.tensor(a).to("cuda") for a in (q, k, v)]
        F.scaled_dot_product_attention(*ts, is_causal=True)
        assert len(fake_flash[-1].calls) == n
    finally:
        em.backends.cuda.enable_flash_sdp(True)
    # float64 has no flash variant: the CuPy (NumPy here) kernel
    assert not ca.supported(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    assert not ca.supported(np.ones((2, 200), np.float32), np.ones((2, 200), np.float32),
                            np.ones((2, 200), np.float32))


# ------------------------------------------------------------------ NVRTC + ptxas
NVRTC = nvrtc.available() and bool(nvrtc.include_dirs())


@pytest.mark.skipif(not NVRTC, reason="NVRTC or the CUDA headers are not installed "
                    "(pip install 'ember[nvrtc]')")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_variant_compiles_to_sm90_without_spills(dtype):
    import re
    for d, dv in [(16, 16), (32, 32), (64, 64), (80, 80), (128, 128), (64, 32), (32, 128)]:
        s = ca.variant(dtype, d, dv)[0]
        cubin, log = nvrtc.compile_sass(ca.render(dtype, d, dv), f"flash_{s}")
        entries = set(re.findall(r"Compiling entry function '(\w+)'", log))
        assert entries == {f"ember_flash_{k}_{s}" for k in ("fwd", "delta", "dkdv", "dq")}
        assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log
        smem = [int(x) for x in re.findall(r"(\d+) bytes smem", log)]
        assert smem and max(smem) <= 48 * 1024, smem
        assert len(cubin) > 1000
