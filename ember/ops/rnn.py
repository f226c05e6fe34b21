"""Fused recurrent layers: ``lstm_layer``, ``gru_layer``, ``rnn_layer`` and their gradients.

Each primitive runs ONE layer in ONE direction over a whole time-major sequence. The GRU
and RNN take the input projection of every step at once (``xp = x @ W_ihᵀ + biases``, one
GEMM outside); the LSTM takes the layer input itself with ``W_ih`` and the summed bias
``b = b_ih + b_hh`` (PyTorch's ``_VF.lstm``: its float32 kernel computes ``x_t W_ihᵀ +
h_{t-1} W_hhᵀ`` as one GEMM chain per step and adds the bias in the gates' epilogue, so
no projection tensor, bias add or bias column sum exists outside):

====================================================  ====================================
``lstm_layer(x (L,N,IN), h0, c0, w_ih, w_hh, b)``     ``(L, N, 6H)``: ``[h_t | c_t | i f g o]``
``gru_layer(xp (L,N,3H), h0, w_hh (3H,H), b_hh)``     ``(L, N, H)``: ``h_t`` per step
``rnn_layer(xp (L,N,H), h0, w_hh (H,H), relu)``       ``(L, N, H)``: ``h_t`` per step
====================================================  ====================================

Gate order and formulas are PyTorch's (LSTM i, f, g, o; GRU r, z, n with
``n = tanh(xn + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``).

NOTE: primitives, not composites of the per-step ops, because the composite costs about
ten dispatched ops (each with an autograd node) per time step forward and as many
backward; here a step is one GEMM plus a few in-place NumPy ufuncs, and the backward
(``*_layer_grad``) is BPTT with the gate pre-activations recomputed for all steps in one
GEMM (the LSTM saves its activated gates instead), per-step work reduced to the
recurrent GEMM and a few ufuncs, and the weight gradient one GEMM batched over time. A
primitive has one output, so the LSTM packs its cell states and gates beside its hidden
states and each ``*_grad`` returns its input gradients
flattened and concatenated (as ``sdpa_grad``).

Gradients: the VJP calls the ``*_grad`` primitive unless grad mode is on during the
backward (``create_graph=True``); then the same BPTT runs in differentiable Ember ops, so
higher derivatives work. The JVPs are tangent recursions in Ember ops.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..autograd.grad_mode import state
from ..errors import DTypeError, ShapeError
from . import dispatch
from .join import cat, stack
from .linalg import matmul
from . import batching_rules as _vb
from .registry import defop
from . import _rnn_cpu

__all__ = ["lstm_layer", "lstm_hidden", "gru_layer", "rnn_layer"]

_apply = dispatch.apply


# ------------------------------------------------------------------ helpers
def _sig_(xp, a):
    """``sigmoid(a)`` in place, as ``0.5 * tanh(0.5 a) + 0.5`` (no overflow)."""
    a *= 0.5
    xp.tanh(a, out=a)
    a *= 0.5
    a += 0.5
    return a


def _sig_np(xp, a):
    return _sig_(xp, a.copy())


def _prev(xp, first, seq):
    """``[first, seq[0], ..., seq[L-2]]``: the state each step starts from."""
    return xp.concatenate([first[None], seq[:-1]], 0)



# ------------------------------------------------------------------ LSTM
# NOTE: the output keeps each step's activated gates beside h and c, (L, N, 6H) =
# [h | c | i f g o], so the backward reads them instead of recomputing the recurrent
# GEMM of every step (a third of the layer's FLOPs).
def _lstm_np(xp, x, h0, c0, w):
    L, N, G = x.shape
    H = G // 4
    out = xp.empty((L, N, 6 * H), dtype=x.dtype)
    wt, h, c = xp.ascontiguousarray(w.T), h0, c0     # NOTE: a transposed operand is slower
    pre = xp.empty((N, G), dtype=x.dtype)
    for t in range(L):
        xp.matmul(h, wt, out=pre)
        pre += x[t]
        _sig_(xp, pre[:, :2 * H])
        xp.tanh(pre[:, 2 * H:3 * H], out=pre[:, 2 * H:3 * H])
        _sig_(xp, pre[:, 3 * H:])
        out[t, :, 2 * H:] = pre
        hn, cn = out[t, :, :H], out[t, :, H:2 * H]
        xp.multiply(pre[:, H:2 * H], c, out=cn)
        cn += pre[:, :H] * pre[:, 2 * H:3 * H]
        xp.tanh(cn, out=hn)
        hn *= pre[:, 3 * H:]
        h, c = hn, cn
    return out


def _lstm_coeffs(i, f, g, o, tc, cprev):
    """Local derivatives of one LSTM step, shared by the NumPy and the Ember-ops BPTT:
    ``d o_pre = dh K1``, ``dc += dh K2``, ``d(i, f, g)_pre = dc (K3, K4, K5)``."""
    return tc * o * (1 - o), o * (1 - tc * tc), i * (1 - i) * g, f * (1 - f) * cprev, \
        i * (1 - g * g)


def _gate_dact(i, f, g, o):
    """Derivatives of the gates' activations at the activated values."""
    return i * (1 - i), f * (1 - f), 1 - g * g, o * (1 - o)


def _lstm_proj(xp, x, w_ih, b):
    """``b + x @ W_ihᵀ`` for every step, ``(L, N, 4H)`` (``addmm``'s order and rounding)."""
    L, N, IN = x.shape
    return (b + xp.matmul(x.reshape(L * N, IN), w_ih.T)).reshape(L, N, w_ih.shape[0])


def _lstm_layer_np(xp, x, h0, c0, w_ih, w_hh, b):
    return _lstm_np(xp, _lstm_proj(xp, x, w_ih, b), h0, c0, w_hh)


def _lstm_bptt_np(xp, gout, out, h0, c0, w):
    """BPTT from the projections: ``(dG (L, N, 4H), dh0, dc0)`` (dG = d projections)."""
    L, N, S = out.shape
    H, G = S // 6, 4 * (S // 6)
    hs, cs = out[..., :H], out[..., H:2 * H]
    hprev, cprev = _prev(xp, h0, hs), _prev(xp, c0, cs)
    i, f, g, o = (out[..., (2 + k) * H:(3 + k) * H] for k in range(4))
    tc = xp.tanh(cs)
    k1, k2, k3, k4, k5 = _lstm_coeffs(i, f, g, o, tc, cprev)
    k345 = xp.stack([k3, k4, k5], 2)                       # (L, N, 3, H)
    # the gates' own gradient (nonzero only when a caller reads them) enters directly
    direct = gout[..., 2 * H:] * xp.concatenate(_gate_dact(i, f, g, o), -1)
    dg = xp.empty((L, N, 4, H), dtype=out.dtype)
    dh, dc = xp.zeros_like(h0), xp.zeros_like(c0)
    for t in range(L - 1, -1, -1):
        dh = gout[t, :, :H] + dh
        dc = gout[t, :, H:2 * H] + dc
        dc += dh * k2[t]
        xp.multiply(dc[:, None, :], k345[t], out=dg[t, :, :3])
        xp.multiply(dh, k1[t], out=dg[t, :, 3])
        dg[t] += direct[t].reshape(N, 4, H)
        dc = dc * f[t]
        dh = xp.matmul(dg[t].reshape(N, G), w)
    return dg.reshape(L, N, G), dh, dc


# NOTE: W_ih's, W_hh's and b's gradients are ONE GEMM over [x_t | h_{t-1} | 1]
# (L N, IN + H + 1): 1400-1490 us against 1530-1590 for the two weight GEMMs and 1490-1530
# with the column sum (IN = 64, H = 128, L N = 1024, OpenBLAS, one thread)
def _lstm_weight_grads(xp, dg, xh1, out=None):
    """``[d W_ih | d W_hh | d b] = dGᵀ [x | h_prev | 1]``, ``(4H, IN + H + 1)``, over all
    steps (into ``out`` when given)."""
    L, N, G = dg.shape
    d2, xh2 = dg.reshape(L * N, G), xh1.reshape(L * N, xh1.shape[-1])
    return xp.matmul(d2.T, xh2, out=out)


def _lstm_layer_grad_np(xp, gout, out, x, h0, c0, w_ih, w_hh, b):
    H = h0.shape[-1]
    dg, dh, dc = _lstm_bptt_np(xp, gout, out, h0, c0, w_hh)
    dx = xp.matmul(dg, w_ih)
    hprev = _prev(xp, h0, out[..., :H])[:len(out)]
    xh1 = xp.concatenate([x, hprev, xp.ones(hprev.shape[:2] + (1,), dtype=x.dtype)], -1)
    dw = _lstm_weight_grads(xp, dg, xh1)
    return xp.concatenate([a.reshape(-1) for a in (dx, dh, dc, dw)])


def _lstm_parts(out, h0, c0):
    """States before each step, gate activations and ``tanh(c)`` from the saved output."""
    H = h0.shape[-1]
    hs, cs = out[..., :H], out[..., H:2 * H]
    hprev = cat([h0.unsqueeze(0), hs[:-1]], 0)
    cprev = cat([c0.unsqueeze(0), cs[:-1]], 0)
    i, f, g, o = out[..., 2 * H:].chunk(4, -1)
    return hprev, cprev, i, f, g, o, cs.tanh()


def _lstm_vjp(gout, out, x, h0, c0, w_ih, w_hh, b):
    if not state.grad_enabled:
        flat = _apply(lstm_layer_grad_p, (gout, out, x, h0, c0, w_ih, w_hh, b), {})
        IN, H = x.shape[-1], h0.shape[-1]
        dx, dh, dc, dw = _rnn_cpu._slots(flat, x.shape, h0.shape, c0.shape,
                                         (w_ih.shape[0], IN + H + 1))
        return dx, dh, dc, dw[:, :IN], dw[:, IN:IN + H], dw[:, IN + H]
    L, N, IN = x.shape
    H = h0.shape[-1]
    dxp, dh, dc, dwh = _lstm_bptt(gout, out, h0, c0, w_hh)
    d2 = dxp.reshape(L * N, 4 * H)
    return matmul(dxp, w_ih), dh, dc, matmul(d2.t(), x.reshape(L * N, IN)), dwh, d2.sum(0)


def _lstm_bptt(gout, out, h0, c0, w):
    """BPTT in Ember ops (differentiable): ``(d xp, dh0, dc0, dW_hh)``."""
    L, N, S = out.shape
    H, G = S // 6, 4 * (S // 6)
    hprev, cprev, i, f, g, o, tc = _lstm_parts(out, h0, c0)
    k1, k2, k3, k4, k5 = _lstm_coeffs(i, f, g, o, tc, cprev)
    direct = gout[..., 2 * H:] * cat(list(_gate_dact(i, f, g, o)), -1)
    dh, dc, dgs = h0.new_zeros(h0.shape), c0.new_zeros(c0.shape), [None] * L
    for t in range(L - 1, -1, -1):
        dh = gout[t, :, :H] + dh
        dc = gout[t, :, H:2 * H] + dc + dh * k2[t]
        dgs[t] = cat([dc * k3[t], dc * k4[t], dc * k5[t], dh * k1[t]], -1) + direct[t]
        dc = dc * f[t]
        dh = matmul(dgs[t], w)
    dx = stack(dgs, 0) if L else out.new_zeros((L, N, G))
    dw = matmul(dx.reshape(L * N, G).t(), hprev.reshape(L * N, H))
    return dx, dh, dc, dw


def _lstm_jvp(tans, out, x, h0, c0, w_ih, w, b):
    tx, th, tcell, twi, tw, tb = tans
    hprev, cprev, i, f, g, o, tc = _lstm_parts(out, h0, c0)
    # the tangent of every step's pre-activation, but the recurrent term th @ W_hhᵀ added
    # per step
    tpre = matmul(tx, w_ih.t()) + matmul(x, twi.t()) + tb + matmul(hprev, tw.t())
    outs = []
    for t in range(x.shape[0]):
        di, df, dg, do = (tpre[t] + matmul(th, w.t())).chunk(4, -1)
        di, df, dg, do = (d * a for d, a in zip((di, df, dg, do),
                                                _gate_dact(i[t], f[t], g[t], o[t])))
        tcell = df * cprev[t] + f[t] * tcell + di * g[t] + i[t] * dg
        th = do * tc[t] + o[t] * (1 - tc[t] * tc[t]) * tcell
        outs.append(cat([th, tcell, di, df, dg, do], -1))
    return stack(outs, 0) if outs else out.new_zeros(out.shape)


# NOTE: ``lstm_hidden`` is the hidden states of an lstm_layer output as a contiguous
# (L, N, H) copy. A primitive because the generic slice's gradient (zeros of the full
# (L, N, 6H) output, copied, then written) cost ~0.6 ms per layer in the benchmark's step;
# this one's VJP is one concatenation with broadcast zeros, and it replaces the
# ``.contiguous()`` copy the slice needed anyway.
def _hidden_vjp(g, out, x):
    H = g.shape[-1]
    zeros = g.new_zeros((1,) * g.ndim).expand(*g.shape[:-1], 5 * H)
    return (cat([g, zeros], -1),)


def _hidden_shape(s):
    if len(s) == 0 or s[-1] % 6:
        raise ShapeError(f"lstm_hidden: expected an lstm_layer output (..., 6H); got {tuple(s)}")
    return tuple(s[:-1]) + (s[-1] // 6,)


# ------------------------------------------------------------------ GRU
def _gru_np(xp, x, h0, w, b):
    L, N, G = x.shape
    H = G // 3
    out = xp.empty((L, N, H), dtype=x.dtype)
    hp = xp.empty((N, G), dtype=x.dtype)
    wt, h = xp.ascontiguousarray(w.T), h0
    for t in range(L):
        xp.matmul(h, wt, out=hp)
        hp += b
        rz = _sig_(xp, hp[:, :2 * H] + x[t, :, :2 * H])
        n = rz[:, :H] * hp[:, 2 * H:]
        n += x[t, :, 2 * H:]
        xp.tanh(n, out=n)
        hn = out[t]
        xp.subtract(h, n, out=hn)
        hn *= rz[:, H:]
        hn += n
        h = hn
    return out


def _gru_coeffs(r, z, n, hn, hprev):
    """``d(r, z, n)_pre = dh (Kr, Kz, Kn)`` and ``d hn = dh Khn`` of one GRU step."""
    kn = (1 - z) * (1 - n * n)
    return kn * hn * r * (1 - r), (hprev - n) * z * (1 - z), kn, kn * r


def _gru_grad_np(xp, gout, out, x, h0, w, b):
    L, N, G = x.shape
    H = G // 3
    hprev = _prev(xp, h0, out)
    hp = xp.matmul(hprev, w.T) + b
    r = _sig_np(xp, x[..., :H] + hp[..., :H])
    z = _sig_np(xp, x[..., H:2 * H] + hp[..., H:2 * H])
    n = xp.tanh(x[..., 2 * H:] + r * hp[..., 2 * H:])
    kr, kz, kn, khn = _gru_coeffs(r, z, n, hp[..., 2 * H:], hprev)
    kh = xp.stack([kr, kz, khn], 2)                        # (L, N, 3, H)
    dhp = xp.empty((L, N, 3, H), dtype=x.dtype)
    dhs = xp.empty((L, N, H), dtype=x.dtype)
    dh = xp.zeros_like(h0)
    for t in range(L - 1, -1, -1):
        dh = xp.add(gout[t], dh, out=dhs[t])
        xp.multiply(dh[:, None, :], kh[t], out=dhp[t])
        dh = dh * z[t] + xp.matmul(dhp[t].reshape(N, G), w)
    dx = (dhs[:, :, None, :] * xp.stack([kr, kz, kn], 2)).reshape(-1)
    dhp = dhp.reshape(L * N, G)
    dw = xp.matmul(dhp.T, hprev.reshape(L * N, H))
    return xp.concatenate([dx, dh.reshape(-1), dw.reshape(-1), dhp.sum(0)])


def _gru_parts(out, x, h0, w, b):
    hprev = cat([h0.unsqueeze(0), out[:-1]], 0)
    hr, hz, hn = (matmul(hprev, w.t()) + b).chunk(3, -1)
    xr, xz, xn = x.chunk(3, -1)
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    return hprev, r, z, (xn + r * hn).tanh(), hn


def _gru_vjp(gout, out, x, h0, w, b):
    if not state.grad_enabled:
        flat = _apply(gru_layer_grad_p, (gout, out, x, h0, w, b), {})
        return _rnn_cpu._slots(flat, x.shape, h0.shape, w.shape, b.shape)
    L, N, G = x.shape
    H = G // 3
    hprev, r, z, n, hn = _gru_parts(out, x, h0, w, b)
    kr, kz, kn, khn = _gru_coeffs(r, z, n, hn, hprev)
    dh, dhs, dhps = h0.new_zeros(h0.shape), [None] * L, [None] * L
    for t in range(L - 1, -1, -1):
        dh = gout[t] + dh
        dhs[t] = dh
        dhps[t] = cat([dh * kr[t], dh * kz[t], dh * khn[t]], -1)
        dh = dh * z[t] + matmul(dhps[t], w)
    if L == 0:
        return x.new_zeros(x.shape), dh, w.new_zeros(w.shape), b.new_zeros(b.shape)
    d = stack(dhs, 0)
    dx = cat([d * kr, d * kz, d * kn], -1)
    dhp = stack(dhps, 0).reshape(L * N, G)
    return dx, dh, matmul(dhp.t(), hprev.reshape(L * N, H)), dhp.sum(0)


def _gru_jvp(tans, out, x, h0, w, b):
    tx, th, tw, tb = tans
    hprev, r, z, n, hn = _gru_parts(out, x, h0, w, b)
    tfix = matmul(hprev, tw.t()) + tb
    outs = []
    for t in range(x.shape[0]):
        dr, dz, dhn = (tfix[t] + matmul(th, w.t())).chunk(3, -1)
        xr, xz, xn = tx[t].chunk(3, -1)
        dr = (xr + dr) * r[t] * (1 - r[t])
        dz = (xz + dz) * z[t] * (1 - z[t])
        dn = (xn + dr * hn[t] + r[t] * dhn) * (1 - n[t] * n[t])
        th = dn * (1 - z[t]) + dz * (hprev[t] - n[t]) + z[t] * th
        outs.append(th)
    return stack(outs, 0) if outs else out.new_zeros(out.shape)


# ------------------------------------------------------------------ Elman RNN
def _rnn_np(xp, x, h0, w, relu):
    L = x.shape[0]
    out = xp.empty(x.shape, dtype=x.dtype)
    wt, h = xp.ascontiguousarray(w.T), h0
    for t in range(L):
        hn = out[t]
        xp.matmul(h, wt, out=hn)
        hn += x[t]
        if relu:
            xp.maximum(hn, 0, out=hn)
        else:
            xp.tanh(hn, out=hn)
        h = hn
    return out


def _rnn_grad_np(xp, gout, out, x, h0, w, relu):
    L, N, H = x.shape
    dact = (out > 0).astype(x.dtype) if relu else 1 - out * out
    dpre = xp.empty(x.shape, dtype=x.dtype)
    dh = xp.zeros_like(h0)
    for t in range(L - 1, -1, -1):
        xp.multiply(gout[t] + dh, dact[t], out=dpre[t])
        dh = xp.matmul(dpre[t], w)
    dw = xp.matmul(dpre.reshape(L * N, H).T, _prev(xp, h0, out).reshape(L * N, H))
    return xp.concatenate([dpre.reshape(-1), dh.reshape(-1), dw.reshape(-1)])


def _rnn_dact(out, relu):
    return (out > 0).to(out.dtype) if relu else 1 - out * out


def _rnn_vjp(gout, out, x, h0, w, relu):
    if not state.grad_enabled:
        flat = _apply(rnn_layer_grad_p, (gout, out, x, h0, w), {"relu": relu})
        return _rnn_cpu._slots(flat, x.shape, h0.shape, w.shape)
    L, N, H = x.shape
    dact, dh, dps = _rnn_dact(out, relu), h0.new_zeros(h0.shape), [None] * L
    for t in range(L - 1, -1, -1):
        dps[t] = (gout[t] + dh) * dact[t]
        dh = matmul(dps[t], w)
    if L == 0:
        return x.new_zeros(x.shape), dh, w.new_zeros(w.shape)
    dx = stack(dps, 0)
    hprev = cat([h0.unsqueeze(0), out[:-1]], 0)
    return dx, dh, matmul(dx.reshape(L * N, H).t(), hprev.reshape(L * N, H))


def _rnn_jvp(tans, out, x, h0, w, relu):
    tx, th, tw = tans
    dact = _rnn_dact(out, relu)
    hprev = cat([h0.unsqueeze(0), out[:-1]], 0)
    tfix = tx + matmul(hprev, tw.t())
    outs = []
    for t in range(x.shape[0]):
        th = (tfix[t] + matmul(th, w.t())) * dact[t]
        outs.append(th)
    return stack(outs, 0) if outs else out.new_zeros(out.shape)


# ------------------------------------------------------------------ rules
def _dtype_rule(name):
    def rule(*xs, **params):
        d = xs[0]._dtype
        if d.category != _dt.FLOAT or any(x._dtype is not d for x in xs):
            raise DTypeError(f"{name}: inputs must share one floating point dtype; got "
                             f"{', '.join(x._dtype.name for x in xs)}")
        return None, d
    return rule


def _check(name, gates, xs, hs, ws, bs=None, cs=None):
    ok = len(xs) == 3 and len(hs) == 2 and len(ws) == 2 and xs[2] == gates * ws[1] and \
        tuple(ws) == (xs[2], hs[1]) and hs[0] == xs[1] and (cs is None or cs == hs) and \
        (bs is None or tuple(bs) == (xs[2],))
    if not ok:
        H = "H"
        want = f"xp (L, N, {gates}{H}), h0 (N, {H})" + (", c0 (N, H)" if cs else "") + \
            f", w_hh ({gates}{H}, {H})" + (f", b_hh ({gates}{H},)" if bs else "")
        got = ", ".join(str(tuple(s)) for s in (xs, hs, cs, ws, bs) if s is not None)
        raise ShapeError(f"{name}: expected {want}; got {got}")


def _lstm_shape(xs, hs, cs, wis, whs, bs):
    H = hs[1] if len(hs) == 2 else 0
    ok = len(xs) == 3 and len(hs) == 2 and tuple(cs) == tuple(hs) and hs[0] == xs[1] and \
        tuple(wis) == (4 * H, xs[2]) and tuple(whs) == (4 * H, H) and tuple(bs) == (4 * H,)
    if not ok:
        raise ShapeError(f"lstm_layer: expected x (L, N, IN), h0 (N, H), c0 (N, H), w_ih "
                         f"(4H, IN), w_hh (4H, H), b (4H,); got "
                         f"{', '.join(str(tuple(s)) for s in (xs, hs, cs, wis, whs, bs))}")
    return (xs[0], xs[1], 6 * H)


def _gru_shape(xs, hs, ws, bs):
    _check("gru_layer", 3, xs, hs, ws, bs=bs)
    return (xs[0], xs[1], hs[1])


def _rnn_shape(xs, hs, ws, relu=False):
    _check("rnn_layer", 1, xs, hs, ws)
    return tuple(xs)


def _numel(*shapes):
    total = 0
    for s in shapes:
        n = 1
        for d in s:
            n *= d
        total += n
    return (total,)


lstm_layer_p = defop(
    "lstm_layer", nin=6, dtype=_dtype_rule("lstm_layer"), save="both",
    kernels={"xp": _lstm_layer_np,
             "cpu": lambda xp, *a: _rnn_cpu.lstm_layer(xp, *a, fallback=_lstm_layer_np)},
    shape=_lstm_shape, vjp=_lstm_vjp, jvp=_lstm_jvp,
    batch=_vb.recurrent_layer("lstm_layer", 3),
    doc="one LSTM layer over a sequence: [h_t | c_t | gates_t] from the input x, h0, c0, "
        "W_ih, W_hh and b = b_ih + b_hh")
lstm_layer_grad_p = defop(
    "lstm_layer_grad", nin=8, dtype=_dtype_rule("lstm_layer_grad"),
    kernels={"xp": _lstm_layer_grad_np,
             "cpu": lambda xp, *a: _rnn_cpu.lstm_layer_grad(xp, *a,
                                                             fallback=_lstm_layer_grad_np)},
    save=None, differentiable=False, batch="loop",
    shape=lambda gs, os, xs, hs, cs, wis, whs, bs: _numel(xs, hs, cs, wis, whs, bs),
    doc="d x | d h0 | d c0 | [d W_ih | d W_hh | d b] (4H, IN + H + 1) of lstm_layer, "
        "flattened and concatenated")
lstm_hidden_p = defop(
    "lstm_hidden", nin=1, dtype="same", save=None, shape=_hidden_shape,
    kernel=lambda xp, out: out[..., :out.shape[-1] // 6].copy(),
    vjp=_hidden_vjp, jvp="linear", batch="front",
    doc="the hidden states (first sixth of the last dim) of an lstm_layer output, contiguous")
gru_layer_p = defop(
    "gru_layer", nin=4, dtype=_dtype_rule("gru_layer"), save="both",
    kernels={"xp": _gru_np, "cpu": lambda xp, *a: _rnn_cpu.gru(xp, *a, fallback=_gru_np)},
    shape=_gru_shape, vjp=_gru_vjp, jvp=_gru_jvp,
    batch=_vb.recurrent_layer("gru_layer", 2),
    doc="one GRU layer over a sequence: h_t from input projections, h0, W_hh, b_hh")
gru_layer_grad_p = defop(
    "gru_layer_grad", nin=6, dtype=_dtype_rule("gru_layer_grad"),
    kernels={"xp": _gru_grad_np,
             "cpu": lambda xp, *a: _rnn_cpu.gru_grad(xp, *a, fallback=_gru_grad_np)},
    save=None, differentiable=False, batch="loop",
    shape=lambda gs, os, xs, hs, ws, bs: _numel(xs, hs, ws, bs),
    doc="d xp | d h0 | d W_hh | d b_hh of gru_layer, flattened and concatenated")
rnn_layer_p = defop(
    "rnn_layer", nin=3, params={"relu": False}, dtype=_dtype_rule("rnn_layer"),
    kernel=_rnn_np, save="both", shape=_rnn_shape, vjp=_rnn_vjp, jvp=_rnn_jvp,
    batch=_vb.recurrent_layer("rnn_layer", 1),
    doc="one Elman RNN layer (tanh or relu) over a sequence from input projections")
rnn_layer_grad_p = defop(
    "rnn_layer_grad", nin=5, params={"relu": False}, dtype=_dtype_rule("rnn_layer_grad"),
    kernel=_rnn_grad_np, save=None, differentiable=False, batch="loop",
    shape=lambda gs, os, xs, hs, ws, relu=False: _numel(xs, hs, ws),
    doc="d xp | d h0 | d W_hh of rnn_layer, flattened and concatenated")


def lstm_layer(x, h0, c0, w_ih, w_hh, b):
    """One LSTM layer over a time-major sequence (fused; see the module docstring).

    Args:
        x: the layer's input ``(L, N, IN)``.
        h0, c0: initial states ``(N, H)``.
        w_ih, w_hh: input and recurrent weights ``(4H, IN)``, ``(4H, H)``, gates i, f, g, o.
        b: the bias ``b_ih + b_hh``, ``(4H,)`` (zeros for a layer without bias).

    Returns:
        ``(L, N, 6H)``: per step the hidden state (first ``H``), the cell state, then the
        activated gates i, f, g, o (what the backward reads).
    """
    return _apply(lstm_layer_p, (x, h0, c0, w_ih, w_hh, b), {})


def lstm_hidden(out):
    """The hidden states ``out[..., :H]`` of an :func:`lstm_layer` output ``(..., 6H)``, as a
    contiguous tensor (its gradient is written without a full-size scatter)."""
    return _apply(lstm_hidden_p, (out,), {})


def gru_layer(xp, h0, w_hh, b_hh):
    """One GRU layer over a time-major sequence: ``(L, N, H)`` hidden states.

    Args:
        xp: ``x @ W_ihᵀ + b_ih`` of every step, ``(L, N, 3H)``, gates r, z, n.
        h0: initial state ``(N, H)``.
        w_hh, b_hh: recurrent weight ``(3H, H)`` and bias ``(3H,)`` (``b_hn`` stays inside
            ``r * (W_hn h + b_hn)``, PyTorch's formula).
    """
    return _apply(gru_layer_p, (xp, h0, w_hh, b_hh), {})


def rnn_layer(xp, h0, w_hh, relu=False):
    """One Elman RNN layer: ``h_t = act(xp_t + h_{t-1} W_hhᵀ)``, ``(L, N, H)``.

    Args:
        xp: ``x @ W_ihᵀ + b_ih + b_hh`` of every step, ``(L, N, H)``.
        h0: initial state ``(N, H)``.
        w_hh: recurrent weight ``(H, H)``.
        relu: ReLU instead of tanh.
    """
    return _apply(rnn_layer_p, (xp, h0, w_hh), {"relu": bool(relu)})
