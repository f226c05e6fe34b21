"""Philox draws generated on a real GPU (skip: "no CUDA GPU/CuPy"): the kernels' words,
uniforms and Bernoulli masks equal the NumPy Philox4x32-10 reference bit for bit (normals
within float32 rounding); a compiled dropout step draws its mask on the device (the
reference's mask of the generator's (seed, offset), new at every call, gradients
following it); under ``mode="reduce-overhead"`` it is captured and every replay draws the
default mode's next mask, bit for bit. The stand-in runs the same checks on the CUDA
emulator: ``test_cuda_philox_emu.py``, ``test_cuda_philox_graphs.py``.

Run: ``python3 -m pytest -q tests/cuda/test_gpu_philox.py``.
"""
import numpy as np

import ember as em
from ember.codegen import cuda_philox
from ember.graph.passes.fuse_philox import WORDS
from ember.graph.passes.philox import PHILOX
from test_cuda_philox_emu import ref_words
from test_cuda_philox_graphs import P, SHAPE, _program, _run
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


def test_gpu_kernels_match_the_reference(gpu):  # noqa: F811
    import cupy
    seed, off, n = 2**64 - 5, 2**32 - 7, (1 << 20) + 3       # offsets carry into word 1
    key = cupy.asarray(np.array([seed, off], np.uint64).view(np.int64))
    bits = cupy.zeros(n, cupy.uint32)
    grid = (min(-(-cuda_philox.counters(n) // cuda_philox.BLOCK), cuda_philox.MAX_BLOCKS),)
    cuda_philox.function("bits")(grid, (cuda_philox.BLOCK,), (key, bits, np.int64(n)))
    w = ref_words(seed, off, n)
    np.testing.assert_array_equal(cupy.asnumpy(bits), w)
    u = (w >> 8).astype(np.float32) * np.float32(2.0 ** -24)
    got = cupy.asnumpy(cuda_philox.launch(cupy, key, "uniform", (n,), (0.0, 1.0)))
    np.testing.assert_array_equal(got, u)
    mask = cupy.asnumpy(cuda_philox.launch(cupy, key, "bernoulli", (n,), (0.1,)))
    np.testing.assert_array_equal(mask, (u.astype(np.float64) < 0.1).astype(np.float32))
    z = cupy.asnumpy(cuda_philox.launch(cupy, key, "normal", (n,), (0.0, 1.0)))
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1) < 0.01


def test_gpu_compiled_dropout_masks_are_the_reference(gpu):  # noqa: F811
    got, fn = _run(None, calls=4, seed=7)
    assert any(n.op in (PHILOX, WORDS) for n in _program(fn).graph.nodes)  # WORDS: fused
    n = int(np.prod(SHAPE))
    c = cuda_philox.counters(n)
    for k, (out, grad) in enumerate(got[1:]):
        u = (ref_words(7, k * c, n) >> 8).astype(np.float64) * 2.0 ** -24
        np.testing.assert_array_equal(out.reshape(-1) != 0, u < 1 - P)
        np.testing.assert_array_equal(grad, out)


def test_gpu_reduce_overhead_replays_new_draws_bitwise(gpu):  # noqa: F811
    want, _ = _run(None, calls=6)
    got, fn = _run("reduce-overhead", calls=6)
    for (x, gx), (y, gy) in zip(want, got):
        assert x.tobytes() == y.tobytes() and gx.tobytes() == gy.tobytes()
    g = _program(fn).cuda_graph
    assert g.failed is None, g.failed
    assert g.captures == 1 and g.replays >= 2 and g.graph.graph is not None
    outs = [o for o, _ in got[-3:]]
    assert all((a != b).any() for a, b in zip(outs, outs[1:]))
    assert em.cuda.memory_reserved() > 0
