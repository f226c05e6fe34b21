"""Every primitive with a C template, through a generated kernel, against eager Ember.

One shared object per dtype holds every op's kernel (one compiler run each). Inputs mix
special values (NaN, +-inf, +-0, huge, tiny) with random ones, and have odd lengths so
the SIMD loops' tails run.
"""
import numpy as np
import pytest

import ember
from ember import dtypes as dt
from ember.codegen import InputSpec, Kernel, Load, OutSpec, call, compile_many
from ember.codegen.ir import infer
from ember.ops.registry import REGISTRY

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.75, 1e-3, 7.0,
           0.999, -0.9999, 40.0, -100.0]
PARAMS = {"clamp": {"min": -0.75, "max": 2.0}, "cast": {"dtype": dt.float64},
          "round": {"decimals": 0}}
INT_PARAMS = {"clamp": {"min": -3, "max": 5}, "cast": {"dtype": dt.float32}}
ROUND2 = ("round", {"decimals": 2})
TOL = {dt.float32: (2e-5, 1e-6), dt.float64: (1e-12, 1e-14)}


def _ops():
    return sorted(n for n, o in REGISTRY.items() if o.expr)


def _float_inputs(nin, d, rng):
    if nin == 1:
        x = np.concatenate([SPECIAL, rng.standard_normal(40) * 3, rng.uniform(-1, 1, 12)])
        return [x.astype(d.np)]
    a, b = np.meshgrid(SPECIAL, SPECIAL)
    x = np.concatenate([a.ravel(), rng.standard_normal(31) * 3])
    y = np.concatenate([b.ravel(), rng.standard_normal(31) * 3])
    return [x.astype(d.np), y.astype(d.np)]


def _int_inputs(op, nin, rng):
    x = np.concatenate([[0, 1, -1, 7, -7, 2**40, -2**40, 2**62, -2**63, 2**63 - 1],
                        rng.integers(-50, 50, 29)]).astype(np.int64)
    if nin == 1:
        return [x]
    y = rng.integers(-9, 10, x.size).astype(np.int64)
    if op in ("floor_divide", "trunc_divide", "remainder", "fmod", "div"):
        y[y == 0] = 3          # eager raises on an integer division by zero
    if op == "pow":
        y = np.abs(y)
    if op.startswith("bitwise_") and "shift" in op:
        y = rng.integers(0, 70, x.size).astype(np.int64)
    return [x, y]


def _case(op, d, rng):
    """(arrays, params) for ``op`` in dtype ``d``, or None if the op does not take it."""
    o = REGISTRY[op]
    nin = o.nin
    if op == "where":
        c = rng.random(53) > 0.5
        if d is dt.bool_:
            return [c, rng.random(53) > 0.3, rng.random(53) > 0.6], {}
        base = _float_inputs(1, d, rng)[0][:53] if d.is_floating_point else \
            rng.integers(-9, 9, 53).astype(d.np)
        return [c, base, base[::-1].copy()], {}
    if d is dt.bool_:
        arrays = [rng.random(41) > 0.5 for _ in range(nin)]
        return arrays, dict(PARAMS.get(op, {}) if op != "clamp" else {"min": 0, "max": 1})
    if d.is_floating_point:
        return _float_inputs(nin, d, rng), dict(PARAMS.get(op, {}))
    return _int_inputs(op, nin, rng), dict(INT_PARAMS.get(op, PARAMS.get(op, {})))


def _eager(op, arrays, params):
    ts = [ember.tensor(a) for a in arrays]
    return REGISTRY[op](*ts, **params).numpy()


def _kernel(op, arrays, params, name):
    dts = [dt.as_dtype(a.dtype) for a in arrays]
    compute, out = infer(op, dts, params)
    body = call(op, *[Load(i) for i in range(len(arrays))], compute=compute, **params)
    specs = [InputSpec(d, (1,)) for d in dts]
    return Kernel(specs, OutSpec(out, (arrays[0].size,)), body, name=name)


def _run_all(d, extra=()):
    rng = np.random.default_rng(0)
    cases = []
    for op in _ops():
        case = _case(op, d, rng)
        if case is None:
            continue
        arrays, params = case
        try:
            want = _eager(op, arrays, params)
        except Exception:            # the op does not take this dtype in eager mode
            continue
        cases.append((op, arrays, params, want))
    for op, params in extra:
        arrays = _case(op, d, rng)[0]
        cases.append((op, arrays, params, _eager(op, arrays, params)))
    fns = compile_many([_kernel(op, a, p, f"k{i}_{op}") for i, (op, a, p, _) in
                        enumerate(cases)])
    return [(op, p, fn(*a), want) for (op, a, p, want), fn in zip(cases, fns)]


@pytest.mark.parametrize("d", [dt.float32, dt.float64], ids=str)
def test_every_op_float(cc, d):
    results = _run_all(d, extra=[ROUND2, ("cast", {"dtype": dt.bool_}),
                                 ("cast", {"dtype": dt.float16}),
                                 ("nan_to_num", {"nan": 1.0, "posinf": 2.0, "neginf": -2.0})])
    names = {op for op, *_ in results}
    assert len(names) >= 55, sorted(names)
    rtol, atol = TOL[d]
    bad = []
    for op, p, got, want in results:
        assert got.dtype == want.dtype, (op, got.dtype, want.dtype)
        r, a = (1e-3, 1e-3) if want.dtype == np.float16 else (rtol, atol)
        if op == "erfinv":     # NOTE: near +-1 erfinv is ill-conditioned in float32
            r = max(r, 1e-4)
        try:
            np.testing.assert_allclose(got, want, rtol=r, atol=a, equal_nan=True)
        except AssertionError as e:
            bad.append(f"{op} {p}: {str(e)[:400]}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("d", [dt.int64, dt.int32, dt.bool_], ids=str)
def test_every_op_integer_and_bool(cc, d):
    results = _run_all(d)
    assert len(results) >= (25 if d is not dt.bool_ else 12), [r[0] for r in results]
    bad = []
    for op, p, got, want in results:
        assert got.dtype == want.dtype, (op, got.dtype, want.dtype)
        try:
            if got.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, equal_nan=True)
            else:
                np.testing.assert_array_equal(got, want)
        except AssertionError as e:
            bad.append(f"{op} {p}: {str(e)[:400]}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("d", [dt.float16, dt.bfloat16], ids=str)
def test_half_types_convert_at_load_and_store(cc, d):
    rng = np.random.default_rng(1)
    x = np.concatenate([[np.nan, np.inf, -np.inf, 0.0, 65504.0 if d is dt.float16 else 1e38],
                        rng.standard_normal(30)]).astype(d.np)
    y = rng.standard_normal(x.size).astype(d.np)
    ops = [("add", [x, y]), ("exp", [x]), ("tanh", [x]), ("mul", [x, y])]
    fns = compile_many([_kernel(op, a, {}, f"h_{op}") for op, a in ops])
    for (op, a), fn in zip(ops, fns):
        got, want = fn(*a), _eager(op, a, {})
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=1e-2, atol=1e-2, equal_nan=True, err_msg=op)
