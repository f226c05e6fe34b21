"""Vectorised elementwise kernels, eager GPU kernels and the saved attention LSE on a real
GPU (skip: "no CUDA GPU/CuPy"). The same checks run on the CPU emulator in
``test_cuda_vector_emu.py``, ``test_cuda_eager_emu.py`` and ``test_cuda_attention_emu.py``;
here the kernels run through NVRTC, the driver and CuPy.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_attention, cuda_eager, eager_composite
from ember.codegen.cuda_launch import CudaKernel
from test_cuda_vector_emu import DTYPES, _kernel, _want
from _cuda_emu import sample as _sample
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

F = em.nn.functional


@pytest.mark.parametrize("d", [d for d in DTYPES if d.name != "bfloat16"], ids=str)
def test_both_entry_points_equal_numpy(gpu, d):  # noqa: F811
    import cupy
    rng = np.random.default_rng(0)
    # NOTE: NVRTC contracts x * y + x into one FMA (the emulator and NumPy round twice)
    tol = {"float32": 1e-6, "float64": 1e-15, "float16": 2e-3}.get(d.name, 0)
    for n in (1, 5, 1023, 4097, 1 << 20):
        k = _kernel(d, f"g_{d.name}", n)
        a, b = _sample(d, n + 1, rng), _sample(d, n + 1, rng)
        da, db = cupy.asarray(a), cupy.asarray(b)
        for (x, y), (dx, dy) in (((a[:n], b[:n]), (da[:n], db[:n])),      # aligned
                                 ((a[1:], b[:n]), (da[1:], db[:n])),      # misaligned
                                 ((a[:n], b[0]), (da[:n], db[0]))):       # a 0-d operand
            got = CudaKernel(k)(dx, dy)
            for g, w in zip(got, _want(k, [x, y], (n,))):
                g = cupy.asnumpy(g)
                if g.dtype.kind == "f":
                    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                               rtol=tol, atol=tol)
                else:                                     # ints, bools, x > y: exact
                    np.testing.assert_array_equal(g, w)


def test_eager_ops_take_the_generated_kernels(gpu):  # noqa: F811
    rng = np.random.default_rng(1)
    a = rng.standard_normal(cuda_eager.THRESHOLD + 5).astype(np.float32)
    x = em.tensor(a, device="cuda")
    runs = cuda_eager.stats["runs"]
    np.testing.assert_array_equal((x * 2).cpu().numpy(), a * 2)
    np.testing.assert_array_equal(x.clone().cpu().numpy(), a)
    np.testing.assert_array_equal((x[1:] + x[:-1]).cpu().numpy(), a[1:] + a[:-1])
    np.testing.assert_allclose(em.exp(x).cpu().numpy(), np.exp(a.astype(np.float64)),
                               rtol=2 * 2 ** -23)
    assert cuda_eager.stats["runs"] == runs + 4


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_eager_gelu_runs_its_compiled_form(gpu, approximate):  # noqa: F811
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((256, 1024)).astype(np.float32)
    got = []
    runs = eager_composite.stats["runs"]
    for dev in ("cuda", "cpu"):
        x = em.tensor(x0, device=dev, requires_grad=True)
        for _ in range(4):
            x.grad = None
            y = F.gelu(x, approximate=approximate)
            (y * y).sum().backward()
        got.append((y.detach().cpu().numpy(), x.grad.cpu().numpy()))
    assert eager_composite.stats["runs"] > runs
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0][1], got[1][1], rtol=1e-4, atol=1e-5)


def test_attention_backward_reuses_the_forward_lse(gpu):  # noqa: F811
    rng = np.random.default_rng(3)
    q0 = rng.standard_normal((2, 4, 128, 64)).astype(np.float32)
    grads = []
    reused = cuda_attention.stats["lse_reused"]
    for dev in ("cuda", "cpu"):
        q = em.tensor(q0, device=dev, requires_grad=True)
        F.scaled_dot_product_attention(q, q * 0.5, q, is_causal=True).sum().backward()
        grads.append(q.grad.cpu().numpy())
    assert cuda_attention.stats["lse_reused"] == reused + 1 and not cuda_attention._saved
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-3, atol=1e-4)
