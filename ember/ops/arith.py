"""Arithmetic primitives: add, sub, mul, div, neg, pow, and the dtype cast.

These are the hottest ops in eager mode, so the Tensor operators are bound
straight to the dispatcher with no wrapper in between.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError
from ..tensor import Tensor
from . import dispatch
from ._util import LOWP
from .complex import cj
from .registry import defop

__all__ = ['add', 'sub', 'subtract', 'mul', 'multiply', 'div', 'divide', 'true_divide', 'neg', 'negative', 'pow']

_apply = dispatch.apply
_NOPARAMS: dict = {}


def _is_t(x) -> bool:
    return isinstance(x, Tensor)


add_p = defop(
    "add", nin=2, elementwise=True, save=None, expr="({0} + {1})",
    kernel=lambda xp, x, y: xp.add(x, y),
    vjp=lambda g, out, x, y: (g, g),
    jvp=lambda t, out, x, y: _tsum(t[0], t[1]))


def _sub_dy(g, out, x, y):
    # NOTE: a broadcast y (``x - x.mean(dim, keepdim=True)``) is reduced before negating:
    # one small negation instead of a full-size one.
    if tuple(y.shape) != tuple(g.shape):
        from .reduce import sum_to
        g = sum_to(g, y.shape)
    return -g


sub_p = defop(
    "sub", nin=2, elementwise=True, save=None, expr="({0} - {1})",
    kernel=lambda xp, x, y: xp.subtract(x, y),
    vjp=(lambda g, out, x, y: g, _sub_dy),
    jvp=lambda t, out, x, y: _tsum(t[0], None if t[1] is None else -t[1]))

def _times_conj(g, v):
    """``g * conj(v)``; for a real ``v`` (a plain Tensor or Python number) straight to the
    dispatcher: no conj test, no operator frame (mul's VJP is the commonest backward op)."""
    c = v.__class__
    if (c is Tensor and not v._dtype.is_complex) or c is float or c is int:
        return _apply(mul_p, (g, v), _NOPARAMS)
    return g * cj(v)


mul_p = defop(
    "mul", nin=2, elementwise=True, expr="({0} * {1})",
    kernel=lambda xp, x, y: xp.multiply(x, y),
    vjp=(lambda g, out, x, y: _times_conj(g, y), lambda g, out, x, y: _times_conj(g, x)),
    jvp=lambda t, out, x, y: _tsum(None if t[0] is None else t[0] * y,
                                   None if t[1] is None else x * t[1]))

div_p = defop(
    "div", nin=2, elementwise=True, dtype="float", expr="({0} / {1})",
    kernel=lambda xp, x, y: xp.true_divide(x, y),
    save="both",
    vjp=(lambda g, out, x, y: g / cj(y), lambda g, out, x, y: -g * cj(out / y)),
    jvp=lambda t, out, x, y: _tsum(None if t[0] is None else t[0] / y,
                                   None if t[1] is None else -t[1] * out / y))

neg_p = defop(
    "neg", nin=1, elementwise=True, save=None, expr="(-{0})",
    kernel=lambda xp, x: xp.negative(x),
    vjp=lambda g, out, x: (-g,), jvp="linear")


#: Python-scalar exponents computed without a pow call, as PyTorch's
#: ``pow_tensor_scalar_optimized_kernel`` does (so the values are PyTorch's: ``x**0.5`` is
#: ``sqrt(x)``, ``-0.0 ** 0.5 == -0.0``); the C template (``codegen/cexpr.template``) and
#: the eager kernels (``codegen/eager.run``) use the same table. Complex ``x`` takes it for
#: the positive exponents only: NumPy's complex reciprocal of 0 is nan, PyTorch's inf+nanj.
POW_FAST = {1: lambda xp, x: xp.positive(x), 2: lambda xp, x: xp.multiply(x, x),
            3: lambda xp, x: xp.multiply(xp.multiply(x, x), x),
            0.5: lambda xp, x: xp.sqrt(x), -1: lambda xp, x: xp.reciprocal(x),
            -2: lambda xp, x: xp.reciprocal(xp.multiply(x, x)),
            -0.5: lambda xp, x: xp.reciprocal(xp.sqrt(x))}


def pow_fast(x, y):
    """The :data:`POW_FAST` rule for ``x ** y`` (array ``x``, Python scalar ``y``), or None."""
    if (y.__class__ is int or y.__class__ is float) and y in POW_FAST \
            and getattr(x, "dtype", None) is not None:
        k = x.dtype.kind
        if k == "f" or k == "c" and y > 0:
            return POW_FAST[y]
    return None


def _pow_kernel(xp, x, y):
    fast = pow_fast(x, y)
    return fast(xp, x) if fast is not None else xp.power(x, y)


def _pow_dx(g, out, x, y, conj=True):
    d = y * x ** (y - 1)
    return g * (cj(d) if conj else d)


def _pow_dy(g, out, x, y, conj=True):
    # NOTE: d/dy x**y = out*log(x); where x == 0 the limit is 0 (for y > 0), not nan.
    from .unary import log
    from .select import where
    lx = log(where(x == 0, 1, x)) if _is_t(x) else _log_scalar(x)
    return g * (cj(out * lx) if conj else out * lx)


def _log_scalar(x):
    import cmath
    import math
    if isinstance(x, (complex, np.complexfloating)):
        return cmath.log(x)
    return math.log(x) if x > 0 else float("nan")


pow_p = defop(
    "pow", nin=2, elementwise=True, expr="pow({0}, {1})", kernel=_pow_kernel, save="both",
    vjp=(_pow_dx, _pow_dy),
    jvp=lambda t, out, x, y: _tsum(None if t[0] is None else _pow_dx(t[0], out, x, y, False),
                                   None if t[1] is None else _pow_dy(t[1], out, x, y, False)))


def _cast_rule(x, dtype):
    return None, dtype


def _cast_kernel(xp, x, dtype):
    if x.__class__ is np.ndarray and x.size >= _CONVERT_MIN and (x.dtype in LOWP or
                                                                  dtype.np in LOWP):
        # NOTE: float32 <-> float16/bfloat16 through a C kernel, bit-identical to astype
        # and 4-8x faster (NumPy/ml_dtypes convert one element at a time); eager and
        # compiled graphs (a cast node runs this kernel) alike. None: not a handled pair.
        # A GPU's array never gets here (no import on each of its ~170 casts a GPT step).
        from ..codegen.convert_kernels import convert     # NOTE: codegen sits above ops
        r = convert(x, dtype.np)
        if r is not None:
            return r
    if x.dtype.kind == "c" and dtype.np.kind not in "cb":
        x = x.real   # NOTE: the user was warned (to_dtype); NumPy would warn again
    return x.astype(dtype.np)


#: elements from which a float32 <-> float16/bfloat16 cast runs the conversion kernel.
_CONVERT_MIN = 4096


cast_p = defop(
    "cast", nin=1, params={"dtype": None}, dtype=lambda x, dtype=None: (None, dtype),
    kernel=_cast_kernel, save=None, elementwise=True, expr="(({dtype}){0})",
    vjp=lambda g, out, x, dtype: (_cast_back(g, x.dtype),), jvp="linear")


def _cast_back(g, dtype):
    if g._dtype.is_complex and not dtype.is_complex:
        g = g.real   # NOTE: PyTorch's handle_r_to_c: a real input keeps the real part
    return g.to(dtype)
# NOTE: the engine also casts gradients back to each input's dtype; the VJP does it here
# too so that a standalone vjp() of a cast has the right dtype.


def _tsum(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


# ------------------------------------------------------------------ public functions
def add(input, other, *, alpha=1, out=None):
    """``input + alpha * other`` with broadcasting and type promotion (``torch.add``)."""
    if alpha != 1:
        _check_alpha(input, other, alpha, "add")
        other = other * alpha
    return _out(_apply(add_p, (input, other), _NOPARAMS), out)


def sub(input, other, *, alpha=1, out=None):
    """``input - alpha * other`` (``torch.sub``)."""
    if _is_bool(input) or _is_bool(other):
        raise DTypeError("sub: subtraction with two bool tensors is not supported; use "
                         "logical_xor or the ~ operator instead")
    if alpha != 1:
        _check_alpha(input, other, alpha, "sub")
        other = other * alpha
    return _out(_apply(sub_p, (input, other), _NOPARAMS), out)


subtract = sub


def _check_alpha(input, other, alpha, op):
    if not _is_t(alpha):
        from .inplace import check_alpha
        check_alpha(input, other, alpha, op)


def _is_bool(x) -> bool:
    return isinstance(x, Tensor) and x._dtype is _dt.bool_


def mul(input, other, *, out=None):
    """Elementwise product (``torch.mul``)."""
    return _out(_apply(mul_p, (input, other), _NOPARAMS), out)


multiply = mul


def div(input, other, *, rounding_mode=None, out=None):
    """Division: true (default), ``"trunc"`` or ``"floor"`` rounding (``torch.div``)."""
    if rounding_mode is None:
        r = _apply(div_p, (input, other), _NOPARAMS)
    elif rounding_mode in ("trunc", "floor"):
        from .unary import floor_divide_p, trunc_divide_p
        op = floor_divide_p if rounding_mode == "floor" else trunc_divide_p
        r = _apply(op, (input, other), _NOPARAMS)
    else:
        raise ValueError(f"div: expected rounding_mode to be one of None, 'trunc', or 'floor' "
                         f"but found {rounding_mode!r}")
    return _out(r, out)


divide = true_divide = div


def neg(input, *, out=None):
    return _out(_apply(neg_p, (input,), _NOPARAMS), out)


negative = neg


def pow(input, exponent, *, out=None):  # noqa: A001 - PyTorch name
    """``input ** exponent`` elementwise (``torch.pow``)."""
    if not _is_t(input) and not _is_t(exponent):
        raise TypeError("pow: at least one argument must be a Tensor")
    return _out(_apply(pow_p, (input, exponent), _NOPARAMS), out)


def to_dtype(x: Tensor, dtype) -> Tensor:
    dtype = _dt.as_dtype(dtype)
    if x._dtype is dtype:
        return x
    if x._dtype.is_complex and not dtype.is_complex and dtype is not _dt.bool_:
        import warnings
        warnings.warn("Casting complex values to real discards the imaginary part",
                      UserWarning, stacklevel=3)
    return _apply(cast_p, (x,), {"dtype": dtype})


def _out(r, out):
    if out is None:
        return r
    from .inplace import copy_into_out
    return copy_into_out(out, r)


def _rsub(self, other):
    return _apply(sub_p, (other, self), _NOPARAMS)


def _rdiv(self, other):
    return _apply(div_p, (other, self), _NOPARAMS)


def _rpow(self, other):
    return _apply(pow_p, (other, self), _NOPARAMS)


Tensor.__add__ = lambda self, other: _apply(add_p, (self, other), _NOPARAMS)
Tensor.__radd__ = lambda self, other: _apply(add_p, (other, self), _NOPARAMS)
Tensor.__sub__ = lambda self, other: sub(self, other)
Tensor.__rsub__ = _rsub
Tensor.__mul__ = lambda self, other: _apply(mul_p, (self, other), _NOPARAMS)
Tensor.__rmul__ = lambda self, other: _apply(mul_p, (other, self), _NOPARAMS)
Tensor.__truediv__ = lambda self, other: _apply(div_p, (self, other), _NOPARAMS)
Tensor.__rtruediv__ = _rdiv
Tensor.__neg__ = lambda self: _apply(neg_p, (self,), _NOPARAMS)
Tensor.__pos__ = lambda self: self
Tensor.__pow__ = lambda self, other: _apply(pow_p, (self, other), _NOPARAMS)
Tensor.__rpow__ = _rpow
Tensor.__floordiv__ = lambda self, other: div(self, other, rounding_mode="floor")
Tensor.__rfloordiv__ = lambda self, other: div(other, self, rounding_mode="floor")
Tensor.add = add
Tensor.sub = Tensor.subtract = sub
Tensor.mul = Tensor.multiply = mul
Tensor.div = Tensor.divide = Tensor.true_divide = div
Tensor.neg = Tensor.negative = neg
Tensor.pow = pow
