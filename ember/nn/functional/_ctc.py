"""``ctc_loss``: connectionist temporal classification (``torch.nn.functional.ctc_loss``).

The per-sample likelihood and its gradient are the ``ctc_loss``/``ctc_loss_grad``
primitives (ember/ops/ctc.py: log-space forward-backward, vectorised over the batch); this
module normalises PyTorch's argument forms (padded ``(N, S)`` or concatenated 1-D targets,
lengths as tensors or sequences, unbatched ``(T, C)`` input), validates them with
PyTorch's messages, and reduces.
"""
from __future__ import annotations

import numpy as np

from ...ops.batching import per_example
from ...errors import DTypeError, ShapeError
from ...ops import dispatch
from ...ops.ctc import ctc_loss_p
from ...ops.dispatch import autocast_entry
from ...ops.factories import tensor as _tensor
from ...ops.select import where
from ...tensor import Tensor
from ._loss import _desc, _reduction

__all__ = ["ctc_loss"]


def _lengths(op, name, x, n):
    v = np.asarray(x.detach().cpu().numpy() if isinstance(x, Tensor) else x).reshape(-1)
    if v.dtype.kind not in "iu":
        raise DTypeError(f"{op}: {name} must be integers, got dtype {v.dtype}")
    if v.size != n:
        raise ShapeError(f"{op}: {name} must have one entry per batch element ({n}), got "
                         f"{v.size}")
    return v.astype(np.int64)


def _padded_targets(op, targets, tgt_len, n):
    """Targets as an ``(N, S)`` int64 array (concatenated 1-D targets are split)."""
    t = np.asarray(targets.detach().cpu().numpy())
    if t.dtype.kind not in "iu":
        raise DTypeError(f"{op}: targets must be integers, got {_desc(targets)}")
    if t.ndim == 2 and t.shape[0] == n:
        if tgt_len.size and t.shape[1] < tgt_len.max():
            raise ShapeError(f"{op}: expected targets to have size at least {tgt_len.max()} "
                             f"at dimension 1 (the longest target_length), got {_desc(targets)}")
        return t.astype(np.int64)
    if t.ndim != 1 or t.size != tgt_len.sum():
        raise ShapeError(f"{op}: targets must be (N, S) padded or 1-D concatenated with "
                         f"sum(target_lengths) = {tgt_len.sum()} entries, got {_desc(targets)}")
    out = np.zeros((n, int(tgt_len.max(initial=0))), np.int64)
    starts = np.concatenate([[0], np.cumsum(tgt_len)[:-1]]).astype(np.int64)
    for b, (s, k) in enumerate(zip(starts, tgt_len)):
        out[b, :k] = t[s:s + k]
    return out


def _check(op, lp, tg, in_len, tgt_len, blank):
    t_max, _, c = lp.shape
    if not 0 <= blank < c:
        raise ValueError(f"{op}: blank must be in label range [0, {c}), got {blank}")
    for name, v, hi in (("input_lengths", in_len, t_max), ("target_lengths", tgt_len, None)):
        if v.size and v.min() < 0:
            raise ValueError(f"{op}: expected {name} to have value at least 0, but got value "
                             f"{v.min()}")
        if hi is not None and v.size and v.max() > hi:
            raise ValueError(f"{op}: expected {name} to have value at most {hi} (the time "
                             f"steps of log_probs), but got value {v.max()}")
    used = np.arange(tg.shape[1])[None, :] < tgt_len[:, None]
    if used.any() and (tg[used].min() < 0 or tg[used].max() >= c):
        raise ValueError(f"{op}: target labels must be in [0, {c}) (log_probs has {c} classes),"
                         f" got values in [{tg[used].min()}, {tg[used].max()}]")


@per_example
@autocast_entry("ctc_loss")
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """Connectionist temporal classification loss (``torch.nn.functional.ctc_loss``).

    Args:
        log_probs: ``(T, N, C)`` (or unbatched ``(T, C)``) log-probabilities, usually
            ``log_softmax`` outputs.
        targets: ``(N, S)`` padded labels, or 1-D with the ``N`` targets concatenated.
        input_lengths: ``(N,)`` lengths of the inputs (tensor or sequence of ints, ``<= T``).
        target_lengths: ``(N,)`` lengths of the targets.
        blank: the blank label. reduction: ``"none"`` (per sample), ``"sum"``, or ``"mean"``
            (each loss divided by its target length, then averaged over the batch).
        zero_infinity: replace infinite losses (impossible alignments) and their gradients
            by 0.

    The gradient with respect to ``log_probs`` is the true derivative; PyTorch returns
    ``exp(log_probs) - posterior`` instead. Both agree on the gradient of the logits of a
    ``log_softmax`` (see ember/ops/ctc.py).

    Example:
        >>> lp = ember.randn(6, 1, 3).log_softmax(2)
        >>> F.ctc_loss(lp, ember.tensor([[1, 2]]), [6], [2]).shape
        ember.Size([])
    """
    op = "ctc_loss"
    reduction = _reduction(op, reduction)
    if not isinstance(log_probs, Tensor) or not log_probs.dtype.is_floating_point:
        raise DTypeError(f"{op}: log_probs must be a floating point ember.Tensor")
    unbatched = log_probs.ndim == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    if lp.ndim != 3:
        raise ShapeError(f"{op}: log_probs must be (T, N, C) or (T, C), got {_desc(log_probs)}")
    n = lp.shape[1]
    in_len = _lengths(op, "input_lengths", input_lengths, n)
    tgt_len = _lengths(op, "target_lengths", target_lengths, n)
    tg = targets.reshape(1, -1) if unbatched and targets.ndim == 1 else targets
    tg = _padded_targets(op, tg, tgt_len, n)
    _check(op, lp, tg, in_len, tgt_len, blank)
    dev = lp.device
    loss = dispatch.apply(ctc_loss_p, (lp, _tensor(tg, device=dev), _tensor(in_len, device=dev),
                                       _tensor(tgt_len, device=dev)), {"blank": int(blank)})
    if zero_infinity:
        loss = where(loss.isinf(), 0.0, loss)
    if unbatched:
        loss = loss.squeeze(0)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    div = _tensor(np.maximum(tgt_len, 1), dtype=loss.dtype, device=dev)
    return (loss / (div.squeeze(0) if unbatched else div)).mean()
