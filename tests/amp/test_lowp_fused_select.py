"""A bool operand promoted to a float inside a generated kernel (relu's backward,
``grad * (x > 0)``): rendered as a select, which GCC vectorises (``(float)flag`` it does
not), with the same values as eager — NaN/inf gradients included (``inf * 0`` is NaN
either way) — in float32, float16 and bfloat16."""
import numpy as np
import pytest

import ember as em
from ember import dtypes as dt
from ember.codegen import InputSpec, Kernel, Load, OutSpec, call, compile
from ember.codegen.cexpr import Emitter
from tests.graph._kernels import needs_compiler

_need_compiler = needs_compiler("no generated kernels to check")


def _relu_grad_kernel(d, n):
    mask = call("gt", Load(0), 0.0)
    return Kernel([InputSpec(d, (1,)), InputSpec(d, (1,))], OutSpec(d, (n,)),
                  call("mul", Load(1), mask, compute=d))


def test_bool_to_float_is_a_select_not_a_conversion():
    em_ = Emitter(lambda i: f"in{i}[i]", [dt.float32, dt.float32])
    em_.value(_relu_grad_kernel(dt.float32, 4).body)
    text = "\n".join(em_.lines)
    assert " ? (float)1 : (float)0)" in text, text
    assert "((float)t1)" not in text, text


@pytest.mark.parametrize("d", [dt.float32, dt.float16, dt.bfloat16])
def test_relu_backward_kernel_matches_numpy_with_nan_inf_denormals(d):
    n = 1031                                         # a vector body and a tail
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    x[:6] = [np.nan, -np.inf, np.inf, 0.0, -0.0, 1e-40]
    g[6:12] = [np.inf, -np.inf, np.nan, 1e-40, -1e-40, 0.0]
    x[6:9] = [-1.0, -2.0, -3.0]                      # inf/NaN gradient under a closed mask
    xs, gs = x.astype(d.np), g.astype(d.np)
    got = compile(_relu_grad_kernel(d, n))(xs, gs)
    with np.errstate(invalid="ignore"):
        want = (gs.astype(np.float32) * (xs.astype(np.float32) > 0)).astype(d.np)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)),
                                  np.isnan(want.astype(np.float32)))
    ok = ~np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(got.view(np.uint8).reshape(n, -1)[ok],
                                  want.view(np.uint8).reshape(n, -1)[ok])


@pytest.mark.parametrize("d", [em.float32, em.bfloat16])
def test_compiled_relu_backward_equals_eager(d):
    rng = np.random.default_rng(1)
    xa = rng.standard_normal((64, 48)).astype(np.float32)
    xa[0, :4] = [np.nan, np.inf, -np.inf, 0.0]

    def f(x):
        y = em.relu(x)
        (y * y).sum().backward()
        return x.grad

    def run(fn):
        x = em.tensor(xa).to(d).detach().requires_grad_()
        return fn(x).float().numpy()

    want = run(f)
    got = run(em.compile(f))
    np.testing.assert_array_equal(got, want)
