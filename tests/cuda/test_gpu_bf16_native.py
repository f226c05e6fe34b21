"""bfloat16 tensors on a real GPU through CuPy >= 14's native ``ml_dtypes.bfloat16`` arrays.

Run on a GPU machine: ``python3 -m pytest -q tests/cuda/test_gpu_bf16_native.py`` (skips
without CuPy and a GPU, or when this CuPy has no bfloat16: CuPy < 14 or no ml_dtypes).
Every path a bfloat16 tensor takes there against the CPU's bfloat16 op (which computes in
float32 and rounds once): CuPy ufuncs and reductions, the float32 route of what CuPy lacks
(``device/cuda_bf16.widening``), the eager generated kernels, cuBLAS GemmEx, the flash
attention kernels, casts, host copies, DLPack; then a compiled GPT-ish step under
``autocast(dtype=bfloat16)`` against eager.
"""
import importlib.util
import os

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.ops.registry import REGISTRY
from test_gpu_pinned import gpu  # noqa: F401 - the module-scoped real-GPU fixture

F = em.nn.functional
BF16 = np.dtype(ml_dtypes.bfloat16)
EPS = 2.0 ** -8                  # bfloat16's unit roundoff (8 significant bits)
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def bf(gpu):  # noqa: F811
    """The GPU backend when it holds bfloat16 arrays (else a skip naming why); the ops'
    cached ``"cuda"`` kernels are dropped so they are wrapped for this backend."""
    if not gpu.has("bfloat16"):
        pytest.skip(f"this CuPy has no bfloat16 ({gpu.bf16_why})")
    for op in REGISTRY.values():
        op._kcache.pop("cuda", None)
    em.ones(1, dtype=em.bfloat16, device="cuda")          # the first-use round trip
    if not gpu.has("bfloat16"):
        pytest.skip(f"bfloat16 astype failed on this GPU ({gpu.bf16_why})")
    return gpu


def _pair(shape, seed=0, scale=1.0):
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(BF16)
    return em.tensor(x), em.tensor(x, device="cuda")


def _close(got, want, k=2.0):
    """``got`` (cuda) within ``k`` bfloat16 steps of ``want`` (CPU), both rounded once."""
    g = got.detach().cpu().float().numpy()
    w = want.detach().float().numpy()
    assert got.dtype == want.dtype and got.device.type == "cuda"
    np.testing.assert_allclose(g, w, rtol=k * EPS, atol=k * EPS * max(np.abs(w).max(), 1e-30))


def test_capability_and_native_arrays(bf):
    import cupy
    assert em.cuda.is_bf16_supported()
    x = em.ones(3, dtype=em.bfloat16, device="cuda")
    assert isinstance(x._data, cupy.ndarray) and x._data.dtype == BF16


def test_host_copies_are_bitwise(bf):
    bits = np.arange(1 << 16, dtype=np.uint16)
    host = bits.view(BF16)
    d = em.tensor(host, device="cuda")
    back = d.cpu().numpy()
    np.testing.assert_array_equal(back.view(np.uint16), bits)          # NaNs included
    small = em.tensor(np.array([1.5, -2.25, 3.0e-3], BF16), device="cuda")
    assert small.tolist() == [1.5, -2.25, float(np.float32(BF16.type(3.0e-3)))]
    assert small[1].item() == -2.25 and "bfloat16" in repr(small)
    p = em.tensor(host).pin_memory().to("cuda", non_blocking=True)
    np.testing.assert_array_equal(p.cpu().numpy().view(np.uint16), bits)


@pytest.mark.parametrize("name", ["add", "mul", "div", "sub", "maximum"])
def test_binary_ops_match_cpu(bf, name):
    (a, ad), (b, bd) = _pair((257, 129), 1), _pair((129,), 2)
    fn = getattr(em, name)
    _close(fn(ad, bd), fn(a, b), k=2)           # NOTE: float32 inside, rounded once: one step


@pytest.mark.parametrize("name", ["exp", "log1p", "tanh", "sigmoid", "sqrt", "rsqrt", "sin",
                                  "abs", "neg", "relu", "round", "floor", "trunc", "sign"])
def test_unary_ops_match_cpu(bf, name):
    a, ad = _pair((1000,), 3)
    if name in ("sqrt", "rsqrt", "log1p"):
        a, ad = a.abs(), ad.abs()
    _close(getattr(em, name)(ad), getattr(em, name)(a), k=2)   # libdevice vs libm: one step


def test_large_elementwise_ops_run_generated_kernels(bf):
    from ember.codegen import cuda_eager
    a, ad = _pair((1 << 24,), 4)
    runs = cuda_eager.stats["runs"]
    _close(ad * 1.5 + 0.25, a * 1.5 + 0.25, k=2)
    _close(F.gelu(ad, approximate="tanh"), F.gelu(a, approximate="tanh"), k=2)
    assert cuda_eager.stats["runs"] > runs


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1)])
def test_reductions_match_cpu(bf, dim):
    a, ad = _pair((4096, 96), 5)
    for fn in ("sum", "mean", "amax", "amin"):
        kw = {} if dim is None else {"dim": dim}
        if fn in ("amax", "amin") and dim is None:
            kw = {"dim": (0, 1)}
        _close(getattr(em, fn)(ad, **kw), getattr(em, fn)(a, **kw), k=2)
    i = em.argmax(ad, dim=1, keepdim=True)       # NOTE: ties are common in bfloat16
    assert em.equal(em.gather(a, 1, i.cpu()), em.amax(a, 1, keepdim=True))


def test_sort_topk_cumsum_and_scatter(bf):
    a, ad = _pair((64, 300), 6)
    v, i = em.sort(ad, dim=1)
    v0, _ = em.sort(a, dim=1)
    np.testing.assert_array_equal(v.cpu().float().numpy(), v0.float().numpy())
    assert em.equal(em.gather(a, 1, i.cpu()), v0)
    np.testing.assert_array_equal(em.topk(ad, 5).values.cpu().float().numpy(),
                                  em.topk(a, 5).values.float().numpy())
    _close(em.cumsum(ad, 1), em.cumsum(a, 1), k=2)     # float64 prefix sums, rounded once
    idx = em.tensor(np.random.default_rng(0).integers(0, 64, 500))
    src, srcd = _pair((500, 300), 7)
    want = em.zeros(64, 300, dtype=em.bfloat16).index_add(0, idx, src)
    got = em.zeros(64, 300, dtype=em.bfloat16, device="cuda").index_add(0, idx.cuda(), srcd)
    _close(got, want, k=4)


@pytest.mark.parametrize("shape", [((64, 96), (96, 48)), ((3, 64, 96), (3, 96, 40)),
                                   ((2, 5, 33), (33, 7))])
def test_matmul_runs_cublas_in_bfloat16(bf, shape):
    (x, xd), (y, yd) = _pair(shape[0], 8), _pair(shape[1], 9)
    _close(xd @ yd, x @ y, k=2)
    w, wd = _pair((48, 96), 10)
    b, bd = _pair((48,), 11)
    if len(shape[0]) == 2 and shape[0][1] == 96:
        _close(F.linear(xd, wd, bd), F.linear(x, w, b), k=2)


def test_softmax_layer_norm_cross_entropy(bf):
    x, xd = _pair((512, 1000), 12, scale=3.0)
    _close(F.softmax(xd, -1), F.softmax(x, -1), k=2)
    _close(F.log_softmax(xd, -1), F.log_softmax(x, -1), k=2)
    w, wd = _pair((1000,), 13)
    b, bd = _pair((1000,), 14)
    _close(F.layer_norm(xd, (1000,), wd, bd), F.layer_norm(x, (1000,), w, b), k=4)
    t = em.tensor(np.random.default_rng(1).integers(0, 1000, 512))
    xl, xdl = x.clone().requires_grad_(), xd.clone().requires_grad_()
    want, got = F.cross_entropy(xl, t), F.cross_entropy(xdl, t.cuda())
    assert abs(got.item() - want.item()) <= 4 * EPS * abs(want.item())
    want.backward()
    got.backward()
    _close(xdl.grad, xl.grad, k=4)


@pytest.mark.parametrize("d", [32, 64, 128])
def test_sdpa_forward_and_backward(bf, d):
    """The op path hands the flash kernels native bfloat16 arrays (test_gpu_attention.py's
    kernel tests feed them uint16 bit views); bounds: its bfloat16 ones."""
    from ember.codegen import cuda_attention as ca
    ca._modules.clear()
    qs = [_pair((2, 3, 200, d), 20 + i) for i in range(3)]
    cpu = [a.clone().requires_grad_() for a, _ in qs]
    dev = [b.clone().requires_grad_() for _, b in qs]
    want = F.scaled_dot_product_attention(*cpu, is_causal=True)
    got = F.scaled_dot_product_attention(*dev, is_causal=True)
    g, gd = _pair(tuple(want.shape), 30)
    want.backward(g)
    got.backward(gd)
    assert got.dtype == em.bfloat16 and all(t.grad.dtype == em.bfloat16 for t in dev)
    for name, a, b in [("out", got, want)] + [(n, x.grad, y.grad) for n, x, y in
                                              zip(("dq", "dk", "dv"), dev, cpu)]:
        w = b.detach().float().numpy()
        np.testing.assert_allclose(a.detach().cpu().float().numpy(), w, rtol=5e-2,
                                   atol=1e-2 * max(1, np.abs(w).max()), err_msg=name)
    assert any("bf16" in str(k) for k in ca._modules), list(ca._modules)


def test_casts_and_embedding_gradient(bf):
    x32 = np.random.default_rng(2).standard_normal(10000).astype(np.float32)
    d = em.tensor(x32, device="cuda").to(em.bfloat16)
    np.testing.assert_array_equal(d.cpu().numpy().view(np.uint16),
                                  x32.astype(BF16).view(np.uint16))    # round to nearest even
    np.testing.assert_array_equal(d.float().cpu().numpy(), x32.astype(BF16).astype(np.float32))
    assert d.half().dtype == em.float16 and d.double().dtype == em.float64
    emb = em.nn.Embedding(8, 4).cuda().to(em.bfloat16)
    idx = em.tensor([3] * 300 + [5], device="cuda")
    emb(idx).float().sum().backward()
    g = emb.weight.grad.cpu().float().numpy()
    assert g[3].tolist() == [300.0] * 4 and g[5].tolist() == [1.0] * 4     # float32 sums


def test_dlpack_round_trip(bf):
    import cupy
    x = em.tensor(np.array([1.0, 2.5, -3.0], BF16), device="cuda")
    try:
        arr = cupy.from_dlpack(x)
    except (TypeError, BufferError, NotImplementedError, ValueError) as e:
        pytest.skip(f"this CuPy exports no bfloat16 DLPack ({e}); cupy/cupy#9670")
    assert arr.dtype == BF16
    y = em.from_dlpack(arr)
    assert y.dtype == em.bfloat16 and y.device.type == "cuda"
    assert y.tolist() == [1.0, 2.5, -3.0]


def _gpt_step(compiled):
    path = os.path.join(HERE, "..", "..", "bench", "cuda.py")
    spec = importlib.util.spec_from_file_location("ember_bench_cuda_bf16", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    em.manual_seed(0)
    vocab, t = 512, 64
    model = mod._gpt_class(em, d=128, n_layers=2, heads=2, vocab=vocab, block=t)().cuda()
    opt = em.optim.AdamW(model.parameters(), lr=1e-3)
    idx = em.randint(0, vocab, (4, t), device="cuda")
    tgt = em.randint(0, vocab, (4, t), device="cuda")

    def step(idx, tgt):
        with em.autocast("cuda", dtype=em.bfloat16):
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    fn = em.compile(step) if compiled else step
    return [float(fn(idx, tgt)) for _ in range(8)]


def test_compiled_gpt_step_under_bfloat16_autocast_matches_eager(bf, monkeypatch):
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    want = _gpt_step(False)
    got = _gpt_step(True)
    assert all(np.isfinite(want)) and all(np.isfinite(got))
    assert want[-1] < want[0] - 0.1 and got[-1] < got[0] - 0.1          # it learns
    # NOTE: bfloat16 rounding differs between fused kernels and op-by-op: a few steps apart
    np.testing.assert_allclose(got, want, rtol=2e-2)


@pytest.mark.parametrize("strategy", ["block", "thread", "warp"])
def test_generated_bfloat16_row_kernels_take_native_arrays(bf, strategy):
    """The launch plan hands native bfloat16 CuPy arrays to kernels reading
    ``__nv_bfloat16*`` (``test_gpu.py`` runs the float32/float64 ones)."""
    import cupy
    from ember.codegen.cuda_launch import CudaKernel
    from test_gpu import _numpy_reduction
    from test_nvrtc import _rows_kernels
    rng = np.random.default_rng(0)
    ks = [k for k in _rows_kernels() if any(s.dtype is em.bfloat16 for s in k.inputs)]
    assert ks
    for k in ks:
        arrays = [rng.standard_normal(tuple(k.shape)).astype(s.dtype.np) for s in k.inputs]
        got = CudaKernel(k, strategy)(*[cupy.asarray(a) for a in arrays])
        want = _numpy_reduction(k, [a.astype(np.float64) for a in arrays])
        np.testing.assert_allclose(cupy.asnumpy(got[0]).astype(np.float64), want,
                                   rtol=2e-2, atol=2e-2, err_msg=k.name)
