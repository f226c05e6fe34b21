"""A compiled GPU graph's CPU scalars on a real GPU (skip: "no CUDA GPU/CuPy"); the stand-in
runs the same paths in ``test_host_scalars.py``.

Optimizer step counts stay on the host: a compiled AdamW step equals eager, its step counts
are CPU tensors computed without a device copy, and a compiled call returns while the GPU
is still busy (no device-to-host copy or pageable upload waiting for the stream).
"""
import numpy as np

import ember as em
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


def _train(compiled: bool, steps: int = 4):
    em.manual_seed(0)
    model = em.nn.Sequential(em.nn.Linear(64, 256), em.nn.GELU(), em.nn.Linear(256, 8))
    model = model.cuda()
    opt = em.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = em.randn(128, 64, device="cuda"), em.randn(128, 8, device="cuda")

    def step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    fn = em.compile(step) if compiled else step
    for _ in range(steps):
        fn(x, y)
    return model, opt, fn


def test_gpu_compiled_adamw_keeps_step_counts_on_the_host(gpu):  # noqa: F811
    want, _, _ = _train(False)
    got, opt, fn = _train(True)
    # NOTE: fused kernels vs eager's ops round differently (ulps in the gradients), which
    # Adam's m / sqrt(v) carries into the update: four steps of lr 1e-2 stay within these
    for a, b in zip(got.parameters(), want.parameters()):
        np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().cpu().numpy(),
                                   rtol=1e-4, atol=1e-5)
    for p in opt.state:
        assert opt.state[p]["step"].device.type == "cpu"
        assert float(opt.state[p]["step"]) == 4.0
    prog = [e for e in fn._cache.values() if not e.eager and e.program is not None][-1].program
    assert prog._host and not prog._host_inputs


def test_gpu_compiled_call_with_cpu_scalars_does_not_wait_for_the_gpu(gpu):  # noqa: F811
    import cupy
    w = em.ones(1 << 20, device="cuda")
    s = em.zeros((), dtype=em.float32)

    def f(w):
        s.add_(1)
        return w * (s * 2.0).to(em.float32)
    fn = em.compile(f)
    for _ in range(3):
        fn(w)
    cupy.cuda.get_current_stream().synchronize()
    a = cupy.ones((4096, 4096), cupy.float32)
    for _ in range(20):             # ~20 x 137 GFLOP: tens of ms of GPU work queued
        a = a @ a * np.float32(1e-3)
    out = fn(w)
    busy = not cupy.cuda.get_current_stream().done
    cupy.cuda.get_current_stream().synchronize()
    assert busy, "the compiled call waited for the GPU (a D2H copy or a synchronous upload)"
    np.testing.assert_array_equal(out.cpu().numpy()[:4], np.full(4, 8.0, np.float32))
