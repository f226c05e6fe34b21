"""Eager ``F.linear`` with a 2-D float32 input and a bias runs the ``linear`` primitive
(ops/linear.py: one node; on Ember's GEMM the bias is added in its stores): the same bits
as ``matmul(x, w.mT) + b``, forward and every gradient; traced code keeps matmul + add."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F
from op_names import OpNames


def _run(fn, x, w, b, g):
    ts = [ember.tensor(a, requires_grad=True) for a in (x, w, b)]
    out = fn(*ts)
    out.backward(ember.tensor(g))
    return [out.detach().numpy().copy()] + [t.grad.numpy().copy() for t in ts], out


def _composite(x, w, b):
    return x.matmul(w.mT) + b


# (rows, in, out): Ember's GEMM with the bias in its stores (W1's layers), OpenBLAS
# (N = 10, small), a K beyond one k block
SHAPES = [(128, 784, 512), (128, 512, 10), (5, 7, 3), (64, 600, 96)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", ["2d", "strided", "3d"])
def test_same_bits_as_matmul_plus_add(shape, layout):
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    x = rng.standard_normal((m, 2 * k if layout == "strided" else k), dtype=np.float32)
    x = x[:, ::2] if layout == "strided" else x.reshape(m // 4, 4, k) if m % 4 == 0 and \
        layout == "3d" else x
    w = rng.standard_normal((n, k), dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    g = rng.standard_normal(x.shape[:-1] + (n,), dtype=np.float32)
    fast, out = _run(F.linear, x, w, b, g)
    assert out.grad_fn.name() == "LinearBackward"
    slow, _ = _run(_composite, x, w, b, g)
    for a, r in zip(fast, slow):
        np.testing.assert_array_equal(a, r)
    np.testing.assert_allclose(fast[0], x.astype(np.float64) @ w.T.astype(np.float64) + b,
                               rtol=1e-4, atol=1e-4)
    assert fast[2].flags.c_contiguous         # the weight's gradient in its own layout


def test_other_cases_keep_the_composite():
    x16 = ember.randn(4, 3, requires_grad=True)
    mixed = F.linear(x16, ember.randn(2, 3, dtype=ember.float64), ember.randn(2))
    assert mixed.grad_fn.name() == "AddBackward" and mixed.dtype == ember.float64
    xc = ember.randn(4, 3, dtype=ember.complex64, requires_grad=True)
    assert F.linear(xc, ember.randn(2, 3, dtype=ember.complex64),
                    ember.randn(2, dtype=ember.complex64)).grad_fn.name() == "AddBackward"
    x3 = ember.randn(4, 2, 3, requires_grad=True).transpose(0, 1)     # not contiguous
    assert F.linear(x3, ember.randn(2, 3), ember.randn(2)).grad_fn.name() \
        == "AddBackward"
    assert F.linear(ember.randn(4, 3, requires_grad=True), ember.randn(2, 3)).grad_fn.name() \
        == "MatmulBackward"


def _as_f64(t):
    return t.detach().to(ember.float64).numpy()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("lead", [(24,), (3, 8)])
def test_other_float_dtypes_same_bits_as_matmul_plus_add(dtype, lead):
    # NOTE: aten::linear's dtypes: the low-precision products (float32 sums, one rounding)
    # and float64 through the same matmul kernel as the composite's, the bias added after
    dt = getattr(ember, dtype)
    rng = np.random.default_rng(len(lead) + len(dtype))
    arrays = [rng.standard_normal(s, dtype=np.float32)
              for s in (lead + (40,), (24, 40), (24,), lead + (24,))]

    def run(fn):
        ts = [ember.tensor(a).to(dt).requires_grad_() for a in arrays[:3]]
        out = fn(*ts)
        out.backward(ember.tensor(arrays[3]).to(dt))
        return out, [_as_f64(out)] + [_as_f64(t.grad) for t in ts]
    out, fast = run(F.linear)
    assert out.grad_fn.name() == "LinearBackward" and out.dtype == dt
    _, slow = run(_composite)
    for a, r in zip(fast, slow):
        np.testing.assert_array_equal(a, r)


def test_under_autocast_same_bits_as_the_composite(monkeypatch):
    # NOTE: autocast's linear casts x, w and b to bfloat16, then the primitive runs (one
    # node) where a float32-only rule left the transposed view, matmul and add
    from ember.nn.functional import _layers
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s, dtype=np.float32) for s in ((2, 6, 32), (16, 32), (16,))]

    def run():
        ts = [ember.tensor(a, requires_grad=True) for a in arrays]
        with ember.autocast("cpu", dtype=ember.bfloat16):
            out = F.linear(*ts)
        out.float().square().sum().backward()
        return out, [_as_f64(out)] + [t.grad.numpy() for t in ts]
    out, fast = run()
    assert out.dtype == ember.bfloat16 and out.grad_fn.name() == "LinearBackward"
    monkeypatch.setattr(_layers, "_LINEAR_DTYPES", frozenset((ember.float32,)))
    out, slow = run()
    assert out.grad_fn.name() == "AddBackward"
    for a, r in zip(fast, slow):
        np.testing.assert_array_equal(a, r)


def test_a_dispatch_mode_sees_matmul_and_add():
    x, w, b = ember.randn(8, 6), ember.randn(4, 6), ember.randn(4)
    with OpNames() as rec:
        traced = F.linear(x, w, b)
    assert "linear" not in rec.names and {"matmul", "add"} <= set(rec.names)
    np.testing.assert_array_equal(traced.numpy(), F.linear(x, w, b).numpy())


def test_shape_errors_name_the_op():
    with pytest.raises(ValueError, match="linear"):
        F.linear(ember.randn(4, 3), ember.randn(2, 5), ember.randn(2))
    from ember.ops.linear import linear_p
    with pytest.raises(ValueError, match=r"linear: .*\(3,\)"):
        linear_p(ember.randn(4, 3), ember.randn(2, 3), ember.randn(3))
