"""Column sums of float16/bfloat16 matrices (:mod:`ember.codegen.lowp_reduce`): ``x.sum(0)``
(a bias gradient under autocast) in one pass, bit for bit the float32 sum NumPy forms
(the first row, then each row in turn) rounded once — inf/NaN (payloads too), denormals,
one row, one column, blocks of columns — and eager ``sum`` takes it."""
import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.codegen import convert_kernels, lowp_reduce
from tests.graph._kernels import needs_compiler

LOWP = [np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)]
_need_compiler = needs_compiler("the conversion path runs instead")


def _data(shape, dt, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 50
    if a.size > 8:
        a.flat[:8] = [np.nan, np.inf, -np.inf, 1e-40, -1e-40, -0.0, 6e-8, 3e4]
    x = a.astype(dt)
    if x.size > 9:
        x.view(np.uint16).flat[9] = 0x7F81 if dt == LOWP[0] else 0x7C01   # NaN payload
    return x


def _want(x):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sum(x.astype(np.float32), axis=0).astype(x.dtype)


@pytest.mark.parametrize("dt", LOWP)
@pytest.mark.parametrize("shape", [(1, 7), (128, 512), (128, 10), (5, 1), (300, 4100),
                                   (2, 3), (64, 0)])
def test_equals_float32_sum_rounded_once(dt, shape):
    x = _data(shape, dt, shape[1])
    got = lowp_reduce.sum_rows0(x)
    assert got.dtype == dt and got.shape == (shape[1],)
    np.testing.assert_array_equal(got.view(np.uint16), _want(x).view(np.uint16))


@pytest.mark.parametrize("dt", LOWP)
def test_declines_what_it_does_not_serve(dt):
    x = _data((6, 8), dt)
    assert lowp_reduce.sum_rows0(x[:, ::2]) is None                 # strided
    assert lowp_reduce.sum_rows0(x.reshape(2, 3, 8)) is None        # 3-D
    assert lowp_reduce.sum_rows0(x[:0]) is None                     # no rows
    assert lowp_reduce.sum_rows0(x.astype(np.float32)) is None      # float32


@pytest.mark.parametrize("dt", [em.bfloat16, em.float16])
def test_eager_sum_over_dim0_takes_it(dt, monkeypatch):
    x = em.tensor(_data((96, 130), dt.np, 3))
    want = _want(x.numpy())
    def refuse(*a, **k):
        raise AssertionError("sum(0) converted the whole operand")
    monkeypatch.setattr(convert_kernels, "convert", refuse)
    got = x.sum(0).numpy()
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    monkeypatch.undo()
    np.testing.assert_array_equal(x.sum(0, keepdim=True).numpy().view(np.uint16)[0],
                                  want.view(np.uint16))
