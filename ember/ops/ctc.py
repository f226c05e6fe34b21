"""Connectionist temporal classification: the ``ctc_loss`` primitive and its gradient.

``ctc_loss(log_probs (T, N, C), targets (N, S), input_lengths (N,), target_lengths (N,))``
returns the per-sample negative log-likelihood ``-log p(target | input)`` (shape ``(N,)``),
summed over every alignment by the forward (alpha) recursion of Graves et al. (2006), in
log space, vectorised over the batch (one NumPy step per time step). Its VJP multiplies the
incoming gradient by ``ctc_loss_grad``, a non-differentiable primitive that runs the
forward and backward (beta) recursions and returns ``d nll / d log_probs = -gamma``, the
posterior occupancy of each label at each time (0 past a sample's input length, and where
the likelihood is 0).

NOTE: this is the derivative with respect to ``log_probs`` themselves. PyTorch's
``ctc_loss`` backward returns ``exp(log_probs) - gamma`` instead (the gradient with respect
to the logits of a ``log_softmax`` folded in); both give the same gradient to the logits
when ``log_probs = log_softmax(logits)``, which is how CTC is used, and Ember's passes
gradcheck for any ``log_probs``. Like PyTorch, there is no second derivative.
"""
from __future__ import annotations

import numpy as np

from .registry import defop

_NEG_INF = -np.inf


def _extended(targets, target_lengths, blank):
    """Labels with blanks interleaved, ``(N, 2S+1)``; padding positions hold ``blank``."""
    n, s = targets.shape
    ext = np.full((n, 2 * s + 1), blank, dtype=np.int64)
    valid = np.arange(s)[None, :] < target_lengths[:, None]
    ext[:, 1::2] = np.where(valid, targets, blank)
    return ext


def _lse(*terms):
    """Elementwise log-sum-exp of equal-shaped arrays, -inf where all are -inf."""
    m = terms[0]
    for t in terms[1:]:
        m = np.maximum(m, t)
    safe = np.where(np.isfinite(m), m, 0.0)
    acc = sum(np.exp(t - safe) for t in terms)
    with np.errstate(divide="ignore"):
        return np.log(acc) + safe


def _shift(a, k):
    """``a`` shifted right by ``k`` along the last axis, -inf filled."""
    out = np.full_like(a, _NEG_INF)
    out[..., k:] = a[..., :a.shape[-1] - k]
    return out


def _alphas(lp, ext, skip, in_len):
    """Forward variables ``alpha[t, n, s]`` (log space; frozen after each input length)."""
    t_max, n = lp.shape[0], lp.shape[1]
    rows = np.arange(n)[:, None]
    alpha = np.full((t_max, n, ext.shape[1]), _NEG_INF)
    a = np.full((n, ext.shape[1]), _NEG_INF)
    a[:, :2] = lp[0][rows, ext[:, :2]]
    for t in range(t_max):
        if t:
            prev = a
            a = _lse(prev, _shift(prev, 1), np.where(skip, _shift(prev, 2), _NEG_INF)) \
                + lp[t][rows, ext]
            a = np.where((t < in_len)[:, None], a, prev)
        alpha[t] = a
    return alpha


def _nll(alpha, in_len, tgt_len):
    n = alpha.shape[1]
    last = alpha[np.maximum(in_len - 1, 0), np.arange(n)]         # (N, 2S+1)
    end = 2 * tgt_len                                              # index of the last blank
    a_end = last[np.arange(n), end]
    a_lab = np.where(tgt_len > 0, last[np.arange(n), np.maximum(end - 1, 0)], _NEG_INF)
    nll = -_lse(a_end, a_lab)
    # NOTE: an empty input explains only an empty target (one alignment, probability 1)
    return np.where(in_len == 0, np.where(tgt_len == 0, 0.0, np.inf), nll)


def _prepare(lp, targets, in_len, tgt_len, blank):
    lp = np.asarray(lp, np.float64)
    ext = _extended(np.asarray(targets, np.int64), np.asarray(tgt_len, np.int64), blank)
    skip = (ext != blank) & (ext != _shift(ext.astype(np.float64), 2))
    return lp, ext, skip, np.asarray(in_len, np.int64), np.asarray(tgt_len, np.int64)


def _ctc_kernel(xp, log_probs, targets, input_lengths, target_lengths, blank=0):
    lp, ext, skip, in_len, tgt_len = _prepare(log_probs, targets, input_lengths,
                                              target_lengths, blank)
    return _nll(_alphas(lp, ext, skip, in_len), in_len, tgt_len).astype(log_probs.dtype)


def _betas(lp, ext, skip, in_len, tgt_len):
    """Backward variables ``beta[t, n, s]`` (log space, including ``lp[t]`` like alpha)."""
    t_max, n, width = lp.shape[0], lp.shape[1], ext.shape[1]
    rows = np.arange(n)[:, None]
    pos = np.arange(width)[None, :]
    end = 2 * tgt_len[:, None]
    start = np.where((pos == end) | ((pos == end - 1) & (tgt_len[:, None] > 0)), 0.0, _NEG_INF)
    skip_up = np.concatenate([skip[:, 2:], np.zeros((n, 2), bool)], axis=1)  # s -> s+2 allowed
    beta = np.full((t_max, n, width), _NEG_INF)
    b = np.full((n, width), _NEG_INF)
    for t in range(t_max - 1, -1, -1):
        nxt = _lse(b, _shift(b[:, ::-1], 1)[:, ::-1],
                   np.where(skip_up, _shift(b[:, ::-1], 2)[:, ::-1], _NEG_INF))
        b = np.where((t == in_len - 1)[:, None], start,
                     np.where((t < in_len - 1)[:, None], nxt, _NEG_INF)) + lp[t][rows, ext]
        beta[t] = b
    return beta


def _ctc_grad_kernel(xp, log_probs, targets, input_lengths, target_lengths, blank=0):
    lp, ext, skip, in_len, tgt_len = _prepare(log_probs, targets, input_lengths,
                                              target_lengths, blank)
    alpha = _alphas(lp, ext, skip, in_len)
    nll = _nll(alpha, in_len, tgt_len)
    beta = _betas(lp, ext, skip, in_len, tgt_len)
    t_max, n, c = lp.shape
    picked = np.take_along_axis(lp, np.broadcast_to(ext[None], alpha.shape), axis=2)
    log_occ = alpha + beta - picked       # NOTE: alpha and beta both include lp[t]
    with np.errstate(invalid="ignore", over="ignore"):
        occ = np.where(np.isfinite(alpha + beta) & np.isfinite(nll)[None, :, None],
                       np.exp(log_occ + nll[None, :, None]), 0.0)
    flat = (np.arange(t_max)[:, None, None] * n + np.arange(n)[None, :, None]) * c + ext[None]
    gamma = np.bincount(flat.reshape(-1), weights=occ.reshape(-1), minlength=t_max * n * c)
    return (-gamma.reshape(t_max, n, c)).astype(log_probs.dtype)


def _shape(lp, targets, in_len, tgt_len, blank=0):
    return (lp[1],)


ctc_loss_grad_p = defop(
    "ctc_loss_grad", nin=4, kernel=_ctc_grad_kernel, params={"blank": 0}, dtype="same",
    shape=lambda lp, *rest, blank=0: tuple(lp), save=None, differentiable=False,
    nondiff_argnums=(1, 2, 3))


def _grad(lp, targets, in_len, tgt_len, blank):
    from . import dispatch
    return dispatch.apply(ctc_loss_grad_p, (lp, targets, in_len, tgt_len), {"blank": blank})


ctc_loss_p = defop(
    "ctc_loss", nin=4, kernel=_ctc_kernel, params={"blank": 0}, dtype="same", shape=_shape,
    save="inputs", nondiff_argnums=(1, 2, 3),
    vjp=(lambda g, out, lp, tg, il, tl, blank: g[None, :, None] * _grad(lp, tg, il, tl, blank),
         None, None, None),
    jvp=lambda t, out, lp, tg, il, tl, blank: (t[0] * _grad(lp, tg, il, tl, blank)).sum((0, 2)))
