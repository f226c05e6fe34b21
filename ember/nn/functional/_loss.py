"""Loss functions (``torch.nn.functional`` names, signatures, defaults and semantics).

Every loss is a composite of Ember ops, so autograd, higher-order gradients and tracing work
unchanged. ``cross_entropy`` is on every classifier's hot path: one ``log_softmax`` primitive,
one ``take_along_dim`` gather of the target log-probabilities, one sum -- no one-hot matrices.
Graph structure never depends on tensor *values* (only on shapes and arguments), so a traced
loss stays valid for every batch; values are read only to raise clear errors.
"""
from __future__ import annotations

import math
import warnings

from ... import dtypes as _dt
from ...autograd.grad_mode import state as _grad_state
from ...errors import DTypeError, EmberIndexError, ShapeError
from ...ops import dispatch
from ...ops.select import where
from ...ops.softmax import log_softmax
from ...ops.nll import nll_loss_p
from ...ops.sort import take_along_dim_p
from ...ops.unary import exp, log, log1p
from ...tensor import Tensor
from ...ops.dispatch import autocast_entry

__all__ = ['mse_loss', 'l1_loss', 'smooth_l1_loss', 'huber_loss', 'cross_entropy', 'nll_loss',
           'binary_cross_entropy', 'binary_cross_entropy_with_logits', 'kl_div']


# ------------------------------------------------------------------ shared helpers
def _legacy(size_average, reduce, reduction):
    """PyTorch's mapping of the deprecated ``size_average``/``reduce`` pair to ``reduction``."""
    if size_average is None and reduce is None:
        return reduction
    warnings.warn("size_average and reduce args will be deprecated, please use "
                  "reduction='mean'|'sum'|'none' instead.", stacklevel=3)
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else ("mean" if size_average else "sum")


def _reduction(op, reduction, extra=()):
    if reduction not in ("none", "mean", "sum") + tuple(extra):
        valid = ", ".join(repr(r) for r in ("none", "mean", "sum") + tuple(extra))
        raise ValueError(f"{op}: reduction must be one of {valid}, got {reduction!r}")
    return reduction


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _desc(x):
    return f"Tensor(shape={tuple(x.shape)}, dtype={x.dtype.name})"


def _tensor(op, name, x, floating=False):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected '{name}' to be an ember.Tensor, got "
                        f"{type(x).__name__}")
    if floating and not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected '{name}' to have a floating point dtype, got "
                         f"{_desc(x)} (convert with .float())")
    return x


def _pair(op, input, target, warn=True):
    """Check ``input``/``target`` and warn (like PyTorch) when they only broadcast."""
    _tensor(op, "input", input, floating=True)
    _tensor(op, "target", target)
    if tuple(input.shape) != tuple(target.shape):
        try:
            shape = _broadcast(input.shape, target.shape)
        except ShapeError:
            raise ShapeError(f"{op}: target {_desc(target)} does not broadcast with input "
                             f"{_desc(input)}; they should have the same shape") from None
        if warn:
            warnings.warn(f"{op}: using a target size ({tuple(target.shape)}) that is "
                          f"different to the input size ({tuple(input.shape)}) "
                          f"(broadcast to {shape}). This will likely lead to incorrect "
                          f"results due to broadcasting. Please ensure they have the same "
                          f"size.", stacklevel=3)


def _broadcast(a, b):
    out = []
    for x, y in zip((1,) * (len(b) - len(a)) + tuple(a), (1,) * (len(a) - len(b)) + tuple(b)):
        if x != y and 1 not in (x, y):
            raise ShapeError("shapes do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


def _same_size_weight(op, weight, input):
    _tensor(op, "weight", weight)
    if tuple(weight.shape) != tuple(input.shape):
        raise ShapeError(f"{op}: weight {_desc(weight)} and input {_desc(input)} must have "
                         f"the same size")


def _weighted(loss, weight, reduction):
    """PyTorch's elementwise-weighted reduction: mean divides by ``weight.sum()``."""
    loss = loss * weight
    if reduction == "mean":
        return loss.sum() / weight.sum()
    return _reduce(loss, reduction)


def _log_sigmoid(x):
    """``log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))`` without overflow.

    NOTE: both branches choose the ``x >= 0`` side at ``x == 0`` so the gradient there is the
    true 0.5 (``-x.abs()`` with ``abs'(0) = 0`` would give 0 or 1).
    """
    neg = x < 0
    return where(neg, x, 0.0) - log1p(exp(where(neg, x, -x)))


def _clamped_log(x, arg_ok, log_fn):
    """``max(log_fn(x), -100)`` like PyTorch's BCE, with a finite (zero) gradient where
    ``log_fn(x) = -inf`` (``arg_ok`` is False there) instead of ``0 * inf = nan``."""
    safe = log_fn(where(arg_ok, x, 0.5))
    return where(arg_ok, safe, -100.0).clamp(min=-100.0)


# ------------------------------------------------------------------ regression losses
@autocast_entry("mse_loss")
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean squared error ``(input - target)**2``, reduced (``torch.nn.functional.mse_loss``).

    Example:
        >>> F.mse_loss(ember.tensor([1., 2.]), ember.tensor([1., 4.]))
        tensor(2.)
    """
    reduction = _reduction("mse_loss", _legacy(size_average, reduce, reduction))
    _pair("mse_loss", input, target)
    d = input - target
    if weight is not None:
        _same_size_weight("mse_loss", weight, input)
        return _weighted(d * d, weight, reduction)
    return _reduce(d * d, reduction)


@autocast_entry("l1_loss")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean absolute error ``|input - target|``, reduced (``torch.nn.functional.l1_loss``).

    Example:
        >>> F.l1_loss(ember.tensor([1., 2.]), ember.tensor([0., 4.]))
        tensor(1.5000)
    """
    reduction = _reduction("l1_loss", _legacy(size_average, reduce, reduction))
    _pair("l1_loss", input, target)
    d = (input - target).abs()
    if weight is not None:
        _same_size_weight("l1_loss", weight, input)
        return _weighted(d, weight, reduction)
    return _reduce(d, reduction)


def _huber(input, target, delta):
    """``0.5 d**2`` for ``|d| < delta`` else ``delta (|d| - 0.5 delta)``: with ``c = min(|d|,
    delta)`` both branches are ``c (|d| - 0.5 c)`` (continuous value and gradient)."""
    a = (input - target).abs()
    c = a.clamp(max=delta)
    return c * (a - 0.5 * c)


@autocast_entry("smooth_l1_loss")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean",
                   beta=1.0):
    """Huber loss divided by ``beta``; ``beta=0`` is ``l1_loss``
    (``torch.nn.functional.smooth_l1_loss``).

    Example:
        >>> F.smooth_l1_loss(ember.tensor([0., 3.]), ember.tensor([0.5, 0.]))
        tensor(1.3125)
    """
    reduction = _reduction("smooth_l1_loss", _legacy(size_average, reduce, reduction))
    _pair("smooth_l1_loss", input, target)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    if beta == 0:
        return _reduce((input - target).abs(), reduction)
    return _reduce(_huber(input, target, beta) / beta, reduction)


@autocast_entry("huber_loss")
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 d**2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``
    (``torch.nn.functional.huber_loss``).

    Example:
        >>> F.huber_loss(ember.tensor([0., 3.]), ember.tensor([0.5, 0.]), delta=2.)
        tensor(2.0625)
    """
    reduction = _reduction("huber_loss", reduction)
    _pair("huber_loss", input, target)
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    loss = _huber(input, target, delta)
    if weight is not None:
        _same_size_weight("huber_loss", weight, input)
        loss = loss * weight        # NOTE: PyTorch's weighted huber mean is a plain mean
    return _reduce(loss, reduction)


# ------------------------------------------------------------------ class-index losses
def _class_weight(op, weight, n_classes):
    if weight is None:
        return None
    _tensor(op, "weight", weight, floating=True)
    if weight.ndim != 1 or weight.shape[0] != n_classes:
        raise ShapeError(f"{op}: weight should be a 1-D tensor with one entry for each of "
                         f"the {n_classes} classes, got {_desc(weight)}")
    return weight


def targets_in_range(op):
    """The eager fast path's ``check`` of ``op`` (``cross_entropy``/``nll_loss``: input,
    target, weight, size_average, ignore_index...): class-index targets outside ``[0, C)``
    other than ``ignore_index`` raise :func:`_check_targets`'s error. The compiled form's
    kernels read the targets unchecked on a GPU (CuPy's indexing wraps), and its C kernels
    name only ``take_along_dim``; one reduction here, read once (a GPU: one sync)."""
    def check(input, target=None, weight=None, size_average=None, ignore_index=-100,
              *args, **kwargs):
        if not isinstance(target, Tensor) or not isinstance(input, Tensor) or \
                target._dtype.category != _dt.INT or input.ndim == 0 or \
                tuple(target.shape) == tuple(input.shape):
            return
        a = target._data
        n = input.shape[1 if input.ndim > 1 else 0]
        if a.size and bool((((a < 0) | (a >= n)) & (a != ignore_index)).any()):
            _check_targets(op, input, target, ignore_index)
    return check


def _check_targets(op, input, target, ignore_index):
    """Shape/dtype/range rules for class-index targets; returns the class dim, the class
    count and whether the targets are non-empty and none equals ``ignore_index``."""
    if input.ndim == 0:
        raise ShapeError(f"{op}: input must have shape (C,), (N, C) or (N, C, d1, ...), got "
                         f"{_desc(input)}")
    cdim = 1 if input.ndim > 1 else 0
    n = input.shape[cdim]
    if target.dtype.category != _dt.INT:
        raise DTypeError(f"{op}: class-index targets must have an integer dtype (int64), got "
                         f"target {_desc(target)}; for class probabilities pass a float "
                         f"target of the input's shape {tuple(input.shape)}")
    want = tuple(input.shape[:1]) + tuple(input.shape[2:]) if cdim else ()
    if tuple(target.shape) != want:
        raise ShapeError(f"{op}: expected target of shape {want} for input {_desc(input)} "
                         f"(input (N, C, d1, ...) takes target (N, d1, ...)), got "
                         f"{_desc(target)}")
    a = target._data   # NOTE: values read for validation only (no effect on the graph)
    if not a.size:
        return cdim, n, False
    if int(a.min()) < 0 or int(a.max()) >= n:
        bad = a[(a != ignore_index) & ((a < 0) | (a >= n))]
        if bad.size:
            raise EmberIndexError(f"{op}: target {int(bad.reshape(-1)[0])} is out of bounds: "
                                  f"class indices must be in [0, {n - 1}] for input "
                                  f"{_desc(input)} (or equal ignore_index={ignore_index})")
        return cdim, n, False
    return cdim, n, not 0 <= ignore_index < n or not (a == ignore_index).any()


def _take(x, index, dim):
    # NOTE: the primitive directly, not ``gather``: _check_targets has validated the indices,
    # and gather's own checks and view would double the cost of this hot-path op.
    return dispatch.apply(take_along_dim_p, (x, index), {"dim": dim})


def _nll(op, logp, target, weight, ignore_index, reduction, smoothing=0.0):
    """Negative log-likelihood of class indices, optionally label-smoothed (PyTorch's rules:
    the mean divides by the summed weight of non-ignored targets)."""
    cdim, n, none_ignored = _check_targets(op, logp, target, ignore_index)
    weight = _class_weight(op, weight, n)
    if target.dtype is not _dt.int64:
        target = target.long()
    if (none_ignored and weight is None and not smoothing and reduction != "none"
            and not _grad_state.modes):
        # NOTE: eager only (no dispatch mode: a traced graph must not depend on this batch's
        # values). With no target ignored the mask's wheres change no value: the same
        # picked values, sum and division (by the count, as float32 either way), so the
        # same bits forward and backward, in 4 ops instead of 10 (and 4 backward nodes
        # instead of 7) -- for float32/float64 in one (ops/nll.py: those kernels in order).
        if logp._dtype is _dt.float32 or logp._dtype is _dt.float64:
            return dispatch.apply(nll_loss_p, (logp, target),
                                  {"dim": cdim, "reduction": reduction})
        total = _take(logp, target.unsqueeze(cdim), cdim).sum()
        return -total if reduction == "sum" else total / -target.numel()
    # NOTE: the mask is applied even when no target is ignored: a value-dependent shortcut
    # would make a traced graph silently wrong for a later batch with ignored targets.
    target = target.unsqueeze(cdim)                   # class dim kept (size 1) from here on
    keep = target != ignore_index
    idx = where(keep, target, 0)
    picked = _take(logp, idx, cdim)                   # log p[target]
    if weight is not None:
        w = _take(weight, idx.reshape(-1), 0).reshape(idx.shape)
        picked = picked * w
    if smoothing:
        if weight is not None:
            logp = logp * weight.reshape((1, n) + (1,) * (logp.ndim - 2) if cdim else (n,))
        picked = (1.0 - smoothing) * picked + (smoothing / n) * logp.sum(cdim, keepdim=True)
    # NOTE: where, not a multiply by the mask: an ignored row may hold -inf log-probs.
    picked = where(keep, picked, 0.0)
    if reduction == "none":
        return -picked.squeeze(cdim)
    total = picked.sum()
    if reduction == "sum":
        return -total
    return total / -(keep.sum() if weight is None else where(keep, w, 0.0).sum())


@autocast_entry("nll_loss")
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood of class indices given log-probabilities
    (``torch.nn.functional.nll_loss``). ``input`` is (C,), (N, C) or (N, C, d1, ...).

    Example:
        >>> logp = ember.tensor([[0.5, 0.5], [0.9, 0.1]]).log()
        >>> F.nll_loss(logp, ember.tensor([0, 1]))       # -(log .5 + log .1) / 2
        tensor(1.4979)
    """
    reduction = _reduction("nll_loss", _legacy(size_average, reduce, reduction))
    _tensor("nll_loss", "input", input, floating=True)
    _tensor("nll_loss", "target", target)
    return _nll("nll_loss", input, target, weight, ignore_index, reduction)


def _soft_targets(input, target, weight, reduction, smoothing):
    """Cross entropy against class probabilities (``target`` has the input's shape)."""
    op = "cross_entropy"
    _tensor(op, "target", target, floating=True)
    cdim = 1 if input.ndim > 1 else 0
    n = input.shape[cdim]
    weight = _class_weight(op, weight, n)
    if smoothing:
        target = target * (1.0 - smoothing) + smoothing / n
    prod = log_softmax(input, cdim) * target
    if weight is not None:
        prod = prod * weight.reshape((1, n) + (1,) * (input.ndim - 2) if cdim else (n,))
    if reduction == "none":
        return -prod.sum(cdim)
    total = prod.sum()
    if reduction == "sum":
        return -total
    rows = input.numel() // n if n else 0
    return total * (-1.0 / rows) if rows else total * math.nan


@autocast_entry("cross_entropy")
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """Cross entropy between logits and class indices or class probabilities
    (``torch.nn.functional.cross_entropy``).

    ``input`` is (C,), (N, C) or (N, C, d1, ...); ``target`` holds integer class indices of
    shape (), (N,) or (N, d1, ...), or float probabilities of the input's shape. ``weight``
    rescales each class; with ``reduction='mean'`` class-index losses are divided by the
    summed weight of the non-ignored targets. ``label_smoothing`` mixes the target with the
    uniform distribution.

    Example:
        >>> F.cross_entropy(ember.tensor([[2., 0.], [0., 2.]]), ember.tensor([0, 1]))
        tensor(0.1269)
    """
    op = "cross_entropy"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    _tensor(op, "input", input, floating=True)
    _tensor(op, "target", target)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")
    if input.ndim and tuple(target.shape) == tuple(input.shape):
        return _soft_targets(input, target, weight, reduction, label_smoothing)
    if input.ndim == 0:
        raise ShapeError(f"{op}: input must have shape (C,), (N, C) or (N, C, d1, ...), got "
                         f"{_desc(input)}")
    logp = log_softmax(input, 1 if input.ndim > 1 else 0)
    return _nll(op, logp, target, weight, ignore_index, reduction, label_smoothing)


# ------------------------------------------------------------------ binary / divergence
def _same_shape(op, input, target):
    if tuple(target.shape) != tuple(input.shape):
        raise ShapeError(f"{op}: target {_desc(target)} must have the same size as input "
                         f"{_desc(input)}")


def _bcast_weight(op, name, weight, shape):
    _tensor(op, name, weight)
    try:
        ok = _broadcast(weight.shape, shape) == tuple(shape)
    except ShapeError:
        ok = False
    if not ok:
        raise ShapeError(f"{op}: {name} {_desc(weight)} must broadcast to the input shape "
                         f"{tuple(shape)}")


@autocast_entry("binary_cross_entropy")
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """``-w (t log x + (1 - t) log(1 - x))`` for probabilities ``x``, each log clamped to
    ``>= -100`` like PyTorch (``torch.nn.functional.binary_cross_entropy``).

    Example:
        >>> F.binary_cross_entropy(ember.tensor([0.8, 0.4]), ember.tensor([1., 0.]))
        tensor(0.3670)
    """
    op = "binary_cross_entropy"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    _tensor(op, "input", input, floating=True)
    _tensor(op, "target", target)
    _same_shape(op, input, target)
    a = input._data    # NOTE: values read for validation only
    if a.size and not (float(a.min()) >= 0 and float(a.max()) <= 1):
        raise ValueError(f"{op}: all elements of input should be between 0 and 1 (apply "
                         f"sigmoid first, or use binary_cross_entropy_with_logits), got "
                         f"values in [{float(a.min())}, {float(a.max())}]")
    log_x = _clamped_log(input, input > 0, log)
    log_1mx = _clamped_log(-input, input < 1, log1p)
    loss = -(log_1mx + target * (log_x - log_1mx))
    if weight is not None:
        _bcast_weight(op, "weight", weight, input.shape)
        loss = loss * weight
    return _reduce(loss, reduction)


@autocast_entry("binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """Sigmoid + binary cross entropy in one numerically stable expression:
    ``(1 - t) x - (1 + (pos_weight - 1) t) log_sigmoid(x)``
    (``torch.nn.functional.binary_cross_entropy_with_logits``).

    Example:
        >>> F.binary_cross_entropy_with_logits(ember.tensor([3., -3.]), ember.tensor([1., 0.]))
        tensor(0.0486)
    """
    op = "binary_cross_entropy_with_logits"
    reduction = _reduction(op, _legacy(size_average, reduce, reduction))
    _tensor(op, "input", input, floating=True)
    _tensor(op, "target", target)
    _same_shape(op, input, target)
    log_sig = _log_sigmoid(input)
    if pos_weight is not None:
        _bcast_weight(op, "pos_weight", pos_weight, input.shape)
        log_sig = log_sig * ((pos_weight - 1) * target + 1)
    loss = (1 - target) * input - log_sig
    if weight is not None:
        _bcast_weight(op, "weight", weight, input.shape)
        loss = loss * weight
    return _reduce(loss, reduction)


def _xlogx(t):
    """``t log t`` with ``0 log 0 = 0`` (and a finite gradient there)."""
    zero = t == 0
    return where(zero, 0.0, t * log(where(zero, 1.0, t)))


@autocast_entry("kl_div")
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise KL divergence ``t (log t - input)`` for log-probabilities ``input``
    (``torch.nn.functional.kl_div``); ``reduction='batchmean'`` is the true KL per sample.

    Example:
        >>> p = ember.tensor([[0.25, 0.75]])
        >>> F.kl_div(p.log(), p, reduction="batchmean")
        tensor(0.)
    """
    op = "kl_div"
    legacy = _legacy(size_average, reduce, reduction)
    if legacy is reduction and reduction == "mean":
        warnings.warn("kl_div: reduction='mean' divides the total loss by both the batch size "
                      "and the support size; 'batchmean' divides only by the batch size and "
                      "matches the KL divergence's definition.", stacklevel=2)
    reduction = _reduction(op, legacy, extra=("batchmean",))
    _pair(op, input, target, warn=False)
    if log_target:
        loss = exp(target) * (target - input)
    else:
        loss = _xlogx(target) - target * input
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, reduction)


# NOTE: imported last: _loss_margin uses the helpers above.
from ._loss_margin import *  # noqa: E402,F401,F403
from ._loss_margin import __all__ as _margin_all  # noqa: E402

__all__ += _margin_all
