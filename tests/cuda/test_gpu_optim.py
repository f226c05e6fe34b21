"""The default SGD/Adam/AdamW step's generated CUDA kernels on a real GPU (skip: "no CUDA
GPU/CuPy"); the emulator runs the same checks in ``test_cuda_optim_emu.py``.

The kernels' arithmetic is CUDA's correctly rounded, never-contracted intrinsics on scalars
NumPy converted, so a step equals the CPU's C loop bit for bit (NaN payloads aside) and
the unfused CuPy passes within float32 rounding (CuPy may convert a Python scalar
differently from NumPy).
"""
import numpy as np
import pytest

from ember.codegen import cuda_optim
from ember.codegen import optim_kernels as K
from test_cuda_optim_emu import CASES, _run, _same_bits
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_update_kernel_equals_cpu_loop(gpu, name, dtype):  # noqa: F811
    prev = K.set_enabled(True)
    try:
        before = cuda_optim.stats["launches"]
        got = _run(CASES[name], True, dtype, "cuda")
        assert cuda_optim.stats["launches"] > before
        _same_bits(got, _run(CASES[name], True, dtype, "cpu"))
        passes = _run(CASES[name], False, dtype, "cuda")
    finally:
        K.set_enabled(prev)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    for a, b in zip(got, passes):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_gpu_adamw_large_parameter(gpu):  # noqa: F811
    import ember
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1 << 20) + 3).astype(np.float32)
    ps = [ember.nn.Parameter(ember.tensor(w, device=d)) for d in ("cuda", "cpu")]
    opts = [ember.optim.AdamW([p], lr=1e-3, weight_decay=0.1) for p in ps]
    for _ in range(3):
        g = rng.standard_normal(w.shape).astype(np.float32)
        for p, o in zip(ps, opts):
            p.grad = ember.tensor(g, device=p.device.type)
            o.step()
    np.testing.assert_array_equal(ps[0].detach().cpu().numpy(), ps[1].detach().numpy())


@pytest.mark.parametrize("bad", [False, True], ids=["finite", "inf-nan"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_gpu_unscale_equals_the_c_loop_bitwise(gpu, dtype, bad):  # noqa: F811
    """GradScaler's unscale of CuPy gradients (one ``unscale`` launch; float16 and a
    strided view: CuPy's passes): the CPU loop's bits and flag."""
    import cupy
    from ember.amp._unscale_kernels import unscale_group_gpu, unscale_numpy
    from test_cuda_optim_emu import _scaled_grads
    inv = np.float32(1.0 / 4096.0)
    want = _scaled_grads(dtype, bad)
    want_bad = unscale_numpy(want, inv)
    got = [cupy.asarray(a) if a.flags.c_contiguous else cupy.asarray(a.base)[:, ::3]
           for a in _scaled_grads(dtype, bad)]
    before = cuda_optim.stats["launches"]
    assert unscale_group_gpu(cupy, got, inv, True) is want_bad is bad
    assert cuda_optim.stats["launches"] - before == int(dtype != np.float16)
    _same_bits([cupy.asnumpy(a) for a in got], want)


def test_gpu_grad_scaler_step(gpu):  # noqa: F811
    """A GradScaler("cuda") loop with an overflowed batch: one unscale launch a step, the
    step skipped and the scale backed off as on the CPU; the parameters within float32
    rounding of the CPU's (CuPy's tanh is not NumPy's)."""
    from test_cuda_optim_emu import _scaler_run
    prev = K.set_enabled(True)
    try:
        got, scale, launches = _scaler_run("cuda")
    finally:
        K.set_enabled(prev)
    want, want_scale, _ = _scaler_run("cpu")
    assert launches == [2, 1, 2] and scale == want_scale == 2.0 ** 9
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
