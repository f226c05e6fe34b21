"""The declarative API: ember.Graph, placeholders, Variables, ember.gradients, Graph.run."""
import numpy as np
import pytest

import ember as em
from ember.errors import GraphError


def numerical_grad(f, x, eps=1e-6):
    """Central differences of the scalar ``f(x)`` (x a float64 array)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_seeds_example_runs_only_what_the_fetch_needs():
    g = em.Graph()
    with g:
        x = em.placeholder((2,), name="x")
        y = em.placeholder((2,), name="y")
        z = em.placeholder((2,), name="z")
        v1 = x * y
        v2 = v1 + z
        v3 = v2 * 2.0
        v4 = em.exp(v2)           # never needed when fetching v3
    feed = {x: [1.0, 2.0], y: [3.0, 4.0], z: [1.0, 1.0]}
    np.testing.assert_allclose(g.run(v3, feed), [8.0, 18.0])
    pruned = g.pruned(v3)
    assert pruned.count("exp") == 0 and pruned.op_counts() == {"mul": 2, "add": 1}
    prog, _ = g._program([g._var_of(v3, "t")], {g._var_of(p, "t").id: None for p in (x, y, z)})
    assert [s.name for s in prog.steps] == ["mul", "add", "mul"]
    np.testing.assert_allclose(g.run(v4, feed), np.exp([4.0, 9.0]), rtol=1e-6)
    # fetching v1 needs neither z nor its feed
    np.testing.assert_allclose(g.run(v1, {x: [1.0, 2.0], y: [3.0, 4.0]}), [3.0, 8.0])


def test_fetch_structures_and_numpy_results():
    g = em.Graph()
    with g:
        a = em.placeholder((3,), name="a")
        b = a * 2.0
        c = b.sum()
    feed = {a: np.arange(3, dtype=np.float32)}
    out = g.run({"b": b, "pair": (c, a)}, feed)
    assert isinstance(out["b"], np.ndarray) and out["b"].dtype == np.float32
    np.testing.assert_allclose(out["b"], [0, 2, 4])
    assert float(out["pair"][0]) == 6.0
    assert isinstance(g.run([c], feed), list)


def test_program_is_cached_per_fetch_set():
    g = em.Graph()
    with g:
        a = em.placeholder((3,), name="a")
        b = em.tanh(a)
    for _ in range(3):
        g.run(b, {a: np.ones(3)})
    assert len(g._programs) == 1
    g.run([b, a], {a: np.ones(3)})
    assert len(g._programs) == 2


def test_feed_errors_name_the_placeholder():
    g = em.Graph()
    with g:
        a = em.placeholder((2, 3), name="images")
        n = em.placeholder((), dtype=em.int64, name="count")
        b = a.sum() * n
    with pytest.raises(GraphError, match="'count'.*not fed"):
        g.run(b, {a: np.zeros((2, 3))})
    with pytest.raises(GraphError, match=r"'images' expects shape \(2, 3\), got \(3, 2\)"):
        g.run(b, {a: np.zeros((3, 2)), n: 1})
    with pytest.raises(GraphError, match="'count' expects int64"):
        g.run(b, {a: np.zeros((2, 3)), n: np.float64(1.5)})
    assert g.run(b, {a: np.ones((2, 3)), n: 2}) == 12.0


def test_feeding_an_intermediate_overrides_it():
    g = em.Graph()
    with g:
        a = em.placeholder((2,), name="a")
        b = a + 1.0
        c = b * 3.0
    np.testing.assert_allclose(g.run(c, {b: [1.0, 2.0]}), [3.0, 6.0])   # a is not needed


def test_graph_tensors_have_no_value_while_building():
    g = em.Graph()
    with g:
        a = em.placeholder((), name="a")
        with pytest.raises(GraphError, match="no value until the graph runs"):
            bool(a > 0)
    with pytest.raises(GraphError, match="ember.Graph"):
        em.placeholder((2,))


def test_print_shows_the_ir():
    g = em.Graph(name="model")
    with g:
        a = em.placeholder((4,), name="a")
        em.relu(a * 2.0)
    text = str(g)
    assert "model(%0(a): f32[4])" in text and "relu(" in text and "mul(" in text
    assert "ember.Graph model" in repr(g)


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    x0, w0, b0 = rng.normal(size=(4, 3)), rng.normal(size=(3, 2)), rng.normal(size=(2,))
    g = em.Graph()
    with g:
        x = em.placeholder((4, 3), dtype=em.float64, name="x")
        w = em.placeholder((3, 2), dtype=em.float64, name="w")
        b = em.placeholder((2,), dtype=em.float64, name="b")
        h = em.tanh(x @ w + b)          # b broadcasts: its gradient is summed back
        loss = (h * h).sum() + em.exp(b).mean()
        gx, gw, gb = em.gradients(loss, [x, w, b])
    feed = {x: x0, w: w0, b: b0}
    ana = g.run([gx, gw, gb], feed)
    f = {"x": lambda v: g.run(loss, {**feed, x: v}), "w": lambda v: g.run(loss, {**feed, w: v}),
         "b": lambda v: g.run(loss, {**feed, b: v})}
    for got, (k, v) in zip(ana, (("x", x0), ("w", w0), ("b", b0))):
        np.testing.assert_allclose(got, numerical_grad(f[k], v), rtol=1e-6, atol=1e-8)


def test_gradients_seed_none_and_grad_ys():
    g = em.Graph()
    with g:
        x = em.placeholder((3,), dtype=em.float64, name="x")
        u = em.placeholder((3,), dtype=em.float64, name="u")
        k = em.placeholder((3,), dtype=em.int64, name="k")
        y = x * x                      # non-scalar: seeded with ones
        gx, gu, gk = em.gradients(y, [x, u, k])
        c = em.placeholder((3,), dtype=em.float64, name="c")
        (gxc,) = em.gradients(y, [x], grad_ys=[c])
    assert gu is None and gk is None    # unreachable / not floating point
    feed = {x: [1.0, 2.0, 3.0], c: [1.0, 0.0, -1.0]}
    np.testing.assert_allclose(g.run(gx, feed), [2.0, 4.0, 6.0])
    np.testing.assert_allclose(g.run(gxc, feed), [2.0, 0.0, -6.0])


def test_second_order_gradients():
    g = em.Graph()
    with g:
        x = em.placeholder((), dtype=em.float64, name="x")
        y = x * x * x
        (dy,) = em.gradients(y, [x])
        (d2y,) = em.gradients(dy, [x])
    assert g.run([dy, d2y], {x: 2.0}) == [12.0, 12.0]


def test_variables_and_assign_train_a_linear_model():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(32, 3))
    true_w = np.array([1.5, -2.0, 0.5])
    Y = X @ true_w
    g = em.Graph()
    with g:
        x = em.placeholder((32, 3), dtype=em.float64, name="x")
        y = em.placeholder((32,), dtype=em.float64, name="y")
        w = em.Variable(np.zeros(3), name="w", dtype=em.float64)
        loss = ((x @ w - y) ** 2).mean()
        (dw,) = em.gradients(loss, [w])
        step = w.assign(w - 0.3 * dw)
        bump = w.assign_add(em.ones(3, dtype=em.float64))
    feed = {x: X, y: Y}
    first = g.run(loss, feed)
    for _ in range(200):
        g.run(step, feed)
    assert g.run(loss, feed) < 1e-6 * first
    np.testing.assert_allclose(g.run(w), true_w, atol=1e-4)
    new = g.run(bump)
    np.testing.assert_allclose(new, g.run(w))
    np.testing.assert_allclose(new, true_w + 1, atol=1e-4)
    assert isinstance(w, em.Variable)


def test_assign_checks_shape():
    g = em.Graph()
    with g:
        w = em.Variable(np.zeros(3, np.float32), name="w")
        with pytest.raises(GraphError, match="assign: w has shape"):
            w.assign(em.ones(4))
        up = w.assign([1.0, 2.0, 3.0])
    np.testing.assert_allclose(g.run(up), [1, 2, 3])
