"""The ``pool`` pass: max-pools, their gradients and im2col/col2im as C loops.

Compiled functions (forward and ``autograd.grad`` backward in one graph) are compared with
eager Ember. Max-pool values and indices are bitwise eager's; gradients flowing through
``fold``/``maxpool_grad`` add the same terms (where windows overlap maybe in another
order): within ``kh*kw`` roundings of the largest term, plus the GEMMs' own tolerance for
convolutions.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember.codegen import conv_kernels as ck
from ember.graph.passes import DEFAULT_PASSES
from ember.graph.passes.pool import pool
from ._kernels import eps, needs_compiler, op_names

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from train import WORKLOADS  # noqa: E402

F = em.nn.functional
# the pool pass alone (conv_gemm, after it, rewrites its conv nodes again: its own tests)
POOL = [p for p in DEFAULT_PASSES if p != "conv_gemm"]
NO_POOL = [p for p in POOL if p != "pool"]


_need_compiler = needs_compiler("the pool pass leaves graphs unchanged (tested below)")


# (shape, kernel, stride, padding, dilation, ceil_mode)
POOLS = [
    ((2, 3, 8, 8), 2, 2, 0, 1, False),
    ((2, 3, 9, 7), 3, 2, 1, 1, False),          # odd sizes, overlapping windows, padding
    ((1, 2, 11, 10), (3, 2), (2, 1), (1, 1), (2, 1), True),
    ((3, 1, 5, 5), 2, 1, 1, 1, False),
    ((1, 4, 7, 6), 3, 3, 1, 1, True),
]


@pytest.mark.parametrize("dtype", [em.float32, em.float64])
@pytest.mark.parametrize("case", POOLS)
def test_max_pool_forward_and_backward_match_eager(case, dtype):
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(len(shape) + shape[-1] * 7 + shape[-2])
    xa = rng.standard_normal(shape)
    xa[rng.random(shape) < 0.3] = 0.25                 # ties: the first maximum wins
    x = em.tensor(xa, dtype=dtype)

    def f(x):
        x = x.detach().requires_grad_(True)
        y, ind = F.max_pool2d(x * 2, k, s, p, d, ceil, return_indices=True)
        gy = em.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) % 5 - 2.0, dtype=dtype)
        (dx,) = em.autograd.grad(y, [x], gy)
        return y.detach(), ind, dx

    cf = em.compile(f, fullgraph=True)
    cf(x)
    names = op_names(cf.graph)
    assert "maxpool" in names and "maxpool_grad" in names, names
    assert "argmax" not in names and "scatter_add_along_dim" not in names, names
    got, want = cf(x), f(x)
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    kk = np.prod(np.broadcast_to(k, 2))
    np.testing.assert_allclose(got[2].numpy(), want[2].numpy(), rtol=kk * eps(dtype),
                               atol=kk * eps(dtype) * 4)
    assert got[0].dtype is dtype and got[2].dtype is dtype


CONVS = [
    ((2, 3, 9, 8), (4, 3, 3, 3), dict(padding=1)),
    ((1, 2, 10, 7), (3, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    ((2, 4, 7, 6), (2, 4, 2, 2), dict(stride=2)),
]


@pytest.mark.parametrize("dtype", [em.float32, em.float64])
@pytest.mark.parametrize("case", CONVS)
def test_conv_forward_and_backward_match_eager(case, dtype):
    xs, ws, kw = case
    rng = np.random.default_rng(xs[-1] * 13 + ws[0])
    x = em.tensor(rng.standard_normal(xs), dtype=dtype)
    w = em.tensor(rng.standard_normal(ws), dtype=dtype)

    def f(x, w):
        x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        y = F.conv2d(x, w, **kw)
        dx, dw = em.autograd.grad((y * y).sum(), [x, w])
        return y.detach(), dx, dw

    cf = em.compile(f, fullgraph=True, passes=POOL)
    cf(x, w)
    names = op_names(cf.graph)
    assert "unfold_c" in names and "fold_c" in names and "unfold" not in names, names
    # the GEMMs sum K terms: allow that many roundings of the largest product
    tol = 50 * ws[1] * ws[2] * ws[3] * eps(dtype)
    for g, e in zip(cf(x, w), f(x, w)):
        ga, ea = g.numpy(), e.numpy()
        np.testing.assert_allclose(ga, ea, rtol=tol, atol=tol * np.abs(ea).max())


def test_w2_training_step_matches_the_unpooled_pipeline():
    wl = WORKLOADS["W2 CNN SGD"]
    losses, params = {}, {}
    for passes in (POOL, NO_POOL):
        em.manual_seed(0)
        model, opt = wl.build(em, **wl.tiny)
        xa, ya = wl.data(np.random.default_rng(0), **wl.tiny)
        x, y = em.tensor(xa), em.tensor(ya)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        cf = em.compile(step, passes=passes)
        key = "pool" in passes
        losses[key] = [float(cf(x, y)) for _ in range(4)]
        params[key] = [p.detach().numpy().copy() for p in model.parameters()]
        if key:
            names = op_names(cf.graph)
            assert names.count("maxpool_bias_relu") == 2 and names.count("maxpool_grad") == 2, \
                names
    tol = 200 * eps(em.float32)
    np.testing.assert_allclose(losses[True], losses[False], rtol=tol)
    for a, b in zip(params[True], params[False]):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())


def test_without_a_compiler_the_pass_changes_nothing(monkeypatch):
    monkeypatch.setattr(ck, "find_compiler", lambda: None)
    x = em.randn(2, 3, 6, 6)

    def f(x):
        x = x.detach().requires_grad_(True)
        y = F.max_pool2d(x, 2)
        (dx,) = em.autograd.grad(y.sum(), [x])
        return y.detach(), dx

    cf = em.compile(f, fullgraph=True)
    got = cf(x)
    names = op_names(cf.graph)
    assert "argmax" in names and not {"maxpool", "maxpool_grad", "unfold_c"} & set(names)
    g2, stats = pool(cf.graph)
    assert g2 is cf.graph and stats == {"no_compiler": 1}
    for a, b in zip(got, f(x)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_integer_and_unmatched_graphs_are_left_alone():
    x = em.arange(2 * 1 * 4 * 4).reshape(2, 1, 4, 4)
    cf = em.compile(lambda x: F.unfold(x, 2), fullgraph=True)
    got = cf(x)
    assert "unfold" in op_names(cf.graph) and "unfold_c" not in op_names(cf.graph)
    np.testing.assert_array_equal(got.numpy(), F.unfold(x, 2).numpy())


@pytest.mark.parametrize("dtype", [em.float32, em.float64])
@pytest.mark.parametrize("case", POOLS[:3])
def test_relu_before_a_max_pool_is_masked_at_the_window_maxima(case, dtype):
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(shape[-1])
    xa = rng.standard_normal(shape)
    xa[rng.random(shape) < 0.2] = 0.0                  # relu's kink: gradient 0 there
    xa.flat[::11] = np.nan
    x = em.tensor(xa, dtype=dtype)
    ga = rng.standard_normal(tuple(F.max_pool2d(x, k, s, p, d, ceil).shape))
    ga.flat[::5] = np.inf                              # masked inf -> 0, as in eager
    gy = em.tensor(ga, dtype=dtype)

    def f(x, gy):
        x = x.detach().requires_grad_(True)
        y = F.max_pool2d(F.relu(x), k, s, p, d, ceil)
        (dx,) = em.autograd.grad(y, [x], gy)
        return y.detach(), dx

    cf = em.compile(f, fullgraph=True)
    cf(x, gy)
    g = cf.graph
    names = op_names(g)
    assert "maxpool_grad" in names, names
    # the mask ran at the pooled size, before the scatter: after it, only reshapes
    mg = next(n for n in g.nodes if n.op.name == "maxpool_grad")
    after, seen = {mg.outs[0].id}, []
    for n in g.nodes:
        if any(v.__class__ is em.graph.ir.Var and v.id in after for v in n.inputs):
            seen.append(n.op.name)
            after |= {o.id for o in n.outs}
    assert set(seen) <= {"reshape"}, (seen, g)
    got, want = cf(x, gy), f(x, gy)
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    kk = np.prod(np.broadcast_to(k, 2))
    np.testing.assert_array_equal(np.isnan(got[1].numpy()), np.isnan(want[1].numpy()))
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=kk * eps(dtype),
                               atol=kk * eps(dtype) * 4)


@pytest.mark.parametrize("dtype", [em.float32, em.float64])
@pytest.mark.parametrize("pool_args", [(2, 2), (3, 3), (2, 1)])
def test_conv_relu_pool_block_gradients_match_eager(pool_args, dtype):
    """W2's block: the bias gradient is summed at the pooled size (windows without padding)."""
    rng = np.random.default_rng(pool_args[0] * 10 + pool_args[1])
    x = em.tensor(rng.standard_normal((3, 2, 9, 11)), dtype=dtype)
    w = em.tensor(rng.standard_normal((4, 2, 3, 3)), dtype=dtype)
    b = em.tensor(rng.standard_normal(4), dtype=dtype)

    def f(x, w, b):
        x, w, b = (t.detach().requires_grad_(True) for t in (x, w, b))
        y = F.max_pool2d(F.relu(F.conv2d(x, w, b, padding=1)), *pool_args)
        grads = em.autograd.grad((y * y).sum(), [x, w, b])
        return (y.detach(),) + tuple(grads)

    cf = em.compile(f, fullgraph=True, passes=POOL)
    cf(x, w, b)
    names = op_names(cf.graph)
    # bias + relu run inside the pool: nothing else makes a value of the conv's shape
    assert "maxpool_bias_relu" in names and "relu" not in names, names
    conv_shape = (3, 4, 9, 11)
    made = [n.op.name for n in cf.graph.nodes for o in n.outs if o.shape == conv_shape]
    assert set(made) <= {"reshape", "maxpool_grad", "fold_c"}, made
    sums = [n for n in cf.graph.nodes if n.op.name == "sum"]
    if pool_args[0] == pool_args[1]:                   # tiling windows: one sum, pooled
        assert sums and all(n.inputs[0].numel() < x.shape[0] * 4 * 9 * 11 for n in sums)
    tol = 50 * 2 * 9 * eps(dtype)
    for g, e in zip(cf(x, w, b), f(x, w, b)):
        ga, ea = g.numpy(), e.numpy()
        np.testing.assert_allclose(ga, ea, rtol=tol, atol=tol * np.abs(ea).max())
