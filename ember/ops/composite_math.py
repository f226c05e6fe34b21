"""Elementwise and linear-algebra composites PyTorch programs reach for.

``addcmul``/``addcdiv``/``addmv``/``addr``/``addbmm`` (optimizer and layer arithmetic),
``logaddexp(2)``, the inverse hyperbolics and their ``arc*`` aliases, ``deg2rad``/``rad2deg``,
``heaviside``, ``float_power``, ``trace``, ``nansum``/``nanmean`` and ``renorm``. Each is
written in Ember ops, so autograd, forward mode and tracing follow with no rules of their own.

Example:
    >>> ember.logaddexp(ember.tensor([0.0]), ember.tensor([0.0]))   # log(2)
    tensor([0.6931])
"""
from __future__ import annotations

import math

from .. import dtypes as _dt
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .binary import maximum
from .dispatch import autocast_entry
from .inplace import copy_into_out, inplace_from
from .linalg import _scaled_add, bmm, mv, outer
from .reduce import sum as _sum
from .select import where
from .unary import abs as _abs, exp, log, log1p, sqrt

__all__ = ["addcmul", "addcdiv", "addmv", "addr", "addbmm", "logaddexp", "logaddexp2",
           "acosh", "asinh", "atanh", "arccosh", "arcsinh", "arctanh", "deg2rad", "rad2deg",
           "heaviside", "float_power", "trace", "nansum", "nanmean", "renorm"]

_LN2 = math.log(2.0)
#: above this magnitude the inverse hyperbolics use their asymptote (x*x would overflow
#: float32 near 1.8e19; the asymptote is exact to float64 rounding here).
_BIG = 2.0 ** 28


def _out(r: Tensor, out):
    return r if out is None else copy_into_out(out, r)


def _to_float(x: Tensor) -> Tensor:
    """Integer/bool inputs compute in the default float dtype, like PyTorch's unary floats."""
    return x if x.dtype.is_floating_point else x.to(_dt.get_default_dtype())


# ------------------------------------------------------------------ fused multiply-adds
@autocast_entry("addcmul")
def addcmul(input, tensor1, tensor2, *, value=1, out=None):
    """``input + value * tensor1 * tensor2`` (``torch.addcmul``).

    Example:
        >>> ember.addcmul(ember.ones(2), ember.tensor([1., 2.]), ember.tensor([3., 4.]), value=0.5)
        tensor([2.5000, 5.0000])
    """
    prod = tensor1 * tensor2
    return _out(input + (prod if value == 1 else prod * value), out)


@autocast_entry("addcdiv")
def addcdiv(input, tensor1, tensor2, *, value=1, out=None):
    """``input + value * tensor1 / tensor2`` (``torch.addcdiv``); integer division is refused.

    Raises:
        DTypeError: both ``tensor1`` and ``tensor2`` are integer tensors.
    """
    if all(isinstance(t, Tensor) and not t.dtype.is_floating_point for t in (tensor1, tensor2)):
        raise DTypeError(f"addcdiv(): integer division with addcdiv is not supported "
                         f"(tensor1 {tensor1.dtype.name}, tensor2 {tensor2.dtype.name}); "
                         f"valid: a floating point tensor1 or tensor2")
    q = tensor1 / tensor2
    return _out(input + (q if value == 1 else q * value), out)


@autocast_entry("addmv")
def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * (mat @ vec)`` (``torch.addmv``); ``beta=0`` ignores input."""
    return _out(_scaled_add(input, mv(mat, vec), beta, alpha), out)


@autocast_entry("addr")
def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * outer(vec1, vec2)`` (``torch.addr``)."""
    return _out(_scaled_add(input, outer(vec1, vec2), beta, alpha), out)


@autocast_entry("addbmm")
def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * sum_b batch1[b] @ batch2[b]`` (``torch.addbmm``)."""
    return _out(_scaled_add(input, _sum(bmm(batch1, batch2), 0), beta, alpha), out)


# ------------------------------------------------------------------ log-space addition
def logaddexp(input, other, *, out=None):
    """``log(exp(input) + exp(other))`` without overflow (``torch.logaddexp``).

    Example:
        >>> ember.logaddexp(ember.tensor([1000.0]), ember.tensor([1000.0]))
        tensor([1000.6931])
    """
    m = maximum(input, other)
    d = input - other
    # NOTE: inf - inf (both inputs the same infinity) is NaN; the answer there is m itself.
    d = where(d.isnan() & ~m.isnan(), 0.0, d)
    return _out(m + log1p(exp(-_abs(d))), out)


def logaddexp2(input, other, *, out=None):
    """``log2(2**input + 2**other)`` without overflow (``torch.logaddexp2``)."""
    return _out(logaddexp(input * _LN2, other * _LN2) / _LN2, out)


# ------------------------------------------------------------------ inverse hyperbolics
def asinh(input, *, out=None):
    """Inverse hyperbolic sine, accurate near 0 and for large ``|x|`` (``torch.asinh``)."""
    x = _to_float(input)
    # NOTE: s is +-1 as a constant (1 at 0), so a = |x| has derivative s, 1 at 0 (abs's is 0)
    s = where(x < 0, -1.0, 1.0).to(x.dtype)
    a = x * s
    small = log1p(a + a * a / (1 + sqrt(a * a + 1)))
    big = log(where(a > _BIG, a, 1.0)) + _LN2
    return _out(s * where(a > _BIG, big, small), out)


def acosh(input, *, out=None):
    """Inverse hyperbolic cosine (NaN below 1) (``torch.acosh``)."""
    x = _to_float(input)
    xm1 = x - 1
    small = log1p(xm1 + sqrt(xm1 * (x + 1)))
    big = log(where(x > _BIG, x, 1.0)) + _LN2
    return _out(where(x > _BIG, big, small), out)


def atanh(input, *, out=None):
    """Inverse hyperbolic tangent (``torch.atanh``): ``0.5 * log1p(2x / (1 - x))``."""
    x = _to_float(input)
    return _out(0.5 * log1p(2 * x / (1 - x)), out)


arcsinh, arccosh, arctanh = asinh, acosh, atanh


# ------------------------------------------------------------------ simple elementwise
def deg2rad(input, *, out=None):
    """Degrees to radians (``torch.deg2rad``)."""
    return _out(_to_float(input) * (math.pi / 180.0), out)


def rad2deg(input, *, out=None):
    """Radians to degrees (``torch.rad2deg``)."""
    return _out(_to_float(input) * (180.0 / math.pi), out)


def heaviside(input, values, *, out=None):
    """Step function: 0 below zero, 1 above, ``values`` at zero (``torch.heaviside``).

    Raises:
        DTypeError: ``input`` and ``values`` have different dtypes (as PyTorch).
    """
    if isinstance(values, Tensor) and values.dtype is not input.dtype:
        raise DTypeError(f"heaviside(): input ({input.dtype.name}) and values "
                         f"({values.dtype.name}) must have the same dtype")
    step = (input > 0).to(input.dtype)
    return _out(where(input == 0, values, step), out)


def float_power(input, exponent, *, out=None):
    """``input ** exponent`` computed in float64 (``torch.float_power``)."""
    a = input.to(_dt.float64) if isinstance(input, Tensor) else float(input)
    b = exponent.to(_dt.float64) if isinstance(exponent, Tensor) else float(exponent)
    if not isinstance(a, Tensor):
        from .factories import tensor
        a = tensor(a, dtype=_dt.float64)
    return _out(a ** b, out)


# ------------------------------------------------------------------ reductions
@autocast_entry("trace")
def trace(input):
    """Sum of the main diagonal of a 2-D tensor (``torch.trace``)."""
    if input.ndim != 2:
        raise ShapeError(f"trace(): expected a 2-D tensor, got shape {tuple(input.shape)}")
    return _sum(input.diagonal())


def nansum(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """Sum treating NaN as zero (``torch.nansum``); NaN elements get zero gradient."""
    x = where(input.isnan(), 0, input) if input.dtype.is_floating_point else input
    return _out(_sum(x, dim, keepdim, dtype=dtype), out)


def nanmean(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """Mean of the non-NaN elements (``torch.nanmean``); all-NaN slices give NaN."""
    if not input.dtype.is_floating_point:
        raise DTypeError(f"nanmean(): expected a floating point input, got {input.dtype.name}")
    keep = ~input.isnan()
    n = _sum(keep, dim, keepdim).to(dtype or input.dtype)
    return _out(nansum(input, dim, keepdim, dtype=dtype) / n, out)


def renorm(input, p, dim, maxnorm):
    """Rescale each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` (``torch.renorm``).

    Example:
        >>> ember.renorm(ember.tensor([[3., 4.], [0.3, 0.4]]), 2, 0, 1.0)
        tensor([[0.6000, 0.8000],
                [0.3000, 0.4000]])
    """
    if not input.dtype.is_floating_point:
        raise DTypeError(f"renorm(): expected a floating point input, got {input.dtype.name}")
    if p <= 0 or maxnorm < 0:
        raise ValueError(f"renorm(): expected p > 0 and maxnorm >= 0, got p={p}, "
                         f"maxnorm={maxnorm}")
    if input.ndim <= 1:
        raise ShapeError(f"renorm(): input needs at least 2 dimensions, got shape "
                         f"{tuple(input.shape)}")
    d = dim % input.ndim
    others = tuple(i for i in range(input.ndim) if i != d)
    norms = input.norm(p, others, keepdim=True)
    # NOTE: PyTorch's factor, including its 1e-7 guard
    factor = where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0)
    return input * factor


# ------------------------------------------------------------------ Tensor methods
_METHODS = ("addcmul", "addcdiv", "addmv", "addr", "addbmm", "logaddexp", "logaddexp2",
            "acosh", "asinh", "atanh", "arccosh", "arcsinh", "arctanh", "deg2rad", "rad2deg",
            "heaviside", "float_power", "trace", "nansum", "nanmean", "renorm")
_INPLACE = ("addcmul", "addcdiv", "addmv", "addr", "addbmm", "acosh", "asinh", "atanh",
            "arccosh", "arcsinh", "arctanh", "deg2rad", "rad2deg", "heaviside", "renorm")

for _name in _METHODS:
    setattr(Tensor, _name, globals()[_name])
for _name in _INPLACE:
    setattr(Tensor, _name + "_", inplace_from(globals()[_name], _name))
