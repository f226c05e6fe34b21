"""Elementwise binary primitives: maximum/minimum, atan2, fmod/remainder, hypot, copysign,
comparisons, logical and bitwise ops, and the Python operators that reach them.

A differentiable binary primitive is declared by :func:`binary` from its kernel, its C
expression and its two partial derivatives ``dx(x, y, out)``/``dy(x, y, out)`` written in
Ember ops (``ONE`` and ``ZERO`` for the trivial ones); VJP and JVP follow from them.
Eager ops broadcast natively; the autograd engine reduces gradients to input shapes.
"""
from __future__ import annotations

import numbers

from ..tensor import Tensor
from . import dispatch
from .inplace import copy_into_out, inplace_from
from .complex import real_only
from .registry import defop
from .unary import (ZERO, _int_zero_check, _zeros, floor_divide_p,
                    sign, trunc, floor)

__all__ = ['maximum', 'minimum', 'fmax', 'fmin', 'atan2', 'arctan2', 'fmod', 'remainder',
           'floor_divide', 'hypot', 'copysign', 'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'greater',
           'greater_equal', 'less', 'less_equal', 'not_equal', 'equal', 'logical_and',
           'logical_or', 'logical_xor', 'bitwise_and', 'bitwise_or', 'bitwise_xor',
           'bitwise_left_shift', 'bitwise_right_shift']

_apply = dispatch.apply
_NOPARAMS: dict = {}
ONE = "one"     # derivative marker: the partial derivative is 1


def _times(g, d):
    if d is ONE:
        return g
    if d is ZERO:
        return _zeros(g)
    return g * d


def binary(name, kernel, expr, dx=None, dy=None, *, save="inputs", dtype="promote"):
    """Declare an elementwise binary primitive with partials ``dx``/``dy`` (x, y, out)."""
    vjp = jvp = None
    if dx is not None or dy is not None:
        def d(fn, x, y, out):
            return fn if fn is ONE or fn is ZERO else fn(x, y, out)
        vjp = (lambda g, out, x, y: _times(g, d(dx, x, y, out)),
               lambda g, out, x, y: _times(g, d(dy, x, y, out)))

        def jvp(t, out, x, y):
            terms = [_times(ti, d(fn, x, y, out)) for ti, fn in ((t[0], dx), (t[1], dy))
                     if ti is not None and fn is not ZERO]
            if not terms:
                return _zeros(out)
            return terms[0] if len(terms) == 1 else terms[0] + terms[1]
    return defop(name, nin=2, elementwise=True, kernel=kernel, expr=expr, dtype=dtype,
                 save=save, vjp=vjp, jvp=jvp)


def _tie_weight(x, y, lose):
    """PyTorch's maximum/minimum gradient share: 1/2 on ties, 0 where ``lose``, else 1."""
    from .select import where
    from ..dtypes import result_type
    # NOTE: in the operands' dtype: a default-dtype (float32) weight would round a 0-d
    # float64 tangent times it to float32 (a 0-d tensor is weak against a dimensioned one).
    return where(x == y, 0.5, where(lose, 0.0, 1.0)).to(result_type(x, y))


def _checked(name, fn):
    """Kernel that rejects integer division by zero before running ``fn``."""
    def kernel(xp, x, y):
        _int_zero_check(xp, x, y, name)
        return fn(xp, x, y)
    return kernel


# ------------------------------------------------------------------ differentiable
maximum_p = binary("maximum", real_only("maximum", lambda xp, x, y: xp.maximum(x, y)),
                   "({0} > {1} || {0} != {0} ? {0} : {1})",
                   lambda x, y, out: _tie_weight(x, y, x < y),
                   lambda x, y, out: _tie_weight(x, y, x > y))
minimum_p = binary("minimum", real_only("minimum", lambda xp, x, y: xp.minimum(x, y)),
                   "({0} < {1} || {0} != {0} ? {0} : {1})",
                   lambda x, y, out: _tie_weight(x, y, x > y),
                   lambda x, y, out: _tie_weight(x, y, x < y))
atan2_p = binary("atan2", lambda xp, x, y: xp.arctan2(x, y), "atan2({0}, {1})",
                 lambda x, y, out: y / (x * x + y * y),
                 lambda x, y, out: -x / (x * x + y * y), dtype="float")
hypot_p = binary("hypot", lambda xp, x, y: xp.hypot(x, y), "hypot({0}, {1})",
                 lambda x, y, out: x / out, lambda x, y, out: y / out, save="both",
                 dtype="float")
copysign_p = binary("copysign", lambda xp, x, y: xp.copysign(x, y), "copysign({0}, {1})",
                    lambda x, y, out: sign(x) * sign(out), ZERO, save="both", dtype="float")
# NOTE: fmod keeps the dividend's sign (C fmod); remainder the divisor's (Python %).
fmod_p = binary("fmod", _checked("fmod", lambda xp, x, y: xp.fmod(x, y)),
                "fmod({0}, {1})", ONE, lambda x, y, out: -trunc(x / y))
remainder_p = binary("remainder", _checked("remainder", lambda xp, x, y: xp.remainder(x, y)),
                     "pymod({0}, {1})", ONE, lambda x, y, out: -floor(x / y))


# ------------------------------------------------------------------ non-differentiable
def _nondiff(name, kernel, expr, dtype):
    return defop(name, nin=2, elementwise=True, kernel=kernel, expr=expr, dtype=dtype)


eq_p = _nondiff("eq", lambda xp, x, y: xp.equal(x, y), "({0} == {1})", "compare")
ne_p = _nondiff("ne", lambda xp, x, y: xp.not_equal(x, y), "({0} != {1})", "compare")
lt_p = _nondiff("lt", real_only("lt", lambda xp, x, y: xp.less(x, y)), "({0} < {1})", "compare")
le_p = _nondiff("le", real_only("le", lambda xp, x, y: xp.less_equal(x, y)), "({0} <= {1})",
                "compare")
gt_p = _nondiff("gt", real_only("gt", lambda xp, x, y: xp.greater(x, y)), "({0} > {1})", "compare")
ge_p = _nondiff("ge", real_only("ge", lambda xp, x, y: xp.greater_equal(x, y)),
                "({0} >= {1})", "compare")
logical_and_p = _nondiff("logical_and", lambda xp, x, y: xp.logical_and(x, y),
                         "({0} && {1})", "bool")
logical_or_p = _nondiff("logical_or", lambda xp, x, y: xp.logical_or(x, y),
                        "({0} || {1})", "bool")
logical_xor_p = _nondiff("logical_xor", lambda xp, x, y: xp.logical_xor(x, y),
                         "(!{0} != !{1})", "bool")
bitwise_and_p = _nondiff("bitwise_and", lambda xp, x, y: xp.bitwise_and(x, y),
                         "({0} & {1})", "integral")
bitwise_or_p = _nondiff("bitwise_or", lambda xp, x, y: xp.bitwise_or(x, y),
                        "({0} | {1})", "integral")
bitwise_xor_p = _nondiff("bitwise_xor", lambda xp, x, y: xp.bitwise_xor(x, y),
                         "({0} ^ {1})", "integral")
bitwise_left_shift_p = _nondiff("bitwise_left_shift", lambda xp, x, y: xp.left_shift(x, y),
                                "({0} << {1})", "integral")
bitwise_right_shift_p = _nondiff("bitwise_right_shift",
                                 lambda xp, x, y: xp.right_shift(x, y), "({0} >> {1})",
                                 "integral")


# ------------------------------------------------------------------ public functions
def _fn(op, name=None, doc=""):
    def f(input, other, *, out=None):
        r = _apply(op, (input, other), _NOPARAMS)
        return r if out is None else copy_into_out(out, r)
    f.__name__ = f.__qualname__ = name or op.name
    f.__doc__ = (doc or f"Elementwise ``{op.name}`` with broadcasting (``torch.{f.__name__}``)."
                 ) + f"\n\nExample:\n    >>> ember.{f.__name__}(x, y)\n"
    return f


maximum = _fn(maximum_p, doc="Elementwise max; NaN propagates, ties split the gradient.")
minimum = _fn(minimum_p, doc="Elementwise min; NaN propagates, ties split the gradient.")
atan2 = _fn(atan2_p, doc="``atan(input / other)`` in the right quadrant.")
arctan2 = _fn(atan2_p, "arctan2")
hypot = _fn(hypot_p, doc="``sqrt(input**2 + other**2)`` without overflow.")
copysign = _fn(copysign_p, doc="``|input|`` with the sign of ``other``.")
fmod = _fn(fmod_p, doc="C-style remainder: the result has the sign of the dividend.")
remainder = _fn(remainder_p, doc="Python-style ``input % other``: the sign of the divisor.")
floor_divide = _fn(floor_divide_p, doc="``floor(input / other)`` (``//``); ints stay ints.")
eq, ne, lt, le, gt, ge = (_fn(eq_p), _fn(ne_p), _fn(lt_p), _fn(le_p), _fn(gt_p), _fn(ge_p))
greater, greater_equal = _fn(gt_p, "greater"), _fn(ge_p, "greater_equal")
less, less_equal, not_equal = _fn(lt_p, "less"), _fn(le_p, "less_equal"), _fn(ne_p, "not_equal")
logical_and, logical_or = _fn(logical_and_p), _fn(logical_or_p)
logical_xor = _fn(logical_xor_p)
bitwise_and, bitwise_or = _fn(bitwise_and_p), _fn(bitwise_or_p)
bitwise_xor = _fn(bitwise_xor_p)
bitwise_left_shift = _fn(bitwise_left_shift_p)
bitwise_right_shift = _fn(bitwise_right_shift_p)


def fmax(input, other, *, out=None):
    """Elementwise max that ignores NaN (``torch.fmax``).

    Example:
        >>> ember.fmax(ember.tensor([1., float("nan")]), ember.tensor([2., 0.]))  # [2., 0.]
    """
    r = maximum(_fill_nan(input, other), _fill_nan(other, input))
    return r if out is None else copy_into_out(out, r)


def fmin(input, other, *, out=None):
    """Elementwise min that ignores NaN (``torch.fmin``)."""
    r = minimum(_fill_nan(input, other), _fill_nan(other, input))
    return r if out is None else copy_into_out(out, r)


def _fill_nan(a, b):
    from .select import where
    from .unary import isnan
    return where(isnan(a), b, a) if isinstance(a, Tensor) and a.dtype.is_floating_point else a


def equal(input, other) -> bool:
    """True if both tensors have the same shape and elements (``torch.equal``).

    Example:
        >>> ember.equal(ember.tensor([1, 2]), ember.tensor([1, 2]))   # True
    """
    if tuple(input.shape) != tuple(other.shape):
        return False
    # NOTE: through Tensor.__bool__, so ember.compile sees a value read into Python (a graph
    # break) instead of baking this call's answer into the graph
    return bool(eq(input, other).all())


# ------------------------------------------------------------------ Tensor methods/operators
_FAST = frozenset((Tensor, int, float, bool))


def _operator(op, reflected=False):
    def method(self, other):
        if other.__class__ not in _FAST and not isinstance(other, (Tensor, numbers.Number)):
            return NotImplemented       # e.g. x == None: Python falls back to identity
        return _apply(op, (other, self) if reflected else (self, other), _NOPARAMS)
    method.__name__ = f"__{'r' if reflected else ''}{op.name}__"
    return method


for _op, _dunder in ((eq_p, "eq"), (ne_p, "ne"), (lt_p, "lt"), (le_p, "le"), (gt_p, "gt"),
                     (ge_p, "ge")):
    setattr(Tensor, f"__{_dunder}__", _operator(_op))
for _op, _dunder in ((bitwise_and_p, "and"), (bitwise_or_p, "or"), (bitwise_xor_p, "xor"),
                     (remainder_p, "mod"), (bitwise_left_shift_p, "lshift"),
                     (bitwise_right_shift_p, "rshift")):
    setattr(Tensor, f"__{_dunder}__", _operator(_op))
    setattr(Tensor, f"__r{_dunder}__", _operator(_op, reflected=True))

_METHODS = ('maximum', 'minimum', 'fmax', 'fmin', 'atan2', 'arctan2', 'fmod', 'remainder',
            'floor_divide', 'hypot', 'copysign', 'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'greater',
            'greater_equal', 'less', 'less_equal', 'not_equal', 'equal', 'logical_and',
            'logical_or', 'logical_xor', 'bitwise_and', 'bitwise_or', 'bitwise_xor',
            'bitwise_left_shift', 'bitwise_right_shift')
_INPLACE = ('atan2', 'arctan2', 'fmod', 'remainder', 'floor_divide', 'hypot', 'copysign', 'eq',
            'ne', 'lt', 'le', 'gt', 'ge', 'greater', 'greater_equal', 'less', 'less_equal',
            'not_equal', 'logical_and', 'logical_or', 'logical_xor', 'bitwise_and',
            'bitwise_or', 'bitwise_xor', 'bitwise_left_shift', 'bitwise_right_shift')
for _name in _METHODS:
    setattr(Tensor, _name, globals()[_name])
for _name in _INPLACE:
    setattr(Tensor, _name + "_", inplace_from(globals()[_name], _name))
for _dunder, _name in (("and", "bitwise_and"), ("or", "bitwise_or"), ("xor", "bitwise_xor"),
                       ("mod", "remainder"), ("lshift", "bitwise_left_shift"),
                       ("rshift", "bitwise_right_shift"), ("floordiv", "floor_divide")):
    setattr(Tensor, f"__i{_dunder}__", getattr(Tensor, _name + "_"))
# NOTE: __eq__ is set after class creation, so Tensor.__hash__ (identity) is kept.
