"""Generated kernels: layouts (broadcast, strided, zero-size, tails), fused expressions,
reductions, the IR builder and dtype inference, and CUDA text."""
import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import (InputSpec, Kernel, Load, OutSpec, Reduce, ReduceKernel, Row, call,
                           compile, elementwise_kernel, from_nodes, render_cuda, typed)
from ember.codegen.layout import coalesce, coalesce_rows

F32, F64 = dt.float32, dt.float64


def gelu(x):
    return 0.5 * x * (1 + call("tanh", 0.79788456 * (x + 0.044715 * x ** 3)))


def gelu_np(x):
    with np.errstate(all="ignore"):
        return 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x ** 3)))


def test_coalesce_merges_what_every_operand_walks_as_one():
    assert coalesce((4, 5, 6), [(30, 6, 1), (0, 0, 1)]).shape == (20, 6)
    assert coalesce((4, 5, 6), [(30, 6, 1), (30, 6, 1)]).shape == (120,)
    lay = coalesce((3, 1, 4), [(4, 0, 1), (0, 0, 1)])
    assert lay.shape == (3, 4) and lay.key == (2, ("c", "c"))
    assert coalesce((5, 7), [(1, 5)]).key == (2, ("g",))
    lay, copy = coalesce_rows((2, 3, 4), [(12, 4, 1), (0, 1, 3)], 2)
    assert lay.shape == (2, 12) and copy == [False, True]


def test_elementwise_broadcast_and_strided_views(cc):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((9, 14)).astype(np.float32)
    x = base[::2, 1::3].T                     # (5, 5) non-contiguous, transposed
    y = rng.standard_normal(5).astype(np.float32)
    k = Kernel([InputSpec(F32, (1, 5)), InputSpec(F32, (0, 1))], OutSpec(F32, (5, 5)),
               call("mul", call("exp", Load(0)), Load(1)) + 1.0)
    fn = compile(k, prepare=False)
    np.testing.assert_allclose(fn(x, y), np.exp(x) * y + 1, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(fn(np.ascontiguousarray(x), y), np.exp(x) * y + 1, rtol=1e-6, atol=1e-6)
    z = rng.standard_normal((5, 1)).astype(np.float32)   # broadcast along the inner dim
    np.testing.assert_allclose(fn(z, y), np.exp(z) * y + 1, rtol=1e-6, atol=1e-6)
    assert len(fn._fns) == 3          # three layout classes, three variants
    x3 = rng.standard_normal((3, 1, 4)).astype(np.float32)
    k3 = Kernel([InputSpec(F32, (4, 0, 1)), InputSpec(F32, (0, 1, 0))],
                OutSpec(F32, (3, 2, 4)), Load(0) - Load(1))
    y3 = rng.standard_normal((2, 1)).astype(np.float32)
    np.testing.assert_array_equal(compile(k3)(x3, y3), x3 - y3)


@pytest.mark.parametrize("n", [0, 1, 7, 17, 1023, 70001])
def test_odd_lengths_and_zero_size(cc, n):
    x = np.linspace(-5, 5, n).astype(np.float32)
    fn = compile(Kernel([InputSpec(F32, (1,))], OutSpec(F32, (n,)), gelu(Load(0))))
    np.testing.assert_allclose(fn(x), gelu_np(x), rtol=2e-6, atol=1e-6)


def test_zero_size_nd_output_returns_without_calling(cc):
    fn = compile(Kernel([InputSpec(F64, (5, 1))], OutSpec(F64, (0, 5)), call("exp", Load(0))))
    out = fn(np.zeros((0, 5)))
    assert out.shape == (0, 5) and fn._fns        # compiled for its layout, never called


def test_gelu_forward_and_backward_fused(cc):
    rng = np.random.default_rng(2)
    n = 100_003
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[:4] = [np.nan, np.inf, -np.inf, 0.0]
    fwd = compile(Kernel([InputSpec(F32, (1,))], OutSpec(F32, (n,)), gelu(Load(0))))
    want = gelu_np(x)
    np.testing.assert_allclose(fwd(x), want, rtol=1e-5, atol=1e-6, equal_nan=True)
    xv, dy = Load(0), Load(1)
    inner = 0.79788456 * (xv + 0.044715 * xv ** 3)
    t = call("tanh", inner)
    dx = dy * (0.5 * (1 + t) + 0.5 * xv * (1 - t * t) * 0.79788456 * (1 + 3 * 0.044715 * xv * xv))
    bwd = compile(Kernel([InputSpec(F32, (1,)), InputSpec(F32, (1,))], OutSpec(F32, (n,)), dx))
    g = rng.standard_normal(n).astype(np.float32)
    xs = x[4:].astype(np.float64)
    th = np.tanh(0.79788456 * (xs + 0.044715 * xs ** 3))
    ref = g[4:] * (0.5 * (1 + th) + 0.5 * xs * (1 - th ** 2) * 0.79788456
                   * (1 + 3 * 0.044715 * xs ** 2))
    np.testing.assert_allclose(bwd(x, g)[4:], ref, rtol=1e-4, atol=1e-5)


def _rk(ins, shape, naxes, stages, epi, out_shape, full=False, d=F32):
    return ReduceKernel([InputSpec(d, s) for s in ins], shape, naxes, stages, epi,
                        OutSpec(d, out_shape), full=full)


def test_reductions_with_prologue(cc):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 33)).astype(np.float32)
    x[1, 5], x[2, 0] = np.nan, np.inf
    xv = Load(0)
    cases = [("sum", call("exp", xv), np.exp(x).sum(1)),
             ("mean", xv * xv, (x * x).mean(1)),
             ("amax", call("abs", xv), np.abs(x).max(1)),
             ("amin", -xv, (-x).min(1))]
    for kind, body, want in cases:
        fn = compile(_rk([(33, 1)], (6, 33), 1, [Reduce(kind, body)], None, (6,)))
        np.testing.assert_allclose(fn(x), want, rtol=1e-5, equal_nan=True, err_msg=kind)


def test_softmax_layernorm_logsumexp_as_one_kernel_each(cc):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 300)).astype(np.float32) * 4
    xv = Load(0)
    e = call("exp", xv - Row(0))
    soft = compile(_rk([(300, 1)], (64, 300), 1, [Reduce("amax", xv), Reduce("sum", e)],
                       e / Row(1), (64, 300), full=True))
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(soft(x), ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    lse = compile(_rk([(300, 1)], (64, 300), 1, [Reduce("amax", xv), Reduce("sum", e)],
                      call("log", Row(1)) + Row(0), (64,)))
    m = x.max(1)
    np.testing.assert_allclose(lse(x), np.log(np.exp(x - m[:, None]).sum(1)) + m, rtol=1e-5)
    w, b = rng.standard_normal(300).astype(np.float32), rng.standard_normal(300).astype(
        np.float32)
    c = xv - Row(0)
    ln = compile(_rk([(300, 1), (0, 1), (0, 1)], (64, 300), 1,
                     [Reduce("mean", xv), Reduce("mean", c * c)],
                     c / call("sqrt", Row(1) + 1e-5) * Load(1) + Load(2), (64, 300), full=True))
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    np.testing.assert_allclose(ln(x, w, b), (x - mu) / np.sqrt(var + 1e-5) * w + b,
                               rtol=1e-4, atol=1e-4)


def test_reduction_over_several_axes_strided_and_full(cc):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 5, 6))
    k = _rk([(30, 6, 1)], (4, 5, 6), 2, [Reduce("sum", Load(0) * 2.0)], None, (4,), d=F64)
    fn = compile(k)
    np.testing.assert_allclose(fn(x), (x * 2).sum((1, 2)))
    xt = np.transpose(rng.standard_normal((6, 5, 4)), (2, 1, 0))   # inner dims need a copy
    np.testing.assert_allclose(fn(xt), (xt * 2).sum((1, 2)))
    tot = compile(_rk([(1,)], (1000,), 1, [Reduce("amax", Load(0))], None, (), d=F64))
    v = rng.standard_normal(1000)
    assert tot(v).shape == () and tot(v) == v.max()
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    ik = ReduceKernel([InputSpec(dt.int32, (4, 1))], (3, 4), 1, [Reduce("sum", Load(0))],
                      None, OutSpec(dt.int64, (3,)))
    np.testing.assert_array_equal(compile(ik)(ints), ints.sum(1))


def test_builder_and_dtype_inference():
    k = from_nodes([InputSpec(dt.int32, (1,)), InputSpec(F32, (1,))],
                   [("mul", [("in", 0), 0.5], {}, None),
                    ("add", [("node", 0), ("in", 1)], {}, None),
                    ("gt", [("node", 1), 0], {}, None)], (8,))
    assert k.out.dtype is dt.bool_
    mul = k.body.args[0].args[0]
    assert mul.compute is F32 and mul.dtype is F32          # int32 * 0.5 -> default float
    assert typed(call("exp", Load(0)), [dt.int64]).dtype is F32
    assert typed(call("add", Load(0), 2), [dt.int8]).dtype is dt.int8   # weak scalar
    assert typed(call("add", Load(0), Load(1)), [F32, F64]).compute is F64
    assert typed(call("where", Load(0), Load(1), 1.5), [dt.bool_, dt.int64, ]).dtype is F32
    with pytest.raises(ValueError, match="no C expression template"):
        call("matmul", Load(0), Load(1))
    with pytest.raises(IndexError, match="Load"):
        Kernel([InputSpec(F32, (1,))], OutSpec(F32, (3,)), Load(1))
    with pytest.raises(ValueError, match="output shape"):
        ReduceKernel([InputSpec(F32, (3, 1))], (2, 3), 1, [Reduce("sum", Load(0))],
                     Load(0) + Row(0), OutSpec(F32, (2, 3)))


def test_builder_kernel_runs(cc):
    k = from_nodes([InputSpec(F32, (1,))], [("mul", [("in", 0), 2.0], {}, None),
                                            ("clamp", [("node", 0)], {"min": -1.0}, None)],
                   (9,))
    x = np.linspace(-2, 2, 9).astype(np.float32)
    np.testing.assert_array_equal(compile(k)(x), np.clip(x * 2, -1, None))


def test_eager_single_op_helper(cc):
    x = np.random.default_rng(6).standard_normal((300, 7)).astype(np.float32)
    fn = elementwise_kernel("tanh", [F32], [x.shape])
    np.testing.assert_allclose(fn(x), np.tanh(x), rtol=2e-6, atol=1e-7)
    assert elementwise_kernel("tanh", [F32], [x.shape]) is fn          # cached
    y = np.arange(7, dtype=np.int64)
    add = elementwise_kernel("add", [F32, dt.int64], [x.shape, y.shape])
    out = add(x, y)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, x + y.astype(np.float32))
    c = elementwise_kernel("clamp", ["float32"], [x.shape], params={"min": 0.0, "max": 0.5})
    np.testing.assert_array_equal(c(x), np.clip(x, 0, 0.5))


def test_cuda_text_renders():
    k = Kernel([InputSpec(F32, (1, 0)), InputSpec(dt.float16, (0, 1))], OutSpec(F32, (4, 5)),
               gelu(Load(0)) * call("cast", Load(1), dtype=F32))
    src = render_cuda(k)
    assert '__global__ void ember_ew(' in src and "gridDim.x" in src
    assert "ember_tanh_f32(" in src and "__half2float(" in src and "#define EMBER_FN __device__" in src
    r = render_cuda(_rk([(3, 1)], (2, 3), 1, [Reduce("amax", Load(0)),
                                              Reduce("sum", call("exp", Load(0) - Row(0)))],
                        call("exp", Load(0) - Row(0)) / Row(1), (2, 3), full=True))
    assert "acc1 +=" in r and "out[idx * m + i]" in r and "in0[o0 + i * is0]" in r
