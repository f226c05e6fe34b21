"""Tests that need a real NVIDIA GPU and CuPy (``pip install 'ember[cuda]'``).

They skip with "no CUDA GPU/CuPy" everywhere else (CI). On a GPU machine run
``python -m pytest -q tests/cuda/test_gpu.py``: every OpInfo on ``cuda`` against the CPU
(forward and gradients, the stand-in sweep of ``test_fake_ops.py`` on the GPU), the
generated CUDA kernels run through ``cupy.RawModule`` against NumPy, the W1 training run
on ``cuda`` against the CPU, a compiled step, DLPack, streams/events and memory stats.
"""
import os

import numpy as np
import pytest

import ember as em
from ember.device.base import reset_cuda_backend


@pytest.fixture(scope="module")
def gpu():
    """The real cuda backend (never the stand-in), or a skip saying what is missing."""
    saved = os.environ.pop("EMBER_FAKE_CUDA", None)
    reset_cuda_backend()
    from ember.device.base import cuda_backend
    be, why = cuda_backend()
    if be is None or be.is_fake:
        reset_cuda_backend()
        if saved is not None:
            os.environ["EMBER_FAKE_CUDA"] = saved
        pytest.skip(f"no CUDA GPU/CuPy ({why})")
    yield be
    reset_cuda_backend()
    if saved is not None:
        os.environ["EMBER_FAKE_CUDA"] = saved


def test_arrays_live_in_cupy_memory(gpu):
    import cupy
    x = em.ones(1024, device="cuda")
    assert isinstance(x._data, cupy.ndarray) and x.device == em.device("cuda:0")
    assert em.cuda.memory_allocated() >= 4096
    assert em.cuda.memory_reserved() >= em.cuda.memory_allocated()
    del x
    em.cuda.empty_cache()
    assert em.cuda.get_device_capability() >= (7, 0)


def test_nvtx_ranges_reach_cupy_on_the_gpu(gpu, monkeypatch):
    """On a GPU the ranges and marks go to NVTX through CuPy (when its NVTX is there)."""
    from cupy.cuda import nvtx as cupy_nvtx
    if not getattr(cupy_nvtx, "available", False):
        pytest.skip("this CuPy has no NVTX")
    calls = []
    for name in ("RangePush", "RangePop", "Mark"):
        monkeypatch.setattr(cupy_nvtx, name, lambda *a, _n=name: calls.append((_n,) + a))
    with em.cuda.nvtx.range("step {}", 1):
        em.cuda.nvtx.mark("m")
    assert calls == [("RangePush", "step 1"), ("Mark", "m"), ("RangePop",)]


def _sweep_names():
    from test_fake_ops import _BY_NAME
    return sorted(_BY_NAME)


@pytest.mark.parametrize("name", _sweep_names())
def test_opinfo_on_the_gpu_matches_cpu(gpu, name):
    from test_fake_ops import _BY_NAME, _forward, _gradients
    info = _BY_NAME[name]
    _forward(info, "float32")
    if info.grad:
        _gradients(info)


def _kernels():
    from test_nvrtc import _reductions, _rows_kernels
    # NOTE: CuPy has no bfloat16 dtype: the bfloat16 kernels are compiled (test_nvrtc) only
    return [k for d in (em.float32, em.float64, em.int64) for k in _reductions(d)] + [
        k for k in _rows_kernels() if all(s.dtype is not em.bfloat16 for s in k.inputs)]


@pytest.mark.parametrize("strategy", ["block", "thread", "warp"])
def test_generated_cuda_kernels_match_numpy(gpu, strategy):
    import cupy
    from ember.codegen.cuda_launch import CudaKernel
    rng = np.random.default_rng(0)
    for k in _kernels():
        arrays = [rng.standard_normal(tuple(k.shape)).astype(s.dtype.np) if
                  s.dtype.is_floating_point else rng.integers(-9, 9, tuple(k.shape))
                  for s in k.inputs]
        got = CudaKernel(k, strategy)(*[cupy.asarray(a) for a in arrays])
        want = _numpy_reduction(k, arrays)
        np.testing.assert_allclose(cupy.asnumpy(got[0]).astype(np.float64), want,
                                   rtol=2e-3, atol=2e-3, err_msg=k.name)


def _numpy_reduction(k, arrays):
    x = arrays[0].astype(np.float64)
    axes = tuple(range(len(k.shape) - k.naxes, len(k.shape)))
    if k.name == "softmax":
        e = np.exp(x - x.max(axes, keepdims=True))
        return e / e.sum(axes, keepdims=True)
    if k.name == "layer_norm":
        mu = x.mean(axes, keepdims=True)
        var = ((x - mu) ** 2).mean(axes, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * arrays[1]
    if k.name == "norm_rows":
        return np.sqrt((x * x).sum(axes))
    if k.name == "amax_strided":
        return np.abs(x).max(axes)
    kind = k.stages[0].kind
    return {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}[kind](x, axes)


def test_elementwise_gelu_kernel_matches_numpy(gpu):
    import cupy
    from ember.codegen.cuda_launch import CudaKernel
    from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, call
    x = Load(0)
    k = Kernel([InputSpec(em.float32, (0, 1))], OutSpec(em.float32, (3, 1000)),
               0.5 * x * (1 + call("tanh", 0.79788456 * (x + 0.044715 * x ** 3))))
    a = np.linspace(-4, 4, 1000, dtype=np.float32).reshape(1, 1000)
    (y,) = CudaKernel(k)(cupy.asarray(a))
    want = 0.5 * a * (1 + np.tanh(0.79788456 * (a + 0.044715 * a ** 3)))
    np.testing.assert_allclose(cupy.asnumpy(y), np.broadcast_to(want, (3, 1000)), rtol=1e-5,
                               atol=1e-6)


def test_w1_training_on_cuda_matches_cpu(gpu):
    """W1 (the MLP on digits) without dropout: the same losses on cuda as on the CPU."""
    from ember.training import models
    from ember.training.datasets import load_dataset
    from ember.training.loop import TrainConfig
    train_ds, _, info = load_dataset(TrainConfig(model="mlp", dataset="digits"))
    x = em.stack([train_ds[i][0] for i in range(256)])
    y = em.tensor([int(train_ds[i][1]) for i in range(256)])
    res = {}
    for dev in ("cpu", "cuda"):
        em.manual_seed(0)
        m = models.mlp(info["features"], info["classes"], dropout=0.0).to(dev)
        opt = em.optim.AdamW(m.parameters(), lr=3e-3)
        xs, ys, out = x.to(dev), y.to(dev), []
        for _ in range(20):
            loss = em.nn.functional.cross_entropy(m(xs), ys)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(float(loss))
        res[dev] = out
    np.testing.assert_allclose(res["cuda"], res["cpu"], rtol=1e-4)


def test_compiled_step_on_the_gpu_matches_cpu(gpu):
    from test_fake_device import _compiled_losses
    want, _ = _compiled_losses("cpu")
    got, report = _compiled_losses("cuda")
    assert "skipped (no host kernels on the device)" in report
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_dlpack_shares_memory_with_cupy(gpu):
    import cupy
    c = cupy.arange(6, dtype=cupy.float32)
    t = em.from_dlpack(c)
    assert t.device.type == "cuda"
    c[0] = 42
    assert t[0].item() == 42.0
    back = cupy.from_dlpack(t)
    back[1] = 7
    assert t[1].item() == 7.0


def test_events_time_gpu_work_and_streams_order_it(gpu):
    a, b = em.cuda.Event(enable_timing=True), em.cuda.Event(enable_timing=True)
    x = em.randn(1024, 1024, device="cuda")
    s = em.cuda.Stream()
    a.record()
    with em.cuda.stream(s):
        y = x @ x
    s.synchronize()
    b.record()
    b.synchronize()
    assert a.elapsed_time(b) > 0 and float((y - (x @ x)).abs().max()) < 1e-2


def test_pinned_batches(gpu):
    ds = em.utils.data.TensorDataset(em.arange(8.0))
    (b,) = next(iter(em.utils.data.DataLoader(ds, batch_size=4, pin_memory=True)))
    assert b.is_pinned()
    assert b.to("cuda", non_blocking=True).cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def _module_names():
    from test_fake_modules import CASES
    return sorted(CASES)


@pytest.mark.parametrize("name", _module_names())
def test_layer_on_the_gpu_matches_cpu(gpu, name):
    from test_fake_modules import CASES, run
    make, arrays = CASES[name]
    want, _ = run("cpu", make, arrays)
    got, outs = run("cuda", make, arrays)
    assert all(o.device == em.device("cuda:0") for o in outs)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=name)
