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
