"""Behaviour of the elementwise family that the OpInfo table does not cover: dtype
promotion, comparison/logical dtypes, operators, in-place variants, errors, PyTorch's
gradient conventions at kinks, erf/erfinv accuracy and integer division semantics."""
import math

import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, ShapeError


def T(x, dtype=None, **kw):
    return em.tensor(x, dtype=dtype, **kw)


# ------------------------------------------------------------------ dtype promotion
PROMOTION = [  # (a, b, expected result dtype) — PyTorch's rules
    (lambda: T([1, 2]), 2.5, em.float32),                                 # int + float scalar
    (lambda: T([1, 2], em.int32), lambda: T([1, 2], em.int64), em.int64),
    (lambda: T([1, 2], em.uint8), lambda: T([1, 2], em.int8), em.int16),
    (lambda: T([1., 2.], em.float16), lambda: T(1.0, em.float64), em.float16),  # 0-dim weaker
    (lambda: T([1, 2], em.int32), lambda: T(1.5, em.float64), em.float64),      # higher category
    (lambda: T([True, False]), lambda: T([True, True]), em.bool),
    (lambda: T([True, False]), 3, em.int64),
    (lambda: T([1, 2], em.int8), 100, em.int8),                            # int scalar is weak
    (lambda: T([1., 2.], em.float16), 2.5, em.float16),
    (lambda: T([1., 2.], em.bfloat16), lambda: T([1., 2.], em.float16), em.float32),
]


def _mk(v):
    return v() if callable(v) else v


@pytest.mark.parametrize("a,b,want", PROMOTION)
@pytest.mark.parametrize("fn", [em.add, em.mul, em.maximum, em.minimum, em.where])
def test_binary_promotion(a, b, want, fn):
    a, b = _mk(a), _mk(b)
    if fn is em.where:
        r = em.where(T([True, False]), a, b)
    elif fn in (em.maximum, em.minimum) and not isinstance(b, em.Tensor):
        r = fn(a, T(b))    # PyTorch's maximum takes tensors; 0-dim keeps weak-ish rank
        want = em.result_type(a, T(b))
    else:
        r = fn(a, b)
    assert r.dtype == want


def test_promotion_matches_torch():
    torch = pytest.importorskip("torch")
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
             "float32", "float64"]
    for x in names:
        for y in names:
            for ydim in (1, 0):
                a, b = em.ones(2, dtype=getattr(em, x)), em.ones((2,)[:ydim],
                                                                  dtype=getattr(em, y))
                ta = torch.ones(2, dtype=getattr(torch, x))
                tb = torch.ones((2,)[:ydim], dtype=getattr(torch, y))
                for ef, tf in ((em.maximum, torch.maximum), (em.atan2, torch.atan2),
                               (em.eq, torch.eq), (em.remainder, torch.remainder)):
                    if tf is torch.remainder and "bool" in (x, y):
                        continue
                    try:
                        want = tf(ta, tb).dtype
                    except (RuntimeError, TypeError):
                        continue
                    got = ef(a, b).dtype
                    assert got.name == str(want).replace("torch.", ""), (ef, x, y, ydim)


@pytest.mark.parametrize("fn", [em.exp, em.sin, em.sqrt, em.sigmoid, em.erf, em.log1p,
                                em.reciprocal, em.rsqrt])
def test_float_ops_promote_ints_to_default_float(fn):
    assert fn(T([1, 2, 3])).dtype == em.float32
    assert fn(T([True, True])).dtype == em.float32
    em.set_default_dtype(em.float64)
    try:
        assert fn(T([1, 2, 3])).dtype == em.float64
    finally:
        em.set_default_dtype(em.float32)


@pytest.mark.parametrize("fn", [em.abs, em.neg, em.sign, em.floor, em.ceil, em.round, em.trunc,
                                em.relu, em.square])
def test_int_dtype_kept(fn):
    x = T([-3, 0, 4], em.int32)
    r = fn(x)
    assert r.dtype == em.int32
    ref = {em.abs: np.abs, em.neg: np.negative, em.sign: np.sign, em.relu:
           lambda a: np.maximum(a, 0), em.square: np.square}.get(fn, lambda a: a)
    np.testing.assert_array_equal(r.numpy(), ref(np.array([-3, 0, 4], np.int32)))


def test_square_bool_is_int64_and_sign_bool():
    assert em.square(T([True, False])).dtype == em.int64
    assert em.sign(T([True, False])).tolist() == [True, False]


# ------------------------------------------------------------------ comparisons and logic
def test_comparisons_return_bool_and_operators():
    a, b = T([1., 2., 3.]), T([3., 2., 1.])
    for r, want in ((a == b, [0, 1, 0]), (a != b, [1, 0, 1]), (a < b, [1, 0, 0]),
                    (a <= b, [1, 1, 0]), (a > b, [0, 0, 1]), (a >= b, [0, 1, 1]),
                    (2 < a, [0, 0, 1]), (a == 2, [0, 1, 0]), (2.0 >= a, [1, 1, 0])):
        assert r.dtype == em.bool
        assert r.tolist() == [bool(w) for w in want]
    assert em.greater(a, b).tolist() == em.gt(a, b).tolist()
    assert em.less_equal(a, b).tolist() == (a <= b).tolist()
    assert em.not_equal(a, b).tolist() == (a != b).tolist()
    assert (T([1, 2]) < 1.5).tolist() == [True, False]        # int vs float compares as float


def test_eq_with_non_number_and_hash_identity():
    x = T([1., 2.])
    assert (x == None) is False  # noqa: E711 - Python falls back to identity
    assert (x != "a") is True
    y = T([1., 2.])
    d = {x: "x", y: "y"}
    assert d[x] == "x" and d[y] == "y" and hash(x) != hash(y)
    assert em.equal(x, y) and not em.equal(x, T([1., 3.])) and not em.equal(x, T([1.]))


def test_logical_and_bitwise_ops():
    a, b = T([True, True, False]), T([True, False, False])
    assert (a & b).tolist() == [True, False, False]
    assert (a | b).tolist() == [True, True, False]
    assert (a ^ b).tolist() == [False, True, False]
    assert (~a).tolist() == [False, False, True]
    assert (~a).dtype == em.bool
    i = T([5, -2, 12])
    assert (~i).tolist() == [-6, 1, -13]
    assert (i & 6).tolist() == [4, 6, 4] and (6 & i).tolist() == [4, 6, 4]
    assert (i | 1).tolist() == [5, -1, 13] and (i ^ 3).tolist() == [6, -3, 15]
    assert (i << 2).tolist() == [20, -8, 48] and (i >> 1).tolist() == [2, -1, 6]
    assert (1 << T([0, 3])).tolist() == [1, 8]
    r = em.logical_and(T([0., 2.]), T([1, 1]))
    assert r.dtype == em.bool and r.tolist() == [False, True]
    assert em.logical_xor(T([0, 3]), T([0., 0.])).tolist() == [False, True]


@pytest.mark.parametrize("fn", [lambda a, b: a & b, lambda a, b: a | b, lambda a, b: a ^ b,
                                lambda a, b: a << b, em.bitwise_and, em.bitwise_right_shift])
def test_bitwise_on_floats_is_a_clear_error(fn):
    with pytest.raises(DTypeError) as e:
        fn(T([1., 2.]), T([1, 2]))
    msg = str(e.value)
    assert "bitwise" in msg and "float32" in msg and "integer and bool" in msg
    with pytest.raises(TypeError):     # DTypeError is a TypeError
        ~T([1.5])


def test_broadcast_mismatch_names_op_and_shapes():
    for fn, name in ((em.maximum, "maximum"), (em.eq, "eq"), (em.atan2, "atan2"),
                     (em.logical_and, "logical_and"), (em.remainder, "remainder")):
        with pytest.raises(ShapeError) as e:
            fn(em.ones(2, 3), em.ones(4))
        msg = str(e.value)
        assert msg.startswith(name + ":") and "(2, 3)" in msg and "(4,)" in msg
    with pytest.raises(ValueError):
        em.ones(2, 3) < em.ones(2)


# ------------------------------------------------------------------ in-place variants
def test_inplace_variants_write_through_and_keep_dtype():
    x = T([-2.0, 0.25, 4.0])
    v = x[1:]
    assert x.clamp_(-1, 1) is x
    assert x.tolist() == [-1.0, 0.25, 1.0] and v.tolist() == [0.25, 1.0]
    x.abs_().sqrt_()
    np.testing.assert_allclose(x.numpy(), [1.0, 0.5, 1.0])
    x.relu_().exp_().log_()
    np.testing.assert_allclose(x.numpy(), [1.0, 0.5, 1.0], rtol=1e-6)
    i = T([5, -7])
    i %= 3
    assert i.tolist() == [2, 2] and i.dtype == em.int64
    i //= 2
    assert i.tolist() == [1, 1]
    i <<= 2
    i |= 1
    i &= 7
    i ^= 2
    assert i.tolist() == [7, 7]
    with pytest.raises(DTypeError, match="can't be cast"):
        T([1, 2]).exp_()                   # float result into an int tensor, like PyTorch
    f = T([1., 5.])
    f.lt_(2)
    assert f.dtype == em.float32 and f.tolist() == [1.0, 0.0]
    n = T([float("nan"), 2.0])
    n.nan_to_num_(nan=-1.0)
    assert n.tolist() == [-1.0, 2.0]
    s = T([0.0, 1.0])
    s.sigmoid_()
    assert s.tolist()[0] == 0.5
    t = T([0.0, 10.0])
    t.lerp_(T([10.0, 0.0]), 0.5)
    assert t.tolist() == [5.0, 5.0]


def test_inplace_autograd():
    a = T([-1.0, 0.5, 2.0], requires_grad=True)
    y = a * 1
    y.tanh_()
    y.clamp_(max=0.9)
    y.sum().backward()
    want = (1 - np.tanh([-1.0, 0.5, 2.0]) ** 2) * (np.tanh([-1.0, 0.5, 2.0]) <= 0.9)
    np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-6)
    with pytest.raises(RuntimeError, match="leaf"):
        a.exp_()


def test_methods_exist():
    x = T([0.5, 0.25])
    for name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
                 "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
                 "tanh", "sigmoid", "relu", "erf", "erfinv", "abs", "sign", "floor", "ceil",
                 "round", "trunc", "frac", "square", "isnan", "isinf", "isfinite", "isposinf",
                 "isneginf", "signbit", "logical_not", "nan_to_num"):
        np.testing.assert_allclose(getattr(x, name)().numpy(), getattr(em, name)(x).numpy())
    for name in ("maximum", "minimum", "atan2", "fmod", "remainder", "hypot", "copysign", "eq",
                 "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"):
        np.testing.assert_array_equal(getattr(x, name)(x.flip(0)).numpy(),
                                      getattr(em, name)(x, x.flip(0)).numpy())
    assert abs(T([-1.5])).tolist() == [1.5] and round(T([2.5])).tolist() == [2.0]
    assert x.clamp(min=0.375).tolist() == [0.5, 0.375] == x.clip(0.375).tolist()
    assert x.clamp_min(0.375).tolist() == [0.5, 0.375]
    assert x.clamp_max(0.375).tolist() == [0.375, 0.25]
    out = em.empty(2)
    assert em.exp(x, out=out) is out and np.allclose(out.numpy(), np.exp([0.5, 0.25]))


# ------------------------------------------------------------------ gradient conventions
def _grad(f, *xs):
    xs = [T(x, em.float64, requires_grad=True) for x in xs]
    f(*xs).sum().backward()
    return [x.grad.tolist() for x in xs]


def test_kink_gradients_follow_pytorch():
    assert _grad(em.abs, [0.0, -2.0, 3.0]) == [[0.0, -1.0, 1.0]]
    assert _grad(em.relu, [0.0, -2.0, 3.0]) == [[0.0, 0.0, 1.0]]
    assert _grad(em.maximum, [1.0, 2.0, 3.0], [1.0, 5.0, 0.0]) == [[0.5, 0.0, 1.0],
                                                                    [0.5, 1.0, 0.0]]
    assert _grad(em.minimum, [1.0, 2.0, 3.0], [1.0, 5.0, 0.0]) == [[0.5, 1.0, 0.0],
                                                                    [0.5, 0.0, 1.0]]
    assert _grad(lambda x: x.clamp(-1, 1), [-1.0, 1.0, 2.0, -3.0, 0.0]) == \
        [[1.0, 1.0, 0.0, 0.0, 1.0]]
    g = _grad(lambda x, lo: em.clamp(x, lo), [0.0, 1.0, -1.0], [0.0, 0.0, 0.0])
    assert g == [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    for f in (em.floor, em.ceil, em.round, em.trunc, em.sign):
        assert _grad(f, [0.3, -1.7]) == [[0.0, 0.0]]
    assert _grad(em.frac, [0.3, -1.7]) == [[1.0, 1.0]]
    assert _grad(lambda x, y: em.fmod(x, y), [7.0, -7.0], [2.0, 2.0]) == [[1.0, 1.0],
                                                                       [-3.0, 3.0]]
    assert _grad(lambda x, y: em.remainder(x, y), [7.0, -7.0], [2.0, 2.0]) == [[1.0, 1.0],
                                                                            [-3.0, 4.0]]
    assert _grad(lambda x: em.nan_to_num(x), [float("nan"), float("inf"), 2.0]) == \
        [[0.0, 0.0, 1.0]]


def test_zero_gradient_ops_propagate_requires_grad():
    x = T([1.5, -0.5], requires_grad=True)
    for r in (x.floor(), x.sign(), x.round(), x // 2, em.div(x, 2, rounding_mode="trunc")):
        assert r.requires_grad
    for r in (x > 0, x.isnan(), x == x):
        assert not r.requires_grad and r.dtype == em.bool


def test_gradients_match_torch_at_special_points():
    torch = pytest.importorskip("torch")
    xs = [0.0, 1.0, -1.0, 0.5, 2.0, -3.0]
    ys = [0.0, 1.0, 1.0, -0.5, 2.0, 2.0]
    for name in ("maximum", "minimum", "fmod", "remainder", "atan2", "hypot", "copysign"):
        if name in ("fmod", "remainder", "atan2", "hypot"):
            pairs = [(x, y) for x, y in zip(xs, ys) if y != 0 and (x, y) != (0.0, 0.0)]
        else:
            pairs = list(zip(xs, ys))
        a = T([p[0] for p in pairs], em.float64, requires_grad=True)
        b = T([p[1] for p in pairs], em.float64, requires_grad=True)
        ta = torch.tensor([p[0] for p in pairs], dtype=torch.float64, requires_grad=True)
        tb = torch.tensor([p[1] for p in pairs], dtype=torch.float64, requires_grad=True)
        r, tr = getattr(em, name)(a, b), getattr(torch, name)(ta, tb)
        np.testing.assert_allclose(r.detach().numpy(), tr.detach().numpy(), err_msg=name)
        r.sum().backward()
        tr.sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), err_msg=name)
        np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), err_msg=name)


# ------------------------------------------------------------------ erf / erfinv accuracy
def test_erf_erfc_accuracy_float64():
    x = np.concatenate([np.linspace(-6, 6, 4001), np.geomspace(1e-300, 0.4, 200),
                        [0.46875, -0.46875, 4.0, -4.0, 5.9, 26.0]])
    got = em.erf(T(x, em.float64)).numpy()
    ref = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=0)
    xc = np.linspace(-3, 26, 3001)
    gotc = em.erfc(T(xc, em.float64)).numpy()
    refc = np.array([math.erfc(v) for v in xc])
    np.testing.assert_allclose(gotc, refc, rtol=1e-13, atol=0)     # relative, in the tail
    spec = em.erf(T([0.0, -0.0, math.inf, -math.inf, math.nan], em.float64)).numpy()
    assert spec[0] == 0 and math.copysign(1, spec[1]) == -1
    assert spec[2] == 1 and spec[3] == -1 and math.isnan(spec[4])


def test_erf_float32():
    x = np.linspace(-4, 4, 1001).astype(np.float32)
    got = em.erf(T(x)).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [math.erf(v) for v in x.astype(np.float64)], rtol=1e-6,
                               atol=1e-7)


def test_erf_float32_fast_path_within_two_ulp():
    x = np.concatenate([np.linspace(-5, 5, 200001), np.geomspace(1e-40, 1e-3, 300)])
    x = x.astype(np.float32)
    got = em.erf(T(x)).numpy().astype(np.float64)
    ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    err = np.abs(got - ref) / ulp
    i = int(np.argmax(err))
    assert err[i] <= 2, (f"{(err > 2).sum()} of {x.size} points beyond 2 ulp; worst x={x[i]!r}: "
                         f"got {got[i]!r}, want {ref[i]!r} ({err[i]:.2f} ulp)")
    spec = em.erf(T([0.0, -0.0, math.inf, -math.inf, math.nan], em.float32)).numpy()
    assert spec[0] == 0 and math.copysign(1, spec[1]) == -1
    assert spec[2] == 1 and spec[3] == -1 and math.isnan(spec[4])


def test_erf_against_scipy():
    special = pytest.importorskip("scipy.special")
    xd = np.linspace(-6, 6, 2001)
    np.testing.assert_allclose(em.erf(T(xd, em.float64)).numpy(), special.erf(xd), rtol=1e-14)


def test_erfinv_accuracy_float64():
    y = np.concatenate([np.linspace(-0.999, 0.999, 801), np.geomspace(1e-300, 1e-3, 40),
                        1 - np.geomspace(1.2e-16, 1e-2, 80), -1 + np.geomspace(1.2e-16, 1e-2, 40)])
    x = em.erfinv(T(y, em.float64)).numpy()
    # round trip through math.erf, and through erfc in the tails (where 1 - |y| is exact)
    back = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(back, y, rtol=2e-15, atol=0)
    tail = np.abs(y) > 0.5
    tail_back = np.array([math.erfc(abs(v)) for v in x[tail]])
    np.testing.assert_allclose(tail_back, 1 - np.abs(y[tail]), rtol=1e-13)
    mpmath = pytest.importorskip("mpmath")
    ref = np.array([float(mpmath.erfinv(mpmath.mpf(float(v)))) for v in y])
    np.testing.assert_allclose(x, ref, rtol=1e-14)


def test_erfinv_edges():
    r = em.erfinv(T([1.0, -1.0, 0.0, 1.5, -2.0, math.nan], em.float64)).numpy()
    assert r[0] == math.inf and r[1] == -math.inf and r[2] == 0
    assert np.isnan(r[3:]).all()
    r32 = em.erfinv(T([0.5, -0.999], em.float32))
    assert r32.dtype == em.float32
    np.testing.assert_allclose(em.erf(r32).numpy(), [0.5, -0.999], rtol=1e-6)


# ------------------------------------------------------------------ integer division & modulo
def test_remainder_and_fmod_sign_semantics():
    a = T([5, -5, 5, -5])
    b = T([3, 3, -3, -3])
    assert em.remainder(a, b).tolist() == [2, 1, -1, -2]         # sign of the divisor
    assert (a % b).tolist() == [5 % 3, -5 % 3, 5 % -3, -5 % -3]
    assert em.fmod(a, b).tolist() == [2, -2, 2, -2]              # sign of the dividend
    af, bf = a.double(), b.double()
    assert em.remainder(af, bf).tolist() == [2.0, 1.0, -1.0, -2.0]
    assert em.fmod(af, bf).tolist() == [2.0, -2.0, 2.0, -2.0]
    assert (-7.5 % T([2.0])).tolist() == [-7.5 % 2.0]
    assert em.remainder(T([-3.0]), 1.5).tolist() == [0.0]


@pytest.mark.parametrize("mode", ["floor", "trunc"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "float32", "float64"])
def test_div_rounding_modes_vs_numpy(mode, dtype):
    rng = np.random.default_rng(0)
    a = rng.integers(-100, 100, size=(6, 7)).astype(dtype)
    b = rng.integers(1, 9, size=(7,)).astype(dtype) * np.where(np.arange(7) % 2, 1, -1) \
        .astype(dtype)
    if dtype.startswith("float"):
        a = a + rng.uniform(-1, 1, a.shape).astype(dtype)
    got = em.div(em.from_numpy(a), em.from_numpy(b), rounding_mode=mode)
    want = np.floor_divide(a, b) if mode == "floor" else \
        np.trunc(a.astype(np.float64) / b).astype(dtype)
    assert got.dtype.np == np.dtype(dtype)
    np.testing.assert_array_equal(got.numpy(), want)
    big = em.tensor([2 ** 62 + 1, -(2 ** 62) - 1])
    assert em.div(big, 3, rounding_mode="trunc").tolist() == [(2 ** 62 + 1) // 3,
                                                              -((2 ** 62 + 1) // 3)]
    assert (em.from_numpy(a) // em.from_numpy(b)).tolist() == np.floor_divide(a, b).tolist()


def test_integer_division_by_zero_raises():
    for fn in (lambda a, b: a // b, em.remainder, em.fmod,
               lambda a, b: em.div(a, b, rounding_mode="trunc")):
        with pytest.raises(ZeroDivisionError, match="division by zero"):
            fn(T([1, 2]), T([1, 0]))
        with pytest.raises(RuntimeError):
            fn(T([1, 2]), 0)
    assert math.isinf(em.floor_divide(T([1.0]), 0.0).item())


# ------------------------------------------------------------------ misc semantics
def test_round_decimals_and_half_even():
    assert em.round(T([0.5, 1.5, 2.5, -0.5, -1.5])).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0]
    np.testing.assert_allclose(em.round(T([1.2345, -2.5551], em.float64), decimals=2).numpy(),
                               [1.23, -2.56])
    assert em.round(T([1234.0]), decimals=-2).tolist() == [1200.0]
    assert em.round(T([7, 8])).tolist() == [7, 8]


def test_clamp_semantics():
    x = T([1, 5, 9])
    r = em.clamp(x, min=2.5)
    assert r.dtype == em.float32 and r.tolist() == [2.5, 5.0, 9.0]    # promotes like PyTorch
    assert em.clamp(x, 2, 6).dtype == em.int64
    assert em.clamp(T([1., 5.]), min=4, max=2).tolist() == [2.0, 2.0]   # min > max -> max
    r = em.clamp(T([float("nan"), 3.0]), 0, 1).tolist()
    assert math.isnan(r[0]) and r[1] == 1.0
    assert em.clamp(T([0., 5.]), T([1., 1.]), T(4.)).tolist() == [1.0, 4.0]
    with pytest.raises(ValueError, match="min.*max"):
        em.clamp(T([1.0]))


def test_nan_to_num_defaults_and_dtypes():
    for dt in (em.float16, em.bfloat16, em.float32, em.float64):
        r = em.nan_to_num(T([math.nan, math.inf, -math.inf, 1.0], dt))
        fi = em.finfo(dt)
        assert r.dtype == dt and r.tolist() == [0.0, fi.max, fi.min, 1.0]
    assert em.nan_to_num(T([1, 2])).tolist() == [1, 2]


def test_lerp_exact_ends_and_dtype_check():
    a, b = T([1.0, -3.0]), T([1e8, 7.1])
    assert em.lerp(a, b, 1.0).tolist() == b.tolist()
    assert em.lerp(a, b, 0.0).tolist() == a.tolist()
    with pytest.raises(DTypeError, match="lerp"):
        em.lerp(a, b.double(), 0.5)


def test_isposinf_isneginf_and_int_predicates():
    x = T([math.inf, -math.inf, math.nan, 1.0])
    assert em.isposinf(x).tolist() == [True, False, False, False]
    assert em.isneginf(x).tolist() == [False, True, False, False]
    assert em.isnan(T([1, 2])).tolist() == [False, False]
    assert em.isfinite(T([1, 2])).tolist() == [True, True]


def test_sigmoid_extremes_and_relu_nan():
    s = em.sigmoid(T([-800.0, 800.0, -30.0], em.float64)).numpy()
    assert s[0] == 0.0 and s[1] == 1.0 and abs(s[2] / math.exp(-30.0) - 1) < 1e-12
    assert math.isnan(em.relu(T([math.nan])).item())


def test_pow_grad_at_zero_uses_eq():
    x = T([0.0, 2.0], em.float64, requires_grad=True)
    y = T([2.0, 3.0], em.float64, requires_grad=True)
    (x ** y).sum().backward()
    assert y.grad.tolist() == [0.0, 8.0 * math.log(2.0)]
