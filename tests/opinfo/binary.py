"""OpInfos for the elementwise binary ops, comparisons, logical/bitwise ops and selection
(where, clamp, lerp, nan_to_num).

Gradient samples stay away from kinks: divisors in [0.5, 2] for fmod/remainder (and
x / y away from integers with probability ~1), no ties for maximum/minimum, clamp
bounds that are not hit exactly.
"""
import numpy as np

import ember as em

from .core import OpInfo, Sample, binary_samples, rand


def _int_pairs(lo=-20, hi=20, lo2=None, hi2=None, nonzero=False):
    lo2 = lo if lo2 is None else lo2
    hi2 = hi if hi2 is None else hi2

    def gen(rng, dtype):
        def r(shape, lo, hi):
            v = np.asarray(rand(rng, shape, dtype, lo, hi))
            return np.round(v) if v.dtype.kind == "f" else v   # ties for comparisons

        def b(shape):
            v = r(shape, lo2, hi2)
            if nonzero and v.dtype.kind != "b":
                v[v == 0] = 1
            return v
        out = [Sample((r(a, lo, hi), b(s)), grad=False, name=f"{a}x{s}")
               for a, s in (((4, 5), (4, 5)), ((4, 1), (1, 5)), ((), (3,)), ((0, 3), (3,)))]
        scalar = True if np.dtype(dtype).kind == "b" else 3
        out.append(Sample((r((2, 3), lo, hi), scalar), grad=False, name="scalar"))
        return out
    return gen


def _ties(rng, dtype):
    """maximum/minimum forward with exact ties and NaN (no gradcheck: kinks)."""
    a = np.array([1.0, 2.0, np.nan, 3.0, -1.0], dtype=dtype)
    b = np.array([1.0, np.nan, 0.0, 4.0, -1.0], dtype=dtype)
    return [Sample((a, b), grad=False, name="ties_nan")]


def _with_ties(base):
    return lambda rng, dtype: base(rng, dtype) + _ties(rng, dtype)


def _where_samples(rng, dtype):
    c = lambda s: rng.random(s) < 0.5  # noqa: E731
    return [Sample((c((4, 5)), rand(rng, (4, 5), dtype), rand(rng, (4, 5), dtype)), grad=False),
            Sample((c((4, 1)), rand(rng, (1, 5), dtype), rand(rng, (5,), dtype)), grad=False),
            Sample((c((0, 3)), rand(rng, (3,), dtype), rand(rng, (0, 3), dtype)), grad=False),
            Sample((c((2, 3)), rand(rng, (2, 3), dtype), rand(rng, (2, 3), dtype)), name="grad"),
            Sample((c((2, 3)), rand(rng, (3,), dtype), 0.5), name="grad_bcast_scalar")]


def _clamp_samples(rng, dtype):
    r = lambda s: rand(rng, s, dtype, -2, 2)  # noqa: E731
    return [Sample((r((5, 7)),), {"min": -0.5, "max": 0.75}, grad=False),
            Sample((r((0, 3)),), {"min": -0.5}, grad=False),
            Sample((r(()),), {"max": 0.1}, grad=False),
            Sample((r((3, 4)),), {"min": 0.5, "max": -0.5}, grad=False, name="min>max"),
            Sample((r((2, 3)),), {"min": -0.7, "max": 0.9}, name="grad"),
            Sample((r((4,)),), {"max": 0.3}, name="grad_max")]


def _clamp_tensor_samples(rng, dtype):
    r = lambda s, lo=-2, hi=2: rand(rng, s, dtype, lo, hi)  # noqa: E731
    return [Sample((r((4, 5)), r((4, 5), -1.5, -0.2), r((5,), 0.2, 1.5)), grad=False),
            Sample((r((2, 3)), r((2, 3), -1.5, -0.2), r((3,), 0.2, 1.5)), name="grad"),
            Sample((r((2, 3)), r((1, 3), -1.5, -0.2), None), name="grad_min_only")]


def _np_clamp(x, min=None, max=None):
    r = x if min is None else np.where(x < min, min, x)
    r = r if max is None else np.where(r > max, max, r)
    return np.asarray(r).astype(np.result_type(x, *(v for v in (min, max) if v is not None)))


def _lerp_samples(rng, dtype):
    r = lambda s: rand(rng, s, dtype)  # noqa: E731
    return [Sample((r((4, 5)), r((4, 5)), 0.3), grad=False),
            Sample((r((4, 5)), r((5,)), 0.8), grad=False),
            Sample((r((2, 3)), r((2, 3)), rand(rng, (2, 3), dtype, 0, 1)), name="grad_tensor_w"),
            Sample((r((2, 1)), r((3,)), 0.25), name="grad_scalar_w"),
            Sample((r((3,)), r((3,)), 1.0), name="grad_w1")]


def _nan_to_num_samples(rng, dtype):
    a = rand(rng, (4, 6), dtype)
    a.flat[[0, 5, 7]] = [np.nan, np.inf, -np.inf]
    return [Sample((a,), grad=False), Sample((a,), {"nan": 1.5, "posinf": 9.0}, grad=False),
            Sample((a,), {"neginf": -7.0}, grad=False),
            Sample((rand(rng, (2, 3), dtype),), name="grad")]


def _b(name, fn, ref, samples=None, prims=None, **kw):
    return OpInfo(name, fn, ref, samples or binary_samples(), prims or (name,), **kw)


_CMP = dict(dtypes=("float32", "float64", "int64"), grad=False)
_INT = dict(dtypes=("int64", "int32", "uint8"), grad=False)
_BOOL = dict(dtypes=("int64", "bool"), grad=False)
_DIV = binary_samples(-3, 3, 0.5, 2)

OPINFOS = [
    _b("maximum", em.maximum, np.maximum, _with_ties(binary_samples())),
    _b("minimum", em.minimum, np.minimum, _with_ties(binary_samples())),
    _b("fmax", em.fmax, np.fmax, _with_ties(binary_samples()),
       ("maximum", "isnan", "where")),
    _b("fmin", em.fmin, np.fmin, _with_ties(binary_samples()),
       ("minimum", "isnan", "where")),
    _b("atan2", em.atan2, np.arctan2, binary_samples(0.2, 2, -2, 2)),
    _b("hypot", em.hypot, np.hypot, binary_samples(0.2, 2, -2, -0.2)),
    _b("copysign", em.copysign, np.copysign),
    _b("fmod", em.fmod, np.fmod, _DIV),
    _b("remainder", em.remainder, np.remainder, _DIV),
    _b("floor_divide", em.floor_divide, np.floor_divide, _DIV),
    _b("div_trunc", lambda a, b: em.div(a, b, rounding_mode="trunc"),
       lambda a, b: np.trunc(a / b).astype(np.result_type(a, b)), _DIV, ("trunc_divide",)),
    _b("fmod_int", em.fmod, np.fmod, _int_pairs(nonzero=True), ("fmod",), **_INT),
    _b("remainder_int", em.remainder, np.remainder, _int_pairs(nonzero=True), ("remainder",),
       dtypes=("int64", "int32"), grad=False),
    _b("floor_divide_int", em.floor_divide, np.floor_divide, _int_pairs(nonzero=True),
       ("floor_divide",), dtypes=("int64", "int32"), grad=False),
    _b("eq", em.eq, np.equal, _int_pairs(-3, 3), **_CMP),
    _b("ne", em.ne, np.not_equal, _int_pairs(-3, 3), **_CMP),
    _b("lt", em.lt, np.less, _int_pairs(-3, 3), **_CMP),
    _b("le", em.le, np.less_equal, _int_pairs(-3, 3), **_CMP),
    _b("gt", em.gt, np.greater, _int_pairs(-3, 3), **_CMP),
    _b("ge", em.ge, np.greater_equal, _int_pairs(-3, 3), **_CMP),
    _b("logical_and", em.logical_and, np.logical_and, _int_pairs(-1, 1), **_BOOL),
    _b("logical_or", em.logical_or, np.logical_or, _int_pairs(-1, 1), **_BOOL),
    _b("logical_xor", em.logical_xor, np.logical_xor, _int_pairs(-1, 1), **_BOOL),
    _b("bitwise_and", em.bitwise_and, np.bitwise_and, _int_pairs(0, 100), **_BOOL),
    _b("bitwise_or", em.bitwise_or, np.bitwise_or, _int_pairs(0, 100), **_BOOL),
    _b("bitwise_xor", em.bitwise_xor, np.bitwise_xor, _int_pairs(0, 100), **_BOOL),
    _b("bitwise_left_shift", em.bitwise_left_shift, np.left_shift, _int_pairs(0, 20, 0, 5),
       dtypes=("int64", "int32"), grad=False),
    _b("bitwise_right_shift", em.bitwise_right_shift, np.right_shift,
       _int_pairs(-200, 200, 0, 5), dtypes=("int64", "int16"), grad=False),
    OpInfo("where", em.where, np.where, _where_samples, ("where",)),
    OpInfo("clamp", em.clamp, _np_clamp, _clamp_samples, ("clamp",)),
    OpInfo("clamp_tensor", em.clamp, _np_clamp, _clamp_tensor_samples, ("where", "lt", "gt")),
    OpInfo("lerp", em.lerp, lambda a, b, w: (a + w * (b - a)).astype(a.dtype), _lerp_samples,
           ("sub", "mul", "add")),
    OpInfo("nan_to_num", em.nan_to_num, np.nan_to_num, _nan_to_num_samples, ("nan_to_num",)),
]
