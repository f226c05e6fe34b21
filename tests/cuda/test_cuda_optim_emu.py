"""The default SGD/Adam/AdamW step on ``cuda``: one generated CUDA kernel per parameter.

The kernels (``codegen/cuda_optim.py``) are rendered from the same per-element steps as
the CPU's C loops (``codegen/optim_kernels.py``) and run here from their text on the
emulator (``_cuda_emu``): each case runs the same steps with the kernels on and off (off:
the optimizers' array passes) and on the CPU, and compares bitwise — NaN/Inf gradients,
zero-size and 0-d parameters, both float dtypes; the step count and the state's version
counters move as before. NVRTC's PTX of the kernels holds no fused multiply-add.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import ember
from ember.codegen import cuda_optim, nvrtc
from ember.codegen import optim_kernels as K

import _cuda_emu
from test_cuda_fusion_emu import _launched, emu_gpu  # noqa: F401 - the fixture

SHAPES = [(37, 5), (300,), (3, 0), ()]
CASES = {
    "adam": lambda ps: ember.optim.Adam(ps, lr=1e-2),
    "adam_l2_maximize": lambda ps: ember.optim.Adam(ps, lr=1e-2, weight_decay=0.1,
                                                    maximize=True, betas=(0.3, 0.9)),
    "adam_lerp_upper": lambda ps: ember.optim.Adam(ps, lr=1e-2, betas=(0.4, 0.99), eps=1e-3),
    "adamw": lambda ps: ember.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "sgd": lambda ps: ember.optim.SGD(ps, lr=0.1),
    "sgd_momentum_wd_damp": lambda ps: ember.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                       dampening=0.1, weight_decay=0.01),
    "sgd_nesterov_maximize": lambda ps: ember.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                        nesterov=True, maximize=True),
}
emu = pytest.mark.skipif(not _cuda_emu.available(),
                         reason="no g++ with C++20 <barrier> to run the CUDA text on")


@pytest.fixture
def kernels_on(monkeypatch):
    monkeypatch.setattr(cuda_optim, "_module", {})     # NOTE: loaded by this test's loader
    prev = K.set_enabled(True)
    yield
    K.set_enabled(prev)


def _run(make, on, dtype, device, steps=3):
    K.set_enabled(on)
    rng = np.random.default_rng(1)
    ps = [ember.nn.Parameter(ember.tensor(rng.standard_normal(s).astype(dtype),
                                          device=device)) for s in SHAPES]
    opt = make(ps)
    for i in range(steps):
        for p in ps:
            g = rng.standard_normal(p.shape).astype(dtype)
            if i == 1 and g.size > 1:
                g.flat[0], g.flat[-1] = np.nan, -np.inf
            p.grad = ember.tensor(g, device=device)
        opt.step()
    state = [v.cpu().numpy().copy() for p in ps for v in opt.state[p].values()
             if isinstance(v, ember.Tensor)]
    return [p.detach().cpu().numpy().copy() for p in ps] + state


def _same_bits(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y, strict=True)
        num = ~np.isnan(x)
        assert np.array_equal(np.signbit(x[num]), np.signbit(y[num]))


@emu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_update_kernel_equals_the_passes_bitwise(emu_gpu, kernels_on, name, dtype):
    before = cuda_optim.stats["launches"]
    fast = _run(CASES[name], True, dtype, "cuda")
    kind = "adam" if name.startswith("adam") else "sgd"
    suffix = "f32" if dtype == np.float32 else "f64"
    # 3 steps x 3 non-empty parameters (SGD's first momentum step makes the buffer: passes)
    want = 3 * (2 if "momentum" in name or "nesterov" in name else 3)
    assert cuda_optim.stats["launches"] - before == want
    assert f"ember_cuda_{kind}_{suffix}" in _launched(emu_gpu, "ember_cuda_")
    slow = _run(CASES[name], False, dtype, "cuda")
    _same_bits(fast, slow)
    cpu = _run(CASES[name], True, dtype, "cpu")
    _same_bits(fast, cpu)


@emu
def test_cuda_update_keeps_step_count_and_versions(emu_gpu, kernels_on):
    p = ember.nn.Parameter(ember.randn(200, device="cuda"))
    opt = ember.optim.AdamW([p], lr=1e-2)
    for _ in range(2):
        p.grad = ember.randn(200, device="cuda")
        opt.step()
    st = opt.state[p]
    assert st["step"].item() == 2 and st["step"].device.type == "cpu"
    v0 = (p._storage.version, st["exp_avg"]._storage.version,
          st["exp_avg_sq"]._storage.version)
    before = cuda_optim.stats["launches"]
    opt.step()
    assert cuda_optim.stats["launches"] == before + 1 and st["step"].item() == 3
    v1 = (p._storage.version, st["exp_avg"]._storage.version,
          st["exp_avg_sq"]._storage.version)
    assert all(b > a for a, b in zip(v0, v1))


@emu
def test_cuda_amsgrad_and_non_contiguous_take_the_passes(emu_gpu, kernels_on):
    p = ember.nn.Parameter(ember.randn(40, 8, device="cuda"))
    q = ember.nn.Parameter(ember.randn(40, 8, device="cuda"))
    opt = ember.optim.Adam([p], lr=1e-2, amsgrad=True)
    opt2 = ember.optim.Adam([q], lr=1e-2)
    before = cuda_optim.stats["launches"]
    for _ in range(2):
        p.grad = ember.randn(40, 8, device="cuda")
        q.grad = ember.randn(8, 40, device="cuda").t()
        opt.step()
        opt2.step()
    assert cuda_optim.stats["launches"] == before
    assert np.isfinite(p.detach().cpu().numpy()).all()


@pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                    reason="NVRTC or the CUDA headers are not installed")
def test_cuda_update_ptx_has_no_fma():
    ptx = nvrtc.compile_ptx(cuda_optim.source(), "ember_cuda_optim")
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    assert entries == {f"ember_cuda_{k}_{s}" for k in ("sgd", "adam") for s in ("f32", "f64")}
    assert "fma" not in ptx and "mul.rn.f32" in ptx and "sqrt.rn.f64" in ptx


def test_cuda_kernels_share_the_c_loops_steps():
    src, c = cuda_optim.source(), K.source()
    assert K.ADAM_STEP in src and K.ADAM_STEP in c
    assert K.SGD_STEP in src and K.SGD_STEP in c
