"""Special-function primitives with SciPy forward kernels (``torch.special``'s functions).

SciPy's ``scipy.special`` is the well-kept library for these values (Cephes, AMOS, Boost),
so every kernel here calls it — imported on first use, so ``import ember`` stays fast.
Kernels compute in float64 and the dispatcher rounds once to the output dtype (float32,
float16, bfloat16): correctly rounded up to SciPy's float64 error, which is as good as or
better than PyTorch's float32 kernels. Integer inputs compute in the default float dtype.

Differentiable where PyTorch is (derivatives written in Ember ops, so every order exists):
``erfcx``, ``i0``/``i0e``/``i1``/``i1e``, ``ndtr``, ``ndtri``, ``log_ndtr``, ``entr``,
``zeta`` (in ``q`` only), ``gammainc``/``gammaincc`` (in ``x`` only: for the first argument
``.backward()`` raises as PyTorch, ``autograd.grad`` gives none — see :func:`_no_grad_rule`). The
Bessel functions of ``torch.special`` (``bessel_j0``...) and the orthogonal polynomials
give results that do not require grad. Kernels are registered for the CPU backend only
(SciPy works on NumPy arrays); another backend gets a clear NotImplementedError.

Where PyTorch's values are wrong, Ember keeps SciPy's (tests/test_special.py checks them
against mpmath): ``ndtr`` below -5.5 in float32 and -8 in float64 (PyTorch underflows to 0),
the Bessel ``j0/j1/y0/y1`` and ``airy_ai`` in float64 (PyTorch's are off by up to 1e-4
relative), ``zeta(x, inf) = 0`` (PyTorch: NaN), and a NaN argument of ``gammainc``/
``gammaincc`` gives NaN (PyTorch returns 0 or 1 when the other argument is 0 or inf).

Example:
    >>> ember.special.i0e(ember.tensor([0.0, 1.0]))
    tensor([1.0000, 0.4658])
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError
from ..tensor import Tensor
from . import dispatch
from .inplace import copy_into_out, inplace_from
from .registry import defop
from .select import where
from .unary import exp, log, sign

__all__ = ["xlogy", "xlog1py", "erfcx", "i0", "i0e", "i1", "i1e", "ndtr", "ndtri", "log_ndtr",
           "entr", "zeta", "gammainc", "gammaincc", "igamma", "igammac", "bessel_j0", "bessel_j1",
           "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
           "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0",
           "scaled_modified_bessel_k1", "spherical_bessel_j0", "airy_ai", "chebyshev_polynomial_t",
           "chebyshev_polynomial_u", "shifted_chebyshev_polynomial_t",
           "shifted_chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
           "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w",
           "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
           "legendre_polynomial_p"]

_SQRT_2PI = math.sqrt(2 * math.pi)
_apply = dispatch.apply


def _scipy():
    import scipy.special as sp   # NOTE: lazy — SciPy takes ~0.2 s to import
    return sp


def _f64(a):
    return np.asarray(a, dtype=np.float64)     # NOTE: a Python scalar operand arrives as is


def _sc(fn, name):
    """A CPU kernel computing ``fn(scipy.special, *float64 arrays)`` (rounded by dispatch)."""
    def kernel(xp, *arrays):
        for a in arrays:
            if np.iscomplexobj(a):
                raise DTypeError(f"{name}: not implemented for complex dtype "
                                 f"{np.asarray(a).dtype} (as in PyTorch); valid dtypes: bool, "
                                 f"integer and floating")
        with np.errstate(all="ignore"):
            return np.asarray(fn(_scipy(), *[_f64(a) for a in arrays]), dtype=np.float64)
    return {"cpu": kernel}


def _unary(name, fn, deriv=None, save="inputs"):
    """A unary SciPy-backed primitive; ``deriv(x, out)`` in Ember ops (None: no gradient)."""
    vjp = jvp = None
    if deriv is not None:
        vjp = lambda g, out, x: (g * deriv(x, out),)  # noqa: E731
        jvp = lambda t, out, x: t[0] * deriv(x, out)  # noqa: E731
    return defop(name, nin=1, elementwise=True, kernels=_sc(fn, name), dtype="float",
                 save=save if deriv is not None else None, vjp=vjp, jvp=jvp)


def _at_zero(x, value, expr):
    """``expr(x)`` with ``value`` where ``x == 0`` (``expr`` sees 1 there, a safe divisor)."""
    zero = x == 0
    return where(zero, value, expr(where(zero, 1.0, x)))


# ------------------------------------------------------------------ differentiable unary
erfcx_p = _unary("erfcx", lambda sp, x: sp.erfcx(x),
                 lambda x, out: 2 * x * out - 2 / math.sqrt(math.pi), save="both")
i0_p = _unary("i0", lambda sp, x: sp.i0(x), lambda x, out: i1(x))
i1_p = _unary("i1", lambda sp, x: sp.i1(x),
              # NOTE: i1'(0) = 1/2 (PyTorch's i1_backward writes the limit explicitly)
              lambda x, out: _at_zero(x, 0.5, lambda s: i0(s) - i1(s) / s))
i0e_p = _unary("i0e", lambda sp, x: sp.i0e(x), lambda x, out: i1e(x) - sign(x) * out,
               save="both")
i1e_p = _unary("i1e", lambda sp, x: sp.i1e(x),
               lambda x, out: _at_zero(x, 0.5, lambda s: i0e(s) - i1e(s) * (sign(s) + 1 / s)))
ndtri_p = _unary("ndtri", lambda sp, x: sp.ndtri(x),
                 lambda x, out: _SQRT_2PI * exp(out * out * 0.5), save="output")
ndtr_p = _unary("ndtr", lambda sp, x: sp.ndtr(x),
                lambda x, out: exp(x * x * -0.5) / _SQRT_2PI)
log_ndtr_p = _unary("log_ndtr", lambda sp, x: sp.log_ndtr(x),
                    lambda x, out: exp(-(out + x * x * 0.5)) / _SQRT_2PI, save="both")
# NOTE: a primitive, not a composite of log: entr(0) = 0 with gradient -(1 + log 0) = +inf
# and NaN below 0, exactly PyTorch's values (a `where` composite would give 0 there).
entr_p = _unary("entr", lambda sp, x: sp.entr(x), lambda x, out: -(1 + log(x)))

# ------------------------------------------------------------------ non-differentiable unary
_NODIFF = {
    "bessel_j0": lambda sp, x: sp.j0(x),
    "bessel_j1": lambda sp, x: sp.j1(x),
    "bessel_y0": lambda sp, x: sp.y0(x),
    "bessel_y1": lambda sp, x: sp.y1(x),
    "modified_bessel_i0": lambda sp, x: sp.i0(x),
    "modified_bessel_i1": lambda sp, x: sp.i1(x),
    "modified_bessel_k0": lambda sp, x: sp.k0(x),
    "modified_bessel_k1": lambda sp, x: sp.k1(x),
    "scaled_modified_bessel_k0": lambda sp, x: sp.k0e(x),
    "scaled_modified_bessel_k1": lambda sp, x: sp.k1e(x),
    "spherical_bessel_j0": lambda sp, x: sp.spherical_jn(0, x),
    # NOTE: SciPy's Ai is NaN past x = 1e8; it underflows to 0 from x = 104 on
    "airy_ai": lambda sp, x: np.where((x > 200) & (x < np.inf), 0.0, sp.airy(x)[0]),
}
_NODIFF_P = {name: _unary(name, fn) for name, fn in _NODIFF.items()}


# ------------------------------------------------------------------ binary
def _no_grad_rule(name):
    """The rule of the first input, where PyTorch defines no derivative.

    NOTE: PyTorch raises "the derivative for 'igamma: input' is not implemented" when that
    gradient is needed. Ember's engine runs the rule of every input that requires grad, so
    the rule raises only under ``.backward()`` (which fills every leaf's ``.grad``, as
    PyTorch's would need it); under ``autograd.grad`` it gives no gradient, so asking for
    that input raises the unused-input error and asking for ``x`` alone works.
    """
    def rule(g, out, a, x):
        from ..autograd.engine import accumulating
        if accumulating():
            raise NotImplementedError(f"the derivative for '{name}: input' is not implemented "
                                      f"(as in PyTorch): {name} is differentiable in its "
                                      f"second argument only; detach the first")
        return None
    return rule


def _gammainc_dx(a, x):
    """dP(a, x)/dx = x^(a-1) e^-x / Gamma(a) (``a`` may be a Python number)."""
    a = a if isinstance(a, Tensor) else x.new_tensor(a)
    return exp((a - 1) * log(x) - x - _lgamma(a))


def _lgamma(a):
    from .special_gamma import lgamma
    return lgamma(a)


def _binary(name, fn, dy):
    """A binary SciPy-backed primitive differentiable in its second input only."""
    return defop(name, nin=2, elementwise=True, kernels=_sc(fn, name), dtype="float",
                 save="inputs", vjp=(_no_grad_rule(name), lambda g, out, a, x: g * dy(a, x)),
                 jvp=lambda t, out, a, x: t[1] * dy(a, x))


zeta_p = _binary("zeta", lambda sp, x, q: sp.zeta(x, q), lambda x, q: -x * zeta(x + 1, q))
gammainc_p = _binary("gammainc", lambda sp, a, x: sp.gammainc(a, x), _gammainc_dx)
gammaincc_p = _binary("gammaincc", lambda sp, a, x: sp.gammaincc(a, x),
                      lambda a, x: -_gammainc_dx(a, x))


def _like(v, ref):
    return v if isinstance(v, Tensor) else ref.new_tensor(v)


def _xlog_rules(name, pole):
    """VJP/JVP of ``x * log_fn(y)`` as PyTorch's derivatives.yaml: ``d/dx`` is
    ``xlog(grad, y)`` zeroed where ``x == 0`` and ``y <= pole`` (``log`` undefined there),
    ``d/dy = grad * x / (y - pole)``."""
    def dx(g, out, x, y):
        x, y = _like(x, g), _like(y, g)
        return where((x == 0) & (y <= pole), 0.0, _apply(_XLOG[name], (g, y), {}))

    def dy(g, out, x, y):
        return g * x / (y - pole)

    def jvp(t, out, x, y):
        terms = []
        if t[0] is not None:
            terms.append(dx(t[0], out, x, y))
        if t[1] is not None:
            terms.append(dy(t[1], out, x, y))
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]
    return (dx, dy), jvp


_XLOG = {}
for _name, _fn, _pole in (("xlogy", lambda sp, x, y: sp.xlogy(x, y), 0.0),
                          ("xlog1py", lambda sp, x, y: sp.xlog1py(x, y), -1.0)):
    _vjp, _jvp = _xlog_rules(_name, _pole)
    _XLOG[_name] = defop(_name, nin=2, elementwise=True, kernels=_sc(_fn, _name),
                                dtype="float", save="inputs", vjp=_vjp, jvp=_jvp)
xlogy_p, xlog1py_p = _XLOG["xlogy"], _XLOG["xlog1py"]


def _poly(evaluate, first):
    """Kernel of an orthogonal polynomial ``P_n(x)``: ``n`` truncated to an integer, 0 for
    ``n < 0``, ``P_0 = 1`` and ``P_1 = first(x)`` whatever ``x`` (PyTorch's rules, which
    hold for non-finite ``x`` too), NaN for a non-finite ``n``."""
    def fn(sp, x, n):
        finite = np.isfinite(n)
        k = np.where(finite, np.trunc(n), 0).astype(np.int64)
        out = evaluate(sp, np.maximum(k, 0), x)
        out = np.where(k == 0, 1.0, np.where(k == 1, first(x), out))
        return np.where(finite, np.where(k < 0, 0.0, out), np.nan)
    return fn


def _chebyshev_vw(sign):
    """Chebyshev polynomials of the third (V, ``sign=-1``) and fourth (W, ``sign=+1``) kind:
    ``P_0 = 1``, ``P_1 = 2x + sign``, ``P_{k+1} = 2x P_k - P_{k-1}`` (SciPy has none)."""
    def evaluate(sp, n, x):
        x, n = np.broadcast_arrays(x, n)
        prev, cur = np.ones_like(x), 2 * x + sign
        out = np.where(n == 0, prev, cur)
        for k in range(2, int(n.max(initial=0)) + 1):
            prev, cur = cur, 2 * x * cur - prev
            out = np.where(n == k, cur, out)
        return out
    return evaluate


_POLYS = {   # name: (P_n(x) for n >= 0, P_1(x))
    "chebyshev_polynomial_t": (lambda sp, n, x: sp.eval_chebyt(n, x), lambda x: x),
    "chebyshev_polynomial_u": (lambda sp, n, x: sp.eval_chebyu(n, x), lambda x: 2 * x),
    "shifted_chebyshev_polynomial_t": (lambda sp, n, x: sp.eval_sh_chebyt(n, x),
                                       lambda x: 2 * x - 1),
    "shifted_chebyshev_polynomial_u": (lambda sp, n, x: sp.eval_sh_chebyu(n, x),
                                       lambda x: 4 * x - 2),
    "hermite_polynomial_h": (lambda sp, n, x: sp.eval_hermite(n, x), lambda x: 2 * x),
    "hermite_polynomial_he": (lambda sp, n, x: sp.eval_hermitenorm(n, x), lambda x: x),
    "laguerre_polynomial_l": (lambda sp, n, x: sp.eval_laguerre(n, x), lambda x: 1 - x),
    "legendre_polynomial_p": (lambda sp, n, x: sp.eval_legendre(n, x), lambda x: x),
    "chebyshev_polynomial_v": (_chebyshev_vw(-1), lambda x: 2 * x - 1),
    "chebyshev_polynomial_w": (_chebyshev_vw(1), lambda x: 2 * x + 1),
    "shifted_chebyshev_polynomial_v": (lambda sp, n, x: _chebyshev_vw(-1)(sp, n, 2 * x - 1),
                                       lambda x: 4 * x - 3),
    "shifted_chebyshev_polynomial_w": (lambda sp, n, x: _chebyshev_vw(1)(sp, n, 2 * x - 1),
                                       lambda x: 4 * x - 1),
}
_POLYS_P = {name: defop(name, nin=2, elementwise=True, kernels=_sc(_poly(*ev), name),
                        dtype="float", save=None) for name, ev in _POLYS.items()}


# ------------------------------------------------------------------ public functions
def _out(r, out):
    return r if out is None else copy_into_out(out, r)


def _unary_fn(op, doc):
    def f(input, *, out=None):
        return _out(_apply(op, (input,), {}), out)
    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = doc
    return f


erfcx = _unary_fn(erfcx_p, "Scaled complementary error function ``exp(x**2) * erfc(x)``.")
i0 = _unary_fn(i0_p, "Modified Bessel function of the first kind, order 0 (``torch.i0``).")
i1 = _unary_fn(i1_p, "Modified Bessel function of the first kind, order 1.")
i0e = _unary_fn(i0e_p, "Exponentially scaled ``i0``: ``exp(-|x|) * i0(x)``.")
i1e = _unary_fn(i1e_p, "Exponentially scaled ``i1``: ``exp(-|x|) * i1(x)``.")
ndtri = _unary_fn(ndtri_p, "Inverse of the standard normal CDF (the quantile function).")
ndtr = _unary_fn(ndtr_p, "Standard normal CDF ``(1 + erf(x / sqrt(2))) / 2``.")
log_ndtr = _unary_fn(log_ndtr_p, "Log of the standard normal CDF, accurate in both tails.")
entr = _unary_fn(entr_p, "Elementwise entropy ``-x log x`` (0 at 0, -inf below 0).")
bessel_j0, bessel_j1, bessel_y0, bessel_y1 = (
    _unary_fn(_NODIFF_P[n], f"Bessel function of the {k} kind, order {o} (no gradient, "
              f"as PyTorch).") for n, k, o in (("bessel_j0", "first", 0),
                                              ("bessel_j1", "first", 1),
                                              ("bessel_y0", "second", 0),
                                              ("bessel_y1", "second", 1)))
modified_bessel_i0 = _unary_fn(_NODIFF_P["modified_bessel_i0"],
                               "``i0`` without a gradient (PyTorch's modified_bessel_i0).")
modified_bessel_i1 = _unary_fn(_NODIFF_P["modified_bessel_i1"],
                               "``i1`` without a gradient (PyTorch's modified_bessel_i1).")
modified_bessel_k0 = _unary_fn(_NODIFF_P["modified_bessel_k0"],
                               "Modified Bessel function of the second kind, order 0.")
modified_bessel_k1 = _unary_fn(_NODIFF_P["modified_bessel_k1"],
                               "Modified Bessel function of the second kind, order 1.")
scaled_modified_bessel_k0 = _unary_fn(_NODIFF_P["scaled_modified_bessel_k0"],
                                      "``exp(x) * modified_bessel_k0(x)``.")
scaled_modified_bessel_k1 = _unary_fn(_NODIFF_P["scaled_modified_bessel_k1"],
                                      "``exp(x) * modified_bessel_k1(x)``.")
spherical_bessel_j0 = _unary_fn(_NODIFF_P["spherical_bessel_j0"],
                                "Spherical Bessel function of the first kind, ``sin(x)/x``.")
airy_ai = _unary_fn(_NODIFF_P["airy_ai"], "Airy function Ai.")


def zeta(input, other, *, out=None):
    """Hurwitz zeta ``sum_k (k + q)^-x`` of ``x = input`` and ``q = other``
    (``torch.special.zeta``); differentiable in ``other`` only, as PyTorch.

    Example:
        >>> ember.special.zeta(ember.tensor([2.0]), 1.0)     # pi**2 / 6
        tensor([1.6449])
    """
    return _out(_apply(zeta_p, (input, other), {}), out)


def gammainc(input, other, *, out=None):
    """Regularised lower incomplete gamma ``P(a = input, x = other)``
    (``torch.special.gammainc``); differentiable in ``other`` only, as PyTorch.

    Example:
        >>> ember.special.gammainc(ember.tensor([1.0]), ember.tensor([1.0]))   # 1 - 1/e
        tensor([0.6321])
    """
    return _out(_apply(gammainc_p, (input, other), {}), out)


def gammaincc(input, other, *, out=None):
    """Regularised upper incomplete gamma ``Q(a, x) = 1 - P(a, x)``
    (``torch.special.gammaincc``); differentiable in ``other`` only, as PyTorch."""
    return _out(_apply(gammaincc_p, (input, other), {}), out)


igamma, igammac = gammainc, gammaincc     # torch.igamma / torch.igammac


def xlogy(input, other, *, out=None):
    """``input * log(other)``, 0 where ``input`` is 0 unless ``other`` is NaN
    (``torch.xlogy``, ``torch.special.xlogy``); either argument may be a Python number.
    Gradients as PyTorch's: ``log(other)`` for ``input`` (0 where ``input == 0`` and
    ``other <= 0``) and ``input / other`` for ``other``.

    Example:
        >>> ember.xlogy(ember.tensor([0.0, 2.0]), ember.tensor([0.0, 3.0]))
        tensor([0.0000, 2.1972])
    """
    return _out(_apply(xlogy_p, (input, other), {}), out)


def xlog1py(input, other, *, out=None):
    """``input * log1p(other)``, 0 where ``input`` is 0 unless ``other`` is NaN
    (``torch.special.xlog1py``); gradients as :func:`xlogy`'s, with ``other + 1``.

    Example:
        >>> ember.special.xlog1py(ember.tensor([0.0, 2.0]), ember.tensor([-1.0, 1.0]))
        tensor([0.0000, 1.3863])
    """
    return _out(_apply(xlog1py_p, (input, other), {}), out)


def _poly_fn(name, what):
    op = _POLYS_P[name]

    def f(input, n, *, out=None):
        return _out(_apply(op, (input, n), {}), out)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = (f"{what} ``P_n(input)``, elementwise with broadcasting (``torch.special."
                 f"{name}``). ``n`` (a tensor or number) is truncated to an integer; the "
                 f"result is 0 for ``n < 0``. No gradient, as PyTorch.")
    return f


chebyshev_polynomial_t = _poly_fn("chebyshev_polynomial_t", "Chebyshev polynomial T")
chebyshev_polynomial_u = _poly_fn("chebyshev_polynomial_u", "Chebyshev polynomial U")
shifted_chebyshev_polynomial_t = _poly_fn("shifted_chebyshev_polynomial_t",
                                          "Shifted Chebyshev polynomial T*")
shifted_chebyshev_polynomial_u = _poly_fn("shifted_chebyshev_polynomial_u",
                                          "Shifted Chebyshev polynomial U*")
hermite_polynomial_h = _poly_fn("hermite_polynomial_h", "Physicists' Hermite polynomial H")
hermite_polynomial_he = _poly_fn("hermite_polynomial_he",
                                 "Probabilists' Hermite polynomial He")
laguerre_polynomial_l = _poly_fn("laguerre_polynomial_l", "Laguerre polynomial L")
legendre_polynomial_p = _poly_fn("legendre_polynomial_p", "Legendre polynomial P")
chebyshev_polynomial_v = _poly_fn("chebyshev_polynomial_v", "Chebyshev polynomial V (third kind)")
chebyshev_polynomial_w = _poly_fn("chebyshev_polynomial_w", "Chebyshev polynomial W (fourth kind)")
shifted_chebyshev_polynomial_v = _poly_fn("shifted_chebyshev_polynomial_v",
                                          "Shifted Chebyshev polynomial V*")
shifted_chebyshev_polynomial_w = _poly_fn("shifted_chebyshev_polynomial_w",
                                          "Shifted Chebyshev polynomial W*")


Tensor.i0 = i0
Tensor.i0_ = inplace_from(i0, "i0")
Tensor.igamma, Tensor.igammac = igamma, igammac
Tensor.igamma_ = inplace_from(igamma, "igamma")
Tensor.igammac_ = inplace_from(igammac, "igammac")
