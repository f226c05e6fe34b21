"""``torch.<op>`` spellings of neural-network functions, with ATen's argument order.

PyTorch exposes some ``nn.functional`` operations at the top level with *different*
signatures (``torch.batch_norm(input, weight, bias, running_mean, running_var, training,
momentum, eps, cudnn_enabled)``, ``torch.embedding(weight, indices)``, losses taking the
reduction as an integer 0/1/2 = none/mean/sum). These wrappers take PyTorch's top-level
arguments and call :mod:`ember.nn.functional`; the cuDNN switches are accepted and unused.

Example:
    >>> ember.dropout(ember.ones(4), 0.5, False).tolist()
    [1.0, 1.0, 1.0, 1.0]
"""
from __future__ import annotations

from .nn import functional as F
from .nn.functional import relu_, threshold_  # noqa: F401 - same signature at top level

__all__ = ["dropout", "alpha_dropout", "feature_alpha_dropout", "layer_norm", "group_norm",
           "batch_norm", "instance_norm", "embedding", "bilinear", "rms_norm", "kl_div",
           "binary_cross_entropy_with_logits", "hinge_embedding_loss", "margin_ranking_loss",
           "cosine_embedding_loss", "triplet_margin_loss", "poisson_nll_loss", "relu_",
           "threshold_", "ctc_loss", "pdist", "celu_", "selu_", "rrelu", "rrelu_", "dropout_",
           "alpha_dropout_", "feature_alpha_dropout_", "feature_dropout", "feature_dropout_"]

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(r, op: str) -> str:
    """ATen's integer reduction (0/1/2), or the functional's string, as the string."""
    if r in ("none", "mean", "sum"):
        return r
    if r in _REDUCTIONS and not isinstance(r, bool):
        return _REDUCTIONS[r]
    raise ValueError(f"{op}(): reduction must be 0/1/2 or 'none'/'mean'/'sum', got {r!r}")


def dropout(input, p: float, train: bool):
    """``torch.dropout(input, p, train)``: :func:`ember.nn.functional.dropout`."""
    return F.dropout(input, p, train)


def alpha_dropout(input, p: float, train: bool):
    """``torch.alpha_dropout(input, p, train)``."""
    return F.alpha_dropout(input, p, train)


def feature_alpha_dropout(input, p: float, train: bool):
    """``torch.feature_alpha_dropout(input, p, train)``."""
    return F.feature_alpha_dropout(input, p, train)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    """``torch.layer_norm`` (the trailing cuDNN switch is accepted and unused)."""
    return F.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    """``torch.group_norm`` (the trailing cuDNN switch is accepted and unused)."""
    return F.group_norm(input, num_groups, weight, bias, eps)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
               cudnn_enabled=True):
    """``torch.batch_norm``: ATen's order (weight and bias before the running stats)."""
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
                        eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
                  eps, cudnn_enabled=True):
    """``torch.instance_norm``: ATen's order (weight and bias before the running stats)."""
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
                           momentum, eps)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``torch.embedding(weight, indices, padding_idx=-1, ...)``: the weight comes first and
    ``padding_idx=-1`` means none (ATen's convention)."""
    return F.embedding(indices, weight, None if padding_idx == -1 else padding_idx,
                       scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def bilinear(input1, input2, weight, bias=None):
    """``torch.bilinear``: :func:`ember.nn.functional.bilinear`."""
    return F.bilinear(input1, input2, weight, bias)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``torch.rms_norm``: :func:`ember.nn.functional.rms_norm`."""
    return F.rms_norm(input, normalized_shape, weight, eps)


def kl_div(input, target, reduction=1, *, log_target=False):
    """``torch.kl_div`` with ATen's integer reduction (default 1 = mean)."""
    return F.kl_div(input, target, reduction=_reduction(reduction, "kl_div"),
                    log_target=log_target)


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=1):
    """``torch.binary_cross_entropy_with_logits`` (ATen's order: pos_weight before reduction)."""
    return F.binary_cross_entropy_with_logits(
        input, target, weight, reduction=_reduction(reduction, "binary_cross_entropy_with_logits"),
        pos_weight=pos_weight)


def hinge_embedding_loss(input, target, margin=1.0, reduction=1):
    """``torch.hinge_embedding_loss`` with ATen's integer reduction."""
    return F.hinge_embedding_loss(input, target, margin,
                                  reduction=_reduction(reduction, "hinge_embedding_loss"))


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    """``torch.margin_ranking_loss`` with ATen's integer reduction."""
    return F.margin_ranking_loss(input1, input2, target, margin,
                                 reduction=_reduction(reduction, "margin_ranking_loss"))


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    """``torch.cosine_embedding_loss`` with ATen's integer reduction."""
    return F.cosine_embedding_loss(input1, input2, target, margin,
                                   reduction=_reduction(reduction, "cosine_embedding_loss"))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False,
                        reduction=1):
    """``torch.triplet_margin_loss`` with ATen's integer reduction."""
    return F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                 reduction=_reduction(reduction, "triplet_margin_loss"))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    """``torch.poisson_nll_loss(input, target, log_input, full, eps, reduction)``."""
    return F.poisson_nll_loss(input, target, log_input, full, eps=eps,
                              reduction=_reduction(reduction, "poisson_nll_loss"))



def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=0,
             zero_infinity=False):
    """``torch.ctc_loss``: :func:`ember.nn.functional.ctc_loss` with ATen's integer reduction.

    NOTE: PyTorch 2.13's ``torch.ctc_loss`` called without ``reduction`` returns the
    per-sample losses (as ``reduction=0``), unlike ``F.ctc_loss``'s ``"mean"``; so does this.
    """
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=blank,
                      reduction=_reduction(reduction, "ctc_loss"), zero_infinity=zero_infinity)


def pdist(input, p=2.0):
    """``torch.pdist``: :func:`ember.nn.functional.pdist`."""
    return F.pdist(input, p)



def celu_(input, alpha=1.0):
    """``torch.celu_``: in-place :func:`ember.nn.functional.celu`."""
    return F.celu(input, alpha, inplace=True)


def selu_(input):
    """``torch.selu_``: in-place :func:`ember.nn.functional.selu`."""
    return F.selu(input, inplace=True)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """``torch.rrelu``: :func:`ember.nn.functional.rrelu` (global generator only)."""
    _no_generator(generator, "rrelu")
    return F.rrelu(input, lower, upper, training)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """``torch.rrelu_``: in-place :func:`rrelu`."""
    _no_generator(generator, "rrelu_")
    return F.rrelu(input, lower, upper, training, inplace=True)


def _no_generator(generator, op):
    if generator is not None:
        raise NotImplementedError(f"{op}: generator= is not supported; seed the global "
                                  f"generator with ember.manual_seed instead")


def dropout_(input, p: float, train: bool):
    """``torch.dropout_(input, p, train)``: in-place :func:`dropout`."""
    return F.dropout(input, p, train, inplace=True)


def alpha_dropout_(input, p: float, train: bool):
    """``torch.alpha_dropout_``: in-place :func:`alpha_dropout`."""
    return F.alpha_dropout(input, p, train, inplace=True)


def feature_alpha_dropout_(input, p: float, train: bool):
    """``torch.feature_alpha_dropout_``: in-place :func:`feature_alpha_dropout`."""
    return F.feature_alpha_dropout(input, p, train, inplace=True)


def feature_dropout(input, p: float, train: bool):
    """``torch.feature_dropout``: zero whole channels (dim 1) with probability ``p``."""
    from .nn.functional._inplace_more import feature_dropout as _fd
    return _fd(input, p, train)


def feature_dropout_(input, p: float, train: bool):
    """``torch.feature_dropout_``: in-place :func:`feature_dropout`."""
    from .nn.functional._inplace_more import feature_dropout as _fd
    return _fd(input, p, train, inplace=True)


# NOTE: Tensor methods that are nn functions; bound here because ops sit below nn.
from .tensor import Tensor as _Tensor  # noqa: E402

_Tensor.hardshrink = F.hardshrink
_Tensor.prelu = F.prelu
