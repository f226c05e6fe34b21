"""OpInfo for the ``ctc_loss`` primitives (ember/ops/ctc.py) through ``F.ctc_loss``.

The reference sums the probability of every path of the ``C**T`` label sequences that
collapses (merge repeats, drop blanks) to the target: brute force, independent of the
forward-backward recursions. The gradient is checked against central differences for
unnormalised ``log_probs`` (Ember's VJP is the true derivative); no second order (PyTorch
has none either).
"""
import itertools

import numpy as np

import ember.nn.functional as F

from .core import OpInfo, Sample


def _collapse(path, blank):
    out, prev = [], None
    for p in path:
        if p != prev and p != blank:
            out.append(p)
        prev = p
    return tuple(out)


def _ctc_ref(lp, targets, in_len, tgt_len, blank=0, reduction="none"):
    lp64 = lp.astype(np.float64)
    c = lp.shape[2]
    out = []
    for b in range(lp.shape[1]):
        t_b, want = int(in_len[b]), tuple(int(v) for v in targets[b, :tgt_len[b]])
        total = 0.0
        for path in itertools.product(range(c), repeat=t_b):
            if _collapse(path, blank) == want:
                total += np.exp(sum(lp64[t, b, k] for t, k in enumerate(path)))
        with np.errstate(divide="ignore"):
            out.append(-np.log(total))
    return np.array(out, dtype=lp.dtype)


def _samples(rng, dt):
    def lp(t, n, c, norm=True):
        x = rng.standard_normal((t, n, c))
        if norm:
            x = x - np.log(np.exp(x).sum(2, keepdims=True))
        return x.astype(dt)
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    return [Sample((lp(6, 3, 3), i64([[1, 2], [1, 1], [2, 0]]), i64([6, 5, 4]), i64([2, 2, 1])),
                   grad=False, name="batch"),
            Sample((lp(5, 2, 3), i64([[2, 2], [1, 0]]), i64([3, 5]), i64([2, 0])), grad=False,
                   name="repeat needs blanks; empty target"),
            Sample((lp(4, 1, 3), i64([[1, 2, 1]]), i64([2]), i64([3])), grad=False,
                   name="impossible (inf)"),
            Sample((lp(4, 2, 3, norm=False), i64([[1, 2], [2, 2]]), i64([4, 4]), i64([2, 2])),
                   name="grad unnormalised"),
            Sample((lp(5, 2, 3), i64([[2, 1], [1, 0]]), i64([5, 3]), i64([2, 1])),
                   name="grad"),
            Sample((lp(3, 0, 3), np.zeros((0, 2), np.int64), i64([]), i64([])), grad=False,
                   name="empty batch")]


OPINFOS = [
    OpInfo("ctc_loss", lambda lp, tg, il, tl: F.ctc_loss(lp, tg, il, tl, reduction="none"),
           _ctc_ref, _samples, ("ctc_loss", "ctc_loss_grad"), gradgrad=False),
]
