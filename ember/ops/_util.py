"""Small helpers shared by op modules: dims, shapes, method binding."""
from __future__ import annotations

from ..errors import ShapeError
from ..tensor import Tensor, _wrap_dim


def wrap_dim(dim: int, ndim: int, op: str) -> int:
    return _wrap_dim(dim, ndim, op)


def wrap_dims(dim, ndim: int, op: str) -> tuple:
    """Normalise ``dim`` (None, int or sequence) to a sorted tuple of non-negative dims."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int) or hasattr(dim, "__index__") and not isinstance(dim, (tuple, list)):
        return (_wrap_dim(int(dim), ndim, op),)
    out = tuple(sorted(_wrap_dim(int(d), ndim, op) for d in dim))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: dim {tuple(dim)} appears multiple times in the list of dims")
    return out


def as_shape(args, op: str) -> tuple:
    """Accept ``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` shape spellings."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)) or (
            len(args) == 1 and hasattr(args[0], "__iter__") and not isinstance(args[0], Tensor)):
        args = tuple(args[0])
    try:
        shape = tuple(int(s) for s in args)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: shape must be a sequence of ints, got {args!r}") from None
    return shape


def method(name: str | None = None):
    """Decorator: also expose ``fn`` as ``Tensor.<name>``."""
    def deco(fn):
        setattr(Tensor, name or fn.__name__, fn)
        return fn
    return deco


def bind(**methods) -> None:
    for k, v in methods.items():
        setattr(Tensor, k, v)
