"""Issue 19 item 7 (compiled W1 vs JAX): fewer Python-level steps in a compiled MLP step.

* ``scatter_select``: a one-hot ``scatter_add_along_dim`` (cross-entropy's backward)
  becomes ``where(idx == iota, g, 0)`` and fuses into its consumer's kernel, bitwise the
  registry kernel's result (NaN, -0.0 and out-of-range indices included).
* ``matmul_t``: ``matmul(permute(a), b)`` reads ``a.T`` through BLAS's flags, one node
  fewer, bitwise the same product; a permute something else reads stays.
* the executor puts constant nodes' values in place before a run instead of calling a
  step for them.
"""
import numpy as np
import pytest

import ember as em
import ember.nn.functional as F
from ember.graph.executor import Program
from ember.graph.passes import DEFAULT_PASSES
from ember.graph.passes.matmul_t import matmul_t
from ember.graph.passes.scatter_select import scatter_select
from ember.ops.registry import REGISTRY


def _names(g) -> list:
    return [n.op.name for n in g.nodes]


def _take_grad(x, idx, g):
    """d/dx of ``sum(take_along_dim(x, idx, 1) * g)``: ``scatter_add_along_dim(g, idx)``."""
    x = x.detach().requires_grad_(True)
    (dx,) = em.autograd.grad((em.take_along_dim(x, idx, 1) * g).sum(), [x])
    return dx


def _without(*drop):
    return [p for p in DEFAULT_PASSES if p not in drop]


@pytest.mark.parametrize("ncls", [10, 40])
def test_scatter_select_is_the_registry_scatter_bitwise(ncls):
    rng = np.random.default_rng(0)
    g = rng.standard_normal((64, 1)).astype(np.float32)
    g[:4, 0] = [np.nan, -0.0, np.inf, -np.inf]
    idx = rng.integers(0, ncls, (64, 1))
    x = em.tensor(rng.standard_normal((64, ncls)).astype(np.float32))
    on = em.compile(_take_grad, passes=DEFAULT_PASSES)
    off = em.compile(_take_grad, passes=_without("scatter_select"))
    args = (x, em.tensor(idx), em.tensor(g))
    on(*args), off(*args)
    got = on(*args).numpy()
    assert "scatter_add_along_dim" not in _names(on.graph), _names(on.graph)
    assert "scatter_add_along_dim" in _names(off.graph)
    ref = REGISTRY["scatter_add_along_dim"].kernel_for("cpu")(np, g, idx, dim=1,
                                                              shape=(64, ncls))
    want = np.zeros((64, ncls), np.float32)
    want[np.arange(64), idx[:, 0]] = g[:, 0]
    np.testing.assert_array_equal(got, want)              # NaN positions equal too
    if ncls <= 16:      # the registry's one-hot kernel selects: the same bits
        np.testing.assert_array_equal(got.view(np.int32), ref.view(np.int32))
    else:               # bincount adds to +0.0: equal values (-0.0 == 0.0)
        np.testing.assert_array_equal(got, ref)


def test_scatter_select_out_of_range_index_selects_nothing():
    """Like the registry's one-hot kernel: an index past the end gives a zero row."""
    idx = np.array([[0], [3], [7]])        # 7 >= 4
    g = np.array([[1.0], [2.0], [3.0]], np.float32)
    x = em.zeros(3, 4)
    f = em.compile(_take_grad, passes=DEFAULT_PASSES)
    try:
        f(x, em.tensor(idx), em.tensor(g))      # the traced (eager) call may refuse it
    except (IndexError, ValueError):
        f(x, em.tensor(np.array([[0], [3], [1]])), em.tensor(g))
    got = f(x, em.tensor(idx), em.tensor(g)).numpy()
    ref = REGISTRY["scatter_add_along_dim"].kernel_for("cpu")(np, g, idx, dim=1, shape=(3, 4))
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got[2], np.zeros(4, np.float32))


def test_scatter_select_leaves_colliding_scatters_alone():
    """Two indices per row may collide: not one-hot, the pass must not touch it."""
    f = em.compile(_take_grad, passes=["scatter_select"])
    x = em.randn(5, 6)
    idx = em.tensor(np.array([[1, 1]] * 5))
    g = em.randn(5, 2)
    f(x, idx, g)
    got = f(x, idx, g).numpy()
    assert "scatter_add_along_dim" in _names(f.graph)
    _, stats = scatter_select(f.graph)
    assert stats == {"scatter_select": 0}
    np.testing.assert_allclose(got[:, 1], g.numpy().sum(1), rtol=1e-6)


def _mlp_step():
    em.manual_seed(0)
    model = em.nn.Sequential(em.nn.Linear(12, 16), em.nn.ReLU(), em.nn.Linear(16, 3))
    opt = em.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return model, step


def test_compiled_mlp_step_without_transposes_or_scatter_is_bitwise_the_same():
    x, y = em.randn(8, 12), em.randint(0, 3, (8,))
    runs = []
    # NOTE: without ce_rows (it matches scatter_select's form only, and rounds otherwise)
    for passes in (_without("ce_rows"), _without("matmul_t", "scatter_select", "ce_rows")):
        model, step = _mlp_step()
        f = em.compile(step, passes=passes)
        losses = [float(f(x, y)) for _ in range(4)]
        runs.append((losses, [p.detach().numpy().copy() for p in model.parameters()],
                     _names(f.graph)))
    (la, pa, na), (lb, pb, nb) = runs
    assert la == lb
    for a, b in zip(pa, pb):
        np.testing.assert_array_equal(a, b)
    assert "matmul_t" in na and "permute" not in na, na
    assert "scatter_add_along_dim" not in na
    assert "permute" in nb and "scatter_add_along_dim" in nb
    model, step = _mlp_step()                   # and eager agrees within tolerance
    eager = [float(step(x, y)) for _ in range(4)]
    np.testing.assert_allclose(la, eager, rtol=1e-5)


def test_matmul_t_keeps_a_permute_that_another_node_reads():
    def f(a, b):
        t = a.t()
        return t @ b, t * 2.0
    c = em.compile(f, passes=["matmul_t", "dce"])
    a, b = em.randn(5, 3), em.randn(5, 4)
    c(a, b)
    (p, q) = c(a, b)
    assert "permute" in _names(c.graph) and "matmul_t" not in _names(c.graph)
    np.testing.assert_array_equal(p.numpy(), a.numpy().T @ b.numpy())
    np.testing.assert_array_equal(q.numpy(), a.numpy().T * 2.0)
    _, stats = matmul_t(c.graph)
    assert stats == {"matmul_t": 0}


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_matmul_t_flags_and_planned_buffers(ta, tb):
    """Each flag reads its operand transposed, also into a buffer the planner reuses."""
    def f(a, b):
        a2 = a.t() if ta else a
        b2 = b.t() if tb else b
        h = (a2 @ b2).relu()                 # h dies: a later product may reuse its buffer
        return (h @ em.ones(6, 6)) + 1.0
    a = em.randn(*((7, 5) if ta else (5, 7)))
    b = em.randn(*((6, 7) if tb else (7, 6)))
    c = em.compile(f, passes=["matmul_t", "dce"])
    c(a, b)
    got = c(a, b).numpy()
    names = _names(c.graph)
    assert names.count("matmul_t") == 1 and "permute" not in names, names
    a2 = a.numpy().T if ta else a.numpy()
    b2 = b.numpy().T if tb else b.numpy()
    want = (np.maximum(a2 @ b2, 0) @ np.ones((6, 6), np.float32)) + 1.0
    np.testing.assert_array_equal(got, want)


def test_executor_places_constants_without_a_step():
    def f(x):
        return x * em.tensor([1.0, 2.0, 3.0]) + em.tensor(0.5), em.tensor([7.0, 8.0])
    c = em.compile(f, passes=[])
    x = em.randn(4, 3)
    c(x)
    for _ in range(2):                  # twice: a run must not consume the constants
        y, k = c(x)
        np.testing.assert_allclose(y.numpy(), x.numpy() * [1.0, 2.0, 3.0] + 0.5, rtol=1e-6)
        np.testing.assert_array_equal(k.numpy(), [7.0, 8.0])
    consts = [n for n in c.graph.nodes if n.op.name == "constant"]
    assert len(consts) >= 2
    prog = Program(c.graph)
    # one step per non-constant node; a constant that is an output keeps its step
    out_ids = {v.id for v in c.graph.outputs}
    kept = [n for n in consts if n.outs[0].id in out_ids]
    assert len(prog._serial) == len(c.graph.nodes) - len(consts) + len(kept)
    y2, k2 = prog.run([x.numpy()])
    np.testing.assert_array_equal(y2, y.numpy())
    np.testing.assert_array_equal(k2, [7.0, 8.0])


def _take(x, idx):
    return em.take_along_dim(x, idx, 1) * 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_take_rows_is_take_along_dim(dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((33, 7)).astype(dtype)
    x[0, :] = [np.nan, -0.0, np.inf, -np.inf, 1, 2, 3]
    idx = rng.integers(0, 7, (33, 1))
    idx[0, 0] = 1                                     # -0.0 keeps its sign
    on = em.compile(_take, passes=DEFAULT_PASSES)
    off = em.compile(_take, passes=_without("take_rows"))
    a = (em.tensor(x), em.tensor(idx))
    on(*a), off(*a)
    got, ref = on(*a).numpy(), off(*a).numpy()
    assert "take_rows" in _names(on.graph) and "take_along_dim" not in _names(on.graph)
    assert "take_along_dim" in _names(off.graph)
    want = np.take_along_axis(x, idx, axis=1)
    u = np.int32 if dtype == np.float32 else np.int64
    np.testing.assert_array_equal(got.view(u), want.view(u))
    np.testing.assert_array_equal(ref.view(u), want.view(u))


@pytest.mark.parametrize("bad", [7, -1, 100])
def test_take_rows_out_of_range_index_raises_like_eager(bad):
    x = em.randn(4, 7)
    f = em.compile(_take, passes=DEFAULT_PASSES)
    f(x, em.tensor(np.array([[0], [1], [2], [3]])))
    assert "take_rows" in _names(f.graph)
    idx = em.tensor(np.array([[0], [1], [bad], [3]]))
    msg = r"index out of range for dim 1 of size 7 \(indices must be in \[0, 6\]"
    with pytest.raises(IndexError, match=msg):
        _take(x, idx)                                   # eager
    with pytest.raises(IndexError, match=msg + f"; got {bad} in row 2"):
        f(x, idx)                                       # compiled


def test_take_rows_non_contiguous_input_falls_back():
    from ember.graph.passes.take_rows import _run_take_rows
    x = np.arange(40, dtype=np.float32).reshape(5, 8)[:, ::2]       # (5, 4), strided
    idx = np.array([[0], [3], [1], [2], [2]])
    np.testing.assert_array_equal(_run_take_rows(np, x, idx, dim=1),
                                  np.take_along_axis(x, idx, axis=1))
    xc = np.ascontiguousarray(x)
    np.testing.assert_array_equal(_run_take_rows(np, xc, idx, dim=1),
                                  np.take_along_axis(xc, idx, axis=1))


def _adam_step():
    em.manual_seed(0)
    model = em.nn.Sequential(em.nn.Linear(12, 16), em.nn.ReLU(), em.nn.Linear(16, 3))
    opt = em.optim.Adam(model.parameters(), lr=0.01)

    def step(x, y):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model, step


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_add_of_negated_product_becomes_sub_bitwise(opt):
    """SGD's ``p + g * (-lr)`` is ``p - g * lr`` with no ``neg`` node; exact (NumPy ops)."""
    from ember.graph.passes import EXACT_PASSES
    x, y = em.randn(8, 12), em.randint(0, 3, (8,))
    runs = []
    for compiled in (True, False):
        model, step = _mlp_step() if opt == "sgd" else _adam_step()
        f = em.compile(step, passes=EXACT_PASSES) if compiled else step
        for _ in range(3):
            f(x, y)
        runs.append([p.detach().numpy().copy() for p in model.parameters()])
        if compiled:
            names = _names(f.graph)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))
    if opt == "sgd":        # the loss keeps one (of the target count); the lr's are gone
        assert names.count("neg") == 1 and names.count("sub") >= 4, names


def test_cross_entropy_row_gradient_joins_the_softmax_backward_kernel(monkeypatch):
    """The masked row gradient ``where(mask, g, 0)`` of cross-entropy (``ignore_index``)
    is absorbed into log-softmax's backward kernel as row members (``fuse_groups.
    _absorb_rows``) and reads the 0-d gradient itself (``simplify``: no reshape): same bits
    as the graph without them."""
    from ember import codegen
    from ember.graph.passes import fuse_groups
    if not codegen.available():
        pytest.skip("no C compiler: nothing is fused")
    rng = np.random.default_rng(0)
    x = em.tensor(rng.standard_normal((64, 10)).astype(np.float32))
    y = rng.integers(0, 10, 64)
    y[:5] = -100                                        # ignored targets
    y = em.tensor(y)

    def f(x, y):
        x = x.detach().requires_grad_(True)
        (dx,) = em.autograd.grad(F.cross_entropy(x, y), [x])
        return dx
    on = em.compile(f)
    on(x, y)
    got = on(x, y).numpy()
    assert "where" not in _names(on.graph) and "reshape" not in [
        n.op.name for n in on.graph.nodes if n.inputs and n.inputs[0].shape == ()]
    monkeypatch.setattr(fuse_groups, "_absorb_rows", lambda graph, groups: None)
    off = em.compile(f)
    off(x, y)
    ref = off(x, y).numpy()
    assert "where" in _names(off.graph)
    np.testing.assert_array_equal(got.view(np.int32), ref.view(np.int32))
    np.testing.assert_array_equal(got[:5], 0)
