"""Eager mode's generated-kernel fast path (ember/codegen/eager.py via the dispatcher).

Every op on the fast path, through the dispatcher, against NumPy (the op's own kernel with
the fast path off) in float32 and float64: special values, odd lengths (SIMD tails),
broadcasting, Python scalars, non-contiguous and negative-stride views, zero-size. Then
NaN/Inf semantics of the C templates that used to drop NaN, the switches (config, env,
warm-up), the no-compiler path, a failed build, a corrupted cache entry, autograd through
the fast path, and integers never taking it. Tests lower the size thresholds (and turn the
warm-up off) so that small arrays exercise the kernels; the defaults are tested as data.
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ember
from ember import config
from ember import dtypes as dt
from ember.codegen import cache, eager, elementwise_kernel, runtime, toolchain
from ember.ops import dispatch
from ember.ops.registry import REGISTRY

FAST = sorted(eager.THRESHOLDS)
BINARY = [op for op in FAST if REGISTRY[op].nin == 2]
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.75, 1e-3, 7.0,
           0.999, -0.9999, 40.0, -100.0, 1e-30, 3e38]
#: max error in units in the last place: glibc's libm/libmvec (<= 4 ulp by glibc's tables)
#: and float32 tanh's rational approximation (<= 4.5 ulp). float32 results are compared
#: with the op computed in float64 and rounded (an exact reference at this scale); float64
#: ones with NumPy, whose own error adds: Ember's NumPy erf/erfc/erfinv are <= 6 ulp off
#: (mpmath), the kernel's libm ones <= 1 ulp.
MAX_ULP = {np.float32: 5, np.float64: 4}
NUMPY_ULP64 = {"erf": 6, "erfc": 6, "erfinv": 6}


@pytest.fixture
def fast(cc):
    """Every fast-path op from one element up, no warm-up; defaults restored after."""
    prev = config.set_eager_kernels(True)
    eager.configure(thresholds={op: 1 for op in FAST}, warmup=0)
    yield
    eager.configure(reset=True)
    config.set_eager_kernels(prev)


def _numpy(fn, *args):
    """``fn(*args)`` in eager Ember with the fast path off: the NumPy kernels' result."""
    prev = config.set_eager_kernels(False)
    try:
        return fn(*args).numpy()
    finally:
        config.set_eager_kernels(prev)


def _through_kernel(fn, *args):
    before = eager.stats["runs"]
    out = fn(*args).numpy()
    assert eager.stats["runs"] == before + 1, "the fast path did not take the op"
    return out


def _assert_ulp(got, want, d, what, slack=0):
    assert got.dtype == want.dtype == d, (what, got.dtype, want.dtype)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{what}: NaN positions")
    g, w = got[~nan].astype(np.float64), want[~nan].astype(np.float64)
    inf = np.isinf(w)
    np.testing.assert_array_equal(g[inf], w[inf], err_msg=f"{what}: infinities")
    tiny = np.finfo(d).tiny
    ulp = np.abs(g[~inf] - w[~inf]) / np.maximum(np.spacing(np.abs(w[~inf]).astype(d)), tiny)
    worst = ulp.max(initial=0.0)
    assert worst <= MAX_ULP[d] + slack, f"{what}: {worst:.1f} ulp from the reference"


def _unary_input(d, n, rng):
    x = np.concatenate([SPECIAL, rng.standard_normal(n - len(SPECIAL) - 40) * 3,
                        rng.uniform(-1, 1, 40)])
    return x.astype(d)


def _call(op):
    """The public Ember spelling of primitive ``op`` (the dispatcher is what is tested)."""
    if op == "threshold_backward":     # relu's backward: not a top-level name (PyTorch's)
        from ember.ops.unary_backward import threshold_backward
        return lambda g, y: threshold_backward(g, y, 0)
    return {"pow": ember.pow, "sigmoid": ember.sigmoid}.get(op) or getattr(ember, op)


# ------------------------------------------------------------------ every op, every layout
@pytest.mark.parametrize("d", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", FAST)
def test_every_fast_op_matches_numpy(fast, op, d):
    rng = np.random.default_rng(0)
    fn = _call(op)
    if op in BINARY:
        a, b = np.meshgrid(SPECIAL, SPECIAL)
        x = np.concatenate([a.ravel(), rng.standard_normal(200) * 3]).astype(d)
        y = np.concatenate([b.ravel(), rng.uniform(-3, 3, 200)]).astype(d)
        args = [ember.tensor(x), ember.tensor(y)]
    else:
        args = [ember.tensor(_unary_input(d, 1003, rng))]      # odd: the SIMD loop's tail
    got = _through_kernel(fn, *args)
    if d is np.float32:
        want = _numpy(fn, *[a.double() for a in args])
        with np.errstate(over="ignore"):
            want = want.astype(np.float32)
        _assert_ulp(got, want, d, op)
    else:
        _assert_ulp(got, _numpy(fn, *args), d, op, NUMPY_ULP64.get(op, 0))


@pytest.mark.parametrize("d", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_layouts_broadcast_scalars_strides(fast, d):
    rng = np.random.default_rng(1)
    base = rng.uniform(0.1, 3, (9, 2, 37)).astype(d)
    t = ember.tensor(base)
    views = {"transposed": t.permute(2, 0, 1), "sliced": t[::2, :, 1::3],
             "reversed": ember.from_numpy(base[::-1, :, ::-1]),    # negative strides
             "expanded": ember.tensor(base[:1]).expand(9, 2, 37)}
    for name, v in views.items():
        for op in ("exp", "tanh", "log", "erf"):
            # NOTE: float32 against the op in float64, rounded: NumPy's own float32 error
            # would add to the kernel's (libmvec's logf is up to 3.9 ulp in every variant).
            want = _numpy(_call(op), v.double() if d is np.float32 else v).astype(d)
            _assert_ulp(_through_kernel(_call(op), v), want, d, f"{op} {name}")
    col = ember.tensor(rng.uniform(0.5, 2, (9, 1, 1)).astype(d))
    row = ember.tensor(rng.uniform(0.5, 2, (37,)).astype(d))
    for op in BINARY:
        fn = _call(op)
        for what, args in (("bcast col", (t, col)), ("bcast row", (row, t)),
                           ("both", (col, row)), ("scalar right", (t, 1.5)),
                           ("scalar left", (0.75, t)), ("strided", (t[:, :, ::2], row[::2]))):
            if not isinstance(args[0], ember.Tensor) and op != "pow":
                args = (ember.tensor(np.full((), args[0], d)).expand(*t.shape), args[1])
            _assert_ulp(_through_kernel(fn, *args), _numpy(fn, *args), d, f"{op} {what}")


def test_zero_size_and_one_element(fast):
    eager.configure(thresholds={"exp": 0, "atan2": 0}, warmup=0)
    for shape in ((0,), (3, 0, 5)):
        x = ember.zeros(shape)
        assert _through_kernel(ember.exp, x).shape == shape
        assert _through_kernel(ember.atan2, x, x).shape == shape
    one = ember.tensor([0.25])
    # NOTE: the kernel's expf is correctly rounded here; NumPy's float32 exp is 1 ulp off.
    _assert_ulp(_through_kernel(ember.exp, one), np.exp(np.float64([0.25])).astype(np.float32),
                np.float32, "exp one element")


def test_integers_and_mixed_dtypes_keep_numpy(fast):
    before = eager.stats["runs"]
    i = ember.arange(0, 5000)
    ember.exp(i)                                  # computes in float32: the kernel may run
    assert eager.stats["runs"] == before + 1
    ember.pow(i, 2), ember.remainder(i, 3)        # integer compute: never a kernel
    with pytest.raises(ember.errors.IntegerDivisionByZero, match="floor_divide"):
        ember.floor_divide(i, ember.zeros(5000, dtype=ember.int64))
    x32, x64 = ember.rand(5000), ember.rand(5000, dtype=ember.float64)
    np.testing.assert_allclose(ember.atan2(x32, x64).numpy(),
                               np.arctan2(x32.numpy().astype(np.float64), x64.numpy()))
    assert eager.stats["runs"] == before + 2      # mixed: promoted first, then one dtype


def test_integer_division_ops_are_not_fusible():
    for op in ("floor_divide", "trunc_divide", "remainder", "fmod", "pow"):
        assert not eager.fusible(op, dt.int64) and not eager.fusible(op, dt.bool_)
        assert eager.fusible(op, dt.float32)
    assert eager.fusible("add", dt.int64) and not eager.fusible("matmul", dt.float32)


# ------------------------------------------------------------------ NaN / Inf in templates
@pytest.mark.parametrize("d", [dt.float32, dt.float64], ids=str)
def test_templates_propagate_nan_like_numpy(cc, d):
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -2.0, 0.3, 5.0], d.np)
    y = np.array([0.0, np.nan, 1.0, np.nan, -np.inf, np.nan, 0.3, np.inf], d.np)
    cases = [("relu", [x], {}, np.maximum(x, 0)), ("sign", [x], {}, np.sign(x)),
             ("clamp", [x], {"min": -1.0, "max": 1.0}, np.clip(x, -1, 1)),
             ("clamp", [x], {"min": -1.0, "max": None}, np.maximum(x, -1)),
             ("maximum", [x, y], {}, np.maximum(x, y)), ("minimum", [x, y], {}, np.minimum(x, y)),
             ("maximum", [y, x], {}, np.maximum(y, x)), ("where", [x > 0, x, y], {},
                                                         np.where(x > 0, x, y)),
             ("nan_to_num", [x], {"nan": 0.0, "posinf": None, "neginf": None},
              np.nan_to_num(x)), ("abs", [x], {}, np.abs(x)), ("floor", [x], {}, np.floor(x)),
             ("round", [x], {"decimals": 0}, np.round(x))]
    for op, arrays, params, want in cases:
        fn = elementwise_kernel(op, [dt.as_dtype(a.dtype) for a in arrays],
                                [a.shape for a in arrays], params=params)
        got = fn(*arrays)
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {params}")
        assert str(REGISTRY[op].expr).find("fmin") < 0      # no NaN-dropping fmin/fmax


# ------------------------------------------------------------------ switches and fallbacks
def test_switch_off_is_numpy_bits(fast):
    x = ember.tensor(_unary_input(np.float32, 2001, np.random.default_rng(2)))
    prev = config.set_eager_kernels(False)
    try:
        before = eager.stats["runs"]
        got = ember.tanh(x).numpy()
        assert eager.stats["runs"] == before
    finally:
        config.set_eager_kernels(prev)
    np.testing.assert_array_equal(got, np.tanh(x.numpy()))


def test_env_var_turns_it_off():
    code = "import ember.config as c; print(c.EAGER_KERNELS, c.EAGER_KERNELS_WARMUP)"
    env = {**os.environ, "EMBER_EAGER_KERNELS": "0", "EMBER_EAGER_KERNELS_WARMUP": "7"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=300).stdout.split()
    assert out == ["False", "7"]


def test_warmup_runs_numpy_first(cc):
    eager.configure(thresholds={"exp": 100}, warmup=1000)
    try:
        x = ember.rand(400)
        before = eager.stats["runs"]
        for _ in range(3):                         # 1200 elements seen: still warming up
            np.testing.assert_array_equal(ember.exp(x).numpy(), np.exp(x.numpy()))
        ember.exp(x[:50])                          # under the size threshold: not counted
        assert eager.stats["runs"] == before
        ember.exp(x)
        assert eager.stats["runs"] == before + 1
    finally:
        eager.configure(reset=True)


def test_defaults_and_dispatcher_gate_agree():
    eager.configure(reset=True)
    assert dispatch._EAGER_MIN == eager.min_threshold() >= 1 << 12
    assert dispatch._EAGER_OPS == set(eager.THRESHOLDS)     # the ops the dispatcher asks
    for op, (n32, n64) in eager.THRESHOLDS.items():
        o = REGISTRY[op]
        assert o.elementwise and o.expr and o.nin in (1, 2), op
        assert all(n is None or n >= 1 << 12 for n in (n32, n64)), op
    # memory-bound arithmetic stays on NumPy (measured: no gain worth a changed path)
    assert not {"add", "sub", "mul", "neg", "relu"} & set(eager.THRESHOLDS)


@pytest.fixture
def no_compiler(monkeypatch):
    monkeypatch.setattr(toolchain, "_candidates", lambda: [])
    monkeypatch.setattr(runtime, "_warned", [False])
    toolchain.find_compiler.cache_clear()
    eager.configure(thresholds={op: 1 for op in FAST}, warmup=0)
    yield
    monkeypatch.undo()
    toolchain.find_compiler.cache_clear()
    eager.configure(reset=True)


def test_no_compiler_is_numpy_silently(no_compiler):
    x = ember.tensor(_unary_input(np.float32, 999, np.random.default_rng(3)))
    before = eager.stats["runs"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ember.erf(x).numpy()
        ember.atan2(x, x)
    assert eager.stats["runs"] == before
    np.testing.assert_array_equal(got, _numpy(ember.erf, x))


def test_failed_build_warns_once_then_numpy(fast, monkeypatch):
    def broken(self, key):
        raise toolchain.CompileError("codegen: gcc failed (simulated)")
    monkeypatch.setattr(runtime.CompiledKernel, "function", broken)
    x = ember.rand(300)
    with pytest.warns(RuntimeWarning, match="ember_eager_cosh failed to build"):
        got = ember.cosh(x).numpy()
    np.testing.assert_array_equal(got, np.cosh(x.numpy()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ember.cosh(x)                              # disabled now: no second warning


def test_corrupted_cache_entry_is_rebuilt(fast, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path))
    x = ember.rand(777)
    want = _through_kernel(ember.sinh, x)
    (so,) = [p for p in os.listdir(tmp_path) if p.endswith(".so") and not p.startswith(".")]
    with open(tmp_path / so, "r+b") as f:
        f.truncate(100)
    cache.forget_loaded()
    eager.configure(thresholds={"sinh": 1}, warmup=0)      # drop the process's memo
    before = dict(cache.stats)
    np.testing.assert_array_equal(_through_kernel(ember.sinh, x), want)
    assert cache.stats["rebuilt"] == before["rebuilt"] + 1


# ------------------------------------------------------------------ autograd
@pytest.mark.parametrize("d", [ember.float32, ember.float64], ids=str)
def test_autograd_through_fast_path_matches(fast, d):
    rng = np.random.default_rng(4)
    xs = rng.uniform(0.2, 1.5, (31, 17))

    def run():
        x = ember.tensor(xs, dtype=d, requires_grad=True)
        y = ember.tensor(xs.T.copy() + 0.5, dtype=d, requires_grad=True)
        z = ember.tanh(x).exp() * ember.erf(x) + ember.pow(x, y.T) + ember.atan2(x, y.T)
        z = ember.sigmoid(z).log()
        z.sum().backward()
        return z.detach().numpy(), x.grad.numpy(), y.grad.numpy()

    before = eager.stats["runs"]
    fast_out = run()
    assert eager.stats["runs"] >= before + 8       # forward and backward both used kernels
    prev = config.set_eager_kernels(False)
    try:
        slow_out = run()
    finally:
        config.set_eager_kernels(prev)
    rtol = 2e-6 if d is ember.float32 else 1e-14
    for f, s in zip(fast_out, slow_out):
        np.testing.assert_allclose(f, s, rtol=rtol, atol=rtol)
