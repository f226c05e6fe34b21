"""Eager composites under float16 CUDA autocast on a real GPU (skip: "no CUDA GPU/CuPy").

The emulator runs the same checks on small shapes (``test_cuda_amp_emu.py``); here the
fused kernels go through NVRTC and CuPy, plus a GPT-head-sized loss (float16 logits, the
float32 cast traced into the loss's kernels) against the op-by-op path.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import eager_composite
from test_cuda_amp_emu import CASES, _calls
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

F = em.nn.functional


@pytest.mark.parametrize("case", sorted(CASES))
def test_autocast_composites_compiled_on_the_gpu(gpu, case):  # noqa: F811
    y, g, runs = _calls(case, True)
    assert runs == 2
    y0, g0, _ = _calls(case, False)
    assert y.dtype == y0.dtype and g.dtype == g0.dtype
    want, gw = y0.cpu().detach().float().numpy(), g0.cpu().float().numpy()
    # NOTE: float16 outputs (GELU) round once here, every op there: one float16 step apart
    tol = 1e-5 if y.dtype == em.float32 else 2 ** -10
    np.testing.assert_allclose(y.cpu().detach().float().numpy(), want, rtol=tol,
                               atol=tol * np.abs(want).max())
    gtol = 1e-4 if g.dtype == em.float32 else 2 ** -8
    np.testing.assert_allclose(g.cpu().float().numpy(), gw, rtol=gtol,
                               atol=gtol * np.abs(gw).max())


def test_gpt_head_sized_loss_under_autocast(gpu):  # noqa: F811
    """(2048, 50257) float16 logits: one compiled call (cast + log-softmax + nll, forward
    and backward) vs the cast and the ops one by one."""
    rng = np.random.default_rng(0)
    x = em.tensor(rng.standard_normal((2048, 50257)).astype(np.float16), device="cuda")
    t = em.tensor(rng.integers(0, 50257, 2048), device="cuda")
    out = {}
    for fast in (True, False):
        prev = eager_composite.set_enabled(fast)
        runs = eager_composite.stats["runs"]
        try:
            xl = x.detach().requires_grad_()
            for _ in range(eager_composite.WARMUP + 2):
                xl.grad = None
                with em.autocast("cuda", dtype=em.float16):
                    loss = F.cross_entropy(xl, t)
                loss.backward()
        finally:
            eager_composite.set_enabled(prev)
        assert (eager_composite.stats["runs"] - runs == 2) == fast
        assert loss.dtype == em.float32 and xl.grad.dtype == em.float16
        out[fast] = (loss.item(), xl.grad.cpu().float().numpy())
    assert abs(out[True][0] - out[False][0]) <= 1e-5 * abs(out[False][0])
    # NOTE: most gradients (~1 / (50257 * 2048)) are float16 subnormals: one step 2^-24
    np.testing.assert_allclose(out[True][1], out[False][1], rtol=2 ** -10, atol=2 ** -24)
