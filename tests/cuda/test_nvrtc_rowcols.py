"""Column-sum row kernels (``codegen/cuda_rowcols.py``) through NVRTC and ptxas (sm_90):
a compiled layer norm's at a GPT's width (768, a warp per row, dgamma and dbeta) and at a
block per row; no spills, at most 128 registers (two 256-thread blocks an SM), the shared
accumulators within the static 48 KB, the final entries there."""
import re

import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_cache, nvrtc
from ember.codegen.cuda_rowcols import ColReduceKernel

pytestmark = pytest.mark.skipif(
    not (nvrtc.available() and nvrtc.include_dirs()),
    reason="NVRTC or the CUDA fp16/bf16 headers are not installed (pip install "
    "'ember[nvrtc]')")


class _Stub:
    def get_function(self, name):
        return lambda grid, block, args, shared_mem=0: None


def _ln_kernels(fake_cuda, monkeypatch, n, d):
    """The column-sum kernels (with their module sources) of a compiled layer norm's
    forward and backward on the stand-in (nothing runs: sources only)."""
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    monkeypatch.setattr(cuda_cache, "module_loader", lambda source, name: _Stub())
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    x = em.randn(n, d, device="cuda").requires_grad_()
    w, b = em.ones(d, device="cuda", requires_grad=True), em.zeros(d, device="cuda",
                                                                  requires_grad=True)
    dy = em.randn(n, d, device="cuda").half()

    def f(x, w, b, dy):
        return em.autograd.grad(em.nn.functional.layer_norm(x, (d,), w, b), (x, w, b),
                                dy.float())
    fn = em.compile(f)
    with np.errstate(all="ignore"):
        fn(x, w, b, dy)
        fn(x, w, b, dy)
    prog = [e for e in fn._cache.values() if not e.eager and e.program is not None][-1].program
    return [(nd.op.kernel, nd.op.module.source) for nd in prog.graph.nodes
            if isinstance(getattr(nd.op, "kernel", None), ColReduceKernel)]


@pytest.mark.parametrize("n,d,strategy", [(1024, 768, "warp"), (64, 1024, "block")])
def test_column_sum_kernels_compile_without_spills(fake_cuda, monkeypatch, n, d, strategy):
    import importlib
    fc = importlib.import_module("ember.graph.passes.fuse_cuda")
    found = _ln_kernels(fake_cuda, monkeypatch, n, d)
    assert len(found) == 1
    k, source = found[0]
    assert fc.strategy(k) == strategy and len(k.cols) == 2
    ptx = nvrtc.compile_ptx(source, k.name)
    assert set(re.findall(r"\.entry\s+(\w+)\(", ptx)) == {k.name, k.name + "_cf_float32"}
    assert ".maxntid 256, 1, 1" in ptx and ".minnctapersm 2" in ptx
    _, log = nvrtc.compile_sass(source, k.name)
    assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    smem = [int(s) for s in re.findall(r"(\d+) bytes smem", log)]
    assert regs and max(regs) <= 128 and smem and max(smem) <= 48 * 1024, log
