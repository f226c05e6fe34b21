"""Statistics and scans over a dim: var/std (composites), norm (composite), and the
cumsum/cumprod primitives. Split from ``reduce.py`` by concept; public names re-exported there.
"""
from __future__ import annotations

import math

from .. import dtypes as _dt
from ..errors import DTypeError
from ..tensor import Tensor
from . import dispatch
from ._util import wrap_dim
from .complex import cj
from .inplace import inplace_from
from .reduce import _dims, _out, _sum_dtype, amax, amin, mean, sum
from . import batching_rules as _vb
from .registry import defop
from .select import where

_apply = dispatch.apply
_INF = float("inf")


# ------------------------------------------------------------------ var / std
def _correction(op, unbiased, correction):
    if unbiased is not None and correction is not None:
        raise TypeError(f"{op}(): pass either unbiased= (legacy) or correction=, not both")
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def _var(input, dim, unbiased, keepdim, correction, op):
    if isinstance(dim, bool):            # legacy var(x, unbiased)
        dim, unbiased = None, dim
    if input._dtype.category < _dt.FLOAT:
        raise DTypeError(f"{op}(): std and var only support floating point dtypes, got "
                         f"{input._dtype.name}")
    c = _correction(op, unbiased, correction)
    dims = _dims(dim, input.ndim, op)
    n = math.prod(input.shape[d] for d in dims)
    mu = mean(input, dims, keepdim=True)
    d = input - mu
    # NOTE: like PyTorch, n - correction <= 0 divides by zero (inf or nan), it does not raise.
    if d._dtype.is_complex:   # NOTE: PyTorch: the mean of |z - mu|^2, a real variance
        d = d.abs()
    v = sum(d * d, dims, keepdim) / max(0, n - c)
    return v, (mu if keepdim else mu.reshape(v.shape))


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None, out=None):
    """Variance over ``dim`` with Bessel's ``correction`` (default 1) (``torch.var``).

    Example:
        >>> ember.tensor([1., 2., 3., 4.]).var(correction=0)
        tensor(1.2500)
    """
    return _out(_var(input, dim, unbiased, keepdim, correction, "var")[0], out)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None, out=None):
    """Standard deviation: ``sqrt(var(...))`` (``torch.std``). Like PyTorch, its gradient
    is 0, not nan, where the spread is exactly 0 (a constant input)."""
    return _out(_safe_root(_var(input, dim, unbiased, keepdim, correction, "std")[0], 2), out)


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` in one pass over the data (``torch.var_mean``)."""
    return _var(input, dim, unbiased, keepdim, correction, "var_mean")


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` (``torch.std_mean``)."""
    v, m = _var(input, dim, unbiased, keepdim, correction, "std_mean")
    return _safe_root(v, 2), m


# ------------------------------------------------------------------ norm
def _safe_root(s, p):
    """``s ** (1/p)`` whose gradient is 0 (PyTorch's subgradient), not nan, where ``s == 0``."""
    zero = s == 0
    return where(zero, 0, where(zero, 1, s) ** (1.0 / p))


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector p-norm over ``dim`` (all if None): p in 'fro', 2, 1, inf, -inf, 0 or any float
    (``torch.norm``). The gradient at 0 is 0.

    Example:
        >>> ember.tensor([3., 4.]).norm()
        tensor(5.)
    """
    x = input.to(dtype) if dtype is not None else input
    if x._dtype.is_complex:   # NOTE: PyTorch: the norm of the moduli, a real tensor
        x = x.abs()
    if x._dtype.category != _dt.FLOAT:
        raise DTypeError(f"norm(): expected a floating point tensor as input, got "
                         f"{x._dtype.name}")
    if p is None or p == "fro":
        p = 2
    if p == "nuc":
        # NOTE: imported here: ember.linalg (the SVD) sits above the ops layer.
        from ..linalg import matrix_norm
        return matrix_norm(x, "nuc", tuple(range(x.ndim)) if dim is None else dim, keepdim)
    if isinstance(p, str):
        raise ValueError(f"norm(): p={p!r} is not supported; use 'fro', 'nuc' or a number")
    dims = _dims(dim, x.ndim, "norm")
    if p == 2:
        return _safe_root(sum(x * x, dims, keepdim), 2)
    if p == 0:
        return sum(x.to(_dt.bool_).to(x._dtype), dims, keepdim)
    a = x.abs()
    if p == 1:
        return sum(a, dims, keepdim)
    if p == _INF or p == -_INF:
        if x._data.size == 0:
            raise ValueError(f"norm(): cannot compute the {p} norm of an empty tensor of shape "
                             f"{tuple(x.shape)}")
        return (amax if p > 0 else amin)(a, dims, keepdim)
    return _safe_root(sum(a ** p, dims, keepdim), p)


# ------------------------------------------------------------------ cumsum / cumprod
#: float dtypes a scan accumulates in float64 (PyTorch's CPU accumulation type is double
#: for float32 and float for float16/bfloat16; float64 gives the same or better results).
_WIDEN = ("float32", "float16", "bfloat16")


def _scan_kernel(fn):
    def kernel(xp, x, dim=0, reverse=False, dtype=None):
        npdt = dtype.np if dtype is not None else None
        out_dt = x.dtype if npdt is None else xp.dtype(npdt)
        if out_dt.name in _WIDEN:
            # NOTE: a running float32 sum of [1e8, 1, -1e8, 1] is [1e8, 1e8, 0, 1]; each
            # prefix accumulated in float64 and rounded once is [1e8, 1e8, 1, 2] (PyTorch's).
            return kernel(xp, x.astype(xp.float64), dim, reverse, None).astype(out_dt)
        if x.ndim == 0:
            return getattr(xp, fn)(x.reshape(1), dtype=npdt).reshape(())
        if not reverse:
            return getattr(xp, fn)(x, axis=dim, dtype=npdt)
        r = getattr(xp, fn)(xp.flip(x, dim), axis=dim, dtype=npdt)
        return xp.ascontiguousarray(xp.flip(r, dim))
    return kernel


def _scan_shape(s, **_):
    return tuple(s)


cumsum_p = defop(
    "cumsum", nin=1, params={"dim": 0, "reverse": False, "dtype": None}, dtype=_sum_dtype,
    batch=_vb.one_dim,
    kernel=_scan_kernel("cumsum"), shape=_scan_shape, save=None, jvp="linear",
    # NOTE: `reverse` (as in jax.lax.cumsum) makes the VJP one exact scan, no flips.
    vjp=lambda g, out, x, dim, reverse, dtype: (
        _apply(cumsum_p, (g,), {"dim": dim, "reverse": not reverse, "dtype": None}),))


def _cumprod_vjp(g, out, x, dim, reverse, dtype):
    # NOTE: d out_j / d x_i = out_j / x_i (j >= i): exact while x has no zeros (documented
    # limitation: at zeros this divides 0 by 0, like the simple formula always does).
    rc = _apply(cumsum_p, (g * cj(out),), {"dim": dim, "reverse": not reverse, "dtype": None})
    return (rc / cj(x),)   # NOTE: cj: complex inputs get g * conj(d out / d x)


cumprod_p = defop(
    "cumprod", nin=1, params={"dim": 0, "reverse": False, "dtype": None}, dtype=_sum_dtype,
    batch=_vb.one_dim,
    kernel=_scan_kernel("cumprod"), shape=_scan_shape, save="both", vjp=_cumprod_vjp,
    jvp=lambda t, out, x, dim, reverse, dtype: out * _apply(
        cumsum_p, (t[0] / x,), {"dim": dim, "reverse": reverse, "dtype": None}))


def _scan(p, name, input, dim, dtype, out):
    d = wrap_dim(dim, input.ndim, name)
    dtype = _dt.as_dtype(dtype) if dtype is not None else None
    return _out(_apply(p, (input,), {"dim": d, "reverse": False, "dtype": dtype}), out)


def cumsum(input, dim, *, dtype=None, out=None):
    """Running sum along ``dim``; ints and bools give int64 (``torch.cumsum``).

    Example:
        >>> ember.tensor([1, 2, 3]).cumsum(0)
        tensor([1, 3, 6])
    """
    return _scan(cumsum_p, "cumsum", input, dim, dtype, out)


def cumprod(input, dim, *, dtype=None, out=None):
    """Running product along ``dim`` (``torch.cumprod``). Its gradient divides by ``input``,
    so it is exact only where the input has no zeros."""
    return _scan(cumprod_p, "cumprod", input, dim, dtype, out)


for _n in ("var", "std", "var_mean", "std_mean", "norm", "cumsum", "cumprod"):
    setattr(Tensor, _n, globals()[_n])
Tensor.cumsum_ = inplace_from(cumsum, "cumsum")
Tensor.cumprod_ = inplace_from(cumprod, "cumprod")
