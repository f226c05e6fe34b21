"""The ``linear`` primitive's ``eager_vjp`` (ops/linear.py): a plain eager backward computes
``dx``, ``dw`` and ``db`` on the raw arrays, with the same kernels and arguments as the
VJP rules' dispatches (bitwise the same gradients), and declines wherever the rules' ops
must be seen or recorded: ``create_graph``, a dispatch mode, forward AD, other dtypes."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.ops.linear import linear_p
from op_names import OpNames


@pytest.fixture
def calls(monkeypatch):
    """How many times the eager rule ran (did not decline)."""
    n = [0]
    rule = linear_p.eager_vjp

    def counted(*a, **k):
        r = rule(*a, **k)
        n[0] += r is not None
        return r
    monkeypatch.setattr(linear_p, "eager_vjp", counted)
    return n


def _grads(x, w, b, g, req):
    ts = [ember.tensor(a, requires_grad=r) for a, r in zip((x, w, b), req)]
    F.linear(*ts).backward(g)
    return [None if t.grad is None else t.grad.numpy().copy() for t in ts]


def _data(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k), dtype=np.float32),
            rng.standard_normal((n, k), dtype=np.float32),
            rng.standard_normal(n, dtype=np.float32),
            rng.standard_normal((m, n), dtype=np.float32))


# W1's layers (Ember's GEMM), a small product (OpenBLAS), a k beyond one block
@pytest.mark.parametrize("shape", [(128, 784, 512), (128, 512, 10), (5, 7, 3), (64, 600, 96)])
@pytest.mark.parametrize("req", [(True, True, True), (False, True, True), (True, False, False),
                                 (False, True, False)])
def test_same_bits_as_the_rules(shape, req, calls, monkeypatch):
    x, w, b, g = _data(*shape)
    fast = _grads(x, w, b, ember.tensor(g), req)
    assert calls[0] == 1
    monkeypatch.setattr(linear_p, "eager_vjp", None)
    slow = _grads(x, w, b, ember.tensor(g), req)
    for r, a, s in zip(req, fast, slow):
        assert (a is None) == (not r)
        if r:
            np.testing.assert_array_equal(a, s)
    if req[0]:
        np.testing.assert_allclose(fast[0], g.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    if req[2]:
        np.testing.assert_allclose(fast[2], g.astype(np.float64).sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_incoming_gradient_of_any_layout(layout, calls, monkeypatch):
    x, w, b, g = _data(96, 200, 64, seed=1)
    # NOTE: an F-ordered or strided incoming gradient: NumPy's column sum then runs another
    # order than row by row; the eager rule makes the same call, so the same bits
    gt = ember.tensor(np.ascontiguousarray(g.T)).mT if layout == "transposed" else \
        ember.tensor(np.repeat(g, 2, axis=1))[:, ::2]
    fast = _grads(x, w, b, gt, (True, True, True))
    assert calls[0] == 1
    monkeypatch.setattr(linear_p, "eager_vjp", None)
    slow = _grads(x, w, b, gt, (True, True, True))
    for a, s in zip(fast, slow):
        np.testing.assert_array_equal(a, s)


def test_declines_where_ops_must_be_seen(calls):
    x, w, b, g = _data(8, 6, 5, seed=2)
    ts = [ember.tensor(a, requires_grad=True) for a in (x, w, b)]
    # create_graph: the rules' ops are recorded (double backward works)
    (dx,) = ember.autograd.grad(F.linear(*ts).square().sum(), [ts[0]], create_graph=True)
    (ddw,) = ember.autograd.grad(dx.sum(), [ts[1]])
    assert calls[0] == 0 and ddw.shape == (5, 6)
    # a dispatch mode (a tracer) sees the backward's matmuls and the bias gradient's sum
    out = F.linear(*ts)
    with OpNames() as rec:
        out.backward(ember.tensor(g))
    assert calls[0] == 0
    assert rec.names.count("matmul") == 2 and "sum" in rec.names
    # a gradient of another dtype than the inputs' (a hand-made backward): the rules
    t64 = [ember.tensor(a.astype(np.float64), requires_grad=True) for a in (x, w, b)]
    linear_p(*t64).backward(ember.tensor(g))
    assert calls[0] == 0
    np.testing.assert_allclose(t64[2].grad.numpy(), g.astype(np.float64).sum(0), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("lead", [(12,), (2, 3, 4)])
def test_other_dtypes_same_bits_as_the_rules(dtype, lead, calls, monkeypatch):
    # NOTE: the matmul kernel the rules' dispatches reach, called on the raw arrays; the
    # bias gradient through sum_to as the engine reduces the rule's
    dt = getattr(ember, dtype)
    rng = np.random.default_rng(len(lead))
    arrays = [rng.standard_normal(s, dtype=np.float32)
              for s in (lead + (20,), (10, 20), (10,), lead + (10,))]

    def grads():
        ts = [ember.tensor(a).to(dt).requires_grad_() for a in arrays[:3]]
        F.linear(*ts).backward(ember.tensor(arrays[3]).to(dt))
        return [t.grad.to(ember.float64).numpy() for t in ts]
    fast = grads()
    assert calls[0] == 1
    monkeypatch.setattr(linear_p, "eager_vjp", None)
    for a, s in zip(fast, grads()):
        np.testing.assert_array_equal(a, s)
    g64 = arrays[3].astype(np.float64).reshape(-1, 10)
    tol = 1e-12 if dtype == "float64" else 0.1
    np.testing.assert_allclose(fast[2], g64.sum(0), rtol=tol, atol=tol)


def test_taken_in_a_plain_step(calls):
    x, w, b, g = _data(16, 12, 8, seed=3)
    ts = [ember.tensor(a, requires_grad=True) for a in (x, w, b)]
    F.linear(*ts).backward(ember.tensor(g))
    assert calls[0] == 1
    np.testing.assert_allclose(ts[1].grad.numpy(), g.T.astype(np.float64) @ x, rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("lead", [(4, 32), (2, 3, 5)])
@pytest.mark.parametrize("layout", ["contiguous", "permuted"])
def test_leading_dims_same_bits_as_the_rules(lead, layout, calls, monkeypatch):
    # NOTE: W3's Linears: x (B, T, in); rows folded as the rules' reshape folds them, the
    # bias gradient summed over all leading dims as sum_to sums them
    rng = np.random.default_rng(11)
    x = rng.standard_normal(lead + (96,), dtype=np.float32)
    w = rng.standard_normal((48, 96), dtype=np.float32)
    b = rng.standard_normal(48, dtype=np.float32)
    g = rng.standard_normal(lead + (48,), dtype=np.float32)

    def grad_t():
        if layout == "contiguous":
            return ember.tensor(g)
        # an incoming gradient whose leading dims are not in C order
        return ember.tensor(np.ascontiguousarray(np.swapaxes(g, 0, 1))).transpose(0, 1)
    fast = _grads(x, w, b, grad_t(), (True, True, True))
    assert calls[0] == 1
    monkeypatch.setattr(linear_p, "eager_vjp", None)
    slow = _grads(x, w, b, grad_t(), (True, True, True))
    for a, s in zip(fast, slow):
        np.testing.assert_array_equal(a, s)
    g64 = g.astype(np.float64).reshape(-1, 48)
    np.testing.assert_allclose(fast[1], g64.T @ x.reshape(-1, 96), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fast[2], g64.sum(0), rtol=1e-4, atol=1e-4)
