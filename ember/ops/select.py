"""Selection primitives: ``where`` and friends."""
from __future__ import annotations

from .. import dtypes as _dt
from ..errors import DTypeError
from ..tensor import Tensor
from . import dispatch
from .registry import defop

__all__ = ['where']

_apply = dispatch.apply


def _where_dtype(cond, x, y):
    return None, _dt.result_type(x, y)  # where() casts the values itself


def _where_kernel(xp, cond, x, y):
    return xp.where(cond, x, y)


where_p = defop(
    "where", nin=3, elementwise=True, dtype=_where_dtype, expr="({0} ? {1} : {2})",
    kernel=_where_kernel, save="inputs",
    vjp=(None, lambda g, out, c, x, y: where(c, g, 0), lambda g, out, c, x, y: where(c, 0, g)),
    jvp=lambda t, out, c, x, y: where(c, t[1] if t[1] is not None else 0,
                                      t[2] if t[2] is not None else 0),
    nondiff_argnums=(0,))


def where(condition, input=None, other=None):
    """``input`` where ``condition`` else ``other`` (``torch.where``); one argument: nonzero."""
    if input is None and other is None:
        from .index import nonzero
        return nonzero(condition, as_tuple=True)
    if not isinstance(condition, Tensor) or condition._dtype is not _dt.bool_:
        got = condition._dtype if isinstance(condition, Tensor) else type(condition).__name__
        raise DTypeError(f"where: expected condition to be a bool tensor, got {got}")
    # NOTE: the dispatcher would cast the bool condition to the values' dtype; keep it bool.
    ct = _dt.result_type(input, other)
    return _apply(where_p, (condition, _cast(input, ct), _cast(other, ct)), {})


def _cast(x, dt):
    return x.to(dt) if isinstance(x, Tensor) and x._dtype is not dt else x


Tensor.where = lambda self, condition, other: where(condition, self, other)
