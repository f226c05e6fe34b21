"""Selection primitives: ``where``, ``clamp``, ``nan_to_num``, and the ``lerp`` composite."""
from __future__ import annotations

from .. import dtypes as _dt
from ..errors import DTypeError
from ..tensor import Tensor
from . import dispatch
from .inplace import copy_into_out, inplace_from
from .complex import real_only
from .registry import defop

__all__ = ['where', 'clamp', 'clip', 'clamp_min', 'clamp_max', 'lerp', 'nan_to_num']

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


# ------------------------------------------------------------------ clamp
def _clamp_dtype(x, min=None, max=None):
    ct = _dt.result_type(x, *(v for v in (min, max) if v is not None))
    return ct, ct


def _clamp_mask(x, min, max):
    """Where the gradient passes: ``min <= x <= max`` (PyTorch's convention)."""
    lo = None if min is None else x >= min
    hi = None if max is None else x <= max
    return hi if lo is None else lo if hi is None else lo & hi


# NOTE: a primitive (not maximum/minimum) so that ties pass the whole gradient like
# PyTorch, and so that one fused pass does the common scalar-bounds case.
clamp_p = defop(
    "clamp", nin=1, elementwise=True, params={"min": None, "max": None}, dtype=_clamp_dtype,
    # NOTE: the ember_clamp_* helper (codegen prelude) keeps NaN like np.clip; fmin/fmax
    # would drop it. A missing bound renders as the dtype's -inf/+inf (or integer extreme).
    expr="clamp({0}, {min}, {max})", kernel=real_only(
        "clamp", lambda xp, x, min=None, max=None: xp.clip(x, min, max)), save="inputs",
    vjp=lambda g, out, x, min=None, max=None: (g * _clamp_mask(x, min, max),),
    jvp=lambda t, out, x, min=None, max=None: t[0] * _clamp_mask(x, min, max))


def clamp(input, min=None, max=None, *, out=None):  # noqa: A002 - PyTorch names
    """Clamp into ``[min, max]`` (``torch.clamp``); bounds are scalars or tensors.

    The gradient passes where ``min <= input <= max``; integer inputs with float
    bounds promote like PyTorch. If ``min > max`` every element becomes ``max``.

    Example:
        >>> ember.clamp(ember.tensor([-2., 0.5, 3.]), min=-1, max=1)   # [-1., 0.5, 1.]
    """
    if min is None and max is None:
        raise ValueError("clamp: at least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        r = input
        if min is not None:
            r = where(r < min, min, r)
        if max is not None:
            r = where(r > max, max, r)
    else:
        r = _apply(clamp_p, (input,), {"min": min, "max": max})
    return r if out is None else copy_into_out(out, r)


clip = clamp


def clamp_min(input, min):  # noqa: A002
    """``clamp(input, min=min)`` (``torch.clamp_min``)."""
    return clamp(input, min=min)


def clamp_max(input, max):  # noqa: A002
    """``clamp(input, max=max)`` (``torch.clamp_max``)."""
    return clamp(input, max=max)


# ------------------------------------------------------------------ lerp
def lerp(input, end, weight, *, out=None):
    """``input + weight * (end - input)`` (``torch.lerp``); weight is a scalar or tensor.

    Like PyTorch, weights >= 0.5 use ``end - (end - input) * (1 - weight)`` so that
    ``lerp(a, b, 1) == b`` exactly.

    Example:
        >>> ember.lerp(ember.tensor([0., 1.]), ember.tensor([10., 11.]), 0.5)   # [5., 6.]
    """
    if isinstance(end, Tensor) and end._dtype is not input._dtype:
        raise DTypeError(f"lerp: expected dtype {input._dtype.name} for `end` but got dtype "
                         f"{end._dtype.name}")
    diff = end - input
    if isinstance(weight, Tensor):
        r = where(weight < 0.5, input + weight * diff, end - diff * (1 - weight))
    elif weight < 0.5:
        r = input + weight * diff
    else:
        r = end - diff * (1 - weight)
    return r if out is None else copy_into_out(out, r)


# ------------------------------------------------------------------ nan_to_num
def _nan_to_num_kernel(xp, x, nan=0.0, posinf=None, neginf=None):
    if not _dt.as_dtype(x.dtype).is_floating_point:
        return x.copy()
    fi = _dt.finfo(_dt.as_dtype(x.dtype))
    # NOTE: written with where (not xp.nan_to_num, which ignores bfloat16's inf/nan).
    r = xp.where(xp.isnan(x), nan, x)
    r = xp.where(r == float("inf"), fi.max if posinf is None else posinf, r)
    return xp.where(r == float("-inf"), fi.min if neginf is None else neginf, r)


nan_to_num_p = defop(
    "nan_to_num", nin=1, elementwise=True, params={"nan": 0.0, "posinf": None, "neginf": None},
    dtype="same", kernel=_nan_to_num_kernel, save="inputs",
    expr="(isnan({0}) ? {nan} : isinf({0}) ? ({0} > 0 ? {posinf} : {neginf}) : {0})",
    vjp=lambda g, out, x, **p: (g * x.isfinite(),),
    jvp=lambda t, out, x, **p: t[0] * x.isfinite())


def nan_to_num(input, nan=0.0, posinf=None, neginf=None, *, out=None):
    """Replace NaN, +inf and -inf by finite values (``torch.nan_to_num``).

    Defaults: NaN -> 0, +inf -> the dtype's max, -inf -> its min. Gradient passes where
    the input is finite.

    Example:
        >>> ember.nan_to_num(ember.tensor([float("nan"), float("inf"), 1.]))
    """
    r = _apply(nan_to_num_p, (input,), {"nan": nan, "posinf": posinf, "neginf": neginf})
    return r if out is None else copy_into_out(out, r)


Tensor.where = lambda self, condition, other: where(condition, self, other)
for _name in ("clamp", "clip", "clamp_min", "clamp_max", "lerp", "nan_to_num"):
    setattr(Tensor, _name, globals()[_name])
    setattr(Tensor, _name + "_", inplace_from(globals()[_name], _name))
