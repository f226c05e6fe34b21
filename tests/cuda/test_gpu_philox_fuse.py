"""Device draws fused into the kernels that read them, on a real GPU (skip: "no CUDA
GPU/CuPy"): a compiled dropout step (float32/float16/bfloat16 masks, default mode and
``mode="reduce-overhead"``) and an AdamW step whose backward recomputes the mask equal
the separate-kernel path (``fuse_philox.ENABLED = False``) bit for bit, with no ``philox``
node in the fused program. The stand-in runs the same checks on the CUDA emulator:
``test_cuda_philox_fuse.py``, ``test_cuda_philox_leaf_emu.py``.

Run: ``python3 -m pytest -q tests/cuda/test_gpu_philox_fuse.py``; speed:
``python3 bench/cuda_philox_fuse.py --gpu``.
"""
import pytest

import ember as em
from ember.graph.passes import fuse_philox
from ember.graph.passes.philox import PHILOX
from test_cuda_philox_fuse import _both, _gelu_dropout, _leaf_kernels
from test_cuda_philox_graphs import _program, _run
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["default", "reduce-overhead"])
@pytest.mark.parametrize("dtype", [em.float32, em.float16, em.bfloat16])
def test_gpu_fused_dropout_equals_the_separate_kernel(gpu, monkeypatch, mode,  # noqa: F811
                                                      dtype):
    (got, fn), (want, _) = _both(monkeypatch, lambda: _run(mode, 6, 21, dtype))
    for (x, gx), (y, gy) in zip(got, want):
        assert x.tobytes() == y.tobytes() and gx.tobytes() == gy.tobytes()
    prog = _program(fn)
    assert PHILOX not in [n.op for n in prog.graph.nodes] and _leaf_kernels(prog) >= 1
    assert fuse_philox.WORDS in [n.op for n in prog.graph.nodes]
    if mode is not None:
        assert prog.cuda_graph.failed is None and prog.cuda_graph.replays >= 2


@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["default", "reduce-overhead"])
def test_gpu_backward_recomputes_the_mask_bitwise(gpu, monkeypatch, mode):  # noqa: F811
    (got, ws, fn), (want, ws_sep, _) = _both(monkeypatch, lambda: _gelu_dropout(mode, 6))
    assert got == want
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ws, ws_sep))
    assert _leaf_kernels(_program(fn)) == 2
