"""Loss modules: thin ``Module`` wrappers over ``ember.nn.functional`` losses (PyTorch names,
constructor signatures and defaults). Class weights are registered as buffers, like PyTorch,
so they follow ``.to()`` and appear in ``state_dict()``.
"""
from __future__ import annotations

import warnings

from .. import functional as F
from ..functional._loss import _legacy
from ..module import Module

__all__ = ['MSELoss', 'L1Loss', 'SmoothL1Loss', 'HuberLoss', 'CrossEntropyLoss', 'NLLLoss',
           'BCELoss', 'BCEWithLogitsLoss', 'KLDivLoss', 'CosineEmbeddingLoss',
           'MarginRankingLoss', 'HingeEmbeddingLoss', 'SoftMarginLoss',
           'MultiLabelSoftMarginLoss', 'PoissonNLLLoss', 'GaussianNLLLoss', 'TripletMarginLoss',
           'MultiMarginLoss', 'MultiLabelMarginLoss', 'TripletMarginWithDistanceLoss',
           'CTCLoss', 'NLLLoss2d']


class _Loss(Module):
    """Base of the loss modules: holds ``reduction`` and shows non-default options in repr."""

    _defaults: dict = {"reduction": "mean"}

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.reduction = _legacy(size_average, reduce, reduction)

    def extra_repr(self) -> str:
        # NOTE: PyTorch prints ``CrossEntropyLoss()`` whatever the options; we print the
        # options that differ from the defaults, so the default repr is the same.
        return ", ".join(f"{k}={getattr(self, k)!r}" for k, v in self._defaults.items()
                         if getattr(self, k) != v)


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class L1Loss(_Loss):
    """Mean absolute error; see :func:`ember.nn.functional.l1_loss`.

    Example:
        >>> nn.L1Loss()(ember.tensor([1., 2.]), ember.tensor([0., 4.]))
        tensor(1.5000)
    """

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class MSELoss(_Loss):
    """Mean squared error; see :func:`ember.nn.functional.mse_loss`.

    Example:
        >>> nn.MSELoss()(ember.tensor([1., 2.]), ember.tensor([1., 4.]))
        tensor(2.)
    """

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Huber loss divided by ``beta``; see :func:`ember.nn.functional.smooth_l1_loss`."""

    _defaults = {"reduction": "mean", "beta": 1.0}

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Quadratic within ``delta``, linear beyond; see :func:`ember.nn.functional.huber_loss`."""

    _defaults = {"reduction": "mean", "delta": 1.0}

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of class indices; see :func:`ember.nn.functional.nll_loss`."""

    _defaults = {"reduction": "mean", "ignore_index": -100}

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class NLLLoss2d(NLLLoss):
    """Deprecated alias of :class:`NLLLoss` (``torch.nn.NLLLoss2d``), with PyTorch's warning."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        warnings.warn("NLLLoss2d has been deprecated. Please use NLLLoss instead as a drop-in "
                      "replacement and see https://pytorch.org/docs/main/nn.html#torch.nn."
                      "NLLLoss for more details.", stacklevel=2)
        super().__init__(weight, size_average, ignore_index, reduce, reduction)


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy of logits against class indices or probabilities; see
    :func:`ember.nn.functional.cross_entropy`.

    Example:
        >>> loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
        >>> loss_fn(ember.randn(8, 10), ember.randint(0, 10, (8,)))
    """

    _defaults = {"reduction": "mean", "ignore_index": -100, "label_smoothing": 0.0}

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight,
                               ignore_index=self.ignore_index, reduction=self.reduction,
                               label_smoothing=self.label_smoothing)


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities; see
    :func:`ember.nn.functional.binary_cross_entropy`."""

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight,
                                      reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Sigmoid + binary cross entropy, numerically stable; see
    :func:`ember.nn.functional.binary_cross_entropy_with_logits`."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  pos_weight=self.pos_weight,
                                                  reduction=self.reduction)


class KLDivLoss(_Loss):
    """Pointwise KL divergence of log-probabilities; see :func:`ember.nn.functional.kl_div`."""

    _defaults = {"reduction": "mean", "log_target": False}

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class _MarginLoss(_Loss):
    _defaults = {"reduction": "mean", "margin": 0.0}

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin


class CosineEmbeddingLoss(_MarginLoss):
    """Pull pairs together (target 1) or push them apart (target -1) by cosine similarity;
    see :func:`ember.nn.functional.cosine_embedding_loss`."""

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, margin=self.margin,
                                       reduction=self.reduction)


class MarginRankingLoss(_MarginLoss):
    """Rank ``input1`` above ``input2`` where ``target == 1``; see
    :func:`ember.nn.functional.margin_ranking_loss`."""

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, margin=self.margin,
                                     reduction=self.reduction)


class HingeEmbeddingLoss(_MarginLoss):
    """See :func:`ember.nn.functional.hinge_embedding_loss`."""

    _defaults = {"reduction": "mean", "margin": 1.0}

    def __init__(self, margin: float = 1.0, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, margin=self.margin,
                                      reduction=self.reduction)


class SoftMarginLoss(_Loss):
    """See :func:`ember.nn.functional.soft_margin_loss`."""

    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """See :func:`ember.nn.functional.multilabel_soft_margin_loss`."""

    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, weight=self.weight,
                                             reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    """See :func:`ember.nn.functional.poisson_nll_loss`."""

    _defaults = {"reduction": "mean", "log_input": True, "full": False, "eps": 1e-8}

    def __init__(self, log_input: bool = True, full: bool = False, size_average=None,
                 eps: float = 1e-8, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full,
                                  eps=self.eps, reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """See :func:`ember.nn.functional.gaussian_nll_loss`."""

    _defaults = {"reduction": "mean", "full": False, "eps": 1e-6}

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps,
                                   reduction=self.reduction)


class TripletMarginLoss(_Loss):
    """See :func:`ember.nn.functional.triplet_margin_loss`."""

    _defaults = {"reduction": "mean", "margin": 1.0, "p": 2.0, "eps": 1e-6, "swap": False}

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p,
                                     eps=self.eps, swap=self.swap, reduction=self.reduction)


class MultiMarginLoss(_WeightedLoss):
    """Multi-class hinge loss; see :func:`ember.nn.functional.multi_margin_loss`."""

    _defaults = {"reduction": "mean", "p": 1, "margin": 1.0}

    def __init__(self, p: int = 1, margin: float = 1.0, weight=None, size_average=None,
                 reduce=None, reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        self.p, self.margin = p, margin

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin,
                                   weight=self.weight, reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    """Multi-label hinge loss; see :func:`ember.nn.functional.multilabel_margin_loss`."""

    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """Triplet loss with any distance; see
    :func:`ember.nn.functional.triplet_margin_with_distance_loss`."""

    _defaults = {"reduction": "mean", "margin": 1.0, "swap": False}

    def __init__(self, *, distance_function=None, margin: float = 1.0, swap: bool = False,
                 reduction: str = "mean"):
        super().__init__(None, None, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater "
                             f"than 0, got {margin} instead")
        self.distance_function, self.margin, self.swap = distance_function, margin, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function,
            margin=self.margin, swap=self.swap, reduction=self.reduction)


class CTCLoss(_Loss):
    """Connectionist temporal classification loss; see :func:`ember.nn.functional.ctc_loss`.

    Example:
        >>> loss_fn = nn.CTCLoss()
        >>> lp = ember.randn(10, 2, 5).log_softmax(2)
        >>> loss_fn(lp, ember.tensor([[1, 2], [3, 3]]), [10, 8], [2, 2])
    """

    _defaults = {"reduction": "mean", "blank": 0, "zero_infinity": False}

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(None, None, reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=self.blank,
                          reduction=self.reduction, zero_infinity=self.zero_infinity)
