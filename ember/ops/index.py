"""Indexing: ``Tensor.__getitem__`` / ``__setitem__``, and the ``index``, ``index_put`` and
``nonzero`` primitives with the functions built on them (masked_fill, take, ...).

Like PyTorch, ints, slices, ``None`` and ``...`` give a zero-copy view (``slice`` +
``reshape``); integer tensors/lists and bool masks then index the view's dims (a copy,
NumPy's placement rule: adjacent advanced indices stay in place, separated ones go first).
Assignment writes through that view (``copy_``/``index_put_``), so autograd sees it as
an in-place op on a view of the tensor.
"""
from __future__ import annotations

import numpy as np

from .. import config
from .. import dtypes as _dt
from ..errors import DTypeError, EmberIndexError, ShapeError
from ..tensor import Tensor
from .batching import per_example
from . import dispatch
from ._util import min_max
from .movement import apply_slices, norm_slice, reshape_p, slice_p
from . import batching_rules as _vb
from .registry import defop

__all__ = ['index_put', 'nonzero', 'argwhere', 'masked_fill', 'masked_select',
           'masked_scatter', 'take']

_apply = dispatch.apply
_BF16_NP = np.dtype(_dt.bfloat16.np)


def _key(idx, dims, ndim):
    key = [slice(None)] * ndim
    for d, i in zip(dims, idx):
        key[d] = i
    return tuple(key)


def _index_kernel(xp, x, *idx, dims):
    if len(idx) == 1 and idx[0].ndim and idx[0].dtype.kind in "iu":
        # NOTE: one index array: ``take`` gives a row-major result whatever x's layout
        # (fancy indexing of a channels-last x scatters the dims: PyTorch's index_select
        # is row-major too) and skips the general indexing machinery
        return xp.take(x, idx[0], axis=dims[0])
    r = x[_key(idx, dims, x.ndim)]
    # NOTE: NumPy treats all-0-d integer arrays as basic indexing (a view); indexing copies.
    return xp.array(r, copy=True) if all(i.ndim == 0 for i in idx) else r


def _check_indices(op, x, idx, dims):
    shape = x._data.shape
    for d, i in zip(dims, idx):
        if not isinstance(i, Tensor) or i._dtype.category != _dt.INT:
            got = i._dtype.name if isinstance(i, Tensor) else type(i).__name__
            raise EmberIndexError(f"{op}: tensors used as indices must be long, int, byte or "
                                  f"bool tensors, got {got}")
        if d >= len(shape):
            raise EmberIndexError(f"{op}: too many indices for tensor of dimension {len(shape)}")
        a = i._data
        if a.size:
            (lo, hi), n = min_max(dispatch._backends[i._device.type].xp, a), shape[d]
            if lo < -n or hi >= n:
                bad = hi if hi >= n else lo
                raise EmberIndexError(f"{op}: index {bad} is out of bounds for dimension {d} "
                                      f"with size {n}")


def _index_vjp(g, out, x, *idx, dims):
    from .factories import zeros
    z = zeros(x.shape, dtype=g.dtype, device=g.device)
    gx = _apply(index_put_p, (z, g) + idx, {"dims": dims, "accumulate": True})
    return (gx,) + (None,) * len(idx)


def _index_shape(xs, *ishapes, dims):
    """The shape ``x[key]`` has (:func:`_key`): NumPy's placement rule — the indices'
    broadcast shape replaces their dims where those are adjacent, else goes first."""
    if not dims:
        return tuple(xs)
    b = dispatch.broadcast_shapes(*ishapes, op="index")
    pos = sorted(dims)
    rest = [n for d, n in enumerate(xs) if d not in dims]
    if pos == list(range(pos[0], pos[0] + len(pos))):
        return tuple(xs[:pos[0]]) + b + tuple(xs[pos[-1] + 1:])
    return b + tuple(rest)


index_p = defop(
    "index", nin=-1, params={"dims": ()}, dtype="same", save="inputs",
    batch=_vb.index, shape=_index_shape,
    kernel=_index_kernel, check=lambda x, *idx, dims: _check_indices("index", x, idx, dims),
    vjp=_index_vjp, jvp="linear")


def _index_put_kernel(xp, x, values, *idx, dims, accumulate):
    out = x.copy()
    if accumulate and _rows_of(x, values, idx, dims):
        _add_rows(xp, out, values, idx[0])
        return out
    key = _key(idx, dims, x.ndim)
    if accumulate:
        xp.add.at(out, key, values)
    else:
        out[key] = values
    return out


def _index_put_cpu(xp, x, values, *idx, dims, accumulate):
    """The CPU kernel: whole rows accumulated at a 1-D index (an embedding's gradient) run as
    one C loop (:func:`ember.codegen.reduce_kernels.add_rows`); everything else, or no C
    compiler, takes :func:`_index_put_kernel`."""
    if accumulate and _rows_of(x, values, idx, dims):
        rk, rows = _rows_c(x, values, idx[0])
        if rk is not None:
            out = x.copy()                  # C-contiguous (ndarray.copy's default order)
            try:
                return rk.add_rows(out, values, rows)
            except IndexError as e:         # the indices reach graphs unchecked
                raise EmberIndexError(f"index_put: {e}") from None
    return _index_put_kernel(xp, x, values, *idx, dims=dims, accumulate=accumulate)


def _rows_of(x, values, idx, dims) -> bool:
    """Whether ``values`` are whole rows of ``x`` at one 1-D integer index (an embedding's
    gradient)."""
    return (dims == (0,) and len(idx) == 1 and idx[0].ndim == 1 and idx[0].dtype.kind in "iu"
            and values.shape == idx[0].shape + x.shape[1:] and idx[0].size > 1
            and x.dtype.kind in "fiu" and values.dtype == x.dtype)


def _rows_c(x, values, rows):
    """``(reduce_kernels, int64 rows)`` when the C loop takes these arrays, else
    ``(None, None)``: float32/float64, contiguous values, indices that fit int64."""
    if not config.EAGER_KERNELS or x.dtype.kind != "f" or not values.flags.c_contiguous or \
            (rows.dtype.kind == "u" and rows.dtype.itemsize == 8):
        return None, None
    from ..codegen import reduce_kernels as rk      # NOTE: codegen sits above ops
    if x.dtype not in rk.DTYPES or rk.kernels() is None:
        return None, None
    return rk, np.ascontiguousarray(rows, dtype=np.int64)


def _add_rows(xp, out, values, rows):
    """``out[rows] += values`` with repeated rows adding up, as ``add.at`` does.

    NOTE: ``add.at`` is unbuffered and slow (1.3 ms for an embedding's 1024 x 128 gradient);
    sorting the rows and summing each run with ``add.reduceat`` takes 0.5 ms (each row's
    values are summed before they are added to ``out``: the last bit may differ from
    ``add.at``; the result is deterministic). The CPU kernel runs the C loop instead.
    """
    n = out.shape[0]
    lo, hi = min_max(xp, rows)
    if lo < -n or hi >= n:              # NOTE: graphs run kernels without the op's check
        raise EmberIndexError(f"index_put: index {hi if hi >= n else lo} is out of bounds "
                              f"for dimension 0 with size {n}")
    rows = xp.where(rows < 0, rows + n, rows)
    order = xp.argsort(rows, kind="stable")
    r = rows[order]
    starts = xp.flatnonzero(xp.concatenate([xp.ones(1, bool), r[1:] != r[:-1]]))
    out[r[starts]] += xp.add.reduceat(values[order], starts, axis=0)


def _index_put_vjp(g, out, x, values, *idx, dims, accumulate):
    p = {"dims": dims}
    if accumulate:
        gx = g
    else:
        zero = _scalar(0, g)
        gx = _apply(index_put_p, (g, zero) + idx, {"dims": dims, "accumulate": False})
    gv = _apply(index_p, (g,) + idx, p)
    return (gx, gv) + (None,) * len(idx)


def _index_put_jvp(t, out, x, values, *idx, dims, accumulate):
    tv = t[1] if t[1] is not None else _scalar(0, out)
    return _apply(index_put_p, (t[0], tv) + idx, {"dims": dims, "accumulate": accumulate})


def _index_put_cuda(xp, x, values, *idx, dims, accumulate):
    """The GPU kernel: whole rows accumulated at a 1-D index (an embedding's gradient) as
    one scatter-add with atomics (``cupyx.scatter_add``; the order of the additions to a
    repeated row is not fixed, as in PyTorch's ``index_put_`` on CUDA) instead of the
    sort + ``reduceat`` of :func:`_add_rows`.

    bfloat16 accumulates in float32, rounded once: CuPy's scatter-add has no bfloat16
    atomics (cupy/cupy#9630), and bfloat16 sums of a frequent token's rows would stall
    (256 + 1 rounds back to 256)."""
    if accumulate and x.dtype == _BF16_NP:
        r = _index_put_cuda(xp, x.astype(np.float32), values.astype(np.float32), *idx,
                            dims=dims, accumulate=True)
        return r.astype(x.dtype)
    if accumulate and _rows_of(x, values, idx, dims):
        rows, n = idx[0], x.shape[0]
        if rows.size and bool(((rows < -n) | (rows >= n)).any()):
            raise EmberIndexError(f"index_put: an index is out of bounds for dimension 0 "
                                  f"with size {n}")
        out = x.copy()
        xp.add.at(out, xp.where(rows < 0, rows + n, rows), values)
        return out
    return _index_put_kernel(xp, x, values, *idx, dims=dims, accumulate=accumulate)


index_put_p = defop(
    "index_put", nin=-1, params={"dims": (), "accumulate": False}, dtype="same",
    batch=_vb.index_put, save="inputs", shape=lambda xs, vs, *ishapes, **_: tuple(xs),
    kernels={"xp": _index_put_kernel, "cpu": _index_put_cpu, "cuda": _index_put_cuda},
    check=lambda x, v, *idx, dims, accumulate: _check_indices("index_put", x, idx, dims),
    vjp=_index_put_vjp, jvp=_index_put_jvp)


def _nonzero_kernel(xp, x):
    return xp.argwhere(x)


nonzero_p = defop("nonzero", nin=1, dtype="int64", kernel=_nonzero_kernel, save=None,
                  batch="dynamic_shape")


def _scalar(v, like):
    from .factories import tensor
    return tensor(v, dtype=like.dtype, device=like.device)


# ------------------------------------------------------------------ parsing an index
def _as_index_tensor(it, dev):
    from .factories import tensor
    if isinstance(it, Tensor):
        return it
    arr = np.asarray(it)
    if arr.dtype.kind not in "iub" or (arr.size == 0 and arr.dtype.kind == "f"):
        if arr.size == 0:
            arr = arr.astype(np.int64)
        else:
            raise EmberIndexError(f"tensors used as indices must be long, int, byte or bool "
                                  f"tensors, got a sequence of {arr.dtype}")
    return tensor(arr, device=dev)


def _normalize(x, idx):
    """Index items with the Ellipsis expanded; lists and arrays become tensors."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    items, used, ell = [], 0, 0
    for it in idx:
        if it is None or it is Ellipsis or isinstance(it, (slice, bool)):
            ell += it is Ellipsis
            used += isinstance(it, slice)
        elif isinstance(it, (int, np.integer)):
            it = int(it)
            used += 1
        elif isinstance(it, (Tensor, list, np.ndarray, np.bool_)):
            it = _as_index_tensor(it, x._device)
            used += it.ndim if it._dtype in (_dt.bool_, _dt.uint8) else 1
        else:
            raise EmberIndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long "
                                  f"or byte Variables are valid indices (got "
                                  f"{type(it).__name__})")
        items.append(it)
    if ell > 1:
        raise EmberIndexError("an index can only have a single ellipsis ('...')")
    if used > x.ndim:
        raise EmberIndexError(f"too many indices for tensor of dimension {x.ndim}")
    fill = [slice(None)] * (x.ndim - used)
    if ell:
        k = next(i for i, it in enumerate(items) if it is Ellipsis)
        items[k:k + 1] = fill
    else:
        items += fill
    return items


def parse_index(x, idx):
    """``(basic view of x, advanced index tensors, their dims in the view)``."""
    items = _normalize(x, idx)
    shape = x._data.shape
    slices = [(0, n, 1) for n in shape]
    out_shape, adv, dims = [], [], []
    d = 0
    for it in items:
        if isinstance(it, slice):
            slices[d] = norm_slice(it, shape[d], d)
            out_shape.append(len(range(*slices[d])))
            d += 1
        elif it is None or it is True:
            out_shape.append(1)
        elif it is False:
            dims.append(len(out_shape))
            out_shape.append(1)
            adv.append(_as_index_tensor(np.zeros(0, np.int64), x._device))
        elif isinstance(it, int):
            n = shape[d]
            if not -n <= it < n:
                raise EmberIndexError(f"index {it} is out of bounds for dimension {d} with "
                                      f"size {n}")
            it = it + n if it < 0 else it
            slices[d] = (it, it + 1, 1)
            d += 1
        elif it._dtype in (_dt.bool_, _dt.uint8):
            for n, t in _mask_indices(it, shape, d):
                dims.append(len(out_shape))
                out_shape.append(n)
                adv.append(t)
            d += it.ndim
        else:
            dims.append(len(out_shape))
            out_shape.append(shape[d])
            adv.append(it)
            d += 1
    v = apply_slices(x, slices)
    if tuple(out_shape) != v._data.shape:
        v = _apply(reshape_p, (v,), {"shape": tuple(out_shape)})
    return v, tuple(adv), tuple(dims)


def _mask_indices(m, shape, d):
    """``[(view dim size, index tensor)]`` for a mask over ``shape[d:d + m.ndim]``; a 0-d
    mask adds a dim of size 1 indexed by ``[0]`` (True) or ``[]`` (False)."""
    from .factories import tensor
    k = m.ndim
    if tuple(m.shape) != shape[d:d + k]:
        raise EmberIndexError(
            f"The shape of the mask {list(m.shape)} at index {d} does not match the shape of "
            f"the indexed tensor {list(shape)} at index {d}")
    if not k:
        return [(1, tensor(np.arange(int(bool(m.item())), dtype=np.int64), device=m.device))]
    return [(shape[d + j], t) for j, t in enumerate(nonzero(m, as_tuple=True))]


def getitem(self, idx):
    """``self[idx]``: a view for basic indices, a copy with tensor/list/mask indices."""
    if idx.__class__ is int and self._data.ndim:  # fast path: x[i]
        n = self._data.shape[0]
        if not -n <= idx < n:
            raise EmberIndexError(f"index {idx} is out of bounds for dimension 0 with size {n}")
        from .movement import select
        return select(self, 0, idx)
    v, adv, dims = parse_index(self, idx)
    if not adv:
        if v is self:  # x[...], x[:]: an alias
            return _apply(slice_p, (self,), {"slices": tuple((0, n, 1) for n in v.shape)})
        return v
    return _apply(index_p, (v,) + adv, {"dims": dims})


def setitem(self, idx, value):
    """``self[idx] = value`` (broadcast, cast to ``self``'s dtype), in place and autograd-aware."""
    v, adv, dims = parse_index(self, idx)
    if not adv:
        if isinstance(value, Tensor):
            v.copy_(value)
        else:
            v.fill_(value)
        return
    _index_put_into(v, adv, dims, value, False, "index_put_")


def _index_put_into(v, adv, dims, value, accumulate, op):
    from .inplace import check_inplace, commit
    check_inplace(v, op)
    commit(v, _index_put(v, adv, dims, value, accumulate), op)


def _index_put(x, adv, dims, values, accumulate):
    if not isinstance(values, Tensor):
        values = _scalar(values, x)
    elif values._dtype is not x._dtype:
        values = values.to(x._dtype)
    return _apply(index_put_p, (x, values) + tuple(adv), {"dims": tuple(dims),
                                                          "accumulate": bool(accumulate)})


# ------------------------------------------------------------------ public functions
def _index_tuple(x, indices, op):
    """Tensors indexing the leading dims (masks expand to one tensor per dim)."""
    if isinstance(indices, Tensor):
        raise DTypeError(f"{op}: indices must be a tuple of tensors")
    v, adv, dims = parse_index(x, tuple(indices))
    if v is not x and v._data.shape != x._data.shape:
        raise EmberIndexError(f"{op}: indices must be tensors")
    return adv, dims


def index_put(input, indices, values, accumulate=False):
    """A copy of ``input`` with ``values`` put at ``input[indices]`` (summed with
    ``accumulate=True``) (``torch.index_put``).

    Example:
        >>> x = ember.zeros(3)
        >>> x.index_put((ember.tensor([0, 0]),), ember.tensor(1.), accumulate=True)
        tensor([2., 0., 0.])
    """
    adv, dims = _index_tuple(input, indices, "index_put")
    return _index_put(input, adv, dims, values, accumulate)


def index_put_(input, indices, values, accumulate=False):
    adv, dims = _index_tuple(input, indices, "index_put_")
    _index_put_into(input, adv, dims, values, accumulate, "index_put_")
    return input


def nonzero(input, *, as_tuple=False):
    """Indices of non-zero elements: an ``(n, ndim)`` int64 tensor, or one 1-D tensor per dim
    with ``as_tuple=True`` (``torch.nonzero``).

    Example:
        >>> ember.tensor([0, 3, 0, 4]).nonzero()
        tensor([[1],
                [3]])
    """
    r = _apply(nonzero_p, (input,), {})
    if not as_tuple:
        return r
    if input.ndim == 0:
        return (r.reshape(-1),)
    return tuple(r[:, k] for k in range(input.ndim))


def argwhere(input):
    """Same as ``nonzero(input)`` (``torch.argwhere``)."""
    return _apply(nonzero_p, (input,), {})


def _bool_mask(mask, op):
    if not isinstance(mask, Tensor) or mask._dtype is not _dt.bool_:
        got = mask._dtype.name if isinstance(mask, Tensor) else type(mask).__name__
        raise DTypeError(f"{op} only supports boolean masks, but got mask with dtype {got}")
    return mask


def masked_fill(input, mask, value):
    """``input`` with ``value`` where ``mask`` is True (``torch.masked_fill``)."""
    from .select import where
    _bool_mask(mask, "masked_fill")
    if isinstance(value, Tensor):
        if value.ndim:
            raise ShapeError(f"masked_fill only supports a 0-dimensional value tensor, but got "
                             f"tensor with {value.ndim} dimension(s)")
        value = value.to(input._dtype)
    else:
        value = _scalar(value, input)
    return where(mask, value, input)


def masked_select(input, mask):
    """The elements of ``input`` where ``mask`` (broadcast) is True, as a 1-D tensor
    (``torch.masked_select``)."""
    _bool_mask(mask, "masked_select")
    shape = dispatch.broadcast_shapes(input._data.shape, mask._data.shape, op="masked_select")
    return getitem(input.expand(*shape), mask.expand(*shape))


@per_example
def masked_scatter(input, mask, source):
    """``input`` with the first elements of ``source`` placed where ``mask`` is True, in order
    (``torch.masked_scatter``)."""
    _bool_mask(mask, "masked_scatter")
    mask = mask.expand(*input.shape)
    idx = nonzero(mask, as_tuple=True)
    n = idx[0].shape[0] if idx else 0
    if source.numel() < n:
        raise ShapeError(f"masked_scatter: expected source to have at least {n} elements (the "
                         f"number of True mask entries), got {source.numel()}")
    vals = source.reshape(-1).narrow(0, 0, n)
    return _index_put(input, idx, tuple(range(len(idx))), vals, False)


def take(input, index):
    """Elements of the flattened ``input`` at ``index``, in index's shape (``torch.take``)."""
    flat = input.reshape(-1)
    if not isinstance(index, Tensor) or index._dtype.category != _dt.INT:
        raise EmberIndexError("take(): index must be an integer tensor")
    return _apply(index_p, (flat, index), {"dims": (0,)})


def _inplace(fn, name):
    from .inplace import inplace_from
    return inplace_from(fn, name)


Tensor.__getitem__ = getitem
Tensor.__setitem__ = setitem
Tensor.index_put = index_put
Tensor.index_put_ = index_put_
Tensor.nonzero = nonzero
Tensor.argwhere = argwhere
Tensor.masked_fill = masked_fill
Tensor.masked_fill_ = _inplace(masked_fill, "masked_fill")
Tensor.masked_select = masked_select
Tensor.masked_scatter = masked_scatter
Tensor.masked_scatter_ = _inplace(masked_scatter, "masked_scatter")
Tensor.take = take

from .scatter import *  # noqa: E402,F401,F403 - the rest of the indexing family
from .pad import *  # noqa: E402,F401,F403
from . import scatter as _scatter, pad as _pad  # noqa: E402

__all__ += _scatter.__all__ + _pad.__all__
