"""``index_put(..., accumulate=True)`` of whole rows at a 1-D index (an embedding's gradient).

On the CPU with a C compiler it runs ``reduce_kernels.add_rows``: every element a sequential
sum in index order, bitwise ``np.add.at``. Without one (or for other dtypes, non-contiguous
values) the NumPy sort + ``reduceat`` path runs: each row's values are summed before
being added, so it agrees with ``add.at`` within a few roundings. Either way an index out
of range raises the eager check's error, in compiled graphs too (they run the kernel
without the op's check).
"""
import numpy as np
import pytest

import ember as em
from ember import codegen, config
from ember.codegen import reduce_kernels as rk
from ember.errors import EmberIndexError


@pytest.fixture
def cc(tmp_path, monkeypatch):
    """A private kernel cache; skip (only) when this machine has no C compiler."""
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "kernels"))
    if not codegen.available():
        pytest.skip("no C compiler: the C loop cannot run here")


@pytest.fixture
def calls(monkeypatch):
    """How many times the C loop ran."""
    n = {"add_rows": 0}
    real = rk.add_rows

    def counted(*a):
        n["add_rows"] += 1
        return real(*a)
    monkeypatch.setattr(rk, "add_rows", counted)
    return n


@pytest.fixture
def no_compiler(monkeypatch):
    monkeypatch.setattr(rk, "find_compiler", lambda: None)
    monkeypatch.setattr(rk, "_state", {})


def _case(dt, rng, r=40, n=24, m=300):
    x = rng.standard_normal((r, n)).astype(dt)
    rows = rng.integers(-r, r, m)                    # repeats and negatives
    v = rng.standard_normal((m, n)).astype(dt)
    want = x.copy()
    np.add.at(want, rows, v)
    return x, rows, v, want


def _put(x, rows, v):
    return em.tensor(x).index_put((em.tensor(rows),), em.tensor(v), accumulate=True).numpy()


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_the_c_loop_is_bitwise_add_at(dt, calls, cc):
    rng = np.random.default_rng(0)
    x, rows, v, want = _case(dt, rng)
    np.testing.assert_array_equal(_put(x, rows, v), want)
    np.testing.assert_array_equal(_put(x, rows.astype(np.int32), v), want)
    x3 = rng.standard_normal((6, 3, 5)).astype(dt)       # rows of a 3-D tensor
    v3 = rng.standard_normal((9, 3, 5)).astype(dt)
    r3 = rng.integers(-6, 6, 9)
    w3 = x3.copy()
    np.add.at(w3, r3, v3)
    np.testing.assert_array_equal(_put(x3, r3, v3), w3)
    x1, v1, r1 = x[:, 0].copy(), v[:, 0].copy(), rows % 40       # a 1-D tensor's elements
    w1 = x1.copy()
    np.add.at(w1, r1, v1)
    np.testing.assert_array_equal(_put(x1, r1, v1), w1)
    assert calls["add_rows"] == 4


def test_non_contiguous_values_and_no_compiler_take_the_numpy_path(calls, monkeypatch):
    rng = np.random.default_rng(1)
    x, rows, v, want = _case(np.float32, rng)
    vt = np.asfortranarray(v)
    got = em.tensor(x).index_put((em.tensor(rows),), em.from_numpy(vt), accumulate=True)
    tol = 300 * np.finfo(np.float32).eps * (np.abs(x) + np.abs(v).sum()).max()
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=tol)
    prev = config.set_eager_kernels(False)
    try:
        np.testing.assert_allclose(_put(x, rows, v), want, rtol=0, atol=tol)
    finally:
        config.set_eager_kernels(prev)
    monkeypatch.setattr(rk, "find_compiler", lambda: None)
    monkeypatch.setattr(rk, "_state", {})
    np.testing.assert_allclose(_put(x, rows, v), want, rtol=0, atol=tol)
    assert calls["add_rows"] == 0


def _compiled():
    def f(idx, g):
        return em.zeros(10, 4).index_put((idx,), g, accumulate=True)
    return f, em.compile(f)


@pytest.mark.parametrize("path", ["c", "numpy"])
def test_compiled_graphs_check_the_indices_too(path, request):
    if path == "c":
        request.getfixturevalue("cc")
    else:
        request.getfixturevalue("no_compiler")
    f, cf = _compiled()
    rng = np.random.default_rng(2)
    g = em.tensor(rng.standard_normal((4, 4)).astype(np.float32))
    good = np.array([1, -2, 3, 1])
    want = np.zeros((10, 4), np.float32)
    np.add.at(want, good, g.numpy())
    for _ in range(2):                               # traced, then run as a graph
        np.testing.assert_allclose(cf(em.tensor(good), g).numpy(), want, rtol=1e-6)
    assert "index_put" in [n.op.name for n in cf.graph.nodes]
    for bad, shown in (([1, 2, 30, 1], 30), ([1, -11, 3, 1], -11)):
        msg = f"index_put: index {shown} is out of bounds for dimension 0 with size 10"
        with pytest.raises(EmberIndexError, match=msg):
            f(em.tensor(np.array(bad)), g)
        with pytest.raises(EmberIndexError, match=msg):
            cf(em.tensor(np.array(bad)), g)


def test_an_embeddings_compiled_gradient_is_eagers(cc):
    em.manual_seed(0)
    emb = em.nn.Embedding(50, 16)
    idx = em.tensor(np.random.default_rng(3).integers(0, 50, (8, 32)))
    w = em.randn(8, 32, 16)

    def step(idx):
        emb.weight.grad = None
        (emb(idx) * w).sum().backward()
        return emb.weight.grad
    want = step(idx).numpy().copy()
    cs = em.compile(step)
    for _ in range(3):
        got = cs(idx).numpy()
    np.testing.assert_array_equal(got, want)
