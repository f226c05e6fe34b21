"""Index leaves on a real GPU (issue 21; skip: "no CUDA GPU/CuPy"). Run: ``python -m pytest
-q tests/cuda/test_gpu_index.py``.

The emulator's kernels (``test_cuda_index_emu.py``: every entry, every strategy) on the
device against the interpreter, the GPT head's (rows, 50257) backward kernel with the
iota and with the leaf writing the same bits (``bench/cuda_iota.py``'s pair), and the
compiled Linear + cross-entropy step: its backward kernel reads no iota and its losses
and parameters are bit for bit those of the graph without the rewrite."""
import sys

import numpy as np
import pytest

import ember.graph.passes.fuse_cuda  # noqa: F401 - the module (the package exports the pass)
from ember import dtypes as dt
from ember.codegen.cuda_launch import CudaModule, kernel_plan, row_plan, wants_rows
from ember.codegen.ir import ReduceKernel
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture
from test_cuda_index_emu import KERNELS, REDUCTIONS, _check, _hot_arrays



def _bench():
    """``bench/cuda_iota.py`` as a module (by path: the bench folder on ``sys.path`` would
    shadow the ``cuda`` package CuPy imports)."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "cuda_iota.py")
    spec = importlib.util.spec_from_file_location("cuda_iota", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(k, strategy, arrays, row=False):
    import cupy
    mod = CudaModule([k], strategy, k.name)
    dev = [cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in arrays]
    plan = row_plan(k, dev, k.out.shape, cupy) if row else \
        kernel_plan(k, dev, cupy, strategy)
    name, grid, block, args, outs = plan
    mod.function(name)(grid, block, args)
    return name, [o.get() for o in outs]


@pytest.mark.parametrize("name", ["hot", "hot_a"])
def test_row_and_strided_entries_on_the_gpu(gpu, name):  # noqa: F811
    k = KERNELS[name]
    assert wants_rows(k)
    arrays = _hot_arrays(k, np.random.default_rng(0))
    entry, outs = _run(k, "block", arrays, row=True)
    assert entry == k.name + "_r"
    _check(outs, k, arrays)
    t, x, b = arrays
    xt = np.asfortranarray(x)
    entry, outs = _run(k, "block", [t, xt, b])
    assert entry == k.name
    _check(outs, k, [t, xt, b])


@pytest.mark.parametrize("name", ["flat", "flat_u2"])
def test_contiguous_entry_on_the_gpu(gpu, name):  # noqa: F811
    k = KERNELS[name]
    x = np.random.default_rng(1).standard_normal(k.out.shape).astype(np.float32)
    entry, outs = _run(k, "block", [x, np.float32(0.25)])
    assert entry == k.name + "_c"
    _check(outs, k, [x, np.float32(0.25)])


@pytest.mark.parametrize("strategy,k", REDUCTIONS, ids=[k.name for _, k in REDUCTIONS])
def test_reductions_on_the_gpu(gpu, strategy, k):  # noqa: F811
    assert isinstance(k, ReduceKernel)
    x = np.random.default_rng(2).standard_normal(k.shape).astype(np.float32)
    _, outs = _run(k, strategy, [x])
    _check(outs, k, [x])


def test_gpt_head_backward_kernel_same_bits_with_the_leaf(gpu):  # noqa: F811
    """``bench/cuda_iota.py``'s two kernels on 64 rows of 50257: the same float16 bits."""
    cuda_iota = _bench()
    rows = 64
    ms = cuda_iota.measure(rows, 2)          # raises when the two outputs' bits differ
    assert len(ms) == 3 and all(m > 0 for _, m, _ in ms)
    a, b = cuda_iota.kernels(rows)
    assert len(a.inputs) == len(b.inputs) + 1


@pytest.mark.parametrize("autocast", [False, True], ids=["f32", "f16"])
def test_compiled_cross_entropy_reads_no_iota_on_the_gpu(gpu, monkeypatch, autocast):  # noqa: F811
    from test_cuda_index import _leaves
    from test_cuda_recompute import _ce_step, _close, check_ce
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    fc = sys.modules["ember.graph.passes.fuse_cuda"]
    cf, losses, params = _ce_step("cuda", autocast)
    k = check_ce(cf).op.kernel
    assert _leaves(k) and all(s.strides[-1] == 0 for s in k.inputs if s.dtype is dt.int64)
    monkeypatch.setattr(fc, "index_leaves", lambda lw, producer: lw)
    _, base_losses, base_params = _ce_step("cuda", autocast)
    assert losses == base_losses
    for a, b in zip(params, base_params):
        np.testing.assert_array_equal(a, b)
    _, want_losses, want = _ce_step("cpu", autocast)
    _close(losses, params, want_losses, want, autocast, dict(rtol=1e-4, atol=1e-5))
