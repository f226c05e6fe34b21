"""Elementwise unary primitives (exp, log, sin, relu, ...) and integer-rounding divisions.

A unary primitive is declared by :func:`unary` from its kernel, its C expression for
fusion and its derivative ``d(x, out)`` written in Ember ops; the VJP (``g * d``) and
the JVP (``t * d``) both follow from it.
"""
from __future__ import annotations

from ..tensor import Tensor
from . import dispatch
from .registry import defop

__all__ = ['exp', 'log']

_apply = dispatch.apply
_NOPARAMS: dict = {}


def unary(name, kernel, expr, deriv=None, *, save="inputs", dtype="float",
          differentiable=True):
    """Declare an elementwise unary primitive whose derivative is ``deriv(x, out)``."""
    if deriv is None:
        vjp = jvp = None
    else:
        vjp = lambda g, out, x: (g * deriv(x, out),)  # noqa: E731
        jvp = lambda t, out, x: t[0] * deriv(x, out)  # noqa: E731
    return defop(name, nin=1, elementwise=True, kernel=kernel, expr=expr, dtype=dtype,
                 save=save, vjp=vjp, jvp=jvp, differentiable=differentiable and deriv is not None)


exp_p = unary("exp", lambda xp, x: xp.exp(x), "exp({0})", lambda x, out: out, save="output")
log_p = unary("log", lambda xp, x: xp.log(x), "log({0})", lambda x, out: 1 / x)

floor_divide_p = defop(
    "floor_divide", nin=2, elementwise=True, expr="floor_div({0}, {1})",
    kernel=lambda xp, x, y: xp.floor_divide(x, y), differentiable=False)
trunc_divide_p = defop(
    "trunc_divide", nin=2, elementwise=True, expr="trunc_div({0}, {1})",
    kernel=lambda xp, x, y: _trunc_div(xp, x, y), differentiable=False)


def _trunc_div(xp, x, y):
    q = xp.true_divide(x, y)
    r = xp.trunc(q)
    dt = xp.result_type(x, y)
    return r.astype(dt) if dt.kind in "iub" else r


def _fn(op):
    def f(input, *, out=None):
        r = _apply(op, (input,), _NOPARAMS)
        if out is not None:
            from .inplace import copy_into_out
            return copy_into_out(out, r)
        return r
    f.__name__ = op.name
    f.__doc__ = f"Elementwise ``{op.name}`` (``torch.{op.name}``)."
    return f


exp = _fn(exp_p)
log = _fn(log_p)

for _name in ("exp", "log"):
    setattr(Tensor, _name, globals()[_name])
