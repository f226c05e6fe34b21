"""The ``sdpa_layout`` pass (dq, dk, dv land in the slots of the packed qkv gradient) and
the opt-in ``sdpa_out_layout`` (attention's output lands as ``(B, T, H, D)``): no copies
around the kernels, bitwise the graph without the passes, eager's values within rounding."""
import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.codegen import attention_kernels as ak
from ember.graph.passes import DEFAULT_PASSES, EXACT_PASSES
from ember.graph.passes.sdpa_layout import _run_sdpa_grad_stacked, _run_sdpa_permuted
from ember.ops import attention as A

from ._kernels import op_names

def _with_out(passes):
    i = passes.index("sdpa_layout") + 1
    return passes[:i] + ["sdpa_out_layout"] + passes[i:]


ON, EXACT_ON = _with_out(DEFAULT_PASSES), _with_out(EXACT_PASSES)
OFF = [p for p in DEFAULT_PASSES if p != "sdpa_layout"]
EXACT_OFF = [p for p in EXACT_PASSES if p != "sdpa_layout"]


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _block(B=3, T=10, H=2, D=4, dtype=em.float32, causal=True, seed=0):
    """A training step of the W3 GPT's attention (bench/train.py): a packed qkv projection
    split as (B, T, 3, H, D), permuted and unbound, sdpa, back to (B, T, C), a projection."""
    em.manual_seed(seed)
    C = H * D
    qkv, proj = em.nn.Linear(C, 3 * C).to(dtype), em.nn.Linear(C, C).to(dtype)
    params = list(qkv.parameters()) + list(proj.parameters())
    x = em.randn(B, T, C, dtype=dtype)

    def step(x):
        for p in params:
            p.grad = None
        q, k, v = qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        loss = proj(y.transpose(1, 2).reshape(B, T, C)).square().sum()
        loss.backward()
        return (loss.detach(),) + tuple(p.grad for p in params)

    return step, x


def _run(passes, dtype=em.float32, causal=True, **shape):
    step, x = _block(dtype=dtype, causal=causal, **shape)
    c = em.compile(step, passes=passes)
    c(x)                                     # the first call traces (runs eagerly)
    return [t.numpy().copy() for t in c(x)], c, x


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [em.float32, em.float64])
def test_no_copies_and_bitwise_the_graph_without_the_passes(dtype, causal):
    on, c_on, x = _run(ON, dtype, causal)
    off, c_off, _ = _run(OFF, dtype, causal)
    names, before = op_names(c_on.graph), op_names(c_off.graph)
    assert {"sdpa_permuted", "sdpa_grad_stacked"} <= set(names)
    assert not {"sdpa", "sdpa_grad", "scatter_stack"} & set(names)
    assert {"sdpa", "sdpa_grad", "scatter_stack"} <= set(before)
    # sdpa + permute -> 1 node; sdpa_grad + 3 slices + 3 reshapes + scatter_stack -> 1
    assert len(before) - len(names) == 1 + 7
    for a, b in zip(on, off):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    # every reshape of the two new nodes' outputs is a view of their buffers (no copy)
    plan = c_on.memory_plan(x)
    made = {n.out.id for n in c_on.graph.nodes if n.op.name.startswith("sdpa_")}
    readers = []
    for n in c_on.graph.nodes:               # reshapes of them, and reshapes of those
        if n.op.name == "reshape" and n.inputs[0].id in made:
            readers.append(n)
            made.add(n.out.id)
    assert len(readers) >= 3 and all(plan.kind[n.out.id] == "alias" for n in readers)


def test_default_pipeline_stacks_the_gradient_and_copies_the_output_once():
    """By default the forward keeps ``sdpa`` and one copy (simplify makes the weight
    gradient's reshape a view of the first); the backward is stacked."""
    on, c, x = _run(DEFAULT_PASSES)
    off, _, _ = _run(OFF)
    names = op_names(c.graph)
    assert "sdpa" in names and "sdpa_grad_stacked" in names
    assert not {"sdpa_permuted", "sdpa_grad", "scatter_stack"} & set(names)
    for a, b in zip(on, off):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    g = c.graph
    sd = next(n for n in g.nodes if n.op.name == "sdpa")
    (pm,) = [n for n in g.nodes if sd.out in n.inputs]
    copies = [n for n in g.nodes if n.op.name == "reshape" and pm.out in n.inputs]
    assert len(copies) == 1 and c.memory_plan(x).kind[copies[0].out.id] != "alias"


@pytest.mark.parametrize("causal", [True, False])
def test_matches_eager(causal):
    """Eager runs the same kernels; the compiled step's other fused kernels round
    differently, so: float64, to 1e-12 relative to each gradient's scale."""
    step, x = _block(dtype=em.float64, causal=causal, seed=3)
    eager = [t.numpy().copy() for t in step(x)]
    got, c, _ = _run(ON, em.float64, causal, seed=3)
    assert {"sdpa_permuted", "sdpa_grad_stacked"} <= set(op_names(c.graph))
    for a, b in zip(got, eager):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


def test_exact_pipeline_is_bitwise_eager():
    """EXACT_PASSES (no generated kernels): the step is eager's, bit for bit."""
    step, x = _block(seed=4)
    eager = [t.numpy().copy() for t in step(x)]
    got, c, _ = _run(EXACT_ON, seed=4)
    assert "sdpa_permuted" in op_names(c.graph) and "sdpa_grad_stacked" in op_names(c.graph)
    for a, b in zip(got, eager):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_without_a_compiler_the_numpy_kernels_write_the_layouts(monkeypatch):
    """No C compiler: the nodes run the primitives' NumPy kernels and copy into place —
    still bitwise the graph without the pass (which runs the same NumPy kernels)."""
    monkeypatch.setattr(ak, "kernels", lambda: None)
    on, c_on, _ = _run(EXACT_ON, em.float64, seed=5)
    off, _, _ = _run(EXACT_OFF, em.float64, seed=5)
    assert {"sdpa_permuted", "sdpa_grad_stacked"} <= set(op_names(c_on.graph))
    for a, b in zip(on, off):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def _heads_fn(scale, other_reader=False, dims=(0, 2, 1, 3)):
    """d/dt of attention over the unbound (B, T, 3, H, D) ``t``; optionally the output is
    also read as is (not only through the permute)."""
    def f(t, w):
        t = t.detach().requires_grad_(True)
        q, k, v = t.permute(2, 0, 3, 1, 4).unbind(0)
        y = A.sdpa(q, k, v, scale=scale, is_causal=True)
        loss = (y.permute(*dims) * w).sum()
        if other_reader:
            loss = loss + y.square().sum()
        (g,) = em.autograd.grad(loss, [t])
        return g, y.detach().permute(*dims).reshape(w.shape[0], w.shape[1], -1)
    return f


@pytest.mark.parametrize("other_reader", [False, True])
def test_minus_zero_and_other_readers(other_reader):
    """With k = 0 and a negative scale the kernel's dq is -0.0; the stacked gradient is
    ``0 + dq`` = +0.0, as scatter_stack (and eager's unbind) write it."""
    t = em.randn(2, 6, 3, 2, 4)
    t[:, :, 1] = 0.0
    w = em.randn(2, 6, 2, 4)
    f = _heads_fn(-0.5, other_reader)
    on, off = em.compile(f, passes=EXACT_ON), em.compile(f, passes=EXACT_OFF)
    on(t, w), off(t, w)
    got, ref, eager = on(t, w), off(t, w), f(t, w)
    assert "sdpa_grad_stacked" in op_names(on.graph)
    made = next(n.out for n in on.graph.nodes if n.op.name == "sdpa_permuted")
    readers = [n.op.name for n in on.graph.nodes if made in n.inputs]
    assert ("permute" in readers) == other_reader       # the old layout, as a view
    for a, b, e in zip(got, ref, eager):
        np.testing.assert_array_equal(_bits(a.numpy()), _bits(b.numpy()))
        np.testing.assert_array_equal(_bits(a.numpy()), _bits(e.numpy()))
    dq = got[0].numpy()[:, :, 0]
    assert np.all(dq == 0) and not np.signbit(dq).any()
    # the test can fail: the kernel's own dq carries the sign
    q, k, v = (x.numpy() for x in t.permute(2, 0, 3, 1, 4).unbind(0))
    raw = A._sdpa_grad_cpu(np, np.ones((2, 2, 6, 4), np.float32), q, k, v, -0.5, True)
    assert np.signbit(raw[:q.size]).any()


def test_a_permute_that_moves_the_last_dim_is_left_alone():
    t, w = em.randn(2, 6, 3, 2, 4), em.randn(2, 4, 6, 2)
    f = _heads_fn(0.5, dims=(0, 3, 2, 1))
    c = em.compile(f, passes=EXACT_ON)
    c(t, w)
    names = op_names(c.graph)
    assert "sdpa" in names and "sdpa_permuted" not in names
    assert "sdpa_grad_stacked" in names                       # the backward still is
    for a, b in zip(c(t, w), f(t, w)):
        np.testing.assert_array_equal(_bits(a.numpy()), _bits(b.numpy()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_nodes_write_into_a_given_buffer(dtype):
    """The memory planner may hand the nodes a dead buffer (``out=``); float16 has no C
    kernel (the NumPy kernels run)."""
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((2, 5, 3, 2, 8)).astype(dtype)
    q, k, v = qkv.transpose(2, 0, 3, 1, 4)
    buf = np.full((2, 5, 2, 8), np.nan, dtype)
    got = _run_sdpa_permuted(np, q, k, v, scale=0.3, is_causal=True, dims=(0, 2, 1, 3),
                             out=buf)
    ref = A._sdpa_cpu(np, q, k, v, 0.3, True).transpose(0, 2, 1, 3)
    assert got is buf
    np.testing.assert_array_equal(got, ref)
    g = rng.standard_normal((2, 2, 5, 8)).astype(dtype)
    buf = np.full((4, 2, 5, 2, 8), np.nan, dtype)   # 4 slots: slot 3 gets zeros
    got = _run_sdpa_grad_stacked(np, g, q, k, v, scale=0.3, is_causal=True, slots=(2, 0, 1),
                                 full=(4, 2, 2, 5, 8), dims=(0, 1, 3, 2, 4), out=buf)
    flat = A._sdpa_grad_cpu(np, g, q, k, v, 0.3, True)
    parts = np.split(flat, 3)
    view = got.transpose(0, 1, 3, 2, 4)
    for j, p in zip((2, 0, 1), parts):
        np.testing.assert_array_equal(view[j], p.reshape(q.shape) + 0.0)
    assert np.all(view[3] == 0)
