"""Sorting and selection along a dim: argsort (primitive), sort, topk, kthvalue, median, msort,
and the gather-along-dim pair they (and ``max(dim)``) take their values with:
``take_along_dim`` (primitive) and its VJP ``scatter_add_along_dim`` (primitive).

Indices come from the non-differentiable ``argsort`` primitive; values are gathered from the
input with ``take_along_dim``, so gradients flow back to the selected positions only.
"""
from __future__ import annotations

import math
from collections import namedtuple

from .. import dtypes as _dt
from ..errors import DTypeError, EmberIndexError, ShapeError
from ..tensor import Tensor
from . import dispatch
from ._util import wrap_dim
from .complex import real_only
from . import batching_rules as _vb
from .registry import defop

__all__ = ['sort', 'argsort', 'msort', 'topk', 'kthvalue', 'median', 'take_along_dim']

_apply = dispatch.apply

sort_result = namedtuple("sort", ["values", "indices"])
topk_result = namedtuple("topk", ["values", "indices"])
kthvalue_result = namedtuple("kthvalue", ["values", "indices"])
median_result = namedtuple("median", ["values", "indices"])


# ------------------------------------------------------------------ gather / scatter-add
def _take_check(x, idx, dim):
    if idx._dtype is not _dt.int64:
        raise DTypeError(f"take_along_dim: expected indices of dtype int64, got "
                         f"{idx._dtype.name}")
    xs, ids = x._data.shape, idx._data.shape
    if len(xs) != len(ids) or any(a != b for i, (a, b) in enumerate(zip(xs, ids)) if i != dim):
        raise ShapeError(f"take_along_dim: indices of shape {tuple(ids)} must match the input "
                         f"shape {tuple(xs)} in every dim except dim {dim}")


def _scatter_one_kernel(xp, g, idx, dim, shape):
    """Scatter with one index per slice along a short ``dim`` (the VJP of ``max(dim)``).

    Nothing collides, so output slice ``i`` is ``g`` where ``idx == i`` and 0 elsewhere,
    selected bitwise (``g``'s bits AND an all-ones/all-zeros mask): exact for every value,
    NaN and inf included. NOTE: ``xp.where`` branches per element: on the random masks of a
    max-pool it is 7x slower than these branch-free passes, and ``bincount`` (below) is
    slower still.
    """
    u = xp.dtype(f"u{g.dtype.itemsize}")
    lead = (slice(None),) * dim
    ix, gb = idx[lead + (0,)], g.view(u)[lead + (0,)]
    out = xp.empty(shape, g.dtype)
    ob = out.view(u)
    for i in range(shape[dim]):
        mask = (ix == i).astype(u)
        xp.negative(mask, out=mask)                 # 1 -> all bits set
        xp.bitwise_and(mask, gb, out=ob[lead + (i,)])
    return out


def _scatter_add_kernel(xp, g, idx, dim, shape):
    """out[..., idx[p], ...] += g[p]: one ``bincount`` over flat positions (duplicates add)."""
    if (idx.ndim > 1 and idx.shape[dim] == 1 and 2 <= shape[dim] <= 16 and g.shape == idx.shape
            and g.dtype.itemsize in (1, 2, 4, 8) and g.dtype.kind in "fiu"):
        return _scatter_one_kernel(xp, g, idx, dim, shape)
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    lin = idx.astype(xp.int64) * strides[dim]
    for d in range(idx.ndim):
        if d != dim and idx.shape[d] > 1:
            ax = [1] * idx.ndim
            ax[d] = idx.shape[d]
            lin = lin + (xp.arange(idx.shape[d], dtype=xp.int64) * strides[d]).reshape(ax)
    size, lin, w = math.prod(shape), lin.reshape(-1), g.reshape(-1)
    if w.dtype.kind == "c":
        # NOTE: bincount's weights are float64: the real and imaginary parts sum apart
        # (casting the complex weights dropped the imaginary part: gather's complex grad).
        out = xp.empty(size, g.dtype)
        out.real = xp.bincount(lin, weights=w.real.astype(xp.float64), minlength=size)
        out.imag = xp.bincount(lin, weights=w.imag.astype(xp.float64), minlength=size)
        return out.reshape(shape)
    out = xp.bincount(lin, weights=w.astype(xp.float64), minlength=size)
    return out.astype(g.dtype).reshape(shape)


scatter_add_along_dim_p = defop(
    "scatter_add_along_dim", nin=2, params={"dim": 0, "shape": ()}, dtype="same",
    batch=_vb.scatter_add,
    kernel=_scatter_add_kernel, shape=lambda gs, ids, dim, shape: shape, save="inputs",
    nondiff_argnums=(1,), jvp="linear",
    vjp=(lambda gg, out, g, idx, dim, shape: _apply(take_along_dim_p, (gg, idx), {"dim": dim}),
         None))


def _take_kernel(xp, x, idx, dim):
    """Gather along ``dim``; indices are in range (``take_along_dim`` checks them).

    NOTE: ``take_along_axis`` builds a broadcast fancy index over every dim; for a
    contiguous input one flat ``take`` at ``idx * inner + row offsets`` is twice as fast
    (a max-pool's values: 2.3 -> 1.1 ms).
    """
    if idx.size < 4096 or not x.flags.c_contiguous:
        return xp.take_along_axis(x, idx, axis=dim)
    outer, n = math.prod(x.shape[:dim]), x.shape[dim]
    inner = math.prod(x.shape[dim + 1:])
    lin = idx.reshape(outer, idx.shape[dim], inner) * inner
    lin += (xp.arange(outer) * (n * inner)).reshape(outer, 1, 1)
    lin += xp.arange(inner)
    return xp.take(x.reshape(-1), lin).reshape(idx.shape)


take_along_dim_p = defop(
    "take_along_dim", nin=2, params={"dim": 0}, dtype="same", check=_take_check,
    batch="materialize_dim",
    kernel=_take_kernel,
    shape=lambda xs, ids, dim: tuple(ids), save="inputs", nondiff_argnums=(1,), jvp="linear",
    vjp=(lambda g, out, x, idx, dim: _apply(scatter_add_along_dim_p, (g, idx),
                                            {"dim": dim, "shape": tuple(x.shape)}), None))


def take_along_dim(input, indices, dim=None):
    """Values of ``input`` at ``indices`` along ``dim`` (flattened if None); ``input`` and
    ``indices`` broadcast in the other dims (``torch.take_along_dim``).

    Example:
        >>> x = ember.tensor([[10., 30., 20.]])
        >>> ember.take_along_dim(x, x.argsort(1), 1)
        tensor([[10., 20., 30.]])
    """
    if dim is None:
        input, indices, dim = input.reshape(-1), indices.reshape(-1), 0
    else:
        dim = wrap_dim(dim, input.ndim, "take_along_dim")
    if input.ndim != indices.ndim:
        raise ShapeError(f"take_along_dim: input and indices should have the same number of "
                         f"dims, got {input.ndim} and {indices.ndim}")
    n = input._data.shape[dim]
    if indices._data.size and (int(indices._data.min()) < 0 or int(indices._data.max()) >= n):
        raise EmberIndexError(f"take_along_dim: index out of range for dim {dim} of size {n} "
                              f"(indices must be in [0, {n - 1}])")
    xs, ids = list(input.shape), list(indices.shape)
    from .dispatch import broadcast_shapes
    xs[dim] = ids[dim] = 1
    common = list(broadcast_shapes(tuple(xs), tuple(ids), op="take_along_dim"))
    ex = common[:dim] + [input.shape[dim]] + common[dim + 1:]
    ei = common[:dim] + [indices.shape[dim]] + common[dim + 1:]
    return _apply(take_along_dim_p, (input.expand(*ex), indices.expand(*ei)), {"dim": dim})


# ------------------------------------------------------------------ argsort
def _argsort_kernel(xp, x, dim, descending=False, stable=False, k=None):
    """Sorted order along ``dim``; with ``k``, only the first ``k`` (top-k via partition).

    NOTE: descending sorts the reversed array ascending and maps the indices back: that keeps
    equal elements in their original order (stable) and puts NaN first, like PyTorch.
    """
    if x.ndim == 0:
        return xp.zeros((), dtype=xp.int64)
    n = x.shape[dim]
    kind = "stable" if stable else None
    if k is not None and 0 < k < n // 4 and not stable:
        return _topk_indices(xp, x, dim, descending, k)
    if descending:
        r = xp.argsort(xp.flip(x, dim), axis=dim, kind=kind)
        idx = (n - 1) - xp.flip(r, dim)
    else:
        idx = xp.argsort(x, axis=dim, kind=kind)
    if k is not None and k < n:
        idx = xp.take(idx, xp.arange(k), axis=dim)
    return idx


def _topk_indices(xp, x, dim, descending, k):
    n = x.shape[dim]
    kth = n - k if descending else k - 1
    part = xp.argpartition(x, kth, axis=dim)
    part = xp.take(part, xp.arange(n - k, n) if descending else xp.arange(k), axis=dim)
    order = _argsort_kernel(xp, xp.take_along_axis(x, part, axis=dim), dim, descending)
    return xp.take_along_axis(part, order, axis=dim)


def _argsort_shape(s, dim=0, descending=False, stable=False, k=None):
    return tuple(k if i == dim and k is not None else n for i, n in enumerate(s))


argsort_p = defop(
    "argsort", nin=1, params={"dim": -1, "descending": False, "stable": False, "k": None},
    batch=_vb.one_dim,
    dtype="int64", kernel=real_only("sort", _argsort_kernel), shape=_argsort_shape)


def _argsort(input, dim, descending, stable=False, k=None, op="argsort"):
    d = wrap_dim(dim, input.ndim, op)
    return _apply(argsort_p, (input,), {"dim": d if input.ndim else 0,
                                        "descending": bool(descending),
                                        "stable": bool(stable), "k": k}), d


def _gather(input, idx, d):
    if input.ndim == 0:
        return _apply(take_along_dim_p, (input.reshape(1), idx.reshape(1)),
                      {"dim": 0}).reshape(())
    return _apply(take_along_dim_p, (input, idx), {"dim": d})


def argsort(input, dim=-1, descending=False, stable=False):
    """Indices that sort ``input`` along ``dim`` (``torch.argsort``).

    Example:
        >>> ember.tensor([3., 1., 2.]).argsort()
        tensor([1, 2, 0])
    """
    return _argsort(input, dim, descending, stable)[0]


def sort(input, dim=-1, descending=False, *, stable=False):
    """Sorted values and their indices along ``dim``, as ``(values, indices)`` (``torch.sort``);
    NaN sorts as the largest value.

    Example:
        >>> ember.tensor([3., 1., 2.]).sort().values
        tensor([1., 2., 3.])
    """
    idx, d = _argsort(input, dim, descending, stable, op="sort")
    return sort_result(_gather(input, idx, d), idx)


def msort(input):
    """``sort(input, dim=0).values`` (``torch.msort``)."""
    return sort(input, 0).values


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - PyTorch name
    """The ``k`` largest (or smallest) elements along ``dim`` as ``(values, indices)``
    (``torch.topk``); results are always sorted.

    Example:
        >>> ember.tensor([1., 4., 2., 3.]).topk(2).values
        tensor([4., 3.])
    """
    n = input.shape[wrap_dim(dim, input.ndim, "topk")] if input.ndim else 1
    if not 0 <= k <= n:
        raise EmberIndexError(f"topk: selected index k={k} out of range for dim {dim} of size "
                              f"{n} (shape {tuple(input.shape)})")
    idx, d = _argsort(input, dim, largest, False, k, op="topk")
    return topk_result(_gather(input, idx, d), idx)


def _kth(input, k, dim, keepdim, result, op):
    d = wrap_dim(dim, input.ndim, op)
    n = input.shape[d] if input.ndim else 1
    if not 1 <= k <= n:
        raise EmberIndexError(f"{op}: k={k} out of range for dim {dim} of size {n} (valid: "
                              f"1 <= k <= {n})")
    idx = _argsort(input, d, False, True, k, op=op)[0]
    if input.ndim:
        from .factories import full
        last = full(_argsort_shape(idx.shape, d, k=1), k - 1, dtype=_dt.int64,
                    device=input.device)
        idx = _apply(take_along_dim_p, (idx, last), {"dim": d})   # the k-th smallest's index
    vals = _gather(input, idx, d)
    if not keepdim and input.ndim:
        vals, idx = vals.squeeze(d), idx.squeeze(d)
    return result(vals, idx)


def kthvalue(input, k, dim=-1, keepdim=False):
    """The ``k``-th smallest element (1-based) along ``dim`` and its index
    (``torch.kthvalue``)."""
    return _kth(input, k, dim, keepdim, kthvalue_result, "kthvalue")


def median(input, dim=None, keepdim=False):
    """Lower median: of all elements (``dim=None``, a tensor) or along ``dim`` as
    ``(values, indices)`` (``torch.median``). NaN is not propagated (see ``nanmedian``)."""
    if dim is None:
        if input._data.size == 0:
            raise ShapeError("median(): cannot compute the median of an empty tensor")
        flat = input.reshape(-1)
        return _kth(flat, (flat.shape[0] + 1) // 2, 0, False, median_result, "median").values
    n = input.shape[wrap_dim(dim, input.ndim, "median")] if input.ndim else 1
    return _kth(input, (n + 1) // 2, dim, keepdim, median_result, "median")


for _n in ("sort", "argsort", "msort", "topk", "kthvalue", "median", "take_along_dim"):
    setattr(Tensor, _n, globals()[_n])
