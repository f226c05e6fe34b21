"""The ``conv_gemm`` pass: a convolution's GEMMs over channel-first columns, one each.

Compiled functions (forward and ``autograd.grad`` backward in one graph, and W2's whole
training step) are compared with eager Ember. The GEMMs add the same products in another
order (the weight gradient's batch sum inside the GEMM): results agree within the GEMMs'
tolerance, not bitwise. The graphs are checked to hold the rewritten nodes, so a pattern
that stops matching fails here rather than silently running the batched GEMMs.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember.codegen import conv_kernels as ck
from ember.graph.passes import DEFAULT_PASSES
from ember.graph.passes.conv_gemm import conv_gemm
from ._kernels import eps, needs_compiler, op_names

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from train import WORKLOADS  # noqa: E402

F = em.nn.functional
NO_GEMM = [p for p in DEFAULT_PASSES if p != "conv_gemm"]


_need_compiler = needs_compiler("the pass leaves graphs unchanged (tested below)")


def _close(got, want, k, dtype):
    # the GEMMs sum k terms (the weight gradient N*L): allow that many roundings
    tol = 50 * k * eps(dtype)
    for g, e in zip(got, want):
        ga, ea = g.numpy(), e.numpy()
        assert ga.shape == ea.shape and ga.dtype == ea.dtype
        np.testing.assert_allclose(ga, ea, rtol=tol, atol=tol * np.abs(ea).max(initial=1.0))


# (x shape, weight shape, conv2d kwargs)
CONVS = [
    ((2, 3, 9, 8), (4, 3, 3, 3), dict(padding=1)),
    ((1, 2, 10, 7), (3, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    ((2, 4, 7, 6), (2, 4, 2, 2), dict(stride=2)),
    ((3, 1, 5, 5), (5, 1, 1, 1), {}),
]


@pytest.mark.parametrize("dtype", [em.float32, em.float64])
@pytest.mark.parametrize("case", CONVS)
def test_conv_without_pool_forward_and_backward_match_eager(case, dtype):
    """No max-pool reads the output: the forward GEMM's result is transposed back."""
    xs, ws, kw = case
    rng = np.random.default_rng(xs[-1] * 13 + ws[0])
    x = em.tensor(rng.standard_normal(xs), dtype=dtype)
    w = em.tensor(rng.standard_normal(ws), dtype=dtype)

    def f(x, w):
        x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        y = F.conv2d(x, w, **kw)
        dx, dw = em.autograd.grad((y * y).sum(), [x, w])
        return y.detach(), dx, dw

    cf = em.compile(f, fullgraph=True)
    cf(x, w)
    names = op_names(cf.graph)
    assert {"unfold_t", "fold_t"} <= set(names), names
    assert not {"unfold_c", "fold_c", "unfold", "fold"} & set(names), names
    # one GEMM per product: no batch sum of stacked weight gradients
    assert all(n.inputs[0].ndim == 2 for n in cf.graph.nodes if n.op.name == "matmul")
    _close(cf(x, w), f(x, w), xs[0] * xs[2] * xs[3], dtype)


@pytest.mark.parametrize("dtype", [em.float32, em.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("pool_args", [(2, 2), (3, 2)])
def test_conv_relu_pool_block_matches_eager(pool_args, bias, dtype):
    """With a bias, the pool reads the GEMM's channel-first planes (no transposes at all);
    without, relu sits between them and the output is transposed back."""
    rng = np.random.default_rng(pool_args[0] * 10 + bias)
    x = em.tensor(rng.standard_normal((3, 2, 9, 11)), dtype=dtype)
    w = em.tensor(rng.standard_normal((4, 2, 3, 3)), dtype=dtype)
    b = em.tensor(rng.standard_normal(4), dtype=dtype) if bias else None

    def f(x, w, *b):
        x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        b = tuple(t.detach().requires_grad_(True) for t in b)
        y = F.max_pool2d(F.relu(F.conv2d(x, w, *b, padding=1)), *pool_args)
        grads = em.autograd.grad((y * y).sum(), [x, w, *b])
        return (y.detach(),) + tuple(grads)

    args = (x, w) + ((b,) if bias else ())
    cf = em.compile(f, fullgraph=True)
    cf(*args)
    names = op_names(cf.graph)
    assert {"unfold_t", "fold_t"} <= set(names), names
    if bias:
        assert "maxpool_bias_relu_cf" in names and "contiguous" not in names, names
    if bias and pool_args[0] == pool_args[1]:          # the relu mask moved: dY from the pool
        assert "maxpool_grad_cf" in names, names
    _close(cf(*args), f(*args), 3 * 9 * 11, dtype)


def test_w2_training_step_matches_eager_and_the_pool_pipeline():
    wl = WORKLOADS["W2 CNN SGD"]
    size = dict(wl.tiny, hw=12, batch=3)
    losses, params = {}, {}
    for key, passes in (("gemm", DEFAULT_PASSES), ("pool", NO_GEMM), ("eager", None)):
        em.manual_seed(0)
        model, opt = wl.build(em, **size)
        xa, ya = wl.data(np.random.default_rng(0), **size)
        x, y = em.tensor(xa), em.tensor(ya)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        cf = step if passes is None else em.compile(step, passes=passes)
        losses[key] = [float(cf(x, y)) for _ in range(4)]
        params[key] = [p.detach().numpy().copy() for p in model.parameters()]
        if key == "gemm":
            names = op_names(cf.graph)
            for op, k in (("unfold_t", 2), ("maxpool_bias_relu_cf", 2), ("maxpool_grad_cf", 2),
                          ("fold_t", 1)):
                assert names.count(op) == k, (op, names)
            assert not {"unfold_c", "fold_c", "contiguous"} & set(names), names
    tol = 200 * eps(em.float32)
    for other in ("pool", "eager"):
        np.testing.assert_allclose(losses["gemm"], losses[other], rtol=tol)
        for a, b in zip(params["gemm"], params[other]):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())


def test_conv_output_read_twice_is_transposed_once():
    """The conv output is a graph output and feeds a pool: one transposing copy serves both."""
    rng = np.random.default_rng(5)
    x = em.tensor(rng.standard_normal((2, 3, 8, 8)), dtype=em.float32)
    w = em.tensor(rng.standard_normal((4, 3, 3, 3)), dtype=em.float32)
    b = em.tensor(rng.standard_normal(4), dtype=em.float32)

    def f(x, w, b):
        w = w.detach().requires_grad_(True)
        y = F.conv2d(x, w, b, padding=1)
        p = F.max_pool2d(F.relu(y), 2)
        (dw,) = em.autograd.grad(p.sum(), [w])
        return y.detach(), p.detach(), dw

    cf = em.compile(f, fullgraph=True)
    cf(x, w, b)
    names = op_names(cf.graph)
    assert "unfold_t" in names and names.count("contiguous") >= 1, names
    _close(cf(x, w, b), f(x, w, b), 2 * 64, em.float32)


def test_grouped_conv_is_left_to_the_pool_pass():
    rng = np.random.default_rng(6)
    x = em.tensor(rng.standard_normal((2, 4, 7, 7)), dtype=em.float64)
    w = em.tensor(rng.standard_normal((6, 2, 3, 3)), dtype=em.float64)

    def f(x, w):
        x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        y = F.conv2d(x, w, padding=1, groups=2)
        dx, dw = em.autograd.grad((y * y).sum(), [x, w])
        return y.detach(), dx, dw

    cf = em.compile(f, fullgraph=True)
    cf(x, w)
    names = op_names(cf.graph)
    assert "unfold_c" in names and "fold_c" in names, names
    assert not {"unfold_t", "fold_t"} & set(names), names
    _close(cf(x, w), f(x, w), 2 * 49, em.float64)


def test_empty_batch():
    x = em.zeros(0, 3, 6, 6)
    w = em.tensor(np.random.default_rng(7).standard_normal((4, 3, 3, 3)), dtype=em.float32)

    def f(x, w):
        x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        y = F.conv2d(x, w, padding=1)
        dx, dw = em.autograd.grad((y * y).sum(), [x, w])
        return y.detach(), dx, dw

    cf = em.compile(f, fullgraph=True)
    got, want = cf(x, w), f(x, w)
    assert "unfold_t" in op_names(cf.graph)
    for g, e in zip(got, want):
        assert g.shape == e.shape
        np.testing.assert_array_equal(g.numpy(), e.numpy())


def test_without_a_compiler_the_pass_changes_nothing(monkeypatch):
    x = em.randn(2, 3, 6, 6)
    w = em.randn(4, 3, 3, 3)

    def f(x, w):
        w = w.detach().requires_grad_(True)
        y = F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)
        (dw,) = em.autograd.grad(y.sum(), [w])
        return y.detach(), dw

    cf = em.compile(f, fullgraph=True, passes=NO_GEMM)
    cf(x, w)
    monkeypatch.setattr(ck, "find_compiler", lambda: None)
    g2, stats = conv_gemm(cf.graph)
    assert g2 is cf.graph and stats == {"no_compiler": 1}
    cf = em.compile(f, fullgraph=True)
    got = cf(x, w)
    names = op_names(cf.graph)
    assert "unfold" in names and not {"unfold_t", "unfold_c", "fold_t"} & set(names), names
    for a, b in zip(got, f(x, w)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
