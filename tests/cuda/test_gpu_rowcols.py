"""Column sums inside a layer norm's row kernels on a real GPU (issue 21: ``fuse_colsum``,
``codegen/cuda_rowcols.py``).

Run on a GPU machine: ``python -m pytest -q tests/cuda/test_gpu_rowcols.py`` (skips
without CuPy and a GPU); time it with ``python bench/cuda_layernorm.py --gpu`` (float16
``dy``; ``--dtype float32`` too). At a GPT's (8192, 768) rows the kernel runs a warp per
row with two column sums (48 KB of shared accumulators, at most 128 registers): dx, dgamma
and dbeta are checked against a float64 reference, dgamma/dbeta with the bound of a float32
sum of 8192 terms in any order; dx against the path without the grouping within a few
float32 roundings (NVRTC contracts ``a * b + c`` into FMAs per kernel: merged kernels may
contract differently).
"""
import importlib
import math

import numpy as np
import pytest

from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

EPS32 = 2.0 ** -24


def _run(em, enabled, n, d, dtype, monkeypatch):
    from ember.codegen.cuda_rowcols import ColReduceKernel
    from ember.graph.passes import fuse_colsum
    monkeypatch.setattr(fuse_colsum, "ENABLED", enabled)
    em.manual_seed(0)
    x = em.randn(n, d, device="cuda").requires_grad_()
    w = (em.randn(d, device="cuda") * 0.1 + 1.0).requires_grad_()
    b = (em.randn(d, device="cuda") * 0.1).requires_grad_()
    dy = em.randn(n, d, device="cuda").to(dtype)

    def f(x, w, b, dy):
        return em.autograd.grad(em.nn.functional.layer_norm(x, (d,), w, b), (x, w, b),
                                dy.float())
    fn = em.compile(f)
    fn(x, w, b, dy)
    got = [t.cpu().numpy() for t in fn(x, w, b, dy)]
    prog = [e for e in fn._cache.values() if not e.eager and e.program is not None][-1].program
    cols = [nd for nd in prog.graph.nodes
            if isinstance(getattr(nd.op, "kernel", None), ColReduceKernel)]
    ins = [t.detach().float().cpu().numpy().astype(np.float64) for t in (x, w, dy)]
    return got, cols, ins


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_layer_norm_column_sums_on_the_gpu(gpu, monkeypatch, dtype):  # noqa: F811
    import ember as em
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    fc = importlib.import_module("ember.graph.passes.fuse_cuda")
    n, d = 8192, 768
    want, cols0, _ = _run(em, False, n, d, getattr(em, dtype), monkeypatch)
    got, cols, (x, w, dy) = _run(em, True, n, d, getattr(em, dtype), monkeypatch)
    assert len(cols) == 1 and not cols0 and len(cols[0].op.kernel.cols) == 2
    assert fc.strategy(cols[0].op.kernel) == "warp"
    mu = x.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5)
    xhat = (x - mu) * rstd
    gdy = dy * w
    m1, m2 = gdy.mean(1, keepdims=True), (gdy * xhat).mean(1, keepdims=True)
    dx = rstd * (gdy - m1 - xhat * m2)
    scale = rstd * (np.abs(gdy) + np.abs(m1) + np.abs(xhat * m2))
    for g in (got[0], want[0]):             # dx: float32 roundings of a few terms
        assert (np.abs(g - dx) <= 64 * EPS32 * scale + 1e-30).all()
    assert (np.abs(got[0] - want[0]) <= 16 * EPS32 * scale + 1e-30).all()
    for g, terms in ((got[1], dy * xhat), (got[2], dy)):
        exact = np.array([math.fsum(c) for c in terms.T])
        # a float32 sum of n terms in any order, the terms' own roundings (x_hat: a few)
        tol = (n + 8) * EPS32 * np.abs(terms).sum(0) + EPS32 * np.abs(exact)
        assert (np.abs(g - exact) <= tol).all()
