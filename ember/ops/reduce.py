"""Reduction primitives: sum (and, built on it, sum_to for broadcasting gradients)."""
from __future__ import annotations

from .. import dtypes as _dt
from ..tensor import Tensor
from . import dispatch
from ._util import wrap_dims
from .registry import defop

__all__ = ['sum']

_apply = dispatch.apply


def _sum_dtype(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        return dtype, dtype
    d = x._dtype
    return None, (_dt.int64 if d.category != _dt.FLOAT else d)


def _sum_kernel(xp, x, dim=None, keepdim=False, dtype=None):
    return xp.sum(x, axis=dim, keepdims=keepdim, dtype=dtype.np if dtype is not None else None)


def _sum_shape(s, dim=None, keepdim=False, dtype=None):
    dims = range(len(s)) if dim is None else dim
    if keepdim:
        return tuple(1 if i in dims else n for i, n in enumerate(s))
    return tuple(n for i, n in enumerate(s) if i not in dims)


def _sum_vjp(g, out, x, dim=None, keepdim=False, dtype=None):
    if not keepdim and dim != ():
        dims = range(x.ndim) if dim is None else dim
        shape = tuple(1 if i in dims else n for i, n in enumerate(x.shape))
        g = g.reshape(shape)
    return (g.expand(x.shape),)


sum_p = defop(
    "sum", nin=1, params={"dim": None, "keepdim": False, "dtype": None}, dtype=_sum_dtype,
    kernel=_sum_kernel, shape=_sum_shape, save=None, vjp=_sum_vjp, jvp="linear")


def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001 - PyTorch name
    """Sum over ``dim`` (all dims if None) (``torch.sum``)."""
    dims = None if dim is None else wrap_dims(dim, input.ndim, "sum")
    if dims is not None and len(dims) == input.ndim and not keepdim:
        dims = None
    if dtype is not None:
        dtype = _dt.as_dtype(dtype)
    return _apply(sum_p, (input,), {"dim": dims, "keepdim": bool(keepdim), "dtype": dtype})


def sum_to(x: Tensor, shape: tuple) -> Tensor:
    """Sum ``x`` down to ``shape`` (the inverse of broadcasting ``shape`` to ``x.shape``)."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    lead = x.ndim - len(shape)
    if lead < 0:
        raise ValueError(f"sum_to: cannot reduce shape {tuple(x.shape)} to {shape}")
    dims = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
    r = _apply(sum_p, (x,), {"dim": dims, "keepdim": True, "dtype": None}) if dims else x
    return r.reshape(shape) if tuple(r.shape) != shape else r


Tensor.sum = sum
Tensor.sum_to_size = lambda self, *size: sum_to(self, size[0] if len(size) == 1 and
                                                 isinstance(size[0], (tuple, list)) else size)
