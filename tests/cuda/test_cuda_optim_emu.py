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
@pytest.mark.parametrize("many", [False, True], ids=["one", "many"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_update_kernel_equals_the_passes_bitwise(emu_gpu, kernels_on, monkeypatch, name,
                                                      dtype, many):
    monkeypatch.setattr(cuda_optim, "MANY", many)
    before = dict(cuda_optim.stats)
    fast = _run(CASES[name], True, dtype, "cuda")
    kind = "adam" if name.startswith("adam") else "sgd"
    suffix = "f32" if dtype == np.float32 else "f64"
    # 3 steps x 3 non-empty parameters (SGD's first momentum step makes the buffer: passes);
    # many: one launch a step for the step's parameters
    steps = 2 if "momentum" in name or "nesterov" in name else 3
    assert cuda_optim.stats["launches"] - before["launches"] == (steps if many else 3 * steps)
    assert cuda_optim.stats["records"] - before["records"] == (3 * steps if many else 0)
    assert f"ember_cuda_{kind}_{suffix}{'_m' if many else ''}" in _launched(emu_gpu,
                                                                          "ember_cuda_")
    slow = _run(CASES[name], False, dtype, "cuda")
    _same_bits(fast, slow)
    cpu = _run(CASES[name], True, dtype, "cpu")
    _same_bits(fast, cpu)


@emu
@pytest.mark.parametrize("opt_name", ["adamw", "sgd_momentum_wd_damp"])
def test_cuda_many_update_matches_one_launch_each(emu_gpu, kernels_on, monkeypatch, opt_name):
    """A group whose parameters have different step counts (one joined later) is one
    launch per count; the bits equal one launch per parameter."""
    rng = np.random.default_rng(3)
    init = [rng.standard_normal(s).astype(np.float32) for s in [(70, 9), (5,), (1000,)]]
    grads = [[rng.standard_normal(x.shape).astype(np.float32) for x in init]
             for _ in range(4)]

    def run(many):
        monkeypatch.setattr(cuda_optim, "MANY", many)
        monkeypatch.setattr(cuda_optim, "_tables", {})
        ps = [ember.nn.Parameter(ember.tensor(x, device="cuda")) for x in init]
        opt = CASES[opt_name](ps)
        launches = []
        for i, gs in enumerate(grads):
            for j, (p, g) in enumerate(zip(ps, gs)):
                # parameter 2 gets no gradient in step 0: its step count lags behind
                p.grad = None if i == 0 and j == 2 else ember.tensor(g, device="cuda")
            before = cuda_optim.stats["launches"]
            opt.step()
            launches.append(cuda_optim.stats["launches"] - before)
        return [p.detach().cpu().numpy() for p in ps], launches

    one, l1 = run(False)
    many, lm = run(True)
    _same_bits(one, many)
    assert l1 == ([2, 3, 3, 3] if opt_name == "adamw" else [0, 2, 3, 3])
    if opt_name == "adamw":
        assert lm == [1, 2, 2, 2]     # parameters 0-1 at step k + 1, parameter 2 at step k
    else:   # step 0 makes 0-1's momentum buffers, step 1 2's (that step: one launch each)
        assert lm == [0, 2, 1, 1]


@emu
def test_cuda_many_update_reuses_its_table(emu_gpu, kernels_on):
    """The same pointers again (gradients kept between steps): no new device table."""
    ps = [ember.nn.Parameter(ember.randn(30, device="cuda")) for _ in range(3)]
    opt = ember.optim.AdamW(ps, lr=1e-2)
    for p in ps:
        p.grad = ember.randn(30, device="cuda")
    opt.step()
    table = cuda_optim._tables["ember_cuda_adam_f32_m"][1]
    opt.step()
    assert cuda_optim._tables["ember_cuda_adam_f32_m"][1] is table
    ps[1].grad = ember.randn(30, device="cuda")
    opt.step()
    assert cuda_optim._tables["ember_cuda_adam_f32_m"][1] is not table


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
    assert entries == {f"ember_cuda_{k}_{s}{m}" for k in ("sgd", "adam", "unscale")
                       for s in ("f32", "f64") for m in ("", "_m")}
    assert "fma" not in ptx and "mul.rn.f32" in ptx and "sqrt.rn.f64" in ptx


def test_cuda_kernels_share_the_c_loops_steps():
    src, c = cuda_optim.source(), K.source()
    assert K.ADAM_STEP in src and K.ADAM_STEP in c
    assert K.SGD_STEP in src and K.SGD_STEP in c


def _scaled_grads(dtype, bad):
    """Gradients of a few shapes (one strided view among them), inf/NaN in one if ``bad``."""
    rng = np.random.default_rng(9)
    gs = [(rng.standard_normal(s) * 1e3).astype(dtype) for s in [(70, 9), (5,), (1000,), (0,)]]
    gs.append((rng.standard_normal((8, 12)) * 1e3).astype(dtype)[:, ::3])
    if bad:
        gs[2][17], gs[0][3, 4] = np.inf, np.nan
    return gs


@emu
@pytest.mark.parametrize("bad", [False, True], ids=["finite", "inf-nan"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_cuda_unscale_kernel_equals_the_c_loop_bitwise(emu_gpu, kernels_on, dtype, bad):
    """GradScaler's unscale of a GPU's gradients: one ``unscale`` launch for the contiguous
    float32/float64 ones (float16 and the strided view: the array passes), the same bits
    and flag as the CPU's loop (``unscale_numpy``, the reference its C kernel is held to)."""
    from ember.amp._unscale_kernels import unscale_group_gpu, unscale_numpy
    inv = np.float32(1.0 / 4096.0)
    want = _scaled_grads(dtype, bad)
    want_bad = unscale_numpy(want, inv)
    got = _scaled_grads(dtype, bad)
    before = dict(cuda_optim.stats)
    assert unscale_group_gpu(np, got, inv, True) is want_bad is bad
    kernel = dtype != np.float16
    assert cuda_optim.stats["launches"] - before["launches"] == int(kernel)
    assert cuda_optim.stats["records"] - before["records"] == (3 if kernel else 0)
    if kernel:
        suffix = "f32" if dtype == np.float32 else "f64"
        assert f"ember_cuda_unscale_{suffix}_m" in _launched(emu_gpu, "ember_cuda_")
    _same_bits(got, want)


def _scaler_run(device):
    """``(parameters, final scale, launches of each scaler.step)`` of three GradScaler steps
    of a small MLP on ``device``, the second batch overflowing."""
    ember.manual_seed(0)
    model = ember.nn.Sequential(ember.nn.Linear(6, 5), ember.nn.Tanh(),
                                ember.nn.Linear(5, 3)).to(device)
    opt = ember.optim.SGD(model.parameters(), lr=0.1)
    scaler = ember.amp.GradScaler("cuda" if device == "cuda" else "cpu", init_scale=2.0 ** 10)
    rng = np.random.default_rng(4)
    launches = []
    for i in range(3):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        if i == 1:
            x[0, 0] = np.inf
        loss = model(ember.tensor(x, device=device)).square().sum()
        scaler.scale(loss).backward()
        before = cuda_optim.stats["launches"]
        scaler.step(opt)
        launches.append(cuda_optim.stats["launches"] - before)
        scaler.update()
        opt.zero_grad()
    return [p.detach().cpu().numpy() for p in model.parameters()], scaler.get_scale(), launches


@emu
def test_cuda_grad_scaler_step_unscales_in_one_launch(emu_gpu, kernels_on):
    """A GradScaler step on the device: one unscale launch for all the gradients, an
    overflowed batch skipped (the scale backs off), the parameters as on the CPU."""
    got, scale, launches = _scaler_run("cuda")
    want, want_scale, _ = _scaler_run("cpu")
    # the unscale and SGD's one launch; the overflowed step: the unscale only
    assert launches == [2, 1, 2] and scale == want_scale == 2.0 ** 9
    _same_bits(got, want)
