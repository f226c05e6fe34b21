"""Value-dependent composites: ``cummax``/``cummin``, ``mode``, ``unique``,
``unique_consecutive``, ``bincount``, ``histc`` and ``scatter_reduce``.

Which element wins (a running max, the most frequent value) or how long the output is
(``unique``, ``bincount``) depends on the values, so those parts are computed on the host
from ``Tensor.numpy()`` (a graph break under ``ember.compile``, like ``nonzero``). The
differentiable results are then *gathered* from the input in Ember ops, so gradients
flow to the winning elements exactly as in PyTorch.

Example:
    >>> ember.cummax(ember.tensor([1., 3., 2.]), 0).indices
    tensor([0, 1, 1])
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .batching import per_example
from ._util import wrap_dim
from .factories import tensor as _tensor, zeros_like
from .inplace import inplace_from
from .scatter import gather, scatter, scatter_add
from .select import where

__all__ = ["cummax", "cummin", "mode", "unique", "unique_consecutive", "bincount", "histc",
           "scatter_reduce"]

cummax_result = namedtuple("cummax", ["values", "indices"])
cummin_result = namedtuple("cummin", ["values", "indices"])
mode_result = namedtuple("mode", ["values", "indices"])


def _host(x: Tensor) -> np.ndarray:
    return np.asarray(x.detach().cpu().numpy())   # NOTE: a host copy of a device tensor


def _index(arr: np.ndarray, like: Tensor) -> Tensor:
    return _tensor(np.ascontiguousarray(arr, dtype=np.int64), device=like.device)


# ------------------------------------------------------------------ running extrema
def _cum_extreme(input, dim, better, op, result):
    if input.ndim == 0:
        return result(input.clone(), _index(np.zeros((), np.int64), input))
    d = wrap_dim(dim, input.ndim, op)
    a = _host(input)
    run = better.accumulate(a, axis=d)
    # NOTE: PyTorch picks the latest of tied elements, and NaN wins (and stays) once seen
    hit = (a == run) | np.isnan(a) if a.dtype.kind == "f" else a == run
    shape = [1] * a.ndim
    shape[d] = a.shape[d]
    pos = np.where(hit, np.arange(a.shape[d]).reshape(shape), 0)
    idx = _index(np.maximum.accumulate(pos, axis=d) if a.size else pos, input)
    return result(gather(input, d, idx), idx)


@per_example
def cummax(input, dim):
    """Running maximum along ``dim`` and where it was reached (``torch.cummax``)."""
    return _cum_extreme(input, dim, np.maximum, "cummax", cummax_result)


@per_example
def cummin(input, dim):
    """Running minimum along ``dim`` and where it was reached (``torch.cummin``)."""
    return _cum_extreme(input, dim, np.minimum, "cummin", cummin_result)


# ------------------------------------------------------------------ mode
@per_example
def mode(input, dim=-1, keepdim=False):
    """Most frequent value along ``dim`` (the smallest among ties) and the index of its last
    occurrence (``torch.mode``).

    Example:
        >>> ember.mode(ember.tensor([5., 2., 5., 2., 2.])).values
        tensor(2.)
    """
    if input.ndim == 0:
        return mode_result(input.clone(), _index(np.zeros((), np.int64), input))
    d = wrap_dim(dim, input.ndim, "mode")
    if input.shape[d] == 0:
        raise ShapeError(f"mode(): expected a non-empty dimension {d}, got shape "
                         f"{tuple(input.shape)}")
    a = np.moveaxis(_host(input), d, -1)
    rows = a.reshape(-1, a.shape[-1])
    idx = np.empty(rows.shape[0], np.int64)
    for r, row in enumerate(rows):
        vals, inv, counts = np.unique(row, return_inverse=True, return_counts=True)
        best = int(np.argmax(counts))   # NOTE: np.unique sorts, so ties pick the smallest
        idx[r] = np.flatnonzero(inv.reshape(-1) == best)[-1]
    idx_t = _index(idx.reshape(a.shape[:-1] + (1,)), input).movedim(-1, d)
    values = gather(input, d, idx_t)
    if not keepdim:
        values, idx_t = values.squeeze(d), idx_t.squeeze(d)
    return mode_result(values, idx_t)


# ------------------------------------------------------------------ unique
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values (or slices along ``dim``), sorted (``torch.unique``).

    Returns the values, plus the inverse indices and/or counts when asked for.

    Example:
        >>> ember.unique(ember.tensor([3, 1, 3]), return_counts=True)
        (tensor([1, 3]), tensor([1, 2]))
    """
    a = _host(input)
    if dim is None:
        vals, inv, counts = np.unique(a.reshape(-1), return_inverse=True, return_counts=True)
        inv = inv.reshape(a.shape)
    else:
        d = wrap_dim(dim, input.ndim, "unique")
        vals, inv, counts = np.unique(a, return_inverse=True, return_counts=True, axis=d)
        inv = inv.reshape(-1)
    return _unique_out(input, vals, inv, counts, return_inverse, return_counts)


def _unique_out(input, vals, inv, counts, return_inverse, return_counts):
    out = (_tensor(np.ascontiguousarray(vals), dtype=input.dtype, device=input.device),)
    if return_inverse:
        out += (_index(inv, input),)
    if return_counts:
        out += (_index(counts, input),)
    return out[0] if len(out) == 1 else out


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """Collapse runs of equal consecutive values (or slices along ``dim``)
    (``torch.unique_consecutive``)."""
    a = _host(input)
    d = 0 if dim is None else wrap_dim(dim, input.ndim, "unique_consecutive")
    flat = a.reshape(-1) if dim is None else np.moveaxis(a, d, 0).reshape(a.shape[d], -1)
    if flat.shape[0] == 0:
        starts = np.zeros(0, np.int64)
    else:
        diff = flat[1:] != flat[:-1]
        new = diff if diff.ndim == 1 else diff.any(axis=1)
        starts = np.concatenate([[0], np.flatnonzero(new) + 1])
    vals = flat[starts]
    if dim is not None:
        vals = np.moveaxis(vals.reshape((len(starts),) + tuple(np.delete(a.shape, d))), 0, d)
    inv = np.cumsum(np.isin(np.arange(flat.shape[0]), starts)) - 1
    counts = np.diff(np.append(starts, flat.shape[0]))
    inv = inv.reshape(a.shape) if dim is None else inv
    return _unique_out(input, vals, inv, counts, return_inverse, return_counts)


# ------------------------------------------------------------------ histograms
def bincount(input, weights=None, minlength=0):
    """Count (or sum ``weights`` of) each non-negative integer of a 1-D tensor
    (``torch.bincount``).

    Raises:
        ShapeError: ``input`` is not 1-D, or ``weights`` has another shape.
        ValueError: ``input`` has negative values or ``minlength`` is negative.
    """
    if input.ndim != 1 or input.dtype.is_floating_point or input.dtype is _dt.bool_:
        raise ShapeError(f"bincount(): expected a 1-D tensor of non-negative integers, got "
                         f"shape {tuple(input.shape)} of {input.dtype.name}")
    if minlength < 0:
        raise ValueError(f"bincount(): minlength should be >= 0, got {minlength}")
    a = _host(input)
    if a.size and a.min() < 0:
        raise ValueError(f"bincount(): input should contain only non-negative ints, got min "
                         f"{a.min()}")
    if weights is None:
        return _index(np.bincount(a, minlength=minlength), input)
    if tuple(weights.shape) != tuple(input.shape):
        raise ShapeError(f"bincount(): weights should be 1-D with the input's length "
                         f"{input.shape[0]}, got shape {tuple(weights.shape)}")
    wd = weights.dtype if weights.dtype.is_floating_point else _dt.float64
    r = np.bincount(a, weights=_host(weights).astype(np.float64), minlength=minlength)
    return _tensor(r, dtype=wd, device=input.device)


def histc(input, bins=100, min=0, max=0):  # noqa: A002 - PyTorch names
    """Histogram of ``bins`` equal bins over ``[min, max]`` (the data's range when both are 0);
    values outside are ignored (``torch.histc``)."""
    if not input.dtype.is_floating_point:
        raise DTypeError(f"histc(): expected a floating point input, got {input.dtype.name}")
    if bins <= 0:
        raise ValueError(f"histc(): bins must be > 0, got {bins}")
    a = _host(input).astype(np.float64).reshape(-1)
    lo, hi = float(min), float(max)
    if lo > hi:
        raise ValueError(f"histc(): max must be larger than min, got min={min}, max={max}")
    if lo == hi and a.size:
        lo, hi = float(a.min()), float(a.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ValueError(f"histc(): range of [{lo}, {hi}] is not finite")
    counts, _ = np.histogram(a, bins=bins, range=(lo, hi))
    return _tensor(counts, dtype=input.dtype, device=input.device)


# ------------------------------------------------------------------ scatter_reduce
_REDUCES = ("sum", "prod", "mean", "amax", "amin")


@per_example
def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """Reduce ``src`` into a copy of ``input`` at ``index`` along ``dim``
    (``torch.scatter_reduce``).

    ``reduce`` is "sum", "prod", "mean", "amax" or "amin"; with ``include_self=False`` the
    input's own values at scattered positions take no part. Gradients follow PyTorch
    (amax/amin split evenly among tied winners), with one deliberate difference: with
    ``include_self=False`` an excluded input element that happens to equal the result is
    not counted among the winners (PyTorch counts it, so the gradient of such an output
    sums to less than 1; here it always sums to 1).

    Example:
        >>> ember.scatter_reduce(ember.ones(3), 0, ember.tensor([0, 0, 2]),
        ...                      ember.tensor([2., 4., 6.]), "amax")
        tensor([4., 1., 6.])
    """
    if reduce not in _REDUCES:
        raise ValueError(f"scatter_reduce(): reduce argument must be one of {_REDUCES}, got "
                         f"{reduce!r}")
    d = wrap_dim(dim, max(input.ndim, 1), "scatter_reduce")
    ones = zeros_like(src) + 1
    touched = scatter(zeros_like(input), d, index, ones) > 0
    base = input if include_self else where(touched, 0, input)
    if reduce in ("sum", "mean"):
        total = scatter_add(base, d, index, src)
        if reduce == "sum":
            return total
        count = scatter_add(zeros_like(input) + (1 if include_self else 0), d, index, ones)
        count = where(touched, count, 1)
        return total / count if input.dtype.is_floating_point else total // count
    return _scatter_extreme(input, d, index, src, reduce, include_self, touched)


def _scatter_extreme(input, d, index, src, reduce, include_self, touched):
    """prod/amax/amin: values on the host; gradients through ``res + (num - num.detach())``,
    where ``num`` is linear in the inputs with the (constant) partial derivatives as weights."""
    a = _host(input).copy()
    excluded = np.zeros(a.shape, bool) if include_self else _host(touched)
    if excluded.any():
        a[excluded] = _identity(reduce, a.dtype)
    ufunc = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}[reduce]
    crop = tuple(slice(0, n) for n in index.shape)
    idx, s = _host(index), _host(src)[crop]
    grid = list(np.broadcast_arrays(*np.indices(idx.shape, sparse=True)))
    grid[d] = idx
    where_ = tuple(grid)
    ufunc.at(a, where_, s)
    res = _tensor(a, dtype=input.dtype, device=input.device)
    x, src_c = _host(input), src[crop]
    if reduce == "prod":
        w_self, w_src = _prod_partials(x, s, a, excluded, where_, include_self)
    else:
        w_self = ((x == a) & ~excluded).astype(np.float64)
        w_src = (s == a[where_]).astype(np.float64)
        count = w_self.copy()
        np.add.at(count, where_, w_src)
        count[count == 0] = 1
        w_self, w_src = w_self / count, w_src / count[where_]
    w_self = _tensor(w_self, dtype=input.dtype, device=input.device)
    w_src = _tensor(w_src, dtype=src.dtype, device=src.device)
    num = input * w_self + scatter_add(zeros_like(input), d, index, src_c * w_src)
    return res + (num - num.detach())


def _prod_partials(x, s, res, excluded, where_, include_self):
    """d res / d element for a scatter product: the product of the other members of its
    group (exact with zeros: one zero gets the product of the rest, two or more give 0)."""
    nz = np.where(excluded | (x == 0), 1, x).astype(x.dtype)
    zeros = ((x == 0) & ~excluded).astype(np.int64)
    np.multiply.at(nz, where_, np.where(s != 0, s, 1))
    np.add.at(zeros, where_, (s == 0).astype(np.int64))

    def partial(v, r, p, z):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(v != 0, r / np.where(v != 0, v, 1), np.where(z == 1, p, 0))
    w_self = np.where(excluded, 0, partial(x, res, nz, zeros))
    w_src = partial(s, res[where_], nz[where_], zeros[where_])
    return w_self, w_src


def _identity(reduce, dt):
    """The value that leaves ``reduce`` unchanged, in ``dt``."""
    if reduce == "prod":
        return 1
    if dt.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    if dt.kind == "b":
        return reduce == "amin"
    info = np.iinfo(dt)
    return info.min if reduce == "amax" else info.max


for _name in __all__:
    setattr(Tensor, _name, globals()[_name])
Tensor.scatter_reduce_ = inplace_from(scatter_reduce, "scatter_reduce")
