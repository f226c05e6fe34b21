"""The float64, integer and tensor-p Bernoulli draws on a real GPU (skip: "no CUDA
GPU/CuPy"): the float64 and randint kernels equal ``cuda_philox.reference`` bit for bit
(float64 normals within the GPU libm's rounding; ``__umul64hi`` for ranges over 2**32), a
compiled program of every such draw gives the NumPy Philox4x32-10 values of the device
generator's (seed, offset), and ``mode="reduce-overhead"`` captures it and replays the
default mode's values; a compiled model's forward graph saving a dropout's (seed,
offset) instead of its mask gives bitwise the gradients of the graphs saving the mask.
The stand-in runs the same checks on the CUDA emulator: ``test_cuda_philox_emu.py``,
``test_cuda_philox_draws.py``, ``test_cuda_philox_fuse.py``.

Run: ``python3 -m pytest -q tests/cuda/test_gpu_philox_draws.py``.
"""
import numpy as np

from ember.codegen import cuda_philox
from test_cuda_philox_draws import COUNTERS, _program, _run, _want
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


def test_gpu_float64_and_randint_kernels_match_the_reference(gpu):  # noqa: F811
    import cupy
    seed, off, n = 2**64 - 5, 2**32 - 7, (1 << 18) + 3
    key = cupy.asarray(np.array([seed, off], np.uint64).view(np.int64))
    for kind, sc, dt in (("uniform", (-2.0, 5.0), np.float64), ("bernoulli", (0.3,), np.float64),
                         ("normal", (1.5, 2.0), np.float64), ("randint", (-3, 7), np.int64),
                         ("randint", (-2**31, 2**32), np.int32),
                         ("randint64", (-2**63, 2**64 - 1), np.int64)):
        got = cupy.asnumpy(cuda_philox.launch(cupy, key, kind, (n,), sc, dtype=dt))
        want = cuda_philox.reference(kind, seed, off, n, sc, dt)
        if kind == "normal":
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
        else:
            np.testing.assert_array_equal(got, want, err_msg=kind)


def test_gpu_compiled_draws_are_the_reference_and_replay(gpu):  # noqa: F811
    want, _ = _run(None, calls=5)
    for k, vals in enumerate(want[1:]):
        for j, (v, w) in enumerate(zip(vals, _want(k * sum(COUNTERS)))):
            if j == 6:
                np.testing.assert_allclose(v, w, rtol=1e-13, atol=1e-13)
            else:
                np.testing.assert_array_equal(v, w, err_msg=str(j))
    got, fn = _run("reduce-overhead", calls=5)
    for w, g in zip(want, got):
        assert all(x.tobytes() == y.tobytes() for x, y in zip(w, g))
    g = _program(fn).cuda_graph
    assert g.failed is None and g.captures == 1 and g.replays >= 1, g.failed


def test_gpu_model_backward_redraws_the_saved_key_bitwise(gpu, monkeypatch):  # noqa: F811
    from test_cuda_philox_fuse import _saved_bytes, redraw_runs
    (_, e), (_, e_saved) = redraw_runs(monkeypatch)
    assert _saved_bytes(e_saved) - _saved_bytes(e) == 6 * 16 * 4 - 16
    assert e.program.cuda_graph.failed is None and e.joint.bwd_program.cuda_graph.replays >= 1
