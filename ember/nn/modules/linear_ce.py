"""``LinearCrossEntropyLoss`` (a classifier head and its cross entropy in one module) and
``LinearCrossEntropyOptions`` (PyTorch 2.13's ``torch.nn`` names)."""
from __future__ import annotations

import math

from .. import functional as F
from ..functional._linear_ce import LinearCrossEntropyOptions
from ..module import Module
from .linear import Linear

__all__ = ["LinearCrossEntropyLoss", "LinearCrossEntropyOptions"]


class LinearCrossEntropyLoss(Module):
    """``F.linear_cross_entropy`` with its own ``Linear(in_features, C * prod(out_features))``
    (``self.linear``, stored 2-D and reshaped in ``forward``, as PyTorch).

    Args:
        in_features: input features.
        num_classes: ``C``.
        out_features: ``(d_1, ..., d_K)`` for a K-dimensional loss.
        bias: give the linear layer a bias.
        reduction, weight, ignore_index, label_smoothing, options: as
            :func:`ember.nn.functional.linear_cross_entropy`.

    Example:
        >>> loss = ember.nn.LinearCrossEntropyLoss(16, 100)
        >>> loss(ember.randn(8, 16), ember.randint(0, 100, (8,))).shape
        ember.Size([])
    """

    def __init__(self, in_features: int, num_classes: int, *, out_features=(),
                 bias: bool = False, device=None, dtype=None, reduction: str = "mean",
                 weight=None, ignore_index: int | None = None, label_smoothing: float = 0.0,
                 options: LinearCrossEntropyOptions | None = None):
        super().__init__()
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise RuntimeError(f"LinearCrossEntropyLoss: expected weight shape to be "
                               f"{(num_classes,)}, got {tuple(weight.shape)}")
        if not 0.0 <= label_smoothing <= 1.0:
            raise RuntimeError(f"LinearCrossEntropyLoss: expected label_smoothing to be in "
                               f"range [0, 1], got {label_smoothing}")
        self.reduction = reduction
        self.register_buffer("weight", weight)
        self.num_classes, self.out_features = num_classes, tuple(out_features)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing
        self.linear = Linear(in_features, math.prod(self.out_features, start=num_classes),
                             bias=bias, device=device, dtype=dtype)
        self.options = options

    def forward(self, input, target):
        w = self.linear.weight.reshape(self.num_classes, *self.out_features,
                                       self.linear.in_features)
        b = self.linear.bias
        if b is not None:
            b = b.reshape(self.num_classes, *self.out_features)
        return F.linear_cross_entropy(input, w, target, linear_bias=b, weight=self.weight,
                                      reduction=self.reduction,
                                      ignore_index=self.ignore_index,
                                      label_smoothing=self.label_smoothing,
                                      options=self.options)
