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


_FLOOR = -1e300      # a finite stand-in for a maximum of -inf terms (exp(-inf - floor) = 0)


def _alphas(lpx, skip_add, in_len):
    """Forward variables ``alpha[t, n, s]`` in log space, frozen after each input length.

    ``lpx[t, n, s]`` is the log-probability of extended label ``s`` at time ``t``;
    ``skip_add`` is 0 where the ``s - 2 -> s`` transition is allowed, else -inf. Every step
    writes into preallocated buffers (the arrays are small: one NumPy call costs more than
    its arithmetic), the two shifted copies being views of one -inf-padded buffer.
    """
    t_max, n, width = lpx.shape
    alpha = np.empty((t_max, n, width))
    if t_max == 0:
        return alpha
    buf = np.full((n, width + 2), _NEG_INF)
    a, s1, s2_src = buf[:, 2:], buf[:, 1:-1], buf[:, :-2]
    a[:, :2] = lpx[0, :, :2]
    alpha[0] = a
    s2, m, acc, tmp = (np.empty((n, width)) for _ in range(4))
    frozen_from = int(in_len.min(initial=t_max))
    with np.errstate(divide="ignore", invalid="ignore"):
        for t in range(1, t_max):
            np.add(s2_src, skip_add, out=s2)
            np.maximum(a, s1, out=m)
            np.maximum(m, s2, out=m)
            np.maximum(m, _FLOOR, out=m)
            for i, term in enumerate((a, s1, s2)):
                np.subtract(term, m, out=tmp)
                np.exp(tmp, out=tmp)
                if i:
                    acc += tmp
                else:
                    acc[...] = tmp
            np.log(acc, out=acc)
            acc += m
            acc += lpx[t]
            if t >= frozen_from:
                acc = np.where((t < in_len)[:, None], acc, a)
            a[...] = acc
            alpha[t] = a
    return alpha


def _nll(alpha, in_len, tgt_len):
    if alpha.shape[0] == 0:                  # no time steps: every input length is 0
        return np.where(tgt_len == 0, 0.0, np.inf)
    n = alpha.shape[1]
    last = alpha[np.maximum(in_len - 1, 0), np.arange(n)]         # (N, 2S+1)
    end = 2 * tgt_len                                              # index of the last blank
    a_end = last[np.arange(n), end]
    a_lab = np.where(tgt_len > 0, last[np.arange(n), np.maximum(end - 1, 0)], _NEG_INF)
    with np.errstate(divide="ignore"):
        nll = -np.logaddexp(a_end, a_lab)
    # NOTE: an empty input explains only an empty target (one alignment, probability 1)
    return np.where(in_len == 0, np.where(tgt_len == 0, 0.0, np.inf), nll)


def _prepare(lp, targets, in_len, tgt_len, blank):
    """float64 log-probs, extended labels, their picked log-probs and skip masks."""
    lp = np.asarray(lp, np.float64)
    in_len, tgt_len = np.asarray(in_len, np.int64), np.asarray(tgt_len, np.int64)
    ext = _extended(np.asarray(targets, np.int64), tgt_len, blank)
    lpx = np.take_along_axis(lp, np.broadcast_to(ext[None], (lp.shape[0],) + ext.shape), 2)
    return lp, ext, lpx, _skip_add(ext), in_len, tgt_len


def _skip_add(ext):
    """0 where the ``s - 2 -> s`` transition is allowed, else -inf: ``s`` holds a target
    (odd ``s``; by position, as ATen, so a target equal to ``blank`` is still a target) that
    differs from the one at ``s - 2``."""
    prev2 = np.full_like(ext, -1)
    prev2[:, 2:] = ext[:, :-2]
    odd = (np.arange(ext.shape[1]) % 2 == 1)[None, :]
    return np.where(odd & (ext != prev2), 0.0, _NEG_INF)


def _ctc_kernel(xp, log_probs, targets, input_lengths, target_lengths, blank=0):
    _, _, lpx, skip_add, in_len, tgt_len = _prepare(log_probs, targets, input_lengths,
                                                    target_lengths, blank)
    return _nll(_alphas(lpx, skip_add, in_len), in_len, tgt_len).astype(log_probs.dtype)


def _reversal(in_len, tgt_len, t_max, width):
    """Index arrays mapping each sample's time and label axes back to front: the backward
    (beta) recursion is the forward one on the reversed problem."""
    t = np.arange(t_max)[:, None]
    t_idx = np.where(t < in_len[None, :], in_len[None, :] - 1 - t, t)          # (T, N)
    s = np.arange(width)[None, :]
    s_idx = np.where(s <= 2 * tgt_len[:, None], 2 * tgt_len[:, None] - s, s)   # (N, L)
    return t_idx, s_idx


def _alphas_and_betas(lpx, ext, skip_add, blank, in_len, tgt_len):
    """Forward and backward variables; ``beta[t, n, s]`` includes ``lpx[t]`` like alpha.

    The backward recursion is the forward one on each sample's problem reversed in time
    and in labels, so both run as one forward recursion over a batch of 2N (one NumPy
    call per step serves both).
    """
    t_max, n, width = lpx.shape
    t_idx, s_idx = _reversal(in_len, tgt_len, t_max, width)
    rows = np.arange(n)
    rev = lpx[t_idx[:, :, None], rows[None, :, None], s_idx[None]]
    # NOTE: labels past a sample's end stay -inf: they are not part of its sequence
    rev = np.where(np.arange(width)[None, None, :] <= 2 * tgt_len[None, :, None], rev, _NEG_INF)
    skip_rev = _skip_add(np.take_along_axis(ext, s_idx, 1))
    both = _alphas(np.concatenate([lpx, rev], 1), np.concatenate([skip_add, skip_rev]),
                   np.concatenate([in_len, in_len]))
    alpha, beta_rev = both[:, :n], both[:, n:]
    beta = beta_rev[t_idx[:, :, None], rows[None, :, None], s_idx[None]]
    inside = np.arange(t_max)[:, None, None] < in_len[None, :, None]
    return alpha, np.where(inside, beta, _NEG_INF)


def _ctc_grad_kernel(xp, log_probs, targets, input_lengths, target_lengths, blank=0):
    lp, ext, lpx, skip_add, in_len, tgt_len = _prepare(log_probs, targets, input_lengths,
                                                       target_lengths, blank)
    alpha, beta = _alphas_and_betas(lpx, ext, skip_add, blank, in_len, tgt_len)
    nll = _nll(alpha, in_len, tgt_len)
    t_max, n, c = lp.shape
    with np.errstate(invalid="ignore", over="ignore"):
        ab = alpha + beta
        # NOTE: alpha and beta both include lpx[t]; -inf - -inf (a zero-probability label)
        # and infinite losses contribute nothing
        log_occ = np.where(np.isneginf(ab), _NEG_INF, ab - lpx) + nll[None, :, None]
        occ = np.where(np.isfinite(nll)[None, :, None], np.exp(log_occ), 0.0)
    flat = (np.arange(t_max)[:, None, None] * n + np.arange(n)[None, :, None]) * c + ext[None]
    gamma = np.bincount(flat.reshape(-1), weights=occ.reshape(-1), minlength=t_max * n * c)
    return (-gamma.reshape(t_max, n, c)).astype(log_probs.dtype)


def _shape(lp, targets, in_len, tgt_len, blank=0):
    return (lp[1],)


ctc_loss_grad_p = defop(
    "ctc_loss_grad", nin=4, kernels={"cpu": _ctc_grad_kernel}, params={"blank": 0}, dtype="same",
    batch="loop",
    shape=lambda lp, *rest, blank=0: tuple(lp), save=None, differentiable=False,
    nondiff_argnums=(1, 2, 3))


def _grad(lp, targets, in_len, tgt_len, blank):
    from . import dispatch
    return dispatch.apply(ctc_loss_grad_p, (lp, targets, in_len, tgt_len), {"blank": blank})


ctc_loss_p = defop(
    "ctc_loss", nin=4, kernels={"cpu": _ctc_kernel}, params={"blank": 0}, dtype="same", shape=_shape,
    batch="loop",
    save="inputs", nondiff_argnums=(1, 2, 3),
    vjp=(lambda g, out, lp, tg, il, tl, blank: g[None, :, None] * _grad(lp, tg, il, tl, blank),
         None, None, None),
    jvp=lambda t, out, lp, tg, il, tl, blank: (t[0] * _grad(lp, tg, il, tl, blank)).sum((0, 2)))
