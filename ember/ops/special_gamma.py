"""The gamma family: ``lgamma``, ``digamma`` and ``polygamma`` (and ``mvlgamma``).

Three primitives, each differentiated by the next (``lgamma' = digamma``,
``digamma' = polygamma(1)``, ``polygamma(n)' = polygamma(n + 1)``), so every order of
gradient exists. Kernels are vectorised over ``xp`` and compute in float64 (lower
precisions round once at the end); they are not fused (no C template: C has no digamma).
On the CPU, ``lgamma`` and ``digamma`` take SciPy's ``gammaln``/``psi`` (SciPy is a core
dependency, imported on first use); the kernels below serve the other backends.

- ``lgamma``: Lanczos' approximation (g = 7, 9 terms; ~1e-15 relative in Gamma) for
  x >= 1/2, the reflection ``log(pi / |sin(pi x)|) - lgamma(1 - x)`` below, +inf at the
  poles (non-positive integers), as PyTorch.
- ``digamma``: the recurrence ``psi(x) = psi(x + 1) - 1/x`` up to x >= 10, then the
  asymptotic series to B_14 (error < 1e-16 there); reflection ``psi(1 - x) - pi cot(pi x)``
  below 1/2. -inf at 0, NaN at negative integers (PyTorch's values).
- ``polygamma(n, x)``, n >= 1: the recurrence up to x >= n + 10, then the asymptotic series
  ``(n-1)!/x^n + n!/(2 x^(n+1)) + sum B_2k (2k+n-1)!/((2k)! x^(2k+n))``.

Example:
    >>> ember.lgamma(ember.tensor([0.5, 3.0]))      # log(sqrt(pi)), log(2)
    tensor([0.5724, 0.6931])
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .batching import per_example
from .inplace import copy_into_out, inplace_from
from .registry import defop
from .unary import unary
from . import dispatch

__all__ = ["lgamma", "digamma", "polygamma", "mvlgamma"]

_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
#: B_2k for k = 1..10 (Bernoulli numbers of the asymptotic series).
_B2K = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510,
        43867 / 798, -174611 / 330)


def _f64(xp, x):
    return x.astype(np.float64) if x.dtype != np.float64 else x


def _poles(xp, x):
    return (x <= 0) & (x == xp.floor(x))


def _sin_pi(xp, x):
    """|sin(pi x)| from ``x - round(x)`` (an exact reduction to [-1/2, 1/2]: no pi * x
    rounding, and full relative accuracy near the integers)."""
    return xp.abs(xp.sin(math.pi * (x - xp.round(x))))


def _lgamma_kernel(xp, x):
    x = _f64(xp, x)
    with np.errstate(all="ignore"):
        refl = x < 0.5
        z = xp.where(refl, 1.0 - x, x) - 1.0
        s = xp.full(z.shape, _LANCZOS[0])
        for i, c in enumerate(_LANCZOS[1:], 1):
            s = s + c / (z + i)
        t = z + 7.5
        lg = _HALF_LOG_2PI + (z + 0.5) * xp.log(t) - t + xp.log(s)
        out = xp.where(refl, math.log(math.pi) - xp.log(_sin_pi(xp, x)) - lg, lg)
        out = xp.where(xp.isinf(x), math.inf, out)
        out = xp.where((x == 1) | (x == 2), 0.0, out)   # NOTE: exact zeros, as PyTorch's
        return xp.where(_poles(xp, x), math.inf, out)


def _digamma_kernel(xp, x):
    x = _f64(xp, x)
    with np.errstate(all="ignore"):
        refl = x < 0.5
        r = x - xp.round(x)                       # NOTE: cot has period 1
        cot = xp.cos(math.pi * r) / xp.sin(math.pi * r)
        res = xp.where(refl, -math.pi * cot, 0.0)
        y = xp.where(refl, 1.0 - x, x)
        y = xp.where(xp.isfinite(y), y, 10.0)      # NOTE: inf/NaN handled at the end
        while True:
            small = y < 10
            if not small.any():
                break
            res = res - xp.where(small, 1.0 / y, 0.0)
            y = y + small
        inv2 = 1.0 / (y * y)
        series, p = 0.0, inv2
        for k, b in enumerate(_B2K[:7], 1):
            series = series + b / (2 * k) * p
            p = p * inv2
        res = res + xp.log(y) - 0.5 / y - series
        res = xp.where(x == xp.inf, xp.inf, xp.where(xp.isnan(x) | (x == -xp.inf), xp.nan, res))
        # NOTE: psi(+-0) = -+inf (PyTorch's copysign(inf, -x)); NaN at negative integers
        return xp.where(_poles(xp, x), xp.where(x == 0, xp.copysign(xp.inf, -x), xp.nan), res)


def _polygamma_kernel(xp, x, n=1):
    if n == 0:
        return _digamma_kernel(xp, x)
    x = _f64(xp, x)
    fact = math.factorial(n)
    big = n + 10.0
    with np.errstate(all="ignore"):
        y = xp.where(xp.isfinite(x), x, big)
        res = xp.zeros(y.shape)
        while True:
            small = y < big
            if not small.any():
                break
            res = res + xp.where(small, fact / y ** (n + 1), 0.0)
            y = y + small
        series = math.factorial(n - 1) / y ** n + fact / (2 * y ** (n + 1))
        for k, b in enumerate(_B2K, 1):
            coef = b * math.factorial(2 * k + n - 1) / math.factorial(2 * k)
            series = series + coef / y ** (2 * k + n)
        res = (res + series) * (1.0 if n % 2 else -1.0)
        res = xp.where(x == xp.inf, 0.0, xp.where(xp.isnan(x) | (x == -xp.inf), xp.nan, res))
        pole = xp.inf if n % 2 else xp.nan
        return xp.where(_poles(xp, x), pole, res)


def _lgamma_cpu(xp, x):
    """``lgamma`` on the CPU: SciPy's ``gammaln`` in float64 (4-8x faster than the NumPy
    kernel above), with PyTorch's values where SciPy's differ: +inf at -inf, and
    ``-log|x|`` for subnormal float64 ``x`` (SciPy overflows 1/x to inf there)."""
    x = _f64(xp, x)
    out = _scipy_special().gammaln(x)
    bad = xp.isinf(out)
    if bad.any():                       # NOTE: rare: skip the fix-ups' passes otherwise
        with np.errstate(all="ignore"):
            tiny = bad & (x != xp.floor(x))
            out = xp.where(tiny, -xp.log(xp.abs(x)), xp.where(x == -xp.inf, xp.inf, out))
    return out


def _digamma_cpu(xp, x):
    """``digamma`` on the CPU: SciPy's ``psi`` in float64 (PyTorch's values at 0, -0, the
    negative integers and +-inf, tests/test_fixes_numerics.py)."""
    return _scipy_special().psi(_f64(xp, x))


def _scipy_special():
    import scipy.special  # noqa: PLC0415 - lazy: `import ember` does not load SciPy
    return scipy.special


def _real(name, kernel):
    """``kernel`` refusing complex input (PyTorch has no complex lgamma/digamma/polygamma)."""
    def checked(xp, x, **params):
        if x.dtype.kind == "c":
            raise DTypeError(f"{name}: not implemented for complex dtype {x.dtype} (as in "
                             f"PyTorch); valid dtypes: bool, integer and floating")
        return kernel(xp, x, **params)
    return checked


def _pg(n, x):
    return dispatch.apply(polygamma_p, (x,), {"n": n})


lgamma_p = unary("lgamma", _real("lgamma", _lgamma_kernel), None, lambda x, out: digamma(x),
                 cpu_kernel=_real("lgamma", _lgamma_cpu))
digamma_p = unary("digamma", _real("digamma", _digamma_kernel), None,
                  lambda x, out: _pg(1, x), cpu_kernel=_real("digamma", _digamma_cpu))
polygamma_p = defop(
    "polygamma", nin=1, elementwise=True, kernel=_real("polygamma", _polygamma_kernel),
    dtype="float",
    params={"n": 1}, save="inputs",
    vjp=lambda g, out, x, n: (g * _pg(n + 1, x),),
    jvp=lambda t, out, x, n: t[0] * _pg(n + 1, x))


def lgamma(input, *, out=None):
    """Log of the absolute value of the gamma function (``torch.lgamma``)."""
    r = dispatch.apply(lgamma_p, (input,), {})
    return r if out is None else copy_into_out(out, r)


def digamma(input, *, out=None):
    """Logarithmic derivative of the gamma function, psi (``torch.digamma``)."""
    r = dispatch.apply(digamma_p, (input,), {})
    return r if out is None else copy_into_out(out, r)


def polygamma(n, input, *, out=None):
    """The ``n``-th derivative of digamma (``torch.polygamma``); ``n = 0`` is digamma."""
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"polygamma(): n must be a non-negative integer, got {n!r}")
    r = digamma(input) if n == 0 else dispatch.apply(polygamma_p, (input,), {"n": int(n)})
    return r if out is None else copy_into_out(out, r)


@per_example
def mvlgamma(input, p):
    """Multivariate log-gamma of dimension ``p`` (``torch.mvlgamma``): ``p(p-1)/4 log(pi) +
    sum_{i<p} lgamma(x - i/2)``; every element must exceed ``(p - 1) / 2``."""
    if p < 1:
        raise ShapeError(f"mvlgamma(): p has to be greater than or equal to 1, got {p}")
    if not bool(((input > (p - 1) / 2) | input.isnan()).all()):
        raise ValueError(f"mvlgamma(): all elements must be greater than (p-1)/2 = "
                         f"{(p - 1) / 2}")
    r = lgamma(input)
    for i in range(1, p):
        r = r + lgamma(input - i / 2)
    return r + p * (p - 1) / 4 * math.log(math.pi)


Tensor.lgamma, Tensor.digamma, Tensor.mvlgamma = lgamma, digamma, mvlgamma
Tensor.polygamma = lambda self, n: polygamma(n, self)
Tensor.lgamma_ = inplace_from(lgamma, "lgamma")
Tensor.digamma_ = inplace_from(digamma, "digamma")
Tensor.polygamma_ = inplace_from(lambda self, n: polygamma(n, self), "polygamma")
Tensor.mvlgamma_ = inplace_from(mvlgamma, "mvlgamma")
