"""OpInfos for ``ember.special``'s primitives (ember/ops/special_fns.py) and composites.

References: SciPy's ``scipy.special`` in float64, cast to the input's dtype (the issue's
oracle for these values; tests/test_special.py adds PyTorch and closed forms as independent
oracles), and plain NumPy recurrences for the orthogonal polynomials. ``zeta`` and
``gammainc``/``gammaincc`` are differentiable in their second argument only (as PyTorch),
so their gradient samples pass the first one as a Python number.
"""
import numpy as np

import ember as em
import ember.special as S

from .core import OpInfo, Sample, binary_samples, rand, unary_samples


def _sp(name, *, nargs=1):
    """SciPy reference computed in float64, returned in the dtype of the first array."""
    def ref(*args):
        import scipy.special as sp    # NOTE: a core dependency since issue 18
        dt = next((a.dtype for a in args if isinstance(a, np.ndarray)), np.float32)
        out = getattr(sp, name)(*[np.asarray(a, np.float64) for a in args])
        return np.asarray(out).astype(dt)
    return ref


def _u(name, lo, hi, *, grad=True, prims=None, ref=None, fn=None):
    return OpInfo(name, fn or getattr(S, name), ref or _sp(name), unary_samples(lo, hi),
                  prims or (name,), grad=grad)


def _ai(x):
    import scipy.special as sp
    return sp.airy(x.astype(np.float64))[0].astype(x.dtype)


def _sph_j0(x):
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        return np.where(x64 == 0, 1.0, np.sin(x64) / np.where(x64 == 0, 1.0, x64)).astype(x.dtype)


def _entr_samples(rng, dt):
    out = unary_samples(0.1, 3.0)(rng, dt)
    out.append(Sample((np.array([0.0, -1.0, np.inf, np.nan, 1.0], dt),), grad=False,
                      name="edges"))
    return out


def _second_only(lo1, hi1, lo2, hi2):
    """Forward samples with both operands arrays; gradient samples with a scalar first."""
    def gen(rng, dt):
        out = [Sample((rand(rng, a, dt, lo1, hi1), rand(rng, b, dt, lo2, hi2)), grad=False,
                      name=f"{a}x{b}")
               for a, b in (((4, 5), (4, 5)), ((4, 1), (1, 5)), ((3,), ()), ((0, 3), (3,)))]
        out += [Sample((float(rng.uniform(lo1, hi1)), rand(rng, s, dt, lo2, hi2)),
                       name=f"grad{s}") for s in ((3,), (2, 3))]
        return out
    return gen


def _xlog1py_ref(x, y):
    with np.errstate(all="ignore"):
        r = np.where((x == 0) & ~np.isnan(y), 0.0, x * np.log1p(y))
    return r.astype(np.result_type(x, y))


def _xlogy_ref(x, y):
    with np.errstate(all="ignore"):
        r = np.where((x == 0) & ~np.isnan(y), 0.0, x * np.log(y))
    return r.astype(np.result_type(x, y))


def _xlogy_samples(rng, dt):
    out = binary_samples(-2.0, 2.0, 0.2, 3.0, scalars=(2.5, 0.7))(rng, dt)
    out.append(Sample((np.array([0.0, 0.0, 0.0, 1.0], dt), np.array([0.0, np.nan, np.inf, 0.0],
                                                                    dt)), grad=False,
                      name="edges"))
    return out


def _xlog1py_samples(rng, dt):
    out = binary_samples(-2.0, 2.0, -0.9, 2.0, scalars=())(rng, dt)
    out.append(Sample((np.array([0.0, 0.0, 1.0, 0.0], dt), np.array([-1.0, np.nan, -1.0, 3.0],
                                                                    dt)), grad=False,
                      name="edges"))
    return out


# ------------------------------------------------------------------ polynomials (NumPy refs)
def _recurrence(p0, p1, step):
    """P_n(x) by a three-term recurrence ``P_{k+1} = step(k, x, P_k, P_{k-1})``; 0 for n < 0."""
    def ref(x, n):
        x64, n = np.asarray(x, np.float64), np.asarray(n)
        dt = x.dtype if isinstance(x, np.ndarray) else np.float32
        x64, n = np.broadcast_arrays(x64, np.trunc(n).astype(np.int64))
        prev, cur = np.ones_like(x64) * p0(x64), p1(x64)
        out = np.where(n == 0, prev, 0.0)
        for k in range(1, int(n.max(initial=0)) + 1):
            out = np.where(n == k, cur, out)
            prev, cur = cur, step(k, x64, cur, prev)
        return out.astype(dt)
    return ref


_T = _recurrence(lambda x: 1.0, lambda x: x, lambda k, x, c, p: 2 * x * c - p)
_U = _recurrence(lambda x: 1.0, lambda x: 2 * x, lambda k, x, c, p: 2 * x * c - p)
_V = _recurrence(lambda x: 1.0, lambda x: 2 * x - 1, lambda k, x, c, p: 2 * x * c - p)
_W = _recurrence(lambda x: 1.0, lambda x: 2 * x + 1, lambda k, x, c, p: 2 * x * c - p)
_POLY_REFS = {
    "chebyshev_polynomial_t": _T,
    "chebyshev_polynomial_u": _U,
    "shifted_chebyshev_polynomial_t": lambda x, n: _T(2 * x - 1, n),
    "shifted_chebyshev_polynomial_u": lambda x, n: _U(2 * x - 1, n),
    "chebyshev_polynomial_v": _V,
    "chebyshev_polynomial_w": _W,
    "shifted_chebyshev_polynomial_v": lambda x, n: _V(2 * x - 1, n),
    "shifted_chebyshev_polynomial_w": lambda x, n: _W(2 * x - 1, n),
    "hermite_polynomial_h": _recurrence(lambda x: 1.0, lambda x: 2 * x,
                                        lambda k, x, c, p: 2 * x * c - 2 * k * p),
    "hermite_polynomial_he": _recurrence(lambda x: 1.0, lambda x: x,
                                         lambda k, x, c, p: x * c - k * p),
    "laguerre_polynomial_l": _recurrence(lambda x: 1.0, lambda x: 1 - x,
                                         lambda k, x, c, p: ((2 * k + 1 - x) * c - k * p)
                                         / (k + 1)),
    "legendre_polynomial_p": _recurrence(lambda x: 1.0, lambda x: x,
                                         lambda k, x, c, p: ((2 * k + 1) * x * c - k * p)
                                         / (k + 1)),
}


def _poly_samples(rng, dt):
    ints = lambda s: rng.integers(-1, 7, size=s)  # noqa: E731
    return [Sample((rand(rng, (4, 5), dt, -1, 1), ints((4, 5))), grad=False, name="tensor n"),
            Sample((rand(rng, (4, 1), dt, -1, 1), ints((1, 3))), grad=False, name="bcast"),
            Sample((rand(rng, (6,), dt, 0, 1), 3), grad=False, name="scalar n"),
            Sample((rand(rng, (6,), dt, -1, 1), 2.7), grad=False, name="truncated n"),
            Sample((rand(rng, (0, 2), dt, -1, 1), 4), grad=False, name="empty")]


OPINFOS = [
    _u("erfcx", -2.0, 3.0),
    _u("i0", -3.0, 3.0),
    _u("i0e", -3.0, 3.0),
    _u("i1", -3.0, 3.0),
    _u("i1e", -3.0, 3.0),
    _u("ndtr", -3.0, 3.0),
    _u("ndtri", 0.05, 0.95),
    _u("log_ndtr", -6.0, 3.0),
    OpInfo("entr", S.entr, _sp("entr"), _entr_samples, ("entr",)),
    OpInfo("zeta", S.zeta, _sp("zeta"), _second_only(1.5, 4.0, 0.5, 3.0), ("zeta",)),
    OpInfo("gammainc", S.gammainc, _sp("gammainc"), _second_only(0.5, 3.0, 0.2, 4.0),
           ("gammainc",)),
    OpInfo("gammaincc", S.gammaincc, _sp("gammaincc"), _second_only(0.5, 3.0, 0.2, 4.0),
           ("gammaincc",)),
    OpInfo("igamma", em.igamma, _sp("gammainc"), _second_only(0.5, 3.0, 0.2, 4.0),
           ("gammainc",)),
    _u("bessel_j0", -6.0, 6.0, grad=False, ref=_sp("j0")),
    _u("bessel_j1", -6.0, 6.0, grad=False, ref=_sp("j1")),
    _u("bessel_y0", 0.1, 6.0, grad=False, ref=_sp("y0")),
    _u("bessel_y1", 0.1, 6.0, grad=False, ref=_sp("y1")),
    _u("modified_bessel_i0", -3.0, 3.0, grad=False, ref=_sp("i0")),
    _u("modified_bessel_i1", -3.0, 3.0, grad=False, ref=_sp("i1")),
    _u("modified_bessel_k0", 0.1, 4.0, grad=False, ref=_sp("k0")),
    _u("modified_bessel_k1", 0.1, 4.0, grad=False, ref=_sp("k1")),
    _u("scaled_modified_bessel_k0", 0.1, 4.0, grad=False, ref=_sp("k0e")),
    _u("scaled_modified_bessel_k1", 0.1, 4.0, grad=False, ref=_sp("k1e")),
    _u("spherical_bessel_j0", -6.0, 6.0, grad=False, ref=_sph_j0),
    _u("airy_ai", -4.0, 3.0, grad=False, ref=_ai),
    OpInfo("xlog1py", S.xlog1py, _xlog1py_ref, _xlog1py_samples, ("xlog1py",)),
    OpInfo("special_xlogy", S.xlogy, _xlogy_ref, _xlogy_samples, ("xlogy",)),
]
OPINFOS += [OpInfo(name, getattr(S, name), ref, _poly_samples, (name,), grad=False,
                   exact_dtype=True) for name, ref in _POLY_REFS.items()]
