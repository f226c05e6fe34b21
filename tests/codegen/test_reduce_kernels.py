"""The C loops of ``ember.codegen.reduce_kernels`` against NumPy.

``add_rows`` adds each output element's terms one by one in index order, like
``np.add.at``: bitwise equal to it. ``colsum`` sums in a fixed order of its own (blocks of
rows, each column's rows in order or over 4 accumulators, partials added in block order):
bitwise equal to a NumPy reference written in that order, within ``rows`` roundings of the
float64 sum, and the same bits on any number of threads. ``colsum_mul`` may fuse
``acc + a * b`` into one FMA: within ``rows + 1`` roundings.
"""
import numpy as np
import pytest

from ember.codegen import reduce_kernels as rk
from ember.codegen.runtime import set_num_threads

# (rows, n): one block and several, rows not a multiple of 4, columns in whole 8-vector
# tiles, single vectors and scalar leftovers (float32: 8 lanes, float64: 4)
SHAPES = [(1, 1), (3, 5), (64, 10), (130, 128), (129, 77), (200, 64 + 8 + 3), (1000, 37),
          (1024, 128), (4097, 9)]


@pytest.fixture(autouse=True)
def _need(cc):
    assert rk.kernels() is not None


@pytest.fixture
def threads():
    yield set_num_threads
    set_num_threads(None)


def _eps(dt):
    return float(np.finfo(dt).eps)


def colsum_reference(x: np.ndarray) -> np.ndarray:
    """``x.sum(0)`` in the kernel's order, one rounding per addition in ``x``'s dtype."""
    rows, n = x.shape
    lanes = 32 // x.itemsize
    wide = n // (8 * lanes) * 8 * lanes          # columns summed row by row; the rest by 4
    b = rk.block_rows(rows)
    parts = []
    for r0 in range(0, rows, b):
        blk = x[r0:r0 + b]
        p = np.zeros(n, x.dtype)
        for row in blk:                          # wide tiles: rows in order
            p[:wide] += row[:wide]
        acc = np.zeros((4, n - wide), x.dtype)   # the rest: accumulator r % 4 ...
        full = len(blk) // 4 * 4
        for r in range(full):
            acc[r % 4] += blk[r, wide:]
        for r in range(full, len(blk)):          # ... and the last rows into the first
            acc[0] += blk[r, wide:]
        p[wide:] = (acc[0] + acc[1]) + (acc[2] + acc[3])
        parts.append(p)
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_colsum_is_the_fixed_order_sum(shape, dt):
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    x = rng.standard_normal(shape).astype(dt)
    got = rk.colsum(x)
    assert got.shape == (shape[1],) and got.dtype == dt
    np.testing.assert_array_equal(got, colsum_reference(x))
    exact = x.astype(np.float64).sum(0)
    bound = shape[0] * _eps(dt) * np.abs(x).astype(np.float64).sum(0)
    assert np.all(np.abs(got - exact) <= bound)
    out = np.full(shape[1], np.nan, dt)
    assert rk.colsum(x, out=out) is out
    np.testing.assert_array_equal(out, got)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_colsum_mul_is_the_sum_of_products(shape, dt):
    rng = np.random.default_rng(shape[0] * 1000 + shape[1] + 1)
    a = rng.standard_normal(shape).astype(dt)
    b = rng.standard_normal(shape).astype(dt)
    got = rk.colsum_mul(a, b)
    prod = a.astype(np.float64) * b
    bound = (shape[0] + 1) * _eps(dt) * np.abs(prod).sum(0)
    assert got.dtype == dt and np.all(np.abs(got - prod.sum(0)) <= bound)
    if dt == np.float64:          # different operands give different sums: not a copy of a
        assert not np.allclose(got, a.sum(0))


def test_sums_are_the_same_bits_on_any_number_of_threads(threads):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2048, 520)).astype(np.float32)    # above PARALLEL_MIN
    y = rng.standard_normal(x.shape).astype(np.float32)
    assert x.size >= rk.PARALLEL_MIN
    want = colsum_reference(x)
    want_mul = None
    for n in (1, 2, 3):
        threads(n)
        np.testing.assert_array_equal(rk.colsum(x), want)
        got = rk.colsum_mul(x, y)
        if want_mul is None:
            want_mul = got
        np.testing.assert_array_equal(got, want_mul)


def test_nan_and_inf_reach_their_columns_only():
    x = np.ones((300, 20), np.float32)
    x[7, 3], x[250, 17], x[3, 5], x[4, 5] = np.nan, np.inf, np.inf, -np.inf
    got = rk.colsum(x)
    assert np.isnan(got[3]) and got[17] == np.inf and np.isnan(got[5])
    keep = [c for c in range(20) if c not in (3, 5, 17)]
    np.testing.assert_array_equal(got[keep], 300)


def _add_rows_in_order(out, values, rows):
    """The sequential definition: ``out[rows[i]] += values[i]`` for i = 0, 1, ..."""
    out = out.copy()
    for i, r in enumerate(rows):
        out[r] = out[r] + values[i]
    return out


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("rshape,m", [((6, 4), 8), ((256, 128), 1024), ((64, 128), 64),
                                      ((5, 3, 7), 40), ((9, 1), 3), ((300, 13), 1000)])
def test_add_rows_adds_in_index_order(rshape, m, dt):
    rng = np.random.default_rng(m)
    x = rng.standard_normal(rshape).astype(dt)
    rows = rng.integers(-rshape[0], rshape[0], m)               # repeats and negatives
    values = rng.standard_normal((m,) + rshape[1:]).astype(dt)
    want = x.copy()
    np.add.at(want, rows, values)
    got = rk.add_rows(x.copy(), values, rows)
    np.testing.assert_array_equal(got, want)
    if m <= 64:
        np.testing.assert_array_equal(got, _add_rows_in_order(x, values, rows))


def test_add_rows_on_any_number_of_threads(threads):
    rng = np.random.default_rng(4)
    values = rng.standard_normal((4096, 260)).astype(np.float32)   # above PARALLEL_MIN
    rows = rng.integers(0, 50, 4096)
    want = np.zeros((50, 260), np.float32)
    np.add.at(want, rows, values)
    for n in (1, 2, 3):
        threads(n)
        np.testing.assert_array_equal(rk.add_rows(np.zeros((50, 260), np.float32), values,
                                                  rows), want)


@pytest.mark.parametrize("bad,shown", [([0, 5, 2], 5), ([0, -6, 2], -6), ([9, -7], 9)])
def test_add_rows_rejects_out_of_range_rows_and_changes_nothing(bad, shown):
    out = np.arange(20, dtype=np.float32).reshape(5, 4)
    before = out.copy()
    with pytest.raises(IndexError, match=f"index {shown} is out of bounds for dimension 0 "
                                         f"with size 5"):
        rk.add_rows(out, np.ones((len(bad), 4), np.float32), np.array(bad))
    np.testing.assert_array_equal(out, before)


def test_bad_operands_are_named():
    x = np.ones((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"colsum: .*\(4, 3\) int64"):
        rk.colsum(np.ones((4, 3), np.int64))
    with pytest.raises(ValueError, match=r"colsum_mul: .*\(4, 3\) float32, \(3, 4\) float32"):
        rk.colsum_mul(x, np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        rk.colsum(np.ones((3, 4), np.float32).T)
    with pytest.raises(ValueError, match=r"out must be .*\(3,\) float32"):
        rk.colsum(x, out=np.empty(4, np.float32))
    with pytest.raises(ValueError, match=r"add_rows: .*rows \(2,\) int32"):
        rk.add_rows(x, np.ones((2, 3), np.float32), np.zeros(2, np.int32))
    with pytest.raises(ValueError, match=r"add_rows: .*values \(2, 4\) float32"):
        rk.add_rows(x, np.ones((2, 4), np.float32), np.zeros(2, np.int64))


def test_empty_operands():
    np.testing.assert_array_equal(rk.colsum(np.ones((0, 3), np.float32)), np.zeros(3))
    assert rk.colsum(np.ones((3, 0))).shape == (0,)
    out = np.ones((3, 2))
    assert rk.add_rows(out, np.ones((0, 2)), np.zeros(0, np.int64)) is out
    with pytest.raises(IndexError, match="size 0"):
        rk.add_rows(np.ones((0, 2)), np.ones((1, 2)), np.zeros(1, np.int64))


def test_the_kernels_are_unavailable_without_a_compiler(monkeypatch):
    monkeypatch.setattr(rk, "find_compiler", lambda: None)
    monkeypatch.setattr(rk, "_state", {})
    assert not rk.available() and rk.kernels() is None
    with pytest.raises(RuntimeError, match="no C compiler"):
        rk.colsum(np.ones((2, 2), np.float32))
