"""Control flow (cond, while_loop, fori_loop, scan): eagerly, in declarative graphs and under
ember.compile; forward against plain Python loops, gradients against central differences."""
import numpy as np
import pytest

import ember as em
from ember.autograd import gradcheck
from ember.errors import GraphError

F64 = em.float64


def numerical_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def rnn_step(W, U):
    return lambda h, x: (em.tanh(h @ W + x @ U),) * 2


def collatz_steps(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def collatz(n):
    return em.while_loop(lambda s: s[0] != 1,
                         lambda s: (em.where(s[0] % 2 == 0, s[0] // 2, 3 * s[0] + 1), s[1] + 1),
                         (n, em.tensor(0)))[1]


# --------------------------------------------------------------------- eager
def test_eager_forward():
    x = em.tensor([1.0, 2.0, 3.0])
    assert em.cond(x.sum() > 0, lambda a: a * 2, lambda a: -a, x).tolist() == [2, 4, 6]
    assert em.cond(x.sum() < 0, lambda a: a * 2, lambda a: -a, x).tolist() == [-1, -2, -3]
    assert collatz(em.tensor(27)).item() == collatz_steps(27) == 111
    assert em.fori_loop(0, 5, lambda i, c: c + i, em.tensor(0)).item() == 10
    total, sums = em.scan(lambda c, v: (c + v, c + v), em.tensor(0.0), x)
    assert total.item() == 6.0 and sums.tolist() == [1, 3, 6]
    _, rsums = em.scan(lambda c, v: (c + v, c + v), em.tensor(0.0), x, reverse=True)
    assert rsums.tolist() == [6, 5, 3]


def test_eager_gradients_gradcheck():
    rng = np.random.default_rng(0)
    W = em.tensor(rng.normal(size=(3, 3)) * 0.5, dtype=F64, requires_grad=True)
    U = em.tensor(rng.normal(size=(2, 3)), dtype=F64, requires_grad=True)
    xs = em.tensor(rng.normal(size=(4, 2)), dtype=F64, requires_grad=True)

    def f(W, U, xs):
        h, hs = em.scan(rnn_step(W, U), em.zeros(3, dtype=F64), xs)
        h = em.cond(h.sum() > 0, lambda a: a * a, lambda a: em.sin(a), h)
        return em.fori_loop(0, 3, lambda i, c: c * 0.5 + em.tanh(c), h).sum() + hs.sum()

    assert gradcheck(f, (W, U, xs))


# --------------------------------------------------------------------- declarative graphs
def test_graph_cond_picks_each_branch_from_an_in_graph_pred():
    g = em.Graph()
    with g:
        x = em.placeholder((3,), name="x")
        y = em.cond(x.sum() > 0, lambda a: a * 2.0, lambda a: a - 10.0, x)
    assert g.ir.count("cond") == 1
    np.testing.assert_allclose(g.run(y, {x: [1.0, 2.0, 3.0]}), [2, 4, 6])
    np.testing.assert_allclose(g.run(y, {x: [-1.0, -2.0, 0.0]}), [-11, -12, -10])


def test_graph_cond_with_pytrees_and_captured_tensors():
    g = em.Graph()
    with g:
        x = em.placeholder((2,), name="x")
        k = em.placeholder((), name="k")
        out = em.cond(k > 0, lambda d: {"a": d["v"] * k, "b": d["v"].sum()},
                      lambda d: {"a": d["v"] + k, "b": k * 1.0}, {"v": x})
    r = g.run(out, {x: [1.0, 2.0], k: 3.0})
    np.testing.assert_allclose(r["a"], [3, 6])
    assert r["b"] == 3.0
    r = g.run(out, {x: [1.0, 2.0], k: -1.0})
    np.testing.assert_allclose(r["a"], [0, 1])
    assert r["b"] == -1.0


def test_graph_cond_branch_mismatch_is_an_error():
    with em.Graph():
        x = em.placeholder((3,), name="x")
        with pytest.raises(GraphError, match="cond: output 0"):
            em.cond(x.sum() > 0, lambda a: a, lambda a: a.sum(), x)


def test_graph_while_loop_collatz_and_power():
    g = em.Graph()
    with g:
        n = em.placeholder((), dtype=em.int64, name="n")
        steps = collatz(n)
        b = em.placeholder((), name="b")
        p = em.while_loop(lambda s: s[0] < 5, lambda s: (s[0] + 1, s[1] * b),
                          (em.tensor(0), em.tensor(1.0)))[1]
    for v in (1, 6, 27, 97):
        assert g.run(steps, {n: v}) == collatz_steps(v)
    assert g.run(p, {b: 2.0}) == 32.0


def test_graph_fori_loop_sum_and_dynamic_bounds():
    g = em.Graph()
    with g:
        x = em.placeholder((3,), name="x")
        s = em.fori_loop(0, 4, lambda i, c: c + x * i, em.zeros(3))
        hi = em.placeholder((), dtype=em.int64, name="hi")
        t = em.fori_loop(0, hi, lambda i, c: c + i, em.tensor(0))
    np.testing.assert_allclose(g.run(s, {x: [1.0, 2.0, 3.0]}), [6, 12, 18])
    assert g.ir.count("scan") == 1 and g.ir.count("while") == 1
    assert g.run(t, {hi: 5}) == 10 and g.run(t, {hi: 0}) == 0


def test_graph_scan_cumsum_and_rnn_match_python_loops():
    rng = np.random.default_rng(1)
    W0, U0, X0 = rng.normal(size=(3, 3)) * 0.5, rng.normal(size=(2, 3)), rng.normal(size=(5, 2))
    g = em.Graph()
    with g:
        xs = em.placeholder((5, 2), dtype=F64, name="xs")
        W = em.placeholder((3, 3), dtype=F64, name="W")
        U = em.placeholder((2, 3), dtype=F64, name="U")
        total, sums = em.scan(lambda c, v: (c + v, c + v), em.zeros(2, dtype=F64), xs)
        h, hs = em.scan(rnn_step(W, U), em.zeros(3, dtype=F64), xs)
        hr, hsr = em.scan(rnn_step(W, U), em.zeros(3, dtype=F64), xs, reverse=True)
    r = g.run([total, sums, h, hs, hr, hsr], {xs: X0, W: W0, U: U0})
    np.testing.assert_allclose(r[1], np.cumsum(X0, 0))
    np.testing.assert_allclose(r[0], X0.sum(0))
    Wt, Ut = em.tensor(W0), em.tensor(U0)
    hh, outs = em.zeros(3, dtype=F64), []
    for t in range(5):
        hh = em.tanh(hh @ Wt + em.tensor(X0[t]) @ Ut)
        outs.append(hh.numpy())
    np.testing.assert_allclose(r[2], outs[-1], rtol=1e-12)
    np.testing.assert_allclose(r[3], np.stack(outs), rtol=1e-12)
    hh, outs = em.zeros(3, dtype=F64), [None] * 5
    for t in reversed(range(5)):
        hh = em.tanh(hh @ Wt + em.tensor(X0[t]) @ Ut)
        outs[t] = hh.numpy()
    np.testing.assert_allclose(r[5], np.stack(outs), rtol=1e-12)


def _check_graph_grads(g, loss, grads, feed, wrt):
    ana = g.run(grads, feed)
    for got, ph in zip(ana, wrt):
        num = numerical_grad(lambda v: g.run(loss, {**feed, ph: v}), np.asarray(feed[ph]))
        np.testing.assert_allclose(got, num, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_graph_gradients_through_cond(sign):
    g = em.Graph()
    with g:
        x = em.placeholder((3,), dtype=F64, name="x")
        w = em.placeholder((3,), dtype=F64, name="w")
        y = em.cond(x.sum() > 0, lambda a: em.sin(a) * w, lambda a: a * a * 3.0, x)
        loss = (y * y).sum()
        grads = em.gradients(loss, [x, w])
    _check_graph_grads(g, loss, grads, {x: sign * np.array([0.3, 0.5, 0.9]),
                                        w: np.array([1.0, -2.0, 0.5])}, [x, w])


def test_graph_gradients_through_fori_and_scan_rnn():
    rng = np.random.default_rng(2)
    g = em.Graph()
    with g:
        xs = em.placeholder((4, 2), dtype=F64, name="xs")
        W = em.placeholder((3, 3), dtype=F64, name="W")
        U = em.placeholder((2, 3), dtype=F64, name="U")
        h, hs = em.scan(rnn_step(W, U), em.zeros(3, dtype=F64), xs)
        h = em.cond(h.sum() > 0, lambda a: a * 2.0, lambda a: em.exp(a), h)   # nested in VJP
        z = em.fori_loop(0, 3, lambda i, c: em.tanh(c @ W) + c * 0.5, h)
        _, back = em.scan(lambda c, v: (c * v.sum(), c), em.ones(3, dtype=F64), xs,
                          reverse=True)
        loss = z.sum() + (hs * hs).sum() + back.sum()
        grads = em.gradients(loss, [xs, W, U])
    feed = {xs: rng.normal(size=(4, 2)), W: rng.normal(size=(3, 3)) * 0.5,
            U: rng.normal(size=(2, 3))}
    _check_graph_grads(g, loss, grads, feed, [xs, W, U])


def test_graph_gradients_through_scan_with_cond_in_body():
    g = em.Graph()
    with g:
        xs = em.placeholder((5,), dtype=F64, name="xs")
        body = lambda c, v: (em.cond(v > 0, lambda c, v: c * v, lambda c, v: c + v, c, v), c)
        c, ys = em.scan(body, em.tensor(1.5, dtype=F64), xs)
        loss = c + ys.sum()
        grads = em.gradients(loss, [xs])
    assert g.ir.count("scan") == 2          # forward (storing its carries) + reverse scan
    _check_graph_grads(g, loss, grads, {xs: np.array([0.5, -1.0, 2.0, -0.3, 1.2])}, [xs])


def test_graph_gradients_through_while_loop_is_a_clear_error():
    with em.Graph():
        x = em.placeholder((), dtype=F64, name="x")
        y = em.while_loop(lambda s: s < 10.0, lambda s: s * 2.0, x)
        with pytest.raises(GraphError, match="while_loop.*fori_loop"):
            em.gradients(y, [x])


# --------------------------------------------------------------------- ember.compile
def test_compile_records_one_node_and_matches_eager():
    rng = np.random.default_rng(3)
    W = em.tensor(rng.normal(size=(3, 3)) * 0.5, dtype=F64, requires_grad=True)
    U = em.tensor(rng.normal(size=(2, 3)), dtype=F64, requires_grad=True)

    def f(xs, n):
        h, hs = em.scan(rnn_step(W, U), em.zeros(3, dtype=F64), xs)
        y = em.cond(h.sum() > 0, lambda a: a * 2.0, lambda a: a - 1.0, h)
        return y.sum() + hs.sum(), collatz(n)

    cf = em.compile(f, fullgraph=True)
    for seed in range(3):
        xs = em.tensor(np.random.default_rng(seed).normal(size=(4, 2)), dtype=F64)
        n = em.tensor(27 + seed)
        loss_e, steps_e = f(xs, n)
        ge = em.autograd.grad(loss_e, [W, U])
        for _ in range(2):                         # traced call, then the compiled program
            loss_c, steps_c = cf(xs, n)
            np.testing.assert_allclose(loss_c.item(), loss_e.item(), rtol=1e-12)
            assert steps_c.item() == steps_e.item()
            gc = em.autograd.grad(loss_c, [W, U])
            for a, b in zip(gc, ge):
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10)
    ops = cf.graph.op_counts()
    assert ops.get("scan") == 1 and ops.get("cond") == 1 and ops.get("while") == 1
