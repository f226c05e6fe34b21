"""A compiled GPT step's kernels on a real GPU: shared, compiled in parallel, loaded as cubins.

Run on a GPU machine: ``python -m pytest -q tests/cuda/test_gpu_compile.py`` (skips without
CuPy and a GPU). A 2-layer GPT step of ``bench/cuda_compile.py`` (float16 autocast, AdamW)
compiled with a fresh kernel cache: ``fuse_cuda`` gives the layers' groups one kernel per
distinct text, NVRTC compiles them to cubins (no driver JIT; CuPy's own compile only as a
fallback), and the compiled steps' losses match eager steps of an identical model.
"""
import importlib.util
import os
import re
import time

import numpy as np
import pytest

import ember as em
from ember.codegen import cache, cuda_cache, nvrtc
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

HERE = os.path.dirname(os.path.abspath(__file__))


def _bench():
    path = os.path.join(HERE, "..", "..", "bench", "cuda_compile.py")
    spec = importlib.util.spec_from_file_location("ember_bench_cuda_compile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _losses(compiled: bool, steps: int = 3):
    step, args = _bench()._step(em, layers=2, d=128, heads=2, t=64, batch=2, vocab=512)
    fn = em.compile(step) if compiled else step
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out.append(float(fn(*args)))
        print(f"{'compiled' if compiled else 'eager'} call: {time.perf_counter() - t0:.2f} s")
    return out, fn


def test_gpt_step_kernels_are_shared_cubins_and_match_eager(gpu, tmp_path,  # noqa: F811
                                                            monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    monkeypatch.setattr(cuda_cache, "_memo", {})
    cache.forget_loaded()
    want, _ = _losses(False)
    before = dict(cuda_cache.stats)
    got, cf = _losses(True)
    report = str(cf.explain())
    line = next(ln for ln in report.splitlines() if "pass fuse_cuda" in ln)
    kernels = int(re.search(r"\bkernels (\d+)", line).group(1))
    modules = int(re.search(r"\bmodules (\d+)", line).group(1))
    assert 0 < modules < kernels, line                 # the two layers share their kernels
    if nvrtc.available() and nvrtc.include_dirs():
        assert cuda_cache.stats["cubin_modules"] - before["cubin_modules"] >= modules
        assert cuda_cache.stats["fallback"] == before["fallback"]
    np.testing.assert_allclose(got, want, rtol=2e-3)
    # unbind's VJP (q, k, v) is one node per layer on the GPU too, the attention backward
    # writing into it (scatter_stack, then sdpa_layout): scatter_stack once checked NumPy
    # constants only, and a GPU graph's constants are CuPy arrays
    names = [n.op.name for g in cf.graphs() for n in g.nodes]
    assert names.count("sdpa_grad_stacked") == 2 and "as_strided_scatter" not in names, \
        sorted(set(names))
