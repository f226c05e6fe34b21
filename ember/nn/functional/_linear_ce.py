"""``F.linear_cross_entropy``: cross entropy of a linear layer's logits, PyTorch 2.13's
"LLM head" loss, and ``LinearCrossEntropyOptions``, its chunking options.

With ``options=None`` it is PyTorch's reference: ``cross_entropy(linear(input, W, b),
target, ...)`` with the logits reshaped to ``(N, C, d_1, ..., d_K)`` for a K-dimensional
weight ``(C, d_1, ..., d_K, in_features)``. With options (class-index targets, no label
smoothing, ``out_features == ()``, as PyTorch's chunked path) the batch is processed in
chunks of ``batch_chunk_size`` rows, each under :func:`ember.utils.checkpoint`, so the
full ``(N, C)`` logits never exist at once, in the forward or in the backward (each
chunk's logits are recomputed there); the values and gradients are the reference's.
Ember deliberately differs in how it chunks: ``acc_policy``/``acc_dtype`` are accepted
and not used (logits are computed in the input's dtype, float32 inside for low
precision as every Ember matmul), and ``chunking_method="auto"`` picks chunks whose
logits hold about as many elements as the input.
"""
from __future__ import annotations

import dataclasses
import math
import warnings

__all__ = ["linear_cross_entropy"]

_POLICIES = {"auto", "accurate", "balanced", "compact"}


@dataclasses.dataclass
class LinearCrossEntropyOptions:
    """Chunking options of :func:`linear_cross_entropy` (``torch.nn``'s dataclass).

    Args:
        allow_retain_graph: accepted (Ember's chunks always allow a second backward).
        batch_chunk_size: rows per chunk (positive int) or None for ``chunking_method``.
        chunking_method: ``"auto"`` or ``"aspect_ratio[:k]"`` (k chunks' worth of rows per
            ``in_features / num_classes``), or None.
        acc_policy: ``"auto" | "accurate" | "balanced" | "compact"`` (accepted).
        acc_dtype: accumulation dtype (accepted).
    """

    allow_retain_graph: bool = False
    batch_chunk_size: int | None = None
    chunking_method: str | None = "auto"
    acc_policy: str = "auto"
    acc_dtype: object = None

    def __post_init__(self):
        if self.acc_policy not in _POLICIES:
            raise ValueError(f"invalid acc_policy: {self.acc_policy!r}")
        if self.chunking_method is not None and self.chunking_method != "auto":
            name, sep, factor = self.chunking_method.partition(":")
            factor = factor if sep else "1"
            if not (name == "aspect_ratio" and factor.isdigit() and int(factor) > 0):
                raise ValueError(f"invalid chunking_method: {self.chunking_method!r}")
        if not (self.batch_chunk_size is None or (isinstance(self.batch_chunk_size, int)
                                                  and self.batch_chunk_size > 0)):
            raise ValueError(f"batch_chunk_size must be positive int or None, got "
                             f"{self.batch_chunk_size!r}")

    def rows(self, n: int, in_features: int, num_classes: int) -> int:
        """Rows per chunk for ``n`` rows."""
        if self.batch_chunk_size is not None:
            return self.batch_chunk_size
        factor = 1
        if self.chunking_method not in (None, "auto"):
            _, sep, f = self.chunking_method.partition(":")
            factor = int(f) if sep else 1
        return max(1, min(n, math.ceil(n * in_features * factor / max(num_classes, 1))))


def _check(input, linear_weight, target, linear_bias, ignore_index):
    if input.ndim not in (1, 2):
        raise RuntimeError(f"linear_cross_entropy: expected input with dimensionality 1 or 2, "
                           f"got {input.ndim}")
    if linear_weight.ndim < 2:
        raise RuntimeError(f"linear_cross_entropy: expected linear_weight with dimensionality "
                           f"at least 2, got {linear_weight.ndim}")
    if input.shape[-1] != linear_weight.shape[-1]:
        raise RuntimeError(f"linear_cross_entropy: expected equal input and linear_weight last "
                           f"dimensions (in_features), got {input.shape[-1]} and "
                           f"{linear_weight.shape[-1]}, respectively")
    c, out = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (c, *out):
        raise RuntimeError(f"linear_cross_entropy: expected linear_bias shape {(c, *out)}, got "
                           f"{tuple(linear_bias.shape)}")
    if out and input.ndim == 1:
        raise RuntimeError(f"linear_cross_entropy: K-dimensional loss defined by "
                           f"linear_weight shape {tuple(linear_weight.shape)} requires batched "
                           f"input, (N, {input.shape[-1]}), got unbatched input with shape "
                           f"{tuple(input.shape)}")
    logits_shape = (*input.shape[:-1], c, *out)
    probs = tuple(target.shape) == logits_shape
    if probs and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains "
                           "probabilities")
    return c, out, logits_shape, probs


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None,
                         reduction: str = "mean", ignore_index: int | None = None,
                         label_smoothing: float = 0.0, options=None):
    """Cross entropy of ``linear(input, linear_weight, linear_bias)`` against ``target``.

    Args:
        input: ``(in_features,)`` or ``(N, in_features)``.
        linear_weight: ``(C, in_features)`` or ``(C, d_1, ..., d_K, in_features)``.
        target: class indices ``()``/``(N)``/``(N, d_1, ...)`` or class probabilities of
            the logits' shape.
        linear_bias: ``(C, d_1, ..., d_K)`` or None.
        weight, reduction, label_smoothing: as :func:`cross_entropy`.
        ignore_index: as :func:`cross_entropy` (None means -100).
        options: a :class:`LinearCrossEntropyOptions` to chunk the batch (see the module).

    Example:
        >>> x, w = ember.randn(8, 16), ember.randn(100, 16)
        >>> F.linear_cross_entropy(x, w, ember.randint(0, 100, (8,))).shape
        ember.Size([])
    """
    from . import cross_entropy, linear
    c, out, logits_shape, probs = _check(input, linear_weight, target, linear_bias,
                                         ignore_index)
    ignore = -100 if ignore_index is None else ignore_index
    kw = dict(weight=weight, ignore_index=ignore, label_smoothing=label_smoothing)
    chunkable = (not out and not probs and label_smoothing == 0.0
                 and reduction in ("mean", "sum", "none"))
    if options is not None and not chunkable:
        warnings.warn("linear_cross_entropy: ``options`` ignored; chunked path needs "
                      "reduction in {'mean','sum','none'}, label_smoothing == 0, class-index "
                      "targets, out_features == ()", stacklevel=2)
    if options is not None and chunkable and input.ndim == 2:
        return _chunked(input, linear_weight, target, linear_bias, weight, ignore, reduction,
                        options.rows(input.shape[0], input.shape[1], c))
    w2 = linear_weight.reshape(-1, input.shape[-1]) if out else linear_weight
    b2 = linear_bias.reshape(-1) if (out and linear_bias is not None) else linear_bias
    logits = linear(input, w2, b2).reshape(logits_shape)
    return cross_entropy(logits, target, reduction=reduction, **kw)


def _chunked(input, w, target, b, weight, ignore, reduction, rows):
    """Sum (or concatenation) of per-chunk losses, each chunk checkpointed."""
    from ...autograd.checkpoint import checkpoint
    from ...ops.join import cat
    from . import cross_entropy, linear

    def chunk_loss(x, t, red):
        return cross_entropy(linear(x, w, b), t, weight=weight, ignore_index=ignore,
                             reduction=red)
    red = "none" if reduction == "none" else "sum"
    parts = [checkpoint(chunk_loss, input[i:i + rows], target[i:i + rows], red)
             for i in range(0, input.shape[0], rows)]
    if reduction == "none":
        return cat(parts) if parts else input.new_zeros((0,))
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    if reduction == "sum":
        return total
    keep = target != ignore
    if weight is None:
        return total / keep.sum().to(total.dtype)
    wt = weight[target.clamp(0, weight.shape[0] - 1)] * keep.to(weight.dtype)
    return total / wt.sum()
