"""Margin, embedding and likelihood losses (``torch.nn.functional`` names and semantics):
cosine_embedding, margin_ranking, hinge_embedding, soft_margin, multilabel_soft_margin,
poisson_nll, gaussian_nll, triplet_margin. Composites of Ember ops, like ``_loss``.
"""
from __future__ import annotations

import math

from ...errors import ShapeError
from ...ops.binary import minimum
from ...ops.select import where
from ...ops.unary import exp, log, log1p
from ._loss import _desc, _legacy, _log_sigmoid, _pair, _reduce, _reduction, _tensor
from ...ops.dispatch import autocast_entry

__all__ = ['cosine_embedding_loss', 'margin_ranking_loss', 'hinge_embedding_loss',
           'soft_margin_loss', 'multilabel_soft_margin_loss', 'poisson_nll_loss',
           'gaussian_nll_loss', 'triplet_margin_loss']


@autocast_entry("cosine_embedding_loss")
def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                          reduction="mean"):
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where
    ``target == -1`` (``torch.nn.functional.cosine_embedding_loss``).

    Example:
        >>> x = ember.tensor([[1., 0.]])
        >>> F.cosine_embedding_loss(x, x, ember.tensor([1]))
        tensor(0.)
    """
    op = "cosine_embedding_loss"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    for name, x in (("input1", input1), ("input2", input2)):
        _tensor(op, name, x, floating=True)
    _tensor(op, "target", target)
    if target.ndim not in (0, 1) or input1.ndim != target.ndim + 1 \
            or tuple(input1.shape) != tuple(input2.shape) \
            or (target.ndim and target.shape[0] != input1.shape[0]):
        raise ShapeError(f"{op}: expected inputs (N, D) with target (N,), or inputs (D,) with "
                         f"a 0-d target, got input1 {_desc(input1)}, input2 {_desc(input2)}, "
                         f"target {_desc(target)}")
    d = target.ndim
    eps = 1e-12       # NOTE: PyTorch's EPSILON, added to each squared magnitude
    dot = (input1 * input2).sum(d)
    mag = (((input1 * input1).sum(d) + eps) * ((input2 * input2).sum(d) + eps)).sqrt()
    cos = dot / mag
    loss = where(target == 1, 1 - cos, 0.0) + where(target == -1, (cos - margin).clamp(min=0),
                                                     0.0)
    return _reduce(loss, reduction)


@autocast_entry("margin_ranking_loss")
def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    """``max(0, -target * (input1 - input2) + margin)``
    (``torch.nn.functional.margin_ranking_loss``).

    Example:
        >>> F.margin_ranking_loss(ember.tensor([1.]), ember.tensor([2.]), ember.tensor([1.]))
        tensor(1.)
    """
    op = "margin_ranking_loss"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    for name, x in (("input1", input1), ("input2", input2), ("target", target)):
        _tensor(op, name, x)
    if not input1.ndim == input2.ndim == target.ndim:
        raise ShapeError(f"{op}: all input tensors should have the same number of dims, got "
                         f"input1 {_desc(input1)}, input2 {_desc(input2)}, target "
                         f"{_desc(target)}")
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0), reduction)


@autocast_entry("hinge_embedding_loss")
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """``input`` where ``target == 1``, ``max(0, margin - input)`` where ``target == -1``
    (``torch.nn.functional.hinge_embedding_loss``).

    Example:
        >>> F.hinge_embedding_loss(ember.tensor([0.3, 2.]), ember.tensor([1., -1.]))
        tensor(0.1500)
    """
    op = "hinge_embedding_loss"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    _pair(op, input, target, warn=False)
    loss = where(target != 1, (margin - input).clamp(min=0), 0.0) \
        + where(target != -1, input, 0.0)
    return _reduce(loss, reduction)


@autocast_entry("soft_margin_loss")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-target * input))`` (``torch.nn.functional.soft_margin_loss``).

    Example:
        >>> F.soft_margin_loss(ember.tensor([0.]), ember.tensor([1.]))    # log 2
        tensor(0.6931)
    """
    op = "soft_margin_loss"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    _pair(op, input, target, warn=False)
    return _reduce(log1p(exp(-input * target)), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """Per-class binary cross entropy on logits, averaged over the C classes of the last dim
    (``torch.nn.functional.multilabel_soft_margin_loss``).

    Example:
        >>> F.multilabel_soft_margin_loss(ember.tensor([[0., 0.]]), ember.tensor([[1., 0.]]))
        tensor(0.6931)
    """
    op = "multilabel_soft_margin_loss"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    _pair(op, input, target, warn=False)
    if input.ndim == 0:
        raise ShapeError(f"{op}: input must be (C,) or (N, C), got {_desc(input)}")
    loss = -(target * _log_sigmoid(input) + (1 - target) * _log_sigmoid(-input))
    if weight is not None:
        _tensor(op, "weight", weight)
        loss = loss * weight
    loss = loss.sum(input.ndim - 1) / input.shape[-1]
    return _reduce(loss, reduction)


@autocast_entry("poisson_nll_loss")
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """Poisson negative log-likelihood: ``exp(input) - target * input`` for log-rates, else
    ``input - target * log(input + eps)``; ``full`` adds Stirling's term for ``target > 1``
    (``torch.nn.functional.poisson_nll_loss``).

    Example:
        >>> F.poisson_nll_loss(ember.tensor([0.]), ember.tensor([1.]))
        tensor(1.)
    """
    op = "poisson_nll_loss"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    _pair(op, input, target, warn=False)
    if log_input:
        loss = exp(input) - target * input
    else:
        loss = input - target * log(input + eps)
    if full:
        big = target > 1
        t = where(big, target, 2.0)
        stirling = t * log(t) - t + 0.5 * log(2 * math.pi * t)
        loss = loss + where(big, stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """Gaussian negative log-likelihood ``0.5 (log var + (input - target)**2 / var)``, with
    ``var`` clamped to ``>= eps`` (gradient passes unchanged, as in PyTorch)
    (``torch.nn.functional.gaussian_nll_loss``).

    Example:
        >>> F.gaussian_nll_loss(ember.tensor([1.]), ember.tensor([1.]), ember.tensor([1.]))
        tensor(0.)
    """
    op = "gaussian_nll_loss"
    reduction = _reduction(op, reduction)
    _pair(op, input, target, warn=False)
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError(f"{op}: var has negative entry/entries ({var})")
        var = input.detach() * 0 + float(var)
    _tensor(op, "var", var, floating=True)
    if var._data.size and float(var._data.min()) < 0:   # NOTE: validation only
        raise ValueError(f"{op}: var has negative entry/entries")
    vs, xs = tuple(var.shape), tuple(input.shape)
    if vs != xs:
        if xs[:-1] == vs:
            var = var.unsqueeze(-1)
        elif not (len(xs) == len(vs) and sum(v for x, v in zip(xs, vs) if x != v) == 1):
            raise ShapeError(f"{op}: var {_desc(var)} is of incorrect size for input "
                             f"{_desc(input)}: expected the input's shape, that shape "
                             f"without its last dim, or one dim of size 1")
    var = var + (var.clamp(min=eps) - var).detach()
    loss = 0.5 * (log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def _pairwise_distance(x1, x2, p, eps):
    d = x1 - x2 + eps
    return (d.abs() ** p).sum(max(x1.ndim, x2.ndim) - 1) ** (1.0 / p)


@autocast_entry("triplet_margin_loss")
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the p-norm distance
    (``torch.nn.functional.triplet_margin_loss``); ``swap`` uses ``min(d(a, n), d(p, n))``.

    Example:
        >>> a = ember.tensor([[0., 0.]])
        >>> F.triplet_margin_loss(a, a, a + 3.)
        tensor(0.)
    """
    op = "triplet_margin_loss"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    for name, x in (("anchor", anchor), ("positive", positive), ("negative", negative)):
        _tensor(op, name, x, floating=True)
    if not anchor.ndim == positive.ndim == negative.ndim or anchor.ndim not in (1, 2):
        raise ShapeError(f"{op}: anchor, positive and negative must all be (D,) or (N, D), "
                         f"got {_desc(anchor)}, {_desc(positive)}, {_desc(negative)}")
    if margin <= 0:
        raise ValueError(f"{op}: margin must be greater than 0, got {margin}")
    d_pos = _pairwise_distance(anchor, positive, p, eps)
    d_neg = _pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = minimum(d_neg, _pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_pos - d_neg).clamp(min=0), reduction)
