"""Multi-launch (``NAME_m``, ``ember/codegen/cuda_multi.py``) on a real GPU (skip: "no CUDA
GPU/CuPy"): one launch over a group of records equals the records' ``NAME_c`` launches one
by one, bit for bit (the same ``__device__`` body), on CuPy arrays (float32/64/16, int8: bfloat16
CuPy arrays are refused by Ember's GPU path) — sizes from 0 to past
2**20, misaligned views, scalar operands, more records than one launch takes — and a
compiled training step (AdamW; float32 MLP, float16-autocast GPT-like model) gives the
same losses and parameters with and without the ``multi_launch`` pass. The emulator runs
the same checks on the CPU: ``test_cuda_multi_emu.py``, ``test_multi_launch.py``.

Run: ``python3 -m pytest -q tests/cuda/test_gpu_multi.py``.
"""
from dataclasses import replace

import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import cuda_multi
from ember.codegen.cuda_launch import CudaModule
from ember.codegen.ir import OutSpec
from ember.graph.passes.multi_launch import MultiFusedOp
from test_cuda_multi_emu import _kernel
from _cuda_emu import sample as _sample
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture
from test_multi_launch import DEFAULT_PASSES, WITHOUT, _mlp, _program, _train, _TinyGPT

SIZES = [5, 0, (1 << 20) + 3, 4, 4096, 3, 1 << 16]


def _records(d, rng, sizes, cupy):
    out = []
    for i, n in enumerate(sizes):
        k = replace(_kernel(d, "gm"), out=OutSpec(d, (n,)))
        x = cupy.asarray(_sample(d, n + 1, rng))
        x = x[1:] if i % 3 == 2 else x[:n]               # a misaligned view
        y = cupy.asarray(_sample(d, n, rng))
        s = _sample(d, 1, rng)
        s = float(s[0]) if i % 2 and d.is_floating_point else cupy.asarray(s.reshape(()))
        out.append((k, [x, y, s], [((n,), d.np), ((n,), np.bool_)]))
    return out


@pytest.mark.parametrize("d", [dt.float32, dt.float64, dt.float16, dt.int8],
                         ids=str)
@pytest.mark.parametrize("count", [len(SIZES), 300])
def test_gpu_multi_launch_equals_launches_one_by_one(gpu, d, count):  # noqa: F811
    import cupy
    rng = np.random.default_rng(count)
    sizes = SIZES if count == len(SIZES) else [int(n) for n in rng.integers(0, 3000, count)]
    recs = _records(d, rng, sizes, cupy)
    mod = CudaModule([recs[0][0]], "block", recs[0][0].name, multi=True)
    want = [o for k, ins, m in recs for o in mod.runner(k, m, cupy)(cupy, *ins)]
    run = mod.multi_runner([k for k, _, _ in recs], [m for _, _, m in recs], cupy)
    for _ in range(2):                                  # the second call: no upload
        got = run(cupy, *[a for _, ins, _ in recs for a in ins])
        assert len(run.last.chunks) == -(-count // cuda_multi.MAX_RECORDS)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and cupy.asnumpy(g).tobytes() == cupy.asnumpy(w).tobytes()


@pytest.mark.parametrize("model_fn,amp", [(_mlp, False), (_TinyGPT, True)],
                         ids=["mlp-float32", "gpt-float16-autocast"])
def test_gpu_step_with_the_pass_equals_the_step_without(gpu, model_fn, amp):  # noqa: F811
    want_losses, want_params, _ = _train(WITHOUT, model_fn, amp)
    losses, params, fn = _train(DEFAULT_PASSES, model_fn, amp)
    assert any(isinstance(n.op, MultiFusedOp) for n in _program(fn).graph.nodes)
    assert losses == want_losses
    for a, b in zip(params, want_params):
        assert a.tobytes() == b.tobytes()
