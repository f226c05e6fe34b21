"""Column sums inside a GPU row reduction (``codegen/cuda_rowcols.py``, the
``fuse_colsum`` grouping), run from their CUDA text on the emulator (``_cuda_emu``).

A layer norm's column sums (dbeta = sum of ``dy``, dgamma = sum of ``dy * x_hat`` over the
rows) ride in a row kernel over the same rows as per-block partials, plus one small launch
adding them; ``dx`` is one row kernel.

Checked: the kernel alone (warp and block strategies, rows wider than a warp, two output
dtypes, a grid the emulator cuts to 2 blocks, no rows) against correctly rounded sums with
an order-insensitive bound, its row-reduction outputs bit for bit the same kernel's
without column sums; compiled layer norms with and without the grouping: dx's bits kept,
the column sums within the bound of their summation length, fewer nodes; CPU graphs
untouched. A float16 GPT step: ``test_cuda_rowcols_gpt_emu.py``.
"""
import importlib
import math

import numpy as np
import pytest

import ember as em
from ember import dtypes as dt
from ember.codegen.cuda_launch import CudaModule
from ember.codegen.cuda_rowcols import ColReduceKernel
from ember.codegen.ir import InputSpec, Load, OutSpec, Reduce, ReduceKernel, Row, call
from ember.graph.passes import fuse_colsum

fuse_cuda = importlib.import_module("ember.graph.passes.fuse_cuda")   # NOTE: not the function

import _cuda_emu
from test_cuda_fusion_emu import _launched, emu_gpu  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")
EPS32 = 2.0 ** -24
F32 = dt.float32


def _bound(terms, want, out_eps):
    """|error| bound of a float32 sum of ``terms`` (rows on axis 0) in any order, rounded
    once to a dtype of unit roundoff ``out_eps``: ``n eps32 sum|t| + out_eps |want|``."""
    n = terms.shape[0]
    return n * EPS32 * np.abs(terms).sum(0) + out_eps * np.abs(want) + 1e-30


def _fsum_cols(a):
    return np.array([math.fsum(c) for c in a.astype(np.float64).T])


def _kernels(n, m, strategy):
    x, dy = Load(0), Load(1)
    stages = [Reduce("sum", call("mul", x, dy, compute=F32), F32), Reduce("sum", dy, F32)]
    epi = call("sub", call("mul", dy, 2.0, compute=F32),
               call("mul", Row(0), x, compute=F32), compute=F32)
    specs = [InputSpec(F32, (m, 1)), InputSpec(F32, (m, 1))]
    common = dict(full=True, extra=((F32, Row(1), False),))
    plain = ReduceKernel(specs, (n, m), 1, stages, epi, OutSpec(F32, (n, m)),
                         name=f"plain_{strategy}", **common)
    cols = ColReduceKernel(specs, (n, m), 1, stages, epi, OutSpec(F32, (n, m)),
                           name=f"cols_{strategy}", **common,
                           cols=((F32, call("mul", x, dy, compute=F32)), (dt.float16, dy)))
    return plain, cols


def _run(k, strategy, arrays, metas, tmp):
    mod = CudaModule([k], strategy, k.name)
    mod._module = _cuda_emu.EmuModule(mod.source, str(tmp), 2)   # NOTE: grid cut to 2
    return mod.runner(k, metas, np)(np, *arrays), mod._module.launches


@pytest.mark.parametrize("strategy,n,m", [("warp", 37, 100), ("block", 9, 300)])
def test_kernel_column_sums_and_unchanged_row_outputs(tmp_path, strategy, n, m):
    rng = np.random.default_rng(0)
    X, D = (rng.standard_normal((n, m)).astype(np.float32) for _ in range(2))
    plain, cols = _kernels(n, m, strategy)
    metas = [((n, m), np.float32), ((n,), np.float32)]
    want, _ = _run(plain, strategy, (X, D), metas, tmp_path)
    got, launches = _run(cols, strategy, (X, D), metas + [((m,), np.float32),
                                                         ((m,), np.float16)], tmp_path)
    assert launches == [cols.name, f"{cols.name}_cf_float32", f"{cols.name}_cf_float16"]
    for a, b in zip(got[:2], want):         # the row reduction's own outputs: same bits
        assert a.tobytes() == b.tobytes()
    for c, terms, dtype, eps in ((got[2], X * D, np.float32, EPS32),
                                 (got[3], D, np.float16, 2.0 ** -11)):
        exact = _fsum_cols(terms)
        assert c.dtype == dtype and c.shape == (m,)
        err = np.abs(c.astype(np.float64) - exact)
        assert (err <= _bound(terms.astype(np.float64), exact, eps)).all()


def test_kernel_without_rows_gives_zero_sums(tmp_path):
    _, cols = _kernels(0, 100, "warp")
    metas = [((0, 100), np.float32), ((0,), np.float32), ((100,), np.float32),
             ((100,), np.float16)]
    got, launches = _run(cols, "warp", (np.zeros((0, 100), np.float32),) * 2, metas, tmp_path)
    assert launches == [] and not got[2].any() and not got[3].any()


def _ln_fn(n, m):
    em.manual_seed(0)
    x = em.randn(n, m, device="cuda", requires_grad=True)
    w = (em.randn(m, device="cuda") * 0.5 + 1.0).requires_grad_()
    b = em.randn(m, device="cuda").requires_grad_()
    g = em.randn(n, m, device="cuda")

    def f(x, w, b, g):
        y = em.nn.functional.layer_norm(x, (m,), w, b)
        return em.autograd.grad((y * g).sum(), (x, w, b))
    return f, (x, w, b, g)


def _compiled(f, args, enabled, monkeypatch):
    monkeypatch.setattr(fuse_colsum, "ENABLED", enabled)
    fn = em.compile(f)
    fn(*args)                               # NOTE: the traced call runs eagerly
    return [t.cpu().numpy() for t in fn(*args)], fn


def _program(fn):
    return [e for e in fn._cache.values() if not e.eager and e.program is not None][-1].program


def _col_nodes(fn):
    return [n for n in _program(fn).graph.nodes
            if isinstance(getattr(n.op, "kernel", None), ColReduceKernel)]


@pytest.mark.parametrize("warp", [False, True], ids=["block", "warp"])
def test_compiled_layer_norm_column_sums_ride_in_a_row_kernel(emu_gpu, monkeypatch, warp):
    n, m = 24, 96
    if warp:
        monkeypatch.setattr(fuse_cuda, "WARP_ROWS", 16)
    f, args = _ln_fn(n, m)
    want, fn0 = _compiled(f, args, False, monkeypatch)
    got, fn = _compiled(f, args, True, monkeypatch)
    assert got[0].tobytes() == want[0].tobytes()         # dx: the same kernel stages
    x, w, _b, g = (a.detach().cpu().numpy() for a in args)
    mu = x.mean(1, keepdims=True)
    xhat = (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5)
    for c, terms in ((got[1], (g * xhat)), (got[2], g)):   # dgamma, dbeta
        exact = _fsum_cols(terms)
        # NOTE: the terms' own float32 rounding (x_hat recomputed) plus the sum's
        err = np.abs(c.astype(np.float64) - exact)
        assert (err <= _bound(terms.astype(np.float64), exact, EPS32) +
                8 * EPS32 * np.abs(terms).sum(0)).all()
    for c, c0 in zip(got[1:], want[1:]):
        np.testing.assert_allclose(c, c0, rtol=0, atol=float(n * 4 * EPS32 *
                                                              np.abs(g).sum(0).max()))
    (node,) = _col_nodes(fn)
    assert len(node.op.kernel.cols) == 2 and not _col_nodes(fn0)
    assert fuse_cuda.strategy(node.op.kernel) == ("warp" if warp else "block")
    sums = [nd for nd in _program(fn).graph.nodes if nd.op.name == "sum"
            and nd.inputs[0].shape == (n, m)]
    assert not sums
    ops0 = [nd.op.name for nd in _program(fn0).graph.nodes]
    ops = [nd.op.name for nd in _program(fn).graph.nodes]
    # the forward's row kernel (it reads x and dy, and makes x_hat) sums dgamma and dbeta;
    # dx is one row kernel (dead expands removed first); without: two column sums too
    assert ops == ["fused_reduce", "fused_reduce"], ops
    assert ops0.count("sum") == 2 and len(ops0) == 4, ops0
    assert _launched(emu_gpu, node.op.kernel.name) == [node.op.kernel.name,
                                                       node.op.kernel.name + "_cf_float32"]


def test_cpu_graphs_are_untouched(monkeypatch):
    em.manual_seed(0)
    x = em.randn(16, 96, requires_grad=True)
    w, b = em.ones(96, requires_grad=True), em.zeros(96, requires_grad=True)

    def f(x):
        return em.autograd.grad(em.nn.functional.layer_norm(x, (96,), w, b).square().sum(),
                                (x, w, b))
    called = []
    monkeypatch.setattr(fuse_colsum, "absorb_colsums", lambda *a: called.append(a))
    fn = em.compile(f)
    fn(x)
    got = fn(x)
    assert not called
    assert not any(isinstance(getattr(n.op, "kernel", None), ColReduceKernel)
                   for n in _program(fn).graph.nodes)
    want = f(x)
    for a, b_ in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b_.numpy(), rtol=1e-5, atol=1e-5)
