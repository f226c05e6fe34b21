"""``fuse_cuda`` recomputes cheap forward intermediates in the backward kernels, as the CPU
``fuse`` pass does (``ember/graph/passes/recompute.py``): before, ``recompute`` classified
GPU nodes as the CPU's, found none fusible and a compiled GPT step's GELU forward kernel
stored six full-size intermediates for its backward (bench/cuda_gap.py)."""
import sys

import numpy as np
import pytest

import ember as em
import ember.graph.passes.fuse_cuda  # noqa: F401 - the module (the package exports the pass)

from test_cuda_fusion import gpu_like  # noqa: F401 - the fixture


def _gelu_mlp(dev):
    em.manual_seed(0)
    fc1, fc2 = em.nn.Linear(32, 128).to(dev), em.nn.Linear(128, 32).to(dev)
    x = em.randn(256, 32).to(dev)

    def f(x):
        loss = fc2(em.nn.functional.gelu(fc1(x), approximate="tanh")).square().mean()
        loss.backward()
        return loss
    cf = em.compile(f)
    cf(x)                           # NOTE: the traced call runs eagerly; the second the graph
    for p in (*fc1.parameters(), *fc2.parameters()):
        p.grad = None
    loss = float(cf(x))
    return cf, loss, [p.grad.cpu().numpy() for p in (*fc1.parameters(), *fc2.parameters())]


def _stored(cf, numel) -> int:
    """Full-size values written by a fused kernel and read by another graph node."""
    g = cf.graphs()[-1]
    readers = {x.id for n in g.nodes for x in n.inputs if hasattr(x, "id")}
    return sum(1 for n in g.nodes if n.op.name in ("fused", "fused_reduce")
               for o in n.outs if o.numel() == numel and o.id in readers)


def test_gelu_intermediates_are_recomputed_on_the_gpu(gpu_like, monkeypatch):  # noqa: F811
    _sources, launches = gpu_like
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    fuse_cuda = sys.modules["ember.graph.passes.fuse_cuda"]
    cf, loss, grads = _gelu_mlp("cuda")
    assert launches
    on = _stored(cf, 256 * 128)
    monkeypatch.setattr(fuse_cuda, "recompute", lambda g, groups, *a: (g, 0))
    cf_off, loss_off, grads_off = _gelu_mlp("cuda")
    off = _stored(cf_off, 256 * 128)
    assert on < off, (on, off)
    _, want_loss, want = _gelu_mlp("cpu")
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    for a, b in zip(grads, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- GPU policy (issue 21)
# On a GPU, recompute copies transcendental ops and divisions too (recompute.CUDA): a
# GELU's forward kernel writes its activation only and its backward recomputes from the
# GEMM output and the bias; a layer norm's forward writes no normalised x.

def _numpy_cublas(monkeypatch):
    """float16 products through cuBLAS's plan, computed by its NumPy model."""
    from ember.codegen import cuda_gemm as cg
    from test_cuda_gemm import run_plan

    def matmul(xp, x, y, tf32=False, out=None):
        return run_plan(cg.gemm_plan(x, y, xp, tf32, out))
    monkeypatch.setattr(cg, "matmul", matmul)


def _fused(cf):
    return [n for n in cf.graphs()[-1].nodes if n.op.name in ("fused", "fused_reduce")]


def _full(vs, numel):
    return [v for v in vs if hasattr(v, "numel") and v.numel() == numel]


def _gelu_step(dev, autocast=False):
    """A compiled GELU-tanh MLP training step (AdamW); ``(compiled, losses, params)``."""
    em.manual_seed(0)
    m = em.nn.Sequential(em.nn.Linear(32, 128), em.nn.GELU(approximate="tanh"),
                         em.nn.Linear(128, 32)).to(dev)
    opt = em.optim.AdamW(m.parameters(), lr=1e-2)
    x = em.randn(256, 32).to(dev)

    def step(x):
        with em.autocast(dev.split(":")[0], dtype=em.float16, enabled=autocast):
            loss = m(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    cf = em.compile(step)
    losses = [float(cf(x)) for _ in range(4)]
    return cf, losses, [p.detach().cpu().numpy() for p in m.parameters()]


def _gelu_nodes(cf):
    bwd = [n for n in _fused(cf) if "tanh_backward" in n.op.ops]
    fwd = [n for n in _fused(cf) if "tanh" in n.op.ops.split(",") and n not in bwd]
    assert len(fwd) == 1 and len(bwd) == 1, [n.op.ops for n in _fused(cf)]
    return fwd[0], bwd[0]


@pytest.mark.parametrize("autocast", [False, True])
def test_gpu_gelu_forward_stores_only_its_activation(gpu_like, monkeypatch, autocast):  # noqa: F811
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    _numpy_cublas(monkeypatch)
    cf, losses, params = _gelu_step("cuda", autocast)
    check_gelu(cf)
    _, want_losses, want = _gelu_step("cpu", autocast)
    _close(losses, params, want_losses, want, autocast)


def check_gelu(cf):
    """The GELU's forward kernel writes one full-size value, its activation; the backward
    reads dy and the GEMM output h (+ the bias), nothing the forward stored."""
    fwd, bwd = _gelu_nodes(cf)
    numel = 256 * 128
    assert len(_full(fwd.outs, numel)) == 1, fwd.op.ops
    ins = _full(bwd.inputs, numel)
    assert len(ins) == 2 and fwd.outs[0] not in ins, bwd.op.ops
    assert any(x in ins for x in fwd.inputs)


def _close(losses, params, want_losses, want, lowp, f32=None):
    """Losses and parameters equal within float16's tolerance (``lowp``: autocast) or
    float32's (``f32``, default 1e-5)."""
    tol = dict(rtol=2e-2, atol=2e-3) if lowp else f32 or dict(rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses, want_losses, **tol)
    for a, b in zip(params, want):
        np.testing.assert_allclose(a, b, **tol)


def test_cpu_graphs_keep_the_cpu_policy(monkeypatch):
    """The CPU pipeline still stores a GELU's tanh (a libm call per element there)."""
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    from ember.graph.passes import recompute as rc
    assert rc.CPU.expensive >= {"tanh", "exp", "erf", "div"} and not rc.CPU.lone_readers
    cf, _, _ = _gelu_step("cpu")
    fwd = [n for n in _fused(cf) if "tanh" in n.op.ops.split(",")]
    assert fwd and all(len(_full(n.outs, 256 * 128)) > 1 for n in fwd), \
        [n.op.ops for n in fwd]


def _ln_step(dev):
    em.manual_seed(0)
    m = em.nn.Sequential(em.nn.Linear(32, 256), em.nn.LayerNorm(256),
                         em.nn.Linear(256, 8)).to(dev)
    opt = em.optim.SGD(m.parameters(), lr=0.1)
    x = em.randn(128, 32).to(dev)

    def step(x):
        loss = m(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    cf = em.compile(step)
    losses = [float(cf(x)) for _ in range(4)]
    return cf, losses, [p.detach().cpu().numpy() for p in m.parameters()]


def check_ln(cf):
    """The layer norm's forward kernel writes one full-size value: its output y (read by
    the next Linear); row statistics are small."""
    fwd = [n for n in _fused(cf) if "sqrt" in n.op.ops and "neg" not in n.op.ops]
    assert len(fwd) == 1, [n.op.ops for n in _fused(cf)]
    assert len(_full(fwd[0].outs, 128 * 256)) == 1, fwd[0].op.ops


def test_gpu_layer_norm_forward_stores_no_normalised_x(gpu_like, monkeypatch):  # noqa: F811
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    cf, losses, params = _ln_step("cuda")
    check_ln(cf)
    _, want_losses, want = _ln_step("cpu")
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(params, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _ce_step(dev, autocast=False, **kw):
    """A compiled Linear + cross-entropy training step (SGD): ``(compiled, losses, params)``."""
    em.manual_seed(0)
    m = em.nn.Linear(32, 512).to(dev)
    opt = em.optim.SGD(m.parameters(), lr=0.5)
    x, y = em.randn(64, 32).to(dev), em.randint(0, 512, (64,))
    y[::7] = -100                                   # ignored rows
    y = y.to(dev)

    def step(x, y):
        with em.autocast(dev, dtype=em.float16, enabled=autocast):
            loss = em.nn.functional.cross_entropy(m(x), y, **kw)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    cf = em.compile(step)
    losses = [float(cf(x, y)) for _ in range(4)]
    return cf, losses, [p.detach().cpu().numpy() for p in m.parameters()]


@pytest.mark.parametrize("autocast,kw", [(False, {}), (True, {}),
                                         (False, {"label_smoothing": 0.1})])
def test_gpu_cross_entropy_stores_row_values_only(gpu_like, monkeypatch, autocast,  # noqa: F811
                                                  kw):
    """The loss's forward kernel writes per-row values, no (rows, classes) log-softmax;
    the backward kernel recomputes the softmax from the logits (lse_rows + recompute)."""
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    _numpy_cublas(monkeypatch)
    cf, losses, params = _ce_step("cuda", autocast, **kw)
    bwd = check_ce(cf)
    if not kw:
        # the one-hot's row sum is the row's one selected value (scatter_select): one pass
        # over the logits, no reduction stage
        assert bwd.op.name == "fused" and "sum" not in bwd.op.ops.split(","), bwd.op.ops
    _, want_losses, want = _ce_step("cpu", autocast, **kw)
    _close(losses, params, want_losses, want, autocast)


def check_ce(cf):
    """No log-softmax kernel; the loss's forward kernel writes no (rows, classes) value;
    one backward kernel reads the logits, and no other full-size value."""
    numel = 64 * 512
    nodes = cf.graphs()[-1].nodes
    assert not any("log_softmax" in str(n.params.get("ops", n.op.name)) for n in nodes)
    fwd = [n for n in _fused(cf) if "amax" in n.op.ops.split(",")]
    assert len(fwd) == 1 and not _full(fwd[0].outs, numel), [n.op.ops for n in _fused(cf)]
    logits = _full(fwd[0].inputs, numel)
    assert len(logits) == 1
    bwd = [n for n in _fused(cf) if n is not fwd[0] and logits[0] in n.inputs]
    assert len(bwd) == 1 and _full(bwd[0].inputs, numel) == logits, bwd
    return bwd[0]
