"""Eager composites under float16 CUDA autocast run fused CUDA kernels (emulated GPU).

On the stand-in given a GPU's ``cuda_kernels`` (its CUDA text run by ``_cuda_emu``), an
``F.layer_norm`` / ``F.cross_entropy`` / ``F.gelu`` call inside ``ember.autocast("cuda")``
applies its op's CUDA policy at the boundary (layer norm and the loss: float32; GELU: its
input's float16) and runs its compiled graph's kernels — not ~10 CuPy-style ops plus casts —
with the op-by-op path's values to float32 rounding (float16 outputs: float32 rounded once).
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import eager_composite

import _cuda_emu
from test_cuda_fusion_emu import _launched, emu_gpu  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")
F = em.nn.functional
ROWS, COLS = 64, 512          # 32K elements: the eager composites' size gate
TGT = np.random.default_rng(3).integers(0, COLS, ROWS)

CASES = {   # name -> (call, input dtype, output dtype under float16 autocast)
    "layer_norm_f32": (lambda x, w: F.layer_norm(x, (COLS,), w), "float32", "float32"),
    "layer_norm_f16": (lambda x, w: F.layer_norm(x, (COLS,), w), "float16", "float32"),
    "cross_entropy_f16": (lambda x, w: F.cross_entropy(x * w, em.tensor(TGT, device=x.device)),
                          "float16", "float32"),
    "gelu_tanh_f16": (lambda x, w: F.gelu(x, approximate="tanh"), "float16", "float16"),
}


def _calls(case, fast, amp=True, n=eager_composite.WARMUP + 2):
    """(output, x.grad) of the last of ``n`` calls (the compiled form from call 3)."""
    fn, dtype, _ = CASES[case]
    a = np.random.default_rng(1).standard_normal((ROWS, COLS)).astype(np.float32)
    x = em.tensor(a, device="cuda").to(getattr(em, dtype))
    x = (x if amp else x.float()).detach().requires_grad_()     # the same values either way
    w = em.tensor(np.linspace(0.5, 1.5, COLS, dtype=np.float32), device="cuda")
    prev = eager_composite.set_enabled(fast)
    runs = eager_composite.stats["runs"]
    try:
        for _ in range(n):
            x.grad = None
            with em.autocast("cuda", dtype=em.float16, enabled=amp):
                y = fn(x, w)
            (y.float() * y.float()).sum().backward()
    finally:
        eager_composite.set_enabled(prev)
    return y, x.grad, eager_composite.stats["runs"] - runs


@pytest.mark.parametrize("case", sorted(CASES))
def test_autocast_composites_run_fused_cuda_kernels(emu_gpu, case):
    y, g, runs = _calls(case, True)
    assert runs == 2 and _launched(emu_gpu, "ember_fused_")
    y0, g0, runs0 = _calls(case, False)
    assert runs0 == 0
    out_dtype = CASES[case][2]
    assert y.dtype.name == y0.dtype.name == out_dtype and g.dtype == g0.dtype
    if out_dtype == "float32":
        np.testing.assert_allclose(y.cpu().detach().numpy(), y0.cpu().detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
        gw = g0.cpu().float().numpy()
        np.testing.assert_allclose(g.cpu().float().numpy(), gw,
                                   rtol=1e-4 if g.dtype == em.float32 else 2 ** -10,
                                   atol=1e-5 * np.abs(gw).max())
    else:
        # NOTE: one kernel computes in float32 and rounds once; op by op every float16 op
        # rounds: compare with float32 rounded once (half a float16 step, 2^-11 relative)
        y32, _, _ = _calls(case, False, amp=False)
        want = y32.cpu().detach().numpy()
        np.testing.assert_allclose(y.cpu().detach().float().numpy(), want, rtol=2 ** -11,
                                   atol=1e-6)
