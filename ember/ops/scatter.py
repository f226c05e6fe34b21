"""Gather/scatter along a dim and index_* along a dim, as composites.

``gather`` reads with the ``take_along_dim`` primitive; ``scatter``/``scatter_add`` write
with ``index_put`` at flat positions (``index * stride[dim] + position in the other
dims``); ``index_select``/``index_add``/``index_fill``/``index_copy`` are ``index`` /
``index_put`` with one index tensor at ``dim``. No primitives of their own.
"""
from __future__ import annotations

import math

from .. import dtypes as _dt
from ..device import get_backend
from ..errors import DTypeError, EmberIndexError, ShapeError
from ..tensor import Tensor, _wrap
from . import dispatch
from ._util import min_max, wrap_dim
from .index import _index_put, _scalar, index_p
from .strided import contiguous_strides
from .dispatch import autocast_entry

__all__ = ['gather', 'scatter', 'scatter_add', 'index_select', 'index_add', 'index_fill',
           'index_copy', 'one_hot']

_apply = dispatch.apply


def _int_index(index, op):
    if not isinstance(index, Tensor) or index._dtype.category != _dt.INT:
        got = index._dtype.name if isinstance(index, Tensor) else type(index).__name__
        raise DTypeError(f"{op}(): Expected dtype int64 for index, got {got}")
    return index if index._dtype is _dt.int64 else index.to(_dt.int64)


def _check_along(op, x, dim, index, src=None):
    """PyTorch's gather/scatter rules: same ndim, index no larger than x (and src) elsewhere,
    and values within ``[0, x.size(dim))``."""
    xs, ids = x._data.shape, index._data.shape
    if len(ids) != len(xs) and not (len(ids) <= 1 and len(xs) <= 1):
        raise ShapeError(f"{op}(): Index tensor must have the same number of dimensions as "
                         f"input tensor, got {len(ids)} and {len(xs)}")
    for d, (a, b) in enumerate(zip(ids, xs)):
        if d != dim and a > b:
            raise ShapeError(f"{op}(): Size does not match at dimension {d} expected index "
                             f"{list(ids)} to be no larger than self {list(xs)} apart from "
                             f"dimension {dim}")
        if src is not None and a > src._data.shape[d]:
            raise ShapeError(f"{op}(): Expected index {list(ids)} to be no larger than src "
                             f"{list(src.shape)} in dimension {d}")
    a, n = index._data, (xs[dim] if xs else 1)
    lo, hi = min_max(dispatch._backends[index._device.type].xp, a) if a.size else (0, 0)
    if lo < 0 or hi >= n:
        bad = hi if hi >= n else lo
        raise EmberIndexError(f"{op}(): index {bad} is out of bounds for dimension {dim} with "
                              f"size {n}")


def _crop(x, shape):
    """The leading ``shape`` corner of ``x`` (a view)."""
    from .movement import apply_slices
    return apply_slices(x, [(0, n, 1) for n in shape])


def gather(input, dim, index, *, sparse_grad=False):
    """``out[i][j] = input[index[i][j]][j]`` for ``dim=0`` (``torch.gather``).

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).gather(1, ember.tensor([[1], [0]]))
        tensor([[2],
                [3]])
    """
    from .sort import take_along_dim_p
    index = _int_index(index, "gather")
    if input.ndim == 0:
        return gather(input.reshape(1), 0, index.reshape(1), sparse_grad=sparse_grad) \
            .reshape(index.shape)
    d = wrap_dim(dim, input.ndim, "gather")
    _check_along("gather", input, d, index)
    shape = list(index._data.shape)
    shape[d] = input._data.shape[d]
    return _apply(take_along_dim_p, (_crop(input, shape), index), {"dim": d})


def _flat_positions(index, d, shape):
    """Flat C-order positions in a tensor of ``shape`` that ``index`` (along ``d``) points at."""
    cs = contiguous_strides(shape)
    xp = get_backend(index._device).xp
    ids = index._data.shape
    base = xp.zeros(ids, dtype=xp.int64)
    for k, n in enumerate(ids):
        if k != d:
            ax = [1] * len(ids)
            ax[k] = n
            base = base + (xp.arange(n, dtype=xp.int64) * cs[k]).reshape(ax)
    return index * cs[d] + _wrap(base, _dt.int64, index._device)


def scatter(input, dim, index, src=None, *, value=None, reduce=None):
    """A copy of ``input`` with ``src`` (or ``value``) written at ``index`` along ``dim``;
    ``reduce="add"`` sums instead (``torch.scatter``).

    Example:
        >>> ember.zeros(3).scatter(0, ember.tensor([2, 0]), ember.tensor([5., 6.]))
        tensor([6., 0., 5.])
    """
    if src is None and value is None:
        raise TypeError("scatter(): expected src (a tensor) or value (a number)")
    if src is not None and not isinstance(src, Tensor):
        src, value = None, src
    if reduce not in (None, "add"):
        raise NotImplementedError(f"scatter(): reduce={reduce!r} is not supported; use "
                                  f"reduce='add' or scatter_reduce")
    index = _int_index(index, "scatter")
    if input.ndim == 0:
        src1 = None if src is None else src.reshape(-1)
        return scatter(input.reshape(1), 0, index.reshape(-1), src1, value=value,
                       reduce=reduce).reshape(())
    d = wrap_dim(dim, input.ndim, "scatter")
    _check_along("scatter", input, d, index, src)
    if src is None:
        vals = _scalar(value, input)
    else:
        vals = _crop(src, index._data.shape).reshape(-1)
    pos = _flat_positions(index, d, input._data.shape).reshape(-1)
    flat = _index_put(input.reshape(-1), (pos,), (0,), vals, reduce == "add")
    return flat.reshape(input.shape)


@autocast_entry("scatter_add")
def scatter_add(input, dim, index, src):
    """``scatter(input, dim, index, src, reduce="add")``: duplicates sum (``torch.scatter_add``)."""
    return scatter(input, dim, index, src, reduce="add")


def _index_vector(index, op):
    index = _int_index(index, op)
    if index.ndim > 1:
        raise EmberIndexError(f"{op}(): Index is supposed to be a vector, got shape "
                              f"{list(index.shape)}")
    return index.reshape(-1)


def index_select(input, dim, index):
    """Entries ``index`` (1-D) of ``input`` along ``dim`` (``torch.index_select``)."""
    index = _index_vector(index, "index_select")
    x = input.reshape(1) if input.ndim == 0 else input
    d = wrap_dim(dim, x.ndim, "index_select")
    r = _apply(index_p, (x, index), {"dims": (d,)})
    return r.reshape(()) if input.ndim == 0 else r


def _along(input, dim, index, source, op):
    index = _index_vector(index, op)
    d = wrap_dim(dim, input.ndim, op)
    if source is not None and isinstance(source, Tensor) and source.ndim:
        want = list(input.shape)
        want[d] = index.shape[0]
        if list(source.shape) != want:
            raise ShapeError(f"{op}(): source of shape {list(source.shape)} must have the "
                             f"input's shape with dim {d} of size len(index)={index.shape[0]}, "
                             f"i.e. {want}")
    return index, d


def index_add(input, dim, index, source, *, alpha=1):
    """``input`` with ``alpha * source`` slices added at ``index`` along ``dim``
    (``torch.index_add``)."""
    index, d = _along(input, dim, index, source, "index_add")
    if alpha != 1:
        source = source * alpha
    return _index_put(input, (index,), (d,), source, True)


@autocast_entry("index_copy")
def index_copy(input, dim, index, source):
    """``input`` with ``source`` slices copied to ``index`` along ``dim`` (``torch.index_copy``)."""
    index, d = _along(input, dim, index, source, "index_copy")
    return _index_put(input, (index,), (d,), source, False)


def index_fill(input, dim, index, value):
    """``input`` with the slices at ``index`` along ``dim`` set to ``value``
    (``torch.index_fill``)."""
    index, d = _along(input, dim, index, None, "index_fill")
    return _index_put(input, (index,), (d,), value, False)


def one_hot(tensor, num_classes=-1):
    """``(*shape, num_classes)`` int64 one-hot encoding of class indices
    (``torch.nn.functional.one_hot``).

    Example:
        >>> ember.one_hot(ember.tensor([0, 2]), 3)
        tensor([[1, 0, 0],
                [0, 0, 1]])
    """
    from .factories import zeros
    if not isinstance(tensor, Tensor) or tensor._dtype is not _dt.int64:
        got = tensor._dtype.name if isinstance(tensor, Tensor) else type(tensor).__name__
        raise DTypeError(f"one_hot is only applicable to index tensor of type int64, got {got}")
    a = tensor._data
    if a.size and int(a.min()) < 0:
        raise EmberIndexError("one_hot: Class values must be non-negative.")
    if num_classes == -1:       # NOTE: a size read from values: .item() (a graph break)
        num_classes = int(tensor.max().item()) + 1 if a.size else 0
    elif a.size and int(a.max()) >= num_classes:
        raise EmberIndexError(f"one_hot: Class values must be smaller than num_classes "
                              f"({num_classes}), got {int(a.max())}")
    out = zeros(tuple(tensor.shape) + (num_classes,), dtype=_dt.int64, device=tensor.device)
    if not math.prod(out.shape):
        return out
    return scatter(out, -1, tensor.unsqueeze(-1), value=1)


def _inplace(fn, name):
    from .inplace import inplace_from
    return inplace_from(fn, name)


Tensor.gather = gather
Tensor.scatter = scatter
Tensor.scatter_ = _inplace(scatter, "scatter")
Tensor.scatter_add = scatter_add
Tensor.scatter_add_ = _inplace(scatter_add, "scatter_add")
Tensor.index_select = index_select
Tensor.index_add = index_add
Tensor.index_add_ = _inplace(index_add, "index_add")
Tensor.index_copy = index_copy
Tensor.index_copy_ = _inplace(index_copy, "index_copy")
Tensor.index_fill = index_fill
Tensor.index_fill_ = _inplace(index_fill, "index_fill")
