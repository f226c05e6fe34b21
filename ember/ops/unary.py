"""Elementwise unary primitives (exp, log, sin, relu, erf, ...) and integer-rounding divisions.

A unary primitive is declared by :func:`unary` from its kernel, its C expression for
fusion and its derivative ``d(x, out)`` written in Ember ops; the VJP (``g * d``) and
the JVP (``t * d``) both follow from it. ``ZERO`` marks ops whose gradient PyTorch
defines as zero (floor, sign...), so ``requires_grad`` still propagates like PyTorch.

Integer and bool inputs follow PyTorch: transcendental ops (``dtype="float"``) compute
in the default float dtype; abs, sign, relu and the rounding ops keep the input dtype.
"""
from __future__ import annotations

import math

from ..errors import DTypeError, IntegerDivisionByZero
from ..tensor import Tensor
from . import _special, dispatch
from .complex import cj, complex_abs, real_only
from .inplace import copy_into_out, inplace_from
from .registry import defop
from .unary_backward import relu_backward, relu_eager_vjp, sigmoid_backward, tanh_backward

__all__ = ['exp', 'exp2', 'expm1', 'log', 'log2', 'log10', 'log1p', 'sqrt', 'rsqrt',
           'reciprocal', 'sin', 'cos', 'tan', 'asin', 'acos', 'atan', 'arcsin', 'arccos',
           'arctan', 'sinh', 'cosh', 'tanh', 'sigmoid', 'relu', 'erf', 'erfc', 'erfinv',
           'abs', 'absolute', 'sign', 'floor', 'ceil', 'round', 'trunc', 'fix', 'frac',
           'square', 'logical_not', 'bitwise_not', 'isnan', 'isinf', 'isfinite', 'isposinf',
           'isneginf', 'signbit']

_apply = dispatch.apply
_NOPARAMS: dict = {}
ZERO = "zero"   # derivative marker: PyTorch defines the gradient as zeros
_LN2, _LN10 = math.log(2.0), math.log(10.0)




def unary(name, kernel, expr, deriv=None, *, save="inputs", dtype="float", params=None,
          differentiable=True, cpu_kernel=None, backward=None):
    """Declare an elementwise unary primitive whose derivative is ``deriv(x, out)``.

    ``kernel`` runs on every backend; ``cpu_kernel``, if given, replaces it on the CPU.
    ``backward(g, out)``, if given, is a one-kernel real VJP (``unary_backward``) used for
    real gradients and outputs; complex ones keep ``g * conj(deriv)``.
    """
    if deriv is None or not differentiable:
        vjp = jvp = None
    elif deriv is ZERO:
        save = None
        vjp = lambda g, out, x, **p: (_zeros(g),)  # noqa: E731
        jvp = lambda t, out, x, **p: _zeros(t[0])  # noqa: E731
    else:
        # NOTE: g * conj(f'(z)): PyTorch's convention for complex z (cj is free on reals)
        vjp = lambda g, out, x, **p: (g * cj(deriv(x, out)),)  # noqa: E731
        if backward is not None:
            vjp = _fused_vjp(backward, vjp)
        jvp = lambda t, out, x, **p: t[0] * deriv(x, out)  # noqa: E731
    kernels = {"xp": kernel} if cpu_kernel is None else {"xp": kernel, "cpu": cpu_kernel}
    return defop(name, nin=1, elementwise=True, kernels=kernels, expr=expr, dtype=dtype,
                 save=save, vjp=vjp, jvp=jvp, params=params)


def _fused_vjp(backward, composite):
    """VJP calling the one-kernel ``backward(g, out)`` unless a value is complex."""
    def vjp(g, out, x, **p):
        if g._dtype.is_complex or out._dtype.is_complex:
            return composite(g, out, x, **p)
        return (backward(g, out),)
    return vjp


def _zeros(like):
    from .factories import zeros_like
    return zeros_like(like)


def _keep_int(fn):
    """Kernel that is the identity (a copy) on integer/bool arrays, like torch.floor."""
    def kernel(xp, x, **params):
        return x.copy() if x.dtype.kind in "iub" else fn(xp, x, **params)
    return kernel


def _sigmoid(xp, x):
    # NOTE: 1 / (1 + exp(-x)) keeps relative accuracy for x << 0; exp overflow gives 0.
    return 1 / (1 + xp.exp(-x))


# ------------------------------------------------------------------ primitives
exp_p = unary("exp", lambda xp, x: xp.exp(x), "exp({0})", lambda x, out: out, save="output")
exp2_p = unary("exp2", lambda xp, x: xp.exp2(x), "exp2({0})", lambda x, out: out * _LN2,
               save="output")
expm1_p = unary("expm1", lambda xp, x: xp.expm1(x), "expm1({0})", lambda x, out: out + 1,
                save="output")
log_p = unary("log", lambda xp, x: xp.log(x), "log({0})", lambda x, out: 1 / x)
log2_p = unary("log2", lambda xp, x: xp.log2(x), "log2({0})", lambda x, out: 1 / (x * _LN2))
log10_p = unary("log10", lambda xp, x: xp.log10(x), "log10({0})",
                lambda x, out: 1 / (x * _LN10))
log1p_p = unary("log1p", lambda xp, x: xp.log1p(x), "log1p({0})", lambda x, out: 1 / (x + 1))
sqrt_p = unary("sqrt", lambda xp, x: xp.sqrt(x), "sqrt({0})", lambda x, out: 0.5 / out,
               save="output")
sin_p = unary("sin", lambda xp, x: xp.sin(x), "sin({0})", lambda x, out: cos(x))
cos_p = unary("cos", lambda xp, x: xp.cos(x), "cos({0})", lambda x, out: -sin(x))
tan_p = unary("tan", lambda xp, x: xp.tan(x), "tan({0})", lambda x, out: 1 + out * out,
              save="output")
asin_p = unary("asin", lambda xp, x: xp.arcsin(x), "asin({0})",
               lambda x, out: rsqrt(1 - x * x))
acos_p = unary("acos", lambda xp, x: xp.arccos(x), "acos({0})",
               lambda x, out: -rsqrt(1 - x * x))
atan_p = unary("atan", lambda xp, x: xp.arctan(x), "atan({0})", lambda x, out: 1 / (1 + x * x))
sinh_p = unary("sinh", lambda xp, x: xp.sinh(x), "sinh({0})", lambda x, out: cosh(x))
cosh_p = unary("cosh", lambda xp, x: xp.cosh(x), "cosh({0})", lambda x, out: sinh(x))
tanh_p = unary("tanh", lambda xp, x: xp.tanh(x), "tanh({0})", lambda x, out: 1 - out * out,
               save="output", backward=tanh_backward)
sigmoid_p = unary("sigmoid", _sigmoid, "(1 / (1 + exp(-{0})))",
                  lambda x, out: out * (1 - out), save="output", backward=sigmoid_backward)
# NOTE: erf/erfinv are primitives because NumPy has none (see _special.py for the kernels).
erf_p = unary("erf", real_only("erf", lambda xp, x: _special.erf(xp, x)), "erf({0})",
              lambda x, out: (2 / math.sqrt(math.pi)) * exp(-x * x))
erfc_p = unary("erfc", real_only("erfc", lambda xp, x: _special.erfc(xp, x)), "erfc({0})",
               lambda x, out: (-2 / math.sqrt(math.pi)) * exp(-x * x))
erfinv_p = unary("erfinv", real_only("erfinv", lambda xp, x: _special.erfinv(xp, x)),
                 "erfinv({0})",
                 lambda x, out: (math.sqrt(math.pi) / 2) * exp(out * out), save="output")

# dtype-preserving ops
abs_p = unary("abs", lambda xp, x: xp.abs(x), "fabs({0})", lambda x, out: sign(x),
              dtype="promote")
# NOTE: ``{0} != {0}`` (only NaN differs from itself) keeps NaN like np.maximum(x, 0); a
# plain ``x > 0 ? x : 0`` would map NaN to 0.
relu_p = unary("relu", real_only("relu", lambda xp, x: xp.maximum(x, 0)),
               "({0} > 0 || {0} != {0} ? {0} : 0)",
               lambda x, out: out > 0, save="output", dtype="promote",
               backward=relu_backward)
relu_p.eager_vjp = relu_eager_vjp     # NOTE: relu_backward's kernel without its dispatch
sign_p = unary("sign", real_only("sign (use sgn for complex)",
                                  lambda xp, x: x.copy() if x.dtype.kind == "b" else xp.sign(x)),
               "({0} != {0} ? {0} : ({0} > 0) - ({0} < 0))", ZERO, dtype="promote")
floor_p = unary("floor", real_only("floor", _keep_int(lambda xp, x: xp.floor(x))),
                "floor({0})", ZERO, dtype="promote")
ceil_p = unary("ceil", real_only("ceil", _keep_int(lambda xp, x: xp.ceil(x))), "ceil({0})",
               ZERO, dtype="promote")
trunc_p = unary("trunc", real_only("trunc", _keep_int(lambda xp, x: xp.trunc(x))),
                "trunc({0})", ZERO, dtype="promote")
round_p = unary("round", real_only("round", lambda xp, x, decimals=0: _round(xp, x, decimals)),
                "rint({0})", ZERO,
                dtype="promote", params={"decimals": 0})


def _round(xp, x, decimals):
    if x.dtype.kind in "iub" and decimals >= 0:
        return x.copy()
    return xp.round(x, decimals)   # half to even, like torch.round


# predicates and bit ops (not differentiable)
logical_not_p = unary("logical_not", lambda xp, x: xp.logical_not(x), "(!{0})", dtype="bool")
bitwise_not_p = unary("bitwise_not", lambda xp, x: xp.invert(x), "(~{0})", dtype="integral")
isnan_p = unary("isnan", lambda xp, x: xp.isnan(x), "isnan({0})", dtype="bool")
isinf_p = unary("isinf", lambda xp, x: xp.isinf(x), "isinf({0})", dtype="bool")
isfinite_p = unary("isfinite", lambda xp, x: xp.isfinite(x), "isfinite({0})", dtype="bool")
signbit_p = unary("signbit", lambda xp, x: xp.signbit(x), "signbit({0})", dtype="bool")


# ------------------------------------------------------------------ integer-rounding division
def _int_zero_check(xp, x, y, op):
    dt = xp.result_type(x, y)
    if dt.kind in "iub" and bool(xp.any(xp.asarray(y) == 0)):
        raise IntegerDivisionByZero(f"{op}: integer division by zero (a divisor is 0, dtype "
                                    f"{dt}); PyTorch raises ZeroDivisionError here too")


def _floor_div(xp, x, y):
    _int_zero_check(xp, x, y, "floor_divide")
    return xp.floor_divide(x, y)


def _trunc_div(xp, x, y):
    _int_zero_check(xp, x, y, "trunc_divide")
    if xp.result_type(x, y).kind in "iub":
        return (x - xp.fmod(x, y)) // y     # exact for integers (no float round trip)
    return xp.trunc(xp.true_divide(x, y))


def _zero2(g, out, x, y):
    return _zeros(g), _zeros(g)


# NOTE: PyTorch defines the gradient of rounding divisions as zero (not absent).
floor_divide_p = defop(
    "floor_divide", nin=2, elementwise=True, expr="floor_div({0}, {1})", kernel=_floor_div,
    save=None, vjp=_zero2, jvp=lambda t, out, x, y: _zeros(out))
trunc_divide_p = defop(
    "trunc_divide", nin=2, elementwise=True, expr="trunc_div({0}, {1})", kernel=_trunc_div,
    save=None, vjp=_zero2, jvp=lambda t, out, x, y: _zeros(out))


# ------------------------------------------------------------------ public functions
def _fn(op, name=None):
    def f(input, *, out=None):
        r = _apply(op, (input,), _NOPARAMS)
        return r if out is None else copy_into_out(out, r)
    f.__name__ = name or op.name
    f.__qualname__ = f.__name__
    f.__doc__ = (f"Elementwise ``{op.name}`` (``torch.{f.__name__}``).\n\n"
                 f"Example:\n    >>> ember.{f.__name__}(ember.tensor([0.5, 1.0]))\n")
    return f


exp, exp2, expm1 = _fn(exp_p), _fn(exp2_p), _fn(expm1_p)
log, log2, log10, log1p = _fn(log_p), _fn(log2_p), _fn(log10_p), _fn(log1p_p)
sqrt, sin, cos, tan = _fn(sqrt_p), _fn(sin_p), _fn(cos_p), _fn(tan_p)
asin, acos, atan = _fn(asin_p), _fn(acos_p), _fn(atan_p)
arcsin, arccos, arctan = _fn(asin_p, "arcsin"), _fn(acos_p, "arccos"), _fn(atan_p, "arctan")
sinh, cosh, tanh, sigmoid = _fn(sinh_p), _fn(cosh_p), _fn(tanh_p), _fn(sigmoid_p)
erf, erfc, erfinv = _fn(erf_p), _fn(erfc_p), _fn(erfinv_p)
relu, sign = _fn(relu_p), _fn(sign_p)


def abs(input, *, out=None):  # noqa: A001 - PyTorch name
    """``|input|`` elementwise (``torch.abs``); complex tensors give their real modulus.

    Example:
        >>> ember.abs(ember.tensor([-1.5, 3 + 4j]))    # tensor([1.5000, 5.0000])
    """
    r = complex_abs(input) if input._dtype.is_complex else _apply(abs_p, (input,), _NOPARAMS)
    return r if out is None else copy_into_out(out, r)


absolute = abs
floor, ceil, trunc = _fn(floor_p), _fn(ceil_p), _fn(trunc_p)
fix = _fn(trunc_p, "fix")
logical_not, bitwise_not = _fn(logical_not_p), _fn(bitwise_not_p)
isnan, isinf, isfinite, signbit = _fn(isnan_p), _fn(isinf_p), _fn(isfinite_p), _fn(signbit_p)


def round(input, *, decimals=0, out=None):  # noqa: A001 - PyTorch name
    """Round half to even, optionally to ``decimals`` places (``torch.round``).

    Example:
        >>> ember.round(ember.tensor([0.5, 1.5, 1.2345]), decimals=0)   # [0., 2., 1.]
    """
    r = _apply(round_p, (input,), {"decimals": int(decimals)})
    return r if out is None else copy_into_out(out, r)


def rsqrt(input, *, out=None):
    """``1 / sqrt(input)`` (``torch.rsqrt``). Example: ``ember.rsqrt(ember.tensor([4.]))``."""
    r = 1 / sqrt(input)
    return r if out is None else copy_into_out(out, r)


def reciprocal(input, *, out=None):
    """``1 / input``; integers promote to the default float (``torch.reciprocal``).

    Example:
        >>> ember.reciprocal(ember.tensor([2, 4]))     # tensor([0.5000, 0.2500])
    """
    r = 1 / input
    return r if out is None else copy_into_out(out, r)


def square(input, *, out=None):
    """``input * input``; integers stay integers, bool becomes int64 (``torch.square``).

    Example:
        >>> ember.square(ember.tensor([-2, 3]))        # tensor([4, 9])
    """
    if input.dtype.name == "bool":
        input = input.long()
    r = input * input
    return r if out is None else copy_into_out(out, r)


def frac(input, *, out=None):
    """Fractional part ``input - trunc(input)`` (``torch.frac``); its gradient is 1.

    Example:
        >>> ember.frac(ember.tensor([1.5, -2.25]))     # tensor([ 0.5000, -0.2500])
    """
    r = input - trunc(input)
    return r if out is None else copy_into_out(out, r)


def isposinf(input, *, out=None):
    """True where ``input`` is +inf (``torch.isposinf``)."""
    r = isinf(input) & (input > 0)
    return r if out is None else copy_into_out(out, r)


def isneginf(input, *, out=None):
    """True where ``input`` is -inf (``torch.isneginf``)."""
    r = isinf(input) & (input < 0)
    return r if out is None else copy_into_out(out, r)


# ------------------------------------------------------------------ Tensor methods
_METHODS = ('exp', 'exp2', 'expm1', 'log', 'log2', 'log10', 'log1p', 'sqrt', 'rsqrt',
            'reciprocal', 'sin', 'cos', 'tan', 'asin', 'acos', 'atan', 'arcsin', 'arccos',
            'arctan', 'sinh', 'cosh', 'tanh', 'sigmoid', 'relu', 'erf', 'erfc', 'erfinv', 'abs',
            'absolute', 'sign', 'floor', 'ceil', 'round', 'trunc', 'fix', 'frac', 'square',
            'logical_not', 'bitwise_not', 'isnan', 'isinf', 'isfinite', 'isposinf', 'isneginf',
            'signbit')
_INPLACE = tuple(n for n in _METHODS if not n.startswith("is") and n != "signbit")

for _name in _METHODS:
    setattr(Tensor, _name, globals()[_name])
for _name in _INPLACE:
    setattr(Tensor, _name + "_", inplace_from(globals()[_name], _name))


def _real_abs_only(fn):
    def abs_(self):
        if self._dtype.is_complex:   # NOTE: |z| is real: it has no complex storage to go to
            raise DTypeError("In-place abs is not supported for complex tensors (PyTorch "
                             "refuses it too); use z.abs()")
        return fn(self)
    abs_.__name__ = fn.__name__
    return abs_


Tensor.abs_ = Tensor.absolute_ = _real_abs_only(Tensor.abs_)
Tensor.__abs__ = abs
Tensor.__invert__ = bitwise_not
Tensor.__round__ = lambda self, ndigits=None: round(self, decimals=ndigits or 0)
