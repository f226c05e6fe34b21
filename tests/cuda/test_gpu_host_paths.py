"""Issue 21's host-path changes on a real GPU (skip: "no CUDA GPU/CuPy"). Run:
``python -m pytest -q tests/cuda/test_gpu_host_paths.py``.

Replayed fused launches pass a broadcast operand (a bias row, a per-row column) as the
array itself and a number as its cached device copy (the kernel reads pointers
only); a device graph's views run inside their one reader (``graph/view_chains.py``); the
attention backward's stride arrays are made once per layout. Each compiled call (first,
replayed, replayed on new values) must equal the same function run eagerly on the GPU.
"""
import numpy as np

import ember as em
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


def _f(x, w, b, c):
    h = (x.reshape(4, 2, 64, 32).permute(0, 2, 1, 3).reshape(4, 64, 64) @ w.t()) + b
    h = (h * c - 0.5).relu()
    q = h.reshape(4, 64, 2, 48)[:, :, 0].reshape(4 * 64, 48)
    k = h.reshape(4, 64, 2, 48)[:, :, 1].reshape(4 * 64, 48)
    return (q * k).sum(-1), h.permute(2, 0, 1).reshape(96, 256)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    mk = lambda *s: em.tensor(rng.standard_normal(s).astype(np.float32), device="cuda")
    return mk(4, 128, 32), mk(96, 64), mk(96), mk(4, 64, 1)


def test_compiled_views_and_broadcast_operands_equal_eager(gpu):  # noqa: F811
    fn = em.compile(_f)
    for seed in (0, 0, 1, 2):
        args = _inputs(seed)
        for g, e in zip(fn(*args), _f(*args)):
            np.testing.assert_allclose(g.cpu().numpy(), e.cpu().numpy(), rtol=1e-5,
                                       atol=1e-5)


def test_attention_backward_twice_per_layout_equals_the_first(gpu):  # noqa: F811
    import ember.nn.functional as F
    from ember.codegen import cuda_attention as ca
    rng = np.random.default_rng(0)
    q0, k0, v0 = (rng.standard_normal((2, 4, 128, 64)).astype(np.float16) for _ in range(3))
    grads = []
    for _ in range(3):
        q, k, v = (em.tensor(a, device="cuda", requires_grad=True) for a in (q0, k0, v0))
        F.scaled_dot_product_attention(q, k, v, is_causal=True).float().sum().backward()
        grads.append([t.grad.cpu().numpy() for t in (q, k, v)])
    assert ca._stride_arrays
    for later in grads[1:]:
        for a, b in zip(grads[0], later):
            np.testing.assert_array_equal(a, b)
