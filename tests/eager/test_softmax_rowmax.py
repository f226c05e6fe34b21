"""softmax/log_softmax's row max over a transposed copy (short rows, ``ops/softmax._rowmax``):
the same bits as NumPy's per-row reduction, edge values included."""
import numpy as np
import pytest

import ember
from ember.ops import softmax as S

_SHAPES = [(128, 10), (16, 2), (200, 64), (17, 33), (2048, 10), (15, 10), (128, 65)]


def _edge(x):
    x[0, :2] = [0.0, -0.0]          # a zero max of both signs
    x[1, :] = -0.0
    x[2, :2] = [np.inf, -np.inf]
    x[3, 1] = np.nan
    x[4, :] = -np.inf
    x[5, 0] = np.finfo(x.dtype).max
    return x


def _slow(monkeypatch, fn, x, dim):
    monkeypatch.setattr(S, "_ROWMAX_COLS", (1 << 30, 0))    # no row is short: xp.max
    try:
        return fn(np, x, dim)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", _SHAPES)
def test_same_bits_as_per_row_max(monkeypatch, dtype, shape):
    rng = np.random.default_rng(hash(shape) % 1000)
    x = _edge((rng.standard_normal(shape) * rng.choice([1, 30])).astype(dtype))
    for fn in (S._log_softmax_kernel, S._softmax_kernel):
        for dim in (1, -1):
            fast = fn(np, x, dim)
            slow = _slow(monkeypatch, fn, x, dim)
            assert fast.dtype == slow.dtype and fast.shape == slow.shape
            it = {2: np.int16, 4: np.int32, 8: np.int64}[fast.dtype.itemsize]
            np.testing.assert_array_equal(fast.view(it), slow.view(it))


def test_rowmax_takes_the_copy_only_for_short_rows():
    x = np.random.default_rng(0).standard_normal((128, 10)).astype(np.float32)
    m = S._rowmax(np, x, 1)
    assert m.shape == (128, 1) and m.base is not None    # reshaped from the copy's max
    np.testing.assert_array_equal(m, x.max(axis=1, keepdims=True))
    wide = np.zeros((128, 300), np.float32)
    assert S._rowmax(np, wide, 1).shape == (128, 1)
    few = np.zeros((4, 10), np.float32)
    np.testing.assert_array_equal(S._rowmax(np, few, 0), few.max(axis=0, keepdims=True))


def test_public_ops_and_gradients_unchanged(monkeypatch):
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((128, 10)).astype(np.float32)
    outs = []
    for cols in (S._ROWMAX_COLS, (1 << 30, 0)):
        monkeypatch.setattr(S, "_ROWMAX_COLS", cols)
        x = ember.tensor(xv, requires_grad=True)
        y = ember.log_softmax(x, 1)
        (y * ember.tensor(xv)).sum().backward()
        outs.append((y.detach().numpy().copy(), x.grad.numpy().copy(),
                     ember.softmax(ember.tensor(xv), -1).numpy().copy()))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))
