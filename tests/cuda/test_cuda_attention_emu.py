"""The FlashAttention CUDA kernels' own text, run on the CPU (``_cuda_emu``: g++, a thread
per CUDA thread, barriers for ``__syncthreads`` and warp shuffles), against Ember's CPU
``sdpa`` and its gradients: forward, delta, dk/dv and dq kernels, causal or not, odd
lengths, cross-attention, permuted heads, head dims that are not multiples of 32,
float16/bfloat16 storage. Skips only where no g++ with C++20 ``<barrier>`` exists.
"""
import math

import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_attention as ca
from ember.codegen import cuda_cache

import _cuda_emu

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cuda_emu"))


@pytest.fixture
def emu(workdir, monkeypatch):
    mods = []

    def loader(source, name):
        mods.append(_cuda_emu.EmuModule(source, workdir))
        return mods[-1]
    monkeypatch.setattr(cuda_cache, "module_loader", loader)
    monkeypatch.setattr(ca, "_modules", {})
    return mods


def _cpu(q, k, v, g, causal, scale):
    ts = [em.tensor(a.astype(np.float32)).requires_grad_() for a in (q, k, v)]
    out = em.ops.attention.sdpa(*ts, scale=scale, is_causal=causal)
    out.backward(em.tensor(g.astype(np.float32)))
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


def _flash(q, k, v, g, causal, scale):
    out = ca.forward(np, q, k, v, scale, causal)
    flat = ca.backward(np, g, q, k, v, scale, causal)
    a, b = q.size, q.size + k.size
    return [out, flat[:a].reshape(q.shape), flat[a:b].reshape(k.shape),
            flat[b:].reshape(v.shape)]


CASES = [  # (q shape, k shape, v shape, causal, permuted)
    ((1, 2, 37, 16), (1, 2, 37, 16), (1, 2, 37, 16), True, False),
    ((2, 1, 20, 40), (2, 1, 45, 40), (2, 1, 45, 24), False, False),
    ((1, 2, 33, 64), (1, 2, 33, 64), (1, 2, 33, 64), True, True),
    ((3, 9, 8), (3, 70, 8), (3, 70, 8), True, False),
]


@pytest.mark.parametrize("qs,ks,vs,causal,permuted", CASES)
def test_kernels_match_cpu_sdpa(emu, qs, ks, vs, causal, permuted):
    rng = np.random.default_rng(0)
    if permuted:   # (B, T, H, D) projections viewed as heads, as in the GPT
        q, k, v = (rng.standard_normal((s[0], s[2], s[1], s[3])).astype(np.float32)
                   .transpose(0, 2, 1, 3) for s in (qs, ks, vs))
    else:
        q, k, v = (rng.standard_normal(s).astype(np.float32) for s in (qs, ks, vs))
    g = rng.standard_normal(qs[:-1] + vs[-1:]).astype(np.float32)
    scale = 1 / math.sqrt(qs[-1])
    want = _cpu(q, k, v, g, causal, scale)
    got = _flash(q, k, v, g, causal, scale)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=name)
    assert emu[-1].launches[-4:] == [f"ember_flash_{x}_{ca.variant('float32', qs[-1], vs[-1])[0]}"
                                     for x in ("fwd", "delta", "dkdv", "dq")]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_storage_float32_sums(emu, dtype):
    npd = getattr(em, dtype).np
    rng = np.random.default_rng(1)
    q, k, v, g = (rng.standard_normal((1, 2, 40, 32)).astype(npd) for _ in range(4))
    want = _cpu(q, k, v, g, True, 0.2)
    got = _flash(q, k, v, g, True, 0.2)
    tol = {"float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.dtype == npd
        np.testing.assert_allclose(a.astype(np.float32), b, rtol=tol, atol=tol, err_msg=name)


def test_masked_nan_keys_stay_out_and_nan_rows_match_cpu(emu):
    rng = np.random.default_rng(2)
    q, k, v, g = (rng.standard_normal((1, 1, 40, 8)).astype(np.float32) for _ in range(4))
    k[0, 0, 39], v[0, 0, 39] = np.nan, np.nan      # only query row 39 sees key 39
    want = _cpu(q, k, v, g, True, 0.5)
    got = _flash(q, k, v, g, True, 0.5)
    assert np.isfinite(got[0][0, 0, :39]).all() and np.isnan(got[0][0, 0, 39]).all()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(np.nan_to_num(a), np.nan_to_num(b), rtol=1e-4, atol=1e-5)


def test_backward_reuses_the_saved_lse_once(emu):
    rng = np.random.default_rng(3)
    q, k, v, g = (rng.standard_normal((1, 2, 37, 16)).astype(np.float32) for _ in range(4))
    want = _cpu(q, k, v, g, True, 0.25)
    reused = ca.stats["lse_reused"]
    out = ca.forward(np, q, k, v, 0.25, True, save=True)
    out += 100.0                     # an in-place write to the output: the saved O is a copy
    flat = ca.backward(np, g, q, k, v, 0.25, True)
    s = ca.variant("float32", 16, 16)[0]
    assert emu[-1].launches[-4:] == [f"ember_flash_{x}_{s}" for x in ("fwd", "delta", "dkdv",
                                                                        "dq")]
    assert ca.stats["lse_reused"] == reused + 1 and not ca._saved
    a, b = q.size, q.size + k.size
    for got, w in zip((flat[:a], flat[a:b], flat[b:]), want[1:]):
        np.testing.assert_allclose(got.reshape(w.shape), w, rtol=1e-4, atol=1e-5)
    ca.backward(np, g, q, k, v, 0.25, True)          # taken once: a second backward reruns
    assert emu[-1].launches[-4] == f"ember_flash_fwd_{s}"
    ca.forward(np, q, k, v, 0.25, True, save=True)
    assert ca._recall((q, k, v), 0.5, True) is None               # another scale: not it
    assert ca._recall((q, k.copy(), v), 0.25, True) is None       # other arrays: not it
    del q
    assert not ca._saved                             # freed with its arrays


def test_eager_sdpa_on_a_gpu_runs_one_forward_per_layer(fake_cuda, monkeypatch, emu):
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((2, 3, 40, 16)).astype(np.float32)
    F = em.nn.functional

    def loss(dev):
        x = em.tensor(x0, device=dev, requires_grad=True)
        h = x
        for _ in range(2):                           # two "layers"
            h = F.scaled_dot_product_attention(h, h * 0.5, h, is_causal=True) + h
        h.sum().backward()
        return h.detach().cpu().numpy(), x.grad.cpu().numpy()
    want = loss("cpu")
    reused = ca.stats["lse_reused"]
    got = loss("cuda")
    names = [n for m in emu for n in m.launches]
    assert sum(n.startswith("ember_flash_fwd") for n in names) == 2
    assert sum(n.startswith("ember_flash_dq") for n in names) == 2
    assert ca.stats["lse_reused"] == reused + 2 and not ca._saved
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    with em.no_grad():                               # nothing kept without grad mode
        F.scaled_dot_product_attention(*(em.tensor(x0, device="cuda"),) * 3)
    assert not ca._saved
