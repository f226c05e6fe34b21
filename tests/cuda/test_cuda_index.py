"""A GPU graph's cross-entropy backward kernel reads no int64 iota (issue 21): ``fuse_cuda``
turns the one-hot's ``arange`` constant input into the loop's column index
(``graph/passes/fuse_index.py``, ``codegen.ir.Index``).

On the stand-in with a GPU's capabilities (``gpu_like``: every kernel text compiled by
NVRTC when installed, launches evaluated from the launch arguments by the interpreter):
the compiled Linear + cross-entropy step of ``test_cuda_recompute`` (the GPT head's
shape, small), its backward kernel's inputs with and without the rewrite, the bytes an
element loads, the kernel text's pointers, and the losses and parameters against the CPU
graph's. The same on a GPU: ``test_gpu_index.py``."""
import sys

import numpy as np
import pytest

import ember as em
import ember.graph.passes.fuse_cuda  # noqa: F401 - the module (the package exports the pass)
from ember import dtypes as dt
from ember.codegen.ir import Apply, Index, Load, nodes_of
from ember.codegen.render_cuda import _render_one
from ember.graph.passes.fuse_index import read_bytes

from test_cuda_fusion import gpu_like  # noqa: F401 - the fixture
from test_cuda_recompute import _ce_step, _close, _numpy_cublas, check_ce

CLASSES = 512                               # _ce_step's Linear(32, 512)


def _leaves(k):
    """The Index leaves of kernel ``k``'s outputs."""
    out = set()
    for _d, e, *_ in k.outputs:
        for a in nodes_of(e):
            out |= {x for x in a.args if isinstance(x, Index)}
    return out


def _bwd(autocast, monkeypatch, rewrite=True):
    """The compiled step (``rewrite=False``: ``fuse_cuda`` without ``index_leaves``) and
    its backward kernel's node."""
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    _numpy_cublas(monkeypatch)
    fc = sys.modules["ember.graph.passes.fuse_cuda"]
    real = fc.index_leaves.__wrapped__ if hasattr(fc.index_leaves, "__wrapped__") \
        else fc.index_leaves

    def leaves(lw, producer):
        return real(lw, producer) if rewrite else lw
    leaves.__wrapped__ = real
    monkeypatch.setattr(fc, "index_leaves", leaves)
    cf, losses, params = _ce_step("cuda", autocast)
    return cf, losses, params, check_ce(cf)


@pytest.mark.parametrize("autocast", [False, True], ids=["f32", "f16"])
def test_ce_backward_kernel_computes_its_column_instead_of_reading_an_iota(
        gpu_like, monkeypatch, autocast):  # noqa: F811
    cf, losses, params, bwd = _bwd(autocast, monkeypatch)
    k = bwd.op.kernel
    assert _leaves(k) == {Index(CLASSES, 1, dt.int64)}
    # no int64 input varies along the class axis (the targets: one per row)
    assert all(s.strides[-1] == 0 for s in k.inputs if s.dtype is dt.int64), k.inputs
    # and no graph node makes the iota any more (dce dropped the constant)
    g = cf.graphs()[-1]
    assert not [n for n in g.nodes if n.op.name == "constant" and
                n.outs[0].dtype is dt.int64 and n.outs[0].shape == (1, CLASSES)]
    src = _render_one(k, "block")
    ptrs = [ln for ln in src.splitlines() if ln.startswith('extern "C"')][0]
    assert ptrs.count("const int64_t *__restrict__ in") == 1       # the targets only
    _, base_losses, base_params, base = _bwd(autocast, monkeypatch, rewrite=False)
    kb = base.op.kernel
    assert not _leaves(kb) and len(kb.inputs) == len(k.inputs) + 1
    # bytes an element loads: the iota's 8 less (float32: 4 + 8 -> 4; float16 with the
    # bias recomputed in the kernel: 2 + 2 + 8 -> 2 + 2)
    assert read_bytes(kb) - read_bytes(k) == 8, (read_bytes(kb), read_bytes(k))
    # the same values: bit for bit the unrewritten graph's, and the CPU's within rounding
    assert losses == base_losses
    for a, b in zip(params, base_params):
        np.testing.assert_array_equal(a, b)
    _, want_losses, want = _ce_step("cpu", autocast)
    _close(losses, params, want_losses, want, autocast)


def test_a_traced_arange_compare_reads_no_iota(gpu_like, monkeypatch):  # noqa: F811
    """A one-hot written against ``arange`` (a factory tensor: a graph constant) gets the
    same rewrite, wherever the constant came from."""
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")

    def f(t, x):
        hot = t.unsqueeze(-1) == em.arange(37, device=x.device)
        return (hot.float() * x).exp() * 2.0

    em.manual_seed(0)
    t = em.randint(0, 37, (9,))
    x = em.randn(9, 37)
    got = em.compile(f)
    got(t.to("cuda"), x.to("cuda"))
    out = got(t.to("cuda"), x.to("cuda")).cpu().numpy()
    np.testing.assert_allclose(out, f(t, x).numpy(), rtol=1e-6)
    fused = [n for n in got.graphs()[-1].nodes if n.op.name == "fused"]
    assert fused and all(s.dtype is not dt.int64 or s.strides[-1] == 0
                         for n in fused for s in n.op.kernel.inputs)
    assert any(_leaves(n.op.kernel) for n in fused)


def test_loads_renumber_after_the_leaf():
    """A kernel whose iota input sat between others reads the others at their new
    positions (``fuse_index._substitute``)."""
    from ember.graph.passes.fuse_index import _substitute
    e = Apply("add", (Load(0), Load(2)))
    go = _substitute({0: Load(0), 1: Index(4), 2: Load(1)})
    assert go(e) == Apply("add", (Load(0), Load(1)))
    assert go(Apply("eq", (Load(1), Load(0)))) == Apply("eq", (Index(4), Load(0)))


def test_gpt_head_backward_kernel_reads_the_logits_only(gpu_like, monkeypatch):  # noqa: F811
    """``bench/cuda.py``'s GPT (one small layer, a 2053-word vocabulary: above the
    recompute size, so the loss stores row values only) under float16 autocast: the
    cross-entropy backward kernel loads 2 bytes an element (the float16 logits; was 10
    with the iota) and its text has one int64 pointer (the targets, one a row)."""
    import importlib.util
    import os
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    _numpy_cublas(monkeypatch)
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "cuda.py")
    spec = importlib.util.spec_from_file_location("bench_cuda", path)
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    vocab = 2053
    em.manual_seed(0)
    model = bc._gpt_class(em, d=32, n_layers=1, heads=2, vocab=vocab, block=16)().cuda()
    opt = em.optim.AdamW(model.parameters(), lr=3e-4)
    idx = em.randint(0, vocab, (2, 16), device="cuda")
    tgt = em.randint(0, vocab, (2, 16), device="cuda")

    def step(idx, tgt):
        with em.autocast("cuda", dtype=em.float16):
            loss = em.nn.functional.cross_entropy(model(idx).view(-1, vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    cf = em.compile(step)
    losses = [float(cf(idx, tgt)) for _ in range(2)]
    assert all(np.isfinite(losses))
    bwd = [n for n in cf.graphs()[-1].nodes if n.op.name == "fused" and
           n.op.ops.split(",")[:2] == ["eq", "where"]]
    assert len(bwd) == 1, [n.op.ops for n in cf.graphs()[-1].nodes if n.op.name == "fused"]
    k = bwd[0].op.kernel
    assert _leaves(k) == {Index(vocab, 1, dt.int64)}
    assert read_bytes(k) == 2 and k.out.dtype is dt.float16, k.inputs
    head = [ln for ln in _render_one(k, "block").splitlines() if ln.startswith('extern "C"')]
    assert head[0].count("const int64_t *__restrict__ in") == 1
