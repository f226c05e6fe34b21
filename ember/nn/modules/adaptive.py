"""``AdaptiveLogSoftmaxWithLoss`` (``torch.nn.modules.adaptive``): Grave et al.'s efficient
softmax approximation for large vocabularies — a head over the frequent classes plus one
entry per tail cluster, each cluster a low-rank projection, its classes' log-probabilities
``head[cluster] + log_softmax(tail(x))[class]``. Composites of Ember ops, PyTorch's
parameters (``head``, ``tail[i][0..1]``) and outputs.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ...errors import ShapeError
from ...ops.factories import tensor as _tensor, zeros
from ...ops.join import cat
from ...ops.softmax import log_softmax
from .container import ModuleList, Sequential
from .linear import Linear
from .module import Module

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """Adaptive softmax (``torch.nn.AdaptiveLogSoftmaxWithLoss``).

    Args:
        in_features: size of each input sample.
        n_classes: number of classes; ``cutoffs`` (increasing, in ``[1, n_classes - 1]``)
            split them into the head's shortlist and the tail clusters.
        div_value: the ``i``-th cluster projects to ``in_features // div_value**(i+1)``.
        head_bias: whether the head has a bias.

    ``forward(input, target)`` returns ``(output, loss)``: each target's log-probability and
    their negated mean; :meth:`log_prob` gives the full ``(N, n_classes)`` distribution and
    :meth:`predict` its argmax.

    Example:
        >>> asm = nn.AdaptiveLogSoftmaxWithLoss(16, 10, cutoffs=[4, 8])
        >>> out, loss = asm(ember.randn(3, 16), ember.tensor([0, 5, 9]))
        >>> out.shape
        ember.Size([3])
    """

    def __init__(self, in_features: int, n_classes: int, cutoffs, div_value: float = 4.0,
                 head_bias: bool = False, device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1 \
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted "
                             "in an increasing order, where each value is between 1 and "
                             "n_classes-1")
        kw = {"device": device, "dtype": dtype}
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, **kw)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hsz, bias=False, **kw),
                                        Linear(hsz, osz, bias=False, **kw)))

    def reset_parameters(self) -> None:
        """Re-initialise the head and every tail projection."""
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def _check(self, input, target):
        if target.ndim == 1:
            if input.ndim != 2:
                raise ShapeError(f"1D target tensor expects 2D input tensors, but found inputs "
                                 f"with size {tuple(input.shape)}")
            if input.shape[0] != target.shape[0]:
                raise ShapeError("Input and target should have the same size in the batch "
                                 "dimension.")
        elif target.ndim == 0:
            if input.ndim != 1:
                raise ShapeError(f"0D target tensor expects 1D input tensors, but found inputs "
                                 f"with size {tuple(input.shape)}")
        else:
            raise ShapeError("0D or 1D target tensor expected, multi-target not supported")

    def forward(self, input, target):
        self._check(input, target)
        batched = target.ndim > 0
        x = input if batched else input.unsqueeze(0)
        t = np.asarray((target if batched else target.unsqueeze(0)).cpu().numpy(), np.int64)
        if t.size and (t.min() < 0 or t.max() >= self.n_classes):
            raise ValueError(f"Target values should be in [0, {self.n_classes - 1}], but "
                             f"values in range [{t.min()}, {t.max()}] were found. ")
        cluster = np.searchsorted(np.asarray(self.cutoffs), t, side="right")   # 0: shortlist
        output = zeros(t.shape[0], dtype=x.dtype, device=x.device)
        for i in range(1, self.n_clusters + 1):
            rows = np.nonzero(cluster == i)[0]
            if rows.size == 0:
                continue
            idx = _tensor(rows, device=x.device)
            local = log_softmax(self.tail[i - 1](x.index_select(0, idx)), 1)
            rel = _tensor(t[rows] - self.cutoffs[i - 1], device=x.device).unsqueeze(1)
            output = output.index_copy(0, idx, local.gather(1, rel).squeeze(1))
        head_idx = np.where(cluster == 0, t, self.shortlist_size + cluster - 1)
        head_logprob = log_softmax(self.head(x), 1)
        output = output + head_logprob.gather(
            1, _tensor(head_idx, device=x.device).unsqueeze(1)).squeeze(1)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _full_log_prob(self, input, head_output):
        head_logprob = log_softmax(head_output, 1)
        parts = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster_logprob = log_softmax(self.tail[i](input), 1)
            parts.append(cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(parts, 1)

    def log_prob(self, input):
        """Log-probabilities of all ``n_classes`` classes, ``(N, n_classes)``."""
        return self._full_log_prob(input, self.head(input))

    def predict(self, input):
        """The most probable class of each example (``log_prob(input).argmax(1)``)."""
        head_output = self.head(input)
        output = head_output.argmax(1)
        outside = (output >= self.shortlist_size).cpu().numpy()
        if not outside.any():
            return output
        if outside.all():
            return self._full_log_prob(input, head_output).argmax(1)
        rows = _tensor(np.nonzero(outside)[0], device=input.device)
        best = self._full_log_prob(input.index_select(0, rows),
                                   head_output.index_select(0, rows)).argmax(1)
        return output.index_copy(0, rows, best)
