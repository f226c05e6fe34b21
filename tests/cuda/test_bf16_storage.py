"""bfloat16 for the GPU (``ember/device/cuda_bf16.py``): the CuPy >= 14 probe and its
error text (with fake CuPy modules), the float32 route of what CuPy lacks for bfloat16,
and bfloat16 tensors on the stand-in (which holds real ``ml_dtypes`` bfloat16 arrays).

The same paths on a real GPU: ``test_gpu_bf16_native.py`` (skips without CuPy bfloat16).
"""
import importlib.util
import os
import sys
import types

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.codegen import nvrtc
from ember.device import cuda as cuda_mod
from ember.device import cuda_bf16 as bf
from ember.device.base import _backends
from ember.errors import DTypeError

import _cuda_emu
from test_cuda_fusion_emu import _launched, emu_gpu  # noqa: F401 - the fixture

BF16 = np.dtype(ml_dtypes.bfloat16)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------ the probe
def _fake_cupy(version="14.2.0", empty=None):
    """A module that looks like CuPy to :func:`bf.probe` (arrays are NumPy's)."""
    m = types.ModuleType("cupy")
    m.__version__ = version
    m.empty = empty or (lambda shape, dtype: np.empty(shape, dtype))
    m.asarray = np.asarray
    m.asnumpy = np.asarray
    return m


def test_probe_accepts_cupy_14_with_ml_dtypes():
    assert bf.probe(_fake_cupy("14.2.0"), ml_dtypes) == (True, "")
    assert bf.probe(_fake_cupy("15.0.0rc1"), ml_dtypes) == (True, "")
    assert bf.probe(_fake_cupy("14.2.0")) == (True, "")        # ml_dtypes imported itself


@pytest.mark.parametrize("version", ["13.6.0", "12.3.0", "9.0", "garbage", ""])
def test_probe_refuses_older_cupy_naming_its_version(version):
    ok, why = bf.probe(_fake_cupy(version), ml_dtypes)
    assert not ok and f"CuPy {version} has no bfloat16 dtype" == why


def test_probe_refuses_without_ml_dtypes(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)        # NOTE: import raises
    ok, why = bf.probe(_fake_cupy("14.2.0"))
    assert not ok and "needs ml_dtypes" in why and "14.2.0" in why


def test_probe_refuses_a_cupy_that_rejects_or_mangles_the_dtype():
    def refuse(shape, dtype):
        raise ValueError("Unsupported dtype bfloat16")
    ok, why = bf.probe(_fake_cupy("14.0.0", empty=refuse), ml_dtypes)
    assert not ok and "ValueError: Unsupported dtype bfloat16" in why
    ok, why = bf.probe(_fake_cupy("14.0.0", empty=lambda s, d: np.empty(s, np.float16)),
                       ml_dtypes)
    assert not ok and "float16" in why


def test_roundtrip_is_ml_dtypes_rounding_and_catches_a_wrong_one():
    assert bf.roundtrip(_fake_cupy(), BF16) == (True, "")
    cp = _fake_cupy()
    # a device whose conversion truncates instead of rounding to nearest even
    cp.asarray = lambda a: _Truncating(np.asarray(a))
    ok, why = bf.roundtrip(cp, BF16)
    assert not ok and "did not round like ml_dtypes" in why
    cp.asarray = lambda a: (_ for _ in ()).throw(RuntimeError("nvrtc: error"))
    ok, why = bf.roundtrip(cp, BF16)
    assert not ok and "RuntimeError: nvrtc: error" in why


class _Truncating:
    def __init__(self, a):
        self.a = a

    def astype(self, dtype):
        bits = (self.a.view(np.uint32) >> 16).astype(np.uint16)
        return bits.view(BF16)


class _CuPyLikeRuntime(cuda_mod.FakeRuntime):
    """The stand-in's runtime dressed as a GPU's (``is_fake`` False) with a chosen probe
    answer, so :class:`CUDABackend`'s bfloat16 gate runs as on a GPU."""
    is_fake = False

    def __init__(self, bf16, roundtrip=(True, "")):
        super().__init__()
        self.name = "CuPy 13.6.0"
        self.bf16 = bf16
        self._rt = roundtrip
        self.roundtrips = 0

    def bf16_roundtrip(self):
        self.roundtrips += 1
        return self._rt

    def compile_errors(self):
        return (OSError,)


def test_old_cupy_refuses_bfloat16_with_the_version_and_what_is_needed():
    be = cuda_mod.CUDABackend(_CuPyLikeRuntime((False, "CuPy 13.6.0 has no bfloat16 dtype")))
    assert "bfloat16" not in be.capabilities and "cuda_kernels" in be.capabilities
    for make in (lambda: be.empty((2,), BF16), lambda: be.asarray(np.ones(2, BF16)),
                 lambda: be.asarray(np.ones(2, np.float32), BF16)):
        with pytest.raises(TypeError) as e:
            make()
        msg = str(e.value)
        assert "CuPy >= 14" in msg and "ml_dtypes" in msg and "CuPy 13.6.0" in msg
        assert "valid: float16, float32, float64" in msg.lower()
    assert be.empty((2,), np.dtype(np.float16)).dtype == np.float16


def test_first_bfloat16_array_runs_the_roundtrip_once():
    rt = _CuPyLikeRuntime((True, ""))
    be = cuda_mod.CUDABackend(rt)
    assert "bfloat16" in be.capabilities and rt.roundtrips == 0     # nothing compiled yet
    be.empty((3,), np.dtype(np.float32))
    assert rt.roundtrips == 0
    assert be.empty((3,), BF16).dtype == BF16 and be.asarray(np.ones(2, BF16)).dtype == BF16
    assert rt.roundtrips == 1


def test_a_failed_roundtrip_drops_the_capability_with_its_reason():
    rt = _CuPyLikeRuntime((True, ""), roundtrip=(False, "a bfloat16 astype failed"))
    be = cuda_mod.CUDABackend(rt)
    with pytest.raises(TypeError, match="CuPy >= 14.*a bfloat16 astype failed"):
        be.empty((3,), BF16)
    assert "bfloat16" not in be.capabilities
    with pytest.raises(TypeError, match="a bfloat16 astype failed"):
        be.asarray(np.ones(2, BF16))
    assert rt.roundtrips == 1


# ------------------------------------------------------------------ float32 route
def _no_bf16_loop(xp, x, y=None, **params):
    """A kernel like a CuPy routine without a bfloat16 loop (cupyx, thrust...)."""
    if x.dtype == BF16:
        raise TypeError("Wrong type ((dtype('bfloat16'),)) of arguments for cupy_thing")
    return xp.sqrt(x) + (0 if y is None else y) + params.get("shift", 0)


def test_widening_computes_in_float32_and_rounds_once():
    name = "test_widen_sqrt"
    bf._widened.discard(name)
    k = bf.widening(name, _no_bf16_loop, BF16)
    x32 = np.array([2.0, 3.0, 5.0, 1e-3], np.float32)
    x = x32.astype(BF16)
    got = k(np, x, x, shift=1.5)
    want = (np.sqrt(x.astype(np.float32)) + x.astype(np.float32) + 1.5).astype(BF16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert name in bf._widened                       # later calls widen at once
    np.testing.assert_array_equal(k(np, x32), np.sqrt(x32))     # float32 untouched
    bf._widened.discard(name)


def test_widening_keeps_other_errors():
    def bad(xp, x):
        raise TypeError("bad argument")
    k = bf.widening("test_widen_bad", bad, BF16)
    with pytest.raises(TypeError, match="bad argument"):
        k(np, np.ones(2, BF16))                      # float32 failed too: first error
    with pytest.raises(TypeError, match="bad argument"):
        k(np, np.ones(2, np.float32))                # no bfloat16: not retried
    assert "test_widen_bad" not in bf._widened

    calls = []

    def runtime_error(xp, x):
        calls.append(x.dtype)
        raise RuntimeError("cudaErrorIllegalAddress")
    with pytest.raises(RuntimeError, match="IllegalAddress"):
        bf.widening("test_widen_rt", runtime_error, BF16)(np, np.ones(2, BF16))
    assert calls == [BF16]                           # not one of NO_LOOP: no retry
    # a bfloat16 buffer to write (an array among the params) is never swapped for a copy
    k = bf.widening("test_widen_out", _no_bf16_loop, BF16)
    with pytest.raises(TypeError, match="Wrong type"):
        k(np, np.ones(2, BF16), out=np.ones(2, BF16))


def test_device_kernel_wraps_only_on_a_gpu_with_bfloat16(fake_cuda, monkeypatch):
    assert bf.device_kernel("x", _no_bf16_loop) is _no_bf16_loop     # stand-in
    gpu = cuda_mod.CUDABackend(_CuPyLikeRuntime((True, "")))
    monkeypatch.setitem(_backends, "cuda", gpu)
    k = bf.device_kernel("test_dk", _no_bf16_loop)
    assert k.__wrapped__ is _no_bf16_loop
    np.testing.assert_array_equal(k(np, np.full(2, 4.0, BF16)), np.full(2, 2.0, BF16))
    old = cuda_mod.CUDABackend(_CuPyLikeRuntime((False, "CuPy 13.6.0 has no bfloat16 dtype")))
    monkeypatch.setitem(_backends, "cuda", old)
    assert bf.device_kernel("x", _no_bf16_loop) is _no_bf16_loop
    bf._widened.discard("test_dk")


def test_an_op_whose_array_routine_lacks_bfloat16_runs_in_float32(monkeypatch):
    """End to end through the dispatcher and ``OpDef.kernel_for``: a GPU-like backend with
    bfloat16 whose ``sqrt`` routine refuses bfloat16 (as a CuPy routine without the loop)."""
    from ember.ops.registry import REGISTRY
    gpu = cuda_mod.CUDABackend(_CuPyLikeRuntime((True, "")))
    monkeypatch.setitem(_backends, "cuda", gpu)
    op = REGISTRY["sqrt"]
    monkeypatch.setattr(op, "_kcache", {})
    monkeypatch.setitem(op.kernels, "cuda", lambda xp, x: _no_bf16_loop(xp, x))
    x32 = np.array([2.0, 3.0, 10.0, 0.5], np.float32)
    x = em.tensor(x32.astype(BF16), device="cuda")
    try:
        y = em.sqrt(x)
        assert y.dtype == em.bfloat16 and y.device.type == "cuda"
        np.testing.assert_array_equal(np.asarray(y._data).view(np.uint16),
                                      np.sqrt(x32.astype(BF16).astype(np.float32))
                                      .astype(BF16).view(np.uint16))
        assert "sqrt" in bf._widened
        np.testing.assert_array_equal(np.asarray(em.sqrt(x.float())._data),
                                      np.sqrt(x32.astype(BF16).astype(np.float32)))
    finally:
        bf._widened.discard("sqrt")


@pytest.mark.parametrize("ok", [False, True])
def test_a_cast_to_bfloat16_passes_the_backends_gate(monkeypatch, ok):
    from ember.ops.registry import REGISTRY
    rt = _CuPyLikeRuntime((ok, "" if ok else "CuPy 13.6.0 has no bfloat16 dtype"))
    monkeypatch.setitem(_backends, "cuda", cuda_mod.CUDABackend(rt))
    monkeypatch.setattr(REGISTRY["cast"], "_kcache", {})
    x = em.tensor(np.array([1.5, 2.0], np.float32), device="cuda")
    assert x.half().dtype == em.float16 and rt.roundtrips == 0
    if not ok:
        with pytest.raises(TypeError, match="cast.*CuPy >= 14 with ml_dtypes.*CuPy 13.6.0"):
            x.to(em.bfloat16)
        return
    y = x.to(em.bfloat16)
    assert y.dtype == em.bfloat16 and rt.roundtrips == 1        # the first bfloat16 array
    assert x.to(em.bfloat16).tolist() == [1.5, 2.0] and rt.roundtrips == 1


def test_optimizer_cuda_kernels_leave_bfloat16_to_the_array_passes():
    # NOTE: like float16: launch() says no, the optimizer runs its CuPy passes
    from ember.codegen import cuda_optim
    before = dict(cuda_optim.stats)
    for d in (BF16, np.dtype(np.float16)):
        arrays = tuple(np.ones(4, d) for _ in range(2))
        assert cuda_optim.launch("sgd", arrays, (0.1, 0.0, 0.0, 0.0, 1.0), 0) is False
        assert cuda_optim.launch_many("sgd", np, [arrays, arrays], (0.1, 0.0, 0.0, 1.0),
                                      0) is False
        assert not cuda_optim.has_kernel(d)
    assert cuda_optim.stats == before


def test_bench_gpt_rows_fall_back_to_float16_when_bfloat16_fails(fake_cuda, monkeypatch,
                                                                capsys):
    spec = importlib.util.spec_from_file_location("ember_bench_cuda_bf16",
                                                  os.path.join(ROOT, "bench", "cuda.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    made = []

    def step(lib, dtype, **kw):
        made.append(dtype.name if hasattr(dtype, "name") else str(dtype))
        if dtype is em.bfloat16:
            raise TypeError("no bfloat16 loop")
        return (lambda: None), ()
    monkeypatch.setattr(mod, "_gpt_step", step)
    monkeypatch.setattr(mod, "_time", lambda fn, reps, sync, warm=2: 1.5)
    rows = mod.gpt_rows(4, None)
    names = [r[0] for r in rows]
    assert names == [f"GPT step {d} {m} ms" for d in ("bfloat16", "float16")
                     for m in ("eager", "compiled", "reduce-overhead")]
    assert [r[1] != r[1] for r in rows] == [True] * 3 + [False] * 3
    out = capsys.readouterr().out
    assert "GPT step bfloat16 eager: failed: TypeError: no bfloat16 loop" in out
    assert "float16 rows follow" in out


# ------------------------------------------------------------------ the stand-in
def test_bf16_tensors_on_the_stand_in(fake_cuda):
    assert em.cuda.is_bf16_supported()
    rng = np.random.default_rng(0)
    a32, b32 = rng.standard_normal((5, 7), np.float32), rng.standard_normal((7, 3), np.float32)
    a = em.tensor(a32, device="cuda").to(em.bfloat16)
    b = em.tensor(b32).to(em.bfloat16).cuda()
    assert (a.dtype, a.device.type, b.dtype) == (em.bfloat16, "cuda", em.bfloat16)
    ab, bb = a32.astype(BF16), b32.astype(BF16)
    np.testing.assert_array_equal(a.cpu().numpy(), ab)
    # matmul: operands widened exactly, float32 products and sums, rounded once
    want = (ab.astype(np.float32) @ bb.astype(np.float32)).astype(BF16)
    got = (a @ b).cpu().numpy()
    assert got.dtype == BF16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2 ** -7)
    np.testing.assert_array_equal((a * 2 + 1).cpu().numpy(),
                                  (ab.astype(np.float32) * 2 + 1).astype(BF16))
    z = em.zeros(4, dtype=em.bfloat16, device="cuda")
    assert z.dtype == em.bfloat16 and z.cpu().tolist() == [0.0] * 4
    p = em.tensor(a32).to(em.bfloat16).pin_memory().to("cuda", non_blocking=True)
    np.testing.assert_array_equal(p.cpu().numpy(), ab)
    assert a[0, 0].item() == float(ab[0, 0]) and a.tolist()[1] == ab[1].astype(float).tolist()
    assert "dtype=torch.bfloat16" in repr(a) or "bfloat16" in repr(a)


def test_bf16_gradients_on_the_stand_in(fake_cuda):
    w = em.ones(3, 2, device="cuda", requires_grad=True)
    x = em.full((4, 3), 0.5, device="cuda")
    y = (x.to(em.bfloat16) @ w.to(em.bfloat16)).float().sum()
    y.backward()
    assert w.grad.dtype == em.float32 and w.grad.device.type == "cuda"
    assert w.grad.cpu().tolist() == [[2.0, 2.0]] * 3


def test_bf16_embedding_gradient_accumulates_in_float32_on_the_device(fake_cuda):
    # NOTE: the "cuda" index_put kernel: 300 repeats of one row add in float32 and round
    # once; bfloat16 adds would stall at 256 (8 significant bits)
    emb = em.nn.Embedding(4, 3).to("cuda").to(em.bfloat16)
    idx = em.tensor([1] * 300 + [2], device="cuda")
    emb(idx).float().sum().backward()
    g = emb.weight.grad
    assert g.dtype == em.bfloat16 and g.device.type == "cuda"
    assert g.cpu().float().tolist() == [[0.0] * 3, [300.0] * 3, [1.0] * 3, [0.0] * 3]


needs_nvrtc = pytest.mark.skipif(
    not (nvrtc.available() and nvrtc.include_dirs()),
    reason="NVRTC or the CUDA bf16 headers are not installed (pip install 'ember[nvrtc]')")

_BF16_KERNEL = r"""
#include <cuda_bf16.h>
extern "C" __global__ void ember_bf16_scale(const __nv_bfloat16 *x, __nv_bfloat16 *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16_rn(2.0f * __bfloat162float(x[i]));
}
"""


@needs_nvrtc
def test_compiling_leaves_python_bytes_alone(tmp_path):
    # NOTE: regression: NVRTC wrote its empty log into CPython's cached b" ", so every
    # b" " after a compile was b"\x00" and ember.save's header padding broke ember.load
    nvrtc.compile_ptx(_BF16_KERNEL, "ember_bf16")
    assert b" " == bytes([32]) and b" " * 3 == bytes([32, 32, 32])
    path = tmp_path / "after_nvrtc.safetensors"
    em.save({"w": em.ones(3), "n": 1}, path)
    assert em.load(path)["n"] == 1


def test_eager_bfloat16_ops_launch_bf16_kernels_from_their_text(emu_gpu, monkeypatch):  # noqa: F811
    """The launch plan hands bfloat16 arrays to the generated ``__nv_bfloat16`` kernels
    (the emulator runs the CUDA text; on a GPU the arrays are CuPy's native bfloat16)."""
    if not _cuda_emu.available():
        pytest.skip("no g++ with C++20 <barrier> to run the CUDA text on")
    from ember.codegen import cuda_eager
    N = 1 << 15             # NOTE: the dispatcher's own gate: the emulator is slow
    monkeypatch.setattr(cuda_eager, "THRESHOLD", N)
    a = np.random.default_rng(0).standard_normal(N + 3).astype(np.float32).astype(BF16)
    x = em.tensor(a, device="cuda")
    before = cuda_eager.stats["runs"]
    for got, want in [(x * 1.5, a.astype(np.float32) * np.float32(1.5)),
                      (x[1:] + x[:-1], a[1:].astype(np.float32) + a[:-1].astype(np.float32))]:
        assert got.dtype == em.bfloat16
        np.testing.assert_array_equal(got.cpu().numpy().view(np.uint16),
                                      want.astype(BF16).view(np.uint16))   # rounded once
    assert cuda_eager.stats["runs"] - before == 2
    assert "ember_eager_mul_bfloat16_2_p_c" in _launched(emu_gpu, "ember_eager_")


class _NoDLPack(np.ndarray):
    def __dlpack__(self, *args, **kwargs):
        raise NotImplementedError("CuPy does not support bfloat16 export")


def test_dlpack_export_a_library_cannot_make_is_a_dtype_error():
    t = em.from_numpy(np.ones(3, BF16).view(_NoDLPack))
    with pytest.raises(DTypeError, match="bfloat16 tensor cannot be exported.*does not sup"):
        t.__dlpack__()


def test_cupy_from_dlpack_of_bfloat16_without_support_names_what_is_needed():
    rt = cuda_mod.CuPyRuntime.__new__(cuda_mod.CuPyRuntime)    # NOTE: no CuPy needed
    rt.cupy = types.SimpleNamespace(from_dlpack=lambda ext: (_ for _ in ()).throw(
        NotImplementedError("CuPy does not support bfloat16 yet")))
    rt.bf16 = (False, "CuPy 13.6.0 has no bfloat16 dtype")
    with pytest.raises(TypeError, match="from_dlpack: .*CuPy >= 14.*CuPy 13.6.0"):
        rt.from_dlpack(object())
    rt.cupy.from_dlpack = lambda ext: (_ for _ in ()).throw(NotImplementedError("complex32"))
    with pytest.raises(NotImplementedError, match="complex32"):
        rt.from_dlpack(object())
