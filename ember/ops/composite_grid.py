"""Grids, stacks and pairwise composites: ``meshgrid``, ``broadcast_tensors``,
``atleast_{1,2,3}d``, ``block_diag``, ``cartesian_prod``, ``column_stack``/``dstack``/
``row_stack``, ``tril_indices``/``triu_indices``, ``searchsorted``/``bucketize``, ``cdist``,
``vander``, ``trapezoid``/``cumulative_trapezoid``, ``cov``/``corrcoef``.

Example:
    >>> xs, ys = ember.meshgrid(ember.arange(2), ember.arange(3), indexing="ij")
    >>> tuple(xs.shape)
    (2, 3)
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError
from ..tensor import Tensor
from ._util import wrap_dim
from .dispatch import autocast_entry, broadcast_shapes
from .factories import tensor as _tensor, zeros
from .join import cat, stack
from .reduce_stats import norm

__all__ = ["meshgrid", "broadcast_tensors", "atleast_1d", "atleast_2d", "atleast_3d",
           "block_diag", "cartesian_prod", "column_stack", "dstack", "row_stack",
           "tril_indices", "triu_indices", "searchsorted", "bucketize", "cdist", "vander",
           "trapezoid", "trapz", "cumulative_trapezoid", "cov", "corrcoef"]


def _seq(tensors):
    return tuple(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) \
        else tuple(tensors)


def broadcast_tensors(*tensors):
    """Views of the tensors expanded to their common shape (``torch.broadcast_tensors``)."""
    ts = _seq(tensors)
    shape = broadcast_shapes(*(tuple(t.shape) for t in ts), op="broadcast_tensors")
    return tuple(t.expand(shape) for t in ts)


def meshgrid(*tensors, indexing="ij"):
    """Coordinate grids from 1-D tensors; ``indexing`` "ij" (matrix) or "xy" (Cartesian).

    PyTorch's default is "ij" (it warns when the argument is omitted; Ember does not).
    """
    ts = _seq(tensors)
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid(): indexing must be 'ij' or 'xy', got {indexing!r}")
    if any(t.ndim > 1 for t in ts):
        raise ShapeError(f"meshgrid(): expected 0-D or 1-D tensors, got shapes "
                         f"{[tuple(t.shape) for t in ts]}")
    ts = [t.reshape(-1) for t in ts]
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.shape[0] for t in ts)
    out = [t.reshape([-1 if i == k else 1 for i in range(len(ts))]).expand(shape)
           for k, t in enumerate(ts)]
    if swap:
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def _atleast(nd, tensors):
    ts = _seq(tensors)
    out = []
    for t in ts:
        if t.ndim == 0:
            t = t.reshape((1,) * nd)
        elif t.ndim == 1 and nd > 1:
            t = t.reshape((1, t.shape[0]) + (1,) * (nd - 2))
        elif t.ndim == 2 and nd == 3:
            t = t.unsqueeze(-1)
        out.append(t)
    return out[0] if len(out) == 1 and not (len(tensors) == 1 and isinstance(
        tensors[0], (list, tuple))) else tuple(out)


def atleast_1d(*tensors):
    """Each tensor viewed with at least 1 dim (``torch.atleast_1d``)."""
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    """Each tensor viewed with at least 2 dims (a 1-D tensor becomes a row)."""
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    """Each tensor viewed with at least 3 dims (``(n,)`` -> ``(1, n, 1)``, ``(m, n)`` ->
    ``(m, n, 1)``), like ``torch.atleast_3d``."""
    return _atleast(3, tensors)


def block_diag(*tensors):
    """A block-diagonal matrix from 0-, 1- or 2-D tensors (``torch.block_diag``)."""
    ts = [t.reshape(1, -1) if t.ndim < 2 else t for t in _seq(tensors)]
    if any(t.ndim != 2 for t in ts):
        raise ShapeError(f"block_diag(): expected 2-D or lower tensors, got shapes "
                         f"{[tuple(t.shape) for t in ts]}")
    if not ts:
        return zeros(0, 0)
    dt = _dt.result_type(*ts)
    cols = sum(t.shape[1] for t in ts)
    rows, left = [], 0
    for t in ts:
        right = cols - left - t.shape[1]
        parts = [zeros(t.shape[0], left, dtype=dt, device=t.device), t.to(dt),
                 zeros(t.shape[0], right, dtype=dt, device=t.device)]
        rows.append(cat(parts, 1))
        left += t.shape[1]
    return cat(rows, 0)


def cartesian_prod(*tensors):
    """Cartesian product of 1-D tensors as rows (``torch.cartesian_prod``)."""
    ts = _seq(tensors)
    if len(ts) == 1:
        return ts[0]
    grids = meshgrid(*ts, indexing="ij")
    return stack([g.reshape(-1) for g in grids], 1)


def column_stack(tensors):
    """Stack 0/1-D tensors as columns, concatenate the rest along dim 1."""
    return cat([t.reshape(-1, 1) if t.ndim < 2 else t for t in tensors], 1)


def dstack(tensors):
    """Concatenate along dim 2 after :func:`atleast_3d` (``torch.dstack``)."""
    return cat(list(atleast_3d(list(tensors))), 2)


def row_stack(tensors):
    """Alias of ``vstack``: concatenate along dim 0 after :func:`atleast_2d`."""
    return cat(list(atleast_2d(list(tensors))), 0)


def _tri_indices(row, col, offset, lower, dtype, device):
    r, c = (np.tril_indices if lower else np.triu_indices)(int(row), int(offset), int(col))
    return _tensor(np.stack([r, c]).astype(np.int64), dtype=dtype or _dt.int64, device=device)


def tril_indices(row, col, offset=0, *, dtype=None, device=None):
    """``(2, N)`` coordinates of the lower triangle of a ``row x col`` matrix."""
    return _tri_indices(row, col, offset, True, dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None):
    """``(2, N)`` coordinates of the upper triangle of a ``row x col`` matrix."""
    return _tri_indices(row, col, offset, False, dtype, device)


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """Insertion indices of ``input`` into the innermost rows of ``sorted_sequence``
    (``torch.searchsorted``)."""
    side = side or ("right" if right else "left")
    if side not in ("left", "right") or (right and side == "left"):
        raise ValueError(f"searchsorted(): side must be 'left' or 'right' and agree with "
                         f"right={right}, got {side!r}")
    # NOTE: a host algorithm on host copies (a GPU's values too); the result goes back to
    # the boundaries' device, as PyTorch's
    dev = sorted_sequence.device
    seq = sorted_sequence.detach().cpu().numpy()
    scalar = not isinstance(input, Tensor)
    vals = np.asarray(input if scalar else input.detach().cpu().numpy())
    if sorter is not None:
        seq = np.take_along_axis(seq, sorter.cpu().numpy(), -1)
    if seq.ndim == 1:
        r = np.searchsorted(seq, vals, side=side)
    else:
        if seq.shape[:-1] != vals.shape[:-1]:
            raise ShapeError(f"searchsorted(): boundaries {seq.shape} and input {vals.shape} "
                             f"must share all but the last dimension")
        r = np.empty(vals.shape, np.int64)
        for i in np.ndindex(seq.shape[:-1]):
            r[i] = np.searchsorted(seq[i], vals[i], side=side)
    return _tensor(r, dtype=_dt.int32 if out_int32 else _dt.int64, device=dev)


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """Index of the bucket of ``boundaries`` (1-D, sorted) each value falls in."""
    if boundaries.ndim != 1:
        raise ShapeError(f"bucketize(): boundaries must be 1-D, got shape "
                         f"{tuple(boundaries.shape)}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


@autocast_entry("cdist")
def cdist(x1, x2, p=2.0, compute_mode=None):
    """Pairwise ``p``-norm distances between the rows of ``x1`` (..., P, M) and ``x2``
    (..., R, M) (``torch.cdist``); the gradient at zero distance is 0, as PyTorch's."""
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(f"cdist(): expected x1 (..., P, M) and x2 (..., R, M) with the same "
                         f"M, got {tuple(x1.shape)} and {tuple(x2.shape)}")
    d = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return norm(d, p, -1)


def vander(x, N=None, increasing=False):
    """Vandermonde matrix of a 1-D tensor: columns ``x**(N-1) ... x**0`` (``torch.vander``)."""
    if x.ndim != 1:
        raise ShapeError(f"vander(): x must be 1-D, got shape {tuple(x.shape)}")
    n = x.shape[0] if N is None else int(N)
    powers = range(n) if increasing else range(n - 1, -1, -1)
    xx = x if x.dtype is not _dt.bool_ else x.to(_dt.int64)
    cols = [xx ** k if k else xx * 0 + 1 for k in powers]
    return stack(cols, 1) if cols else zeros(x.shape[0], 0, dtype=xx.dtype)


def _spacing(y, x, dx, d, op):
    if x is not None and dx is not None:
        raise TypeError(f"{op}(): pass x or dx, not both")
    if x is None:
        return 1.0 if dx is None else dx
    if x.ndim == 1:
        shape = [1] * y.ndim
        shape[d] = -1
        return diff_of(x).reshape(shape)
    return diff_of(x, d)


def diff_of(x, d=-1):
    n = x.shape[d]
    return x.narrow(d, 1, n - 1) - x.narrow(d, 0, n - 1)


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """Trapezoidal rule along ``dim`` (``torch.trapezoid``)."""
    d = wrap_dim(dim, y.ndim, "trapezoid")
    n = y.shape[d]
    if n == 0:
        return y.sum(d)
    h = _spacing(y, x, dx, d, "trapezoid")
    return ((y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)) * h).sum(d) / 2


trapz = trapezoid


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """Running trapezoidal integral along ``dim`` (``torch.cumulative_trapezoid``)."""
    d = wrap_dim(dim, y.ndim, "cumulative_trapezoid")
    n = y.shape[d]
    h = _spacing(y, x, dx, d, "cumulative_trapezoid")
    return ((y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)) * h / 2).cumsum(d)


def cov(input, *, correction=1, fweights=None, aweights=None):
    """Covariance of the variables in the rows of ``input`` (``torch.cov``)."""
    if input.ndim > 2:
        raise ShapeError(f"cov(): expected input to have two or fewer dimensions, got "
                         f"{tuple(input.shape)}")
    x = input.reshape(1, -1) if input.ndim < 2 else input
    if not x.dtype.is_floating_point:
        x = x.to(_dt.get_default_dtype())
    w = None
    for wt in (fweights, aweights):
        if wt is not None:
            w = wt.to(x.dtype) if w is None else w * wt
    if w is None:
        n = x.shape[1]
        mean = x.mean(1, keepdim=True)
        xc = x - mean
        c = xc @ xc.t() / max(n - correction, 0)
    else:
        wsum = w.sum()
        mean = (x * w).sum(1, keepdim=True) / wsum
        xc = x - mean
        norm_ = wsum if correction == 0 else (
            wsum - correction * (w * aweights).sum() / wsum if aweights is not None
            else wsum - correction)
        c = (xc * w) @ xc.t() / norm_
    return c.reshape(()) if input.ndim < 2 else c


def corrcoef(input):
    """Pearson correlation coefficients of the rows of ``input`` (``torch.corrcoef``)."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = c.diagonal()
    std = d.sqrt()
    return (c / std.unsqueeze(1) / std.unsqueeze(0)).clamp(-1, 1)


Tensor.cov = cov
Tensor.corrcoef = corrcoef
