"""The column sums' launch plans (``ember/codegen/cuda_reduce.py``: planned once per layout,
replayed after), with a NumPy model of the two kernels in place of the GPU's: the partial
row of each chunk of rows, then the chunks' partials added in order."""
import numpy as np
import pytest

from ember.codegen import cuda_reduce as cr


def _model_functions(d):
    acc = np.float64 if d.name == "float64" else np.float32

    def part(grid, block, args):
        x, part, R, C, rows_per = args
        rows = x.reshape(int(R), int(C)).astype(acc)
        for k in range(part.shape[0]):
            part[k] = rows[k * int(rows_per):(k + 1) * int(rows_per)].sum(0)

    def final(grid, block, args):
        part, out, chunks, C = args
        s = np.zeros(int(C), acc)
        for k in range(int(chunks)):
            s += part[k]
        out.reshape(-1)[...] = s.astype(out.dtype)
    return part, final


@pytest.fixture
def planned(monkeypatch):
    monkeypatch.setattr(cr, "_cache", {})
    monkeypatch.setattr(cr, "THRESHOLD", 1 << 8)
    made = []

    def functions(d):
        made.append(d.name)
        return _model_functions(d)
    monkeypatch.setattr(cr, "_col_functions", functions)
    plans = []
    real = cr._plan

    def counting(*a):
        plans.append(a[1:])
        return real(*a)
    monkeypatch.setattr(cr, "_plan", counting)
    return plans


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_column_sum_is_planned_once_and_replayed(planned, dtype):
    rng = np.random.default_rng(0)
    before = cr.stats["colsum"]
    for seed in range(3):               # new arrays of one layout: planned once
        x = rng.standard_normal((96, 40)).astype(dtype)
        got = cr.sum(np, x, (0,), False)
        want = x.astype(np.float64).sum(0)
        assert got.shape == (40,) and got.dtype == dtype
        np.testing.assert_allclose(got.astype(np.float64), want,
                                   rtol=1e-3 if dtype == np.float16 else 1e-5, atol=1e-2)
    assert len(planned) == 1 and cr.stats["colsum"] == before + 3


def test_a_layout_change_plans_again(planned):
    x = np.arange(4 * 24 * 32, dtype=np.float32).reshape(4, 24, 32)
    np.testing.assert_array_equal(cr.sum(np, x, (0, 1), True), x.sum((0, 1), keepdims=True))
    np.testing.assert_array_equal(cr.sum(np, x, (0,), False), x.sum(0))       # other dims
    y = x.reshape(96, 32)
    np.testing.assert_array_equal(cr.sum(np, y, (0,), False), y.sum(0))       # other shape
    assert len(planned) == 3
    np.testing.assert_array_equal(cr.sum(np, x * 2, (0,), False), (x * 2).sum(0))
    assert len(planned) == 3


def test_sums_left_to_the_array_module_are_remembered_too(planned):
    x = np.ones((64, 64), np.float32)
    assert cr.sum(np, x.T, (0,), False) is None             # not C-contiguous
    assert cr.sum(np, x[:2], (0,), False) is None           # below THRESHOLD
    assert cr.sum(np, x, (1,), False) is None               # a row sum (ROW_SUMS off)
    assert cr.sum(np, x.T, (0,), False) is None
    assert len(planned) == 3
