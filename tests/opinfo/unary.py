"""OpInfos for the elementwise unary ops (exp, log, trig, erf, rounding, predicates...).

References are plain NumPy (``math.erf`` and ``statistics.NormalDist`` for erf/erfinv,
which NumPy lacks). Domains keep central differences valid: logs and roots on [0.5, 2],
asin/acos/erfinv inside (-0.9, 0.9); kinks (abs, relu at 0) and jumps (floor, round at
integers) are hit with probability ~0 by the random samples.
"""
import math
from statistics import NormalDist

import numpy as np

import ember as em
from ember.ops.unary_backward import sigmoid_backward, tanh_backward, threshold_backward

from .core import OpInfo, Sample, rand, unary_samples

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_ND = NormalDist()


def _erfinv_scalar(y: float) -> float:
    if abs(y) >= 1:
        return math.copysign(math.inf, y) if abs(y) == 1 else math.nan
    x = _ND.inv_cdf((1 + y) / 2) / math.sqrt(2)
    for _ in range(2):                         # Newton on erf(x) = y
        x -= (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


_erfinv = np.vectorize(_erfinv_scalar, otypes=[np.float64])


def _same(f):
    """Reference computed in float64, returned in the input's float dtype."""
    return lambda x: f(x.astype(np.float64)).astype(x.dtype)


def _round_samples(rng, dtype):
    out = unary_samples(-3, 3)(rng, dtype)
    out.append(Sample((np.array([0.5, 1.5, 2.5, -0.5, -2.5], dtype=dtype),), grad=False,
                      name="halves"))
    return out


def _round_dec_samples(rng, dtype):
    return [Sample((rand(rng, (4, 5), dtype, -30, 30),), {"decimals": 2}, grad=False),
            Sample((rand(rng, (3,), dtype, -300, 300),), {"decimals": -1}, grad=False),
            Sample((rand(rng, (2, 3), dtype, -3, 3),), {"decimals": 1}, name="grad")]


def _nonfinite(rng, dtype):
    a = rand(rng, (4, 6), dtype)
    a.flat[[0, 5, 7, 13]] = [np.nan, np.inf, -np.inf, 0.0]
    return [Sample((a,), grad=False), Sample((rand(rng, (0, 2), dtype),), grad=False),
            Sample((np.array(np.inf, dtype=dtype),), grad=False)]


def _int_samples(rng, dtype):
    # NOTE: np.asarray: core.rand returns a NumPy scalar (not an array) for bool, shape ().
    return [Sample((np.asarray(rand(rng, s, dtype, -50, 50)),), grad=False)
            for s in ((4, 5), (), (0, 3))]


def _bw_samples(rng, dtype):
    """(g, y) pairs for the ``*_backward`` primitives: y in (-1, 1), broadcasting, empty."""
    pairs = [((4, 5), (4, 5)), ((4, 1), (1, 5)), ((3, 4), (4,)), ((), ()), ((0, 3), (3,))]
    out = [Sample((rand(rng, a, dtype), rand(rng, b, dtype, -1, 1)), grad=False,
                  name=f"{a}x{b}") for a, b in pairs]
    out += [Sample((rand(rng, a, dtype), rand(rng, b, dtype, -1, 1)), name=f"grad{a}x{b}")
            for a, b in (((2, 3), (2, 3)), ((2, 1), (3,)))]
    return out


def _thr_samples(rng, dtype):
    """``_bw_samples`` with thresholds 0 (relu's) and 0.25 (a jump hit with probability ~0)."""
    return [Sample(s.args + (t,), grad=s.grad, name=f"{s.name},t={t}")
            for t in (0, 0.25) for s in _bw_samples(rng, dtype)]


def _thr_ref(g, y, t):
    return np.where(y <= t, 0, g).astype(np.result_type(g, y))


def _u(name, fn, ref, lo=-2.0, hi=2.0, prim=None, **kw):
    return OpInfo(name, fn, ref, unary_samples(lo, hi), (prim or name,), **kw)


OPINFOS = [
    _u("exp", em.exp, np.exp),
    _u("exp2", em.exp2, np.exp2),
    _u("expm1", em.expm1, np.expm1),
    _u("log", em.log, np.log, 0.5, 2),
    _u("log2", em.log2, np.log2, 0.5, 2),
    _u("log10", em.log10, np.log10, 0.5, 2),
    _u("log1p", em.log1p, np.log1p, -0.5, 2),
    _u("sqrt", em.sqrt, np.sqrt, 0.5, 2),
    OpInfo("rsqrt", em.rsqrt, lambda x: 1 / np.sqrt(x), unary_samples(0.5, 2), ("sqrt", "div")),
    OpInfo("reciprocal", em.reciprocal, lambda x: 1 / x, unary_samples(0.5, 2), ("div",)),
    _u("sin", em.sin, np.sin),
    _u("cos", em.cos, np.cos),
    _u("tan", em.tan, np.tan, -1.2, 1.2),
    _u("asin", em.asin, np.arcsin, -0.9, 0.9),
    _u("acos", em.acos, np.arccos, -0.9, 0.9),
    _u("atan", em.atan, np.arctan),
    _u("sinh", em.sinh, np.sinh),
    _u("cosh", em.cosh, np.cosh),
    _u("tanh", em.tanh, np.tanh),
    _u("sigmoid", em.sigmoid, lambda x: 1 / (1 + np.exp(-x)), -6, 6),
    OpInfo("tanh_backward", tanh_backward, lambda g, y: g * (1 - y * y), _bw_samples,
           ("tanh_backward",)),
    OpInfo("sigmoid_backward", sigmoid_backward, lambda g, y: g * (y * (1 - y)), _bw_samples,
           ("sigmoid_backward",)),
    _u("relu", em.relu, lambda x: np.where(x > 0, x, 0).astype(x.dtype)),
    OpInfo("threshold_backward", threshold_backward, _thr_ref, _thr_samples,
           ("threshold_backward",)),
    _u("erf", em.erf, _same(_erf), -3, 3),
    _u("erfc", em.erfc, _same(_erfc), -3, 3),
    _u("erfinv", em.erfinv, _same(_erfinv), -0.9, 0.9),
    _u("abs", em.abs, np.abs),
    _u("sign", em.sign, np.sign),
    _u("floor", em.floor, np.floor, -3, 3),
    _u("ceil", em.ceil, np.ceil, -3, 3),
    _u("trunc", em.trunc, np.trunc, -3, 3),
    OpInfo("round", em.round, np.round, _round_samples, ("round",)),
    OpInfo("round_decimals", em.round, lambda x, decimals: np.round(x, decimals),
           _round_dec_samples, ("round",)),
    OpInfo("frac", em.frac, lambda x: x - np.trunc(x), unary_samples(-3, 3), ("sub", "trunc")),
    OpInfo("square", em.square, np.square, unary_samples(), ("mul",)),
    OpInfo("square_int", em.square, np.square, _int_samples, ("mul",), dtypes=("int64", "int32"),
           grad=False),
    OpInfo("abs_int", em.abs, np.abs, _int_samples, ("abs",), dtypes=("int64", "int8"),
           grad=False),
    OpInfo("sign_int", em.sign, np.sign, _int_samples, ("sign",), dtypes=("int64", "int16"),
           grad=False),
    OpInfo("floor_int", em.floor, lambda x: x.copy(), _int_samples, ("floor",),
           dtypes=("int64", "uint8"), grad=False),
    OpInfo("exp_int", em.exp, lambda x: np.exp(x.astype(np.float32)),
           lambda rng, dt: [Sample((rand(rng, (3, 4), dt, -5, 5),), grad=False)], ("exp",),
           dtypes=("int64", "int32"), grad=False),
    OpInfo("logical_not", em.logical_not, np.logical_not, _int_samples, ("logical_not",),
           dtypes=("float32", "int64", "bool"), grad=False),
    OpInfo("bitwise_not", em.bitwise_not, np.invert, _int_samples, ("bitwise_not",),
           dtypes=("int64", "uint8", "bool"), grad=False),
    OpInfo("isnan", em.isnan, np.isnan, _nonfinite, ("isnan",), grad=False),
    OpInfo("isinf", em.isinf, np.isinf, _nonfinite, ("isinf",), grad=False),
    OpInfo("isfinite", em.isfinite, np.isfinite, _nonfinite, ("isfinite",), grad=False),
    OpInfo("isposinf", em.isposinf, np.isposinf, _nonfinite, ("isinf", "gt", "bitwise_and"),
           grad=False),
    OpInfo("isneginf", em.isneginf, np.isneginf, _nonfinite, ("isinf", "lt", "bitwise_and"),
           grad=False),
    OpInfo("signbit", em.signbit, np.signbit, _nonfinite, ("signbit",), grad=False),
]
