"""Multi-class and multi-label hinge losses and the triplet loss with a custom distance
(``torch.nn.functional`` names and semantics): multi_margin, multilabel_margin,
triplet_margin_with_distance. Composites of Ember ops, like ``_loss_margin``.
"""
from __future__ import annotations

import numpy as np

from ...errors import DTypeError, EmberIndexError, ShapeError
from ...ops.dispatch import autocast_entry
from ...ops.factories import arange, tensor as _as_tensor
from ...ops.scatter import gather
from ...ops.binary import minimum
from ._layers import pairwise_distance
from ._loss import _desc, _legacy, _reduce, _reduction, _tensor

__all__ = ["multi_margin_loss", "multilabel_margin_loss", "triplet_margin_with_distance_loss"]


def _int_target(op, target):
    _tensor(op, "target", target)
    if target.dtype.is_floating_point or target.dtype.name == "bool":
        raise DTypeError(f"{op}: expected target of an integer dtype (int64), got "
                         f"{_desc(target)}")


@autocast_entry("multi_margin_loss")
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """Multi-class hinge loss: ``sum_{j != y} w[y] * max(0, margin - x[y] + x[j])**p / C``
    per sample (``torch.nn.functional.multi_margin_loss``); ``p`` is 1 or 2.

    Example:
        >>> F.multi_margin_loss(ember.tensor([[0.1, 0.2, 0.4, 0.8]]), ember.tensor([3]))
        tensor(0.3250)
    """
    op = "multi_margin_loss"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    _tensor(op, "input", input, floating=True)
    _int_target(op, target)
    x = input.unsqueeze(0) if input.ndim == 1 else input
    if x.ndim != 2 or x.shape[0] != max(target.numel(), 1) or target.ndim > 1 \
            or (input.ndim == 2 and target.ndim != 1):
        raise ShapeError(f"{op}: expected input (N, C) with target (N,), or input (C,) with a "
                         f"0-d or 1-element target, got input {_desc(input)}, target "
                         f"{_desc(target)}")
    n, c = x.shape
    y = target.reshape(n, 1)
    if n and (int(y.min()) < 0 or int(y.max()) >= c):
        raise EmberIndexError(f"{op}: target out of range: values must be in [0, {c}), got "
                              f"[{int(y.min())}, {int(y.max())}]")
    z = (margin - gather(x, 1, y) + x).clamp(min=0)
    if p == 2:
        z = z * z
    if weight is not None:
        _tensor(op, "weight", weight)
        if weight.ndim != 1 or weight.shape[0] != c:
            raise ShapeError(f"{op}: inconsistent weight size, expected {c} but got "
                             f"{_desc(weight)}")
        z = z * weight[y]
    z = z * (arange(c, device=x.device) != y)        # NOTE: the j == y term is not counted
    loss = z.sum(1) / c
    loss = loss.reshape(target.shape) if input.ndim == 1 else loss
    return _reduce(loss, reduction)


@autocast_entry("multilabel_margin_loss")
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Multi-label hinge loss (``torch.nn.functional.multilabel_margin_loss``): per sample,
    ``sum_{j in targets} sum_{i not in targets} max(0, 1 - (x[j] - x[i])) / C``, where the
    targets are the class indices in ``target`` before its first -1.

    Example:
        >>> F.multilabel_margin_loss(ember.tensor([[0.1, 0.2, 0.4, 0.8]]),
        ...                          ember.tensor([[3, 0, -1, 1]]))
        tensor(0.8500)
    """
    op = "multilabel_margin_loss"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    _tensor(op, "input", input, floating=True)
    _int_target(op, target)
    if input.ndim not in (0, 1, 2) or tuple(target.shape) != tuple(input.shape):
        raise ShapeError(f"{op}: inconsistent target size: {_desc(target)} for input of "
                         f"size: {_desc(input)}")
    x = input.reshape(1, -1) if input.ndim < 2 else input
    y = target.reshape(1, -1) if input.ndim < 2 else target
    n, c = x.shape
    t = y.detach().cpu().numpy().astype(np.int64)
    valid = np.cumprod(t >= 0, axis=1).astype(bool)          # positions before the first -1
    if valid.any() and (t[valid].max() >= c):
        raise EmberIndexError(f"{op}: argument #2 'target' is out of range: class indices "
                              f"must be in [0, {c}) (or -1 to end the list), got "
                              f"{t[valid].max()}")
    idx = np.where(valid, t, 0)
    is_target = np.zeros((n, c), bool)
    for k in range(t.shape[1]):                               # NOTE: duplicates stay marked
        rows = valid[:, k]
        is_target[rows, idx[rows, k]] = True
    x_j = gather(x, 1, _as_tensor(idx, device=x.device))                 # (N, K)
    pair = (1 - x_j.unsqueeze(2) + x.unsqueeze(1)).clamp(min=0)        # (N, K, C)
    mask = valid[:, :, None] & ~is_target[:, None, :]
    loss = (pair * _as_tensor(mask, device=x.device)).sum((1, 2)) / c
    loss = loss.reshape(()) if input.ndim < 2 else loss
    return _reduce(loss, reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with any distance ``d`` (default
    :func:`pairwise_distance`) (``torch.nn.functional.triplet_margin_with_distance_loss``);
    ``swap`` uses ``min(d(a, n), d(p, n))``.

    Example:
        >>> a = ember.tensor([[0., 0.]])
        >>> F.triplet_margin_with_distance_loss(a, a, a + 3.)
        tensor(0.)
    """
    op = "triplet_margin_with_distance_loss"
    reduction = _reduction(op, reduction)
    if margin <= 0:
        raise ValueError(f"{op}: margin must be greater than 0, got {margin}")
    for name, x in (("anchor", anchor), ("positive", positive), ("negative", negative)):
        _tensor(op, name, x)
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise ShapeError(f"{op}: the anchor, positive, and negative tensors are expected to "
                         f"have the same number of dimensions, but got: anchor "
                         f"{anchor.ndim}D, positive {positive.ndim}D, and negative "
                         f"{negative.ndim}D inputs")
    d = distance_function if distance_function is not None else pairwise_distance
    d_pos, d_neg = d(anchor, positive), d(anchor, negative)
    if swap:
        d_neg = minimum(d_neg, d(positive, negative))
    return _reduce((margin + d_pos - d_neg).clamp(min=0), reduction)
