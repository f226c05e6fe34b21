"""This session's GPU-facing additions on a real GPU (CuPy): ``save_on_cpu`` (pageable and
pinned) keeps a step's saved activations in host memory with the plain step's gradients,
and ``sdpa_kernel`` switches attention between the FlashAttention kernels and the CuPy
composite with the same results. Skips with "no CUDA GPU/CuPy" elsewhere (the stand-in
versions: ``test_saved_hooks_device.py``, ``tests/test_dropin_utils.py``)."""
import contextlib

import numpy as np
import pytest
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

import ember as em


def _step(model, x, hooks):
    with hooks:
        loss = model(x).square().mean()
    em.cuda.synchronize()
    during = em.cuda.memory_allocated()
    loss.backward()
    grads = [p.grad.cpu().numpy().copy() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return during, grads


@pytest.mark.parametrize("pin", [False, True])
def test_save_on_cpu_offloads_and_keeps_gradients(gpu, pin):
    em.manual_seed(0)
    model = em.nn.Sequential(*[em.nn.Sequential(em.nn.Linear(512, 512), em.nn.GELU())
                               for _ in range(4)]).cuda()
    x = em.randn(256, 512, device="cuda")
    base = em.cuda.memory_allocated()
    plain, want = _step(model, x, contextlib.nullcontext())
    offloaded, got = _step(model, x, em.autograd.graph.save_on_cpu(pin_memory=pin))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # four layers save (256, 512) float32 activations twice each: ~4 MB on the device plain
    assert offloaded - base < (plain - base) / 2, (offloaded - base, plain - base)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_sdpa_kernel_math_and_flash_agree(gpu, dtype):
    from ember.nn.attention import SDPBackend, sdpa_kernel
    em.manual_seed(1)
    dt = getattr(em, dtype)
    q, k, v = (em.randn(2, 4, 128, 64, device="cuda", dtype=dt, requires_grad=True)
               for _ in range(3))

    def run():
        out = em.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.float().square().sum().backward()
        res = [t.detach().float().cpu().numpy() for t in (out, q.grad, k.grad, v.grad)]
        for t in (q, k, v):
            t.grad = None
        return res
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        flash = run()
    with sdpa_kernel(SDPBackend.MATH):
        math = run()
    tol = 2e-2 if dtype == "float16" else 1e-4
    for a, b in zip(flash, math):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
