"""``embedding_bag``: sums, means or maxima of bags of embedding rows, without materialising
the per-index embeddings as a padded batch.

A composite: the looked-up rows (``index_select``, optionally scaled by
``per_sample_weights``) are reduced into their bags by ``index_add`` (sum, mean) or
``scatter_reduce(..., 'amax')`` (max); bag membership comes from the integer ``offsets``.
"""
from __future__ import annotations

import numpy as np

from ...ops.batching import per_example
from ...ops.composite_data import _host
from ...errors import DTypeError, ShapeError
from ...tensor import Tensor

__all__ = ['embedding_bag']

_MODES = ("sum", "mean", "max")


def _is_index(t) -> bool:
    return isinstance(t, Tensor) and not t.dtype.is_floating_point and t.dtype.name != "bool" \
        and not t.dtype.is_complex


def _bag_ids(input, offsets, include_last_offset):
    """(flat indices, bag id per index as a NumPy array, number of bags)."""
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(f"embedding_bag: if input is 2-D {tuple(input.shape)}, offsets "
                             f"must be None, got shape {tuple(offsets.shape)}")
        b, length = input.shape
        return input.reshape(-1), np.repeat(np.arange(b), length), b
    if input.ndim != 1:
        raise ShapeError(f"embedding_bag: input has to be 1-D or 2-D, got shape "
                         f"{tuple(input.shape)}")
    if offsets is None:
        raise ValueError(f"embedding_bag: offsets has to be a 1-D tensor when input is 1-D "
                         f"{tuple(input.shape)}, got None")
    if not _is_index(offsets) or offsets.ndim != 1:
        raise ShapeError(f"embedding_bag: offsets has to be a 1-D integer tensor, got shape "
                         f"{tuple(offsets.shape)} and dtype {offsets.dtype}")
    off = _host(offsets).astype(np.int64)  # NOTE: integer metadata, no gradient
    n = input.shape[0]
    if off.size and (off[0] != 0 or (np.diff(off) < 0).any() or off[-1] > n):
        raise ValueError(f"embedding_bag: offsets must start at 0, be non-decreasing and at "
                         f"most len(input) = {n}, got {off.tolist()}")
    bags = off.size - 1 if include_last_offset else off.size
    if bags < 0:
        raise ValueError("embedding_bag: include_last_offset=True needs at least one offset")
    ids = np.searchsorted(off, np.arange(n), side="right") - 1
    if include_last_offset:
        ids = np.where(ids >= bags, bags, ids)       # indices past the last offset: dropped
    return input, ids, bags


def _validate(input, weight, mode, per_sample_weights):
    if not _is_index(input):
        raise DTypeError(f"embedding_bag: expected integer indices, got "
                         f"{getattr(input, 'dtype', type(input).__name__)}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding_bag: weight has to be a 2-D tensor, got shape "
                         f"{tuple(weight.shape)}")
    if mode not in _MODES:
        raise ValueError(f"embedding_bag: mode has to be one of {_MODES}, got {mode!r}")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                      f"per_sample_weights is only supported for mode='sum' "
                                      f"(got mode='{mode}')")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ShapeError(f"embedding_bag: per_sample_weights of shape "
                             f"{tuple(per_sample_weights.shape)} must have the input's shape "
                             f"{tuple(input.shape)}")


@per_example
def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None,
                  max_norm: float | None = None, norm_type: float = 2, scale_grad_by_freq:
                  bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """Reduce bags of embedding rows (PyTorch's ``F.embedding_bag``).

    Args:
        input: indices, ``(B, L)`` (B bags of L) or 1-D with ``offsets``.
        weight: the ``(num_embeddings, embedding_dim)`` table.
        offsets: 1-D start of each bag in a 1-D ``input``.
        max_norm: rows looked up whose ``norm_type`` norm exceeds it are renormalised in place.
        mode: ``'sum'``, ``'mean'`` or ``'max'``.
        per_sample_weights: weights of ``input``'s shape scaling each row (``'sum'`` only).
        include_last_offset: ``offsets`` has B + 1 entries, the last being the end.
        padding_idx: indices equal to it are left out of their bag (and of the mean's count).

    Returns:
        ``(B, embedding_dim)``; empty bags are zeros.
    """
    from ...ops.factories import zeros
    from ._layers import _renorm_rows
    _validate(input, weight, mode, per_sample_weights)
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding_bag: scale_grad_by_freq and sparse are not "
                                  "supported")
    num, dim = weight.shape
    flat, ids, bags = _bag_ids(input, offsets, include_last_offset)
    idx_np = _host(flat).reshape(-1)
    if idx_np.size and (int(idx_np.min()) < 0 or int(idx_np.max()) >= num):
        from ...errors import EmberIndexError
        raise EmberIndexError(f"embedding_bag: index out of range: indices must be in "
                              f"[0, {num}), got [{int(idx_np.min())}, {int(idx_np.max())}]")
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise ValueError(f"embedding_bag: padding_idx must be within num_embeddings "
                             f"({num}), got {padding_idx}")
        padding_idx %= num
    keep = ids < bags
    if padding_idx is not None:
        keep &= idx_np != padding_idx
    pos = np.nonzero(keep)[0]
    from ...ops.factories import tensor as _t
    sel = flat.reshape(-1).index_select(0, _t(pos, device=weight.device))
    if max_norm is not None:
        _renorm_rows(weight, sel, max_norm, norm_type)
    rows = weight.index_select(0, sel)
    if per_sample_weights is not None:
        psw = per_sample_weights.reshape(-1).index_select(0, _t(pos, device=weight.device))
        rows = rows * psw.unsqueeze(1)
    bag = _t(ids[pos], device=weight.device)
    out = zeros(bags, dim, dtype=rows.dtype, device=weight.device)
    if mode == "max":
        return out.scatter_reduce(0, bag.unsqueeze(1).expand(len(pos), dim), rows, "amax",
                                  include_self=False)
    out = out.index_add(0, bag, rows)
    if mode == "mean":
        counts = np.bincount(ids[pos], minlength=bags).clip(min=1).astype(np.float64)
        out = out / _t(counts, dtype=out.dtype, device=weight.device).unsqueeze(1)
    return out
