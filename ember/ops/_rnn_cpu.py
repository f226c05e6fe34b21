"""The ``"cpu"`` kernels of ``lstm_layer`` / ``gru_layer`` and their gradients: NumPy's GEMM
per step, the rest of the step one C loop (:mod:`ember.codegen.rnn_kernels`); a float32
LSTM runs each direction of its whole sequence, input projection included, as one C call
instead (:mod:`ember.codegen.rnn_gemm`: Ember's GEMM micro-kernel, weights packed once).

Same arithmetic as the NumPy kernels of :mod:`ember.ops.rnn` (the reference and the
fallback: no C compiler, ``EMBER_EAGER_KERNELS=0``, other dtypes), within rounding.
"""
from __future__ import annotations

import threading

from .. import config

# NOTE: per-thread scratch buffers for the backward's big temporaries (the recomputed
# pre-activations, the shifted states): a fresh multi-MiB array is a fresh mmap from
# glibc, and first-touch page faults on it cost more than the GEMMs that fill it (in a VM:
# the LSTM backward 5.4 ms instead of 2.0). Never returned, so never aliased by a result.
_scratch = threading.local()


def _buf(xp, slot, shape, dtype):
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = {}
    a = bufs.get(slot)
    if a is None or a.shape != tuple(shape) or a.dtype != dtype or type(a) is not xp.ndarray:
        a = bufs[slot] = xp.empty(shape, dtype=dtype)
    return a


def _work(xp, size):
    """float32 scratch of at least ``size`` elements (grows only: the layers of a model and
    both directions share it)."""
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = {}
    a = bufs.get("work")
    if a is None or a.size < size or type(a) is not xp.ndarray:
        a = bufs["work"] = xp.empty((size,), dtype="float32")
    return a


def _rk(*arrays):
    """The step kernels' module when they take these arrays, else None."""
    if not config.EAGER_KERNELS:
        return None
    from ..codegen import rnn_kernels as rk      # NOTE: codegen sits above ops
    if arrays[0].dtype not in rk.DTYPES or any(a.dtype != arrays[0].dtype for a in arrays) \
            or rk.kernels() is None:
        return None
    return rk


def _unit(xp, a):
    """``a`` with a unit last stride (the step kernels read rows)."""
    return a if a.ndim == 0 or a.shape[-1] <= 1 or a.strides[-1] == a.itemsize \
        else xp.ascontiguousarray(a)


def _slots(flat, *shapes):
    """Consecutive views of the 1-D ``flat`` with the given shapes (a tuple)."""
    out, at = [], 0
    for s in shapes:
        n = 1
        for d in s:
            n *= d
        out.append(flat[at:at + n].reshape(s))
        at += n
    return tuple(out)


def _prev(xp, first, seq, slot=None):
    if slot is None or seq.shape[0] == 0:
        return xp.concatenate([first[None], seq[:-1]], 0)
    out = _buf(xp, slot, seq.shape, seq.dtype)
    out[0] = first
    out[1:] = seq[:-1]
    return out


def _seq(*arrays):
    """:mod:`ember.codegen.rnn_gemm` when it takes these (float32) arrays, else None."""
    if arrays[0].dtype != "float32" or _rk(*arrays) is None:
        return None
    from ..codegen import rnn_gemm     # NOTE: codegen sits above ops
    return rnn_gemm if rnn_gemm.mode != "off" else None


def lstm_layer(xp, x, h0, c0, w_ih, w_hh, b, fallback):
    """``lstm_layer``'s cpu kernel: the float32 sequence kernel (projection inside), else
    the projection as one GEMM and the per-step path, else ``fallback`` (NumPy)."""
    rk = _rk(x, h0, c0, w_ih, w_hh, b)
    if rk is None:
        return fallback(xp, x, h0, c0, w_ih, w_hh, b)
    x, h, c = (_unit(xp, a) for a in (x, h0, c0))
    rg = _seq(x, h, c, w_ih, w_hh, b)
    if rg is not None:
        H, IN = h.shape[-1], x.shape[-1]
        out = rg.lstm_forward(x, h, c, w_ih, w_hh, b, _work(xp, rg.work_size(H, IN, x.shape[1])))
        if out is not None:
            return out
    from .rnn import _lstm_proj     # NOTE: rnn imports this module
    return lstm(xp, _lstm_proj(xp, x, w_ih, b), h, c, w_hh, rk)


def lstm(xp, x, h0, c0, w, rk):
    """The per-step path from the input projections ``x`` (L, N, 4H): NumPy's GEMM, then
    one C loop (:mod:`ember.codegen.rnn_kernels`) per step."""
    x, h, c = (_unit(xp, a) for a in (x, h0, c0))
    L, N, G = x.shape
    H = G // 4
    out = xp.empty((L, N, 6 * H), dtype=x.dtype)
    pre = xp.empty((N, G), dtype=x.dtype)
    wt, r, it, S = xp.ascontiguousarray(w.T), rk.rows, x.itemsize, 6 * H
    step = rk.Step("lstm_fwd", x.dtype, 6, (N, H, r(x[0]) if L else 0, r(c), S, S, S))
    xs, hs, pp = rk.Seq(x), rk.Seq(out), pre.ctypes.data
    for t in range(L):
        xp.matmul(h, wt, out=pre)
        if t == 1:    # NOTE: from step 1 on the previous cell state is a row of ``out``
            step.geom[3] = S
        o = hs[t]
        step(pp, xs[t], hs[t - 1] + H * it if t else c.ctypes.data, o, o + H * it,
             o + 2 * H * it)
        h = out[t, :, :H]
    return out


def lstm_layer_grad(xp, gout, out, x, h0, c0, w_ih, w_hh, b, fallback):
    """``lstm_layer_grad``'s cpu kernel: BPTT into ``dG`` (a scratch buffer, with ``dx``
    from the sequence kernel), then both weight gradients and the bias gradient as one BLAS
    GEMM over all steps, written into their slot of the flat result."""
    rk = _rk(gout, out, x, h0, c0, w_ih, w_hh, b)
    if rk is None:
        return fallback(xp, gout, out, x, h0, c0, w_ih, w_hh, b)
    gout, out = _unit(xp, gout), xp.ascontiguousarray(out)
    L, N, IN = x.shape
    H = h0.shape[-1]
    G = 4 * H
    # NOTE: the gradients are written into their slots of the flat result (no concatenate)
    flat = xp.empty(L * N * IN + 2 * N * H + G * (IN + H + 1), dtype=x.dtype)
    dx, dh0, dc, dw = _slots(flat, (L, N, IN), (N, H), (N, H), (G, IN + H + 1))
    dg = _buf(xp, "dg", (L, N, G), x.dtype)
    rg = _seq(gout, out, c0, w_ih, w_hh)
    if rg is None or not rg.lstm_backward(
            gout, out, _unit(xp, c0), w_ih, w_hh,
            _work(xp, rg.work_size(H, IN)), dg,
            _buf(xp, "dhr", (N, H), x.dtype), dc, dh0, dx):
        lstm_grad(xp, gout, out, h0, c0, w_hh, rk, dg, dh0, dc)
        xp.matmul(dg, w_ih, out=dx)
    from .rnn import _lstm_weight_grads     # NOTE: rnn imports this module
    # NOTE: one buffer per input size (a stack's first and later layers alternate: one
    # shared slot was a fresh, page-faulting allocation every call)
    xh1 = _buf(xp, ("xh1", IN), (L, N, IN + H + 1), x.dtype)    # [x_t | h_{t-1} | 1]
    xh1[..., :IN] = x
    if L:
        xh1[0, :, IN:IN + H] = h0
        xh1[1:, :, IN:IN + H] = out[:-1, :, :H]
    xh1[..., IN + H] = 1
    _lstm_weight_grads(xp, dg, xh1, dw)
    return flat


def lstm_grad(xp, gout, out, h0, c0, w, rk, dg, dhr, dc):
    """The per-step BPTT path into ``dg`` (L, N, 4H), ``dhr`` (ends as dL/dh0) and ``dc``
    (dL/dc0), all contiguous: one C loop then NumPy's ``dG_t W_hh`` per step."""
    L, N, S = out.shape
    H = S // 6
    dhr[...] = 0
    dc[...] = 0
    cprev = _prev(xp, c0, out[..., H:2 * H], "c")
    r, it = rk.rows, out.itemsize
    sg = r(gout[0]) if L else 0
    step = rk.Step("lstm_bwd", out.dtype, 9, (N, H, H, S, sg, sg, S, sg))
    os_, cps, gs, dgs = (rk.Seq(a) for a in (out, cprev, gout, dg))
    dhp, dcp = dhr.ctypes.data, dc.ctypes.data
    for t in range(L - 1, -1, -1):
        o, g = os_[t], gs[t]
        step(o + 2 * H * it, cps[t], o + H * it, g, g + H * it, g + 2 * H * it, dhp, dcp,
             dgs[t])
        xp.matmul(dg[t], w, out=dhr)


def gru(xp, x, h0, w, b, fallback):
    rk = _rk(x, h0, w, b)
    if rk is None:
        return fallback(xp, x, h0, w, b)
    x, h, b = (_unit(xp, a) for a in (x, h0, b))
    L, N, G = x.shape
    H = G // 3
    out = xp.empty((L, N, H), dtype=x.dtype)
    hp = xp.empty((N, G), dtype=x.dtype)
    wt, r = xp.ascontiguousarray(w.T), rk.rows
    step = rk.Step("gru_fwd", x.dtype, 5, (N, H, r(x[0]) if L else 0, r(h), H))
    xs, hs, pp, bp = rk.Seq(x), rk.Seq(out), hp.ctypes.data, b.ctypes.data
    for t in range(L):
        xp.matmul(h, wt, out=hp)
        if t == 1:    # NOTE: from step 1 on the previous state is a row of ``out``
            step.geom[3] = H
        step(pp, bp, xs[t], hs[t - 1] if t else h.ctypes.data, hs[t])
        h = out[t]
    return out


def gru_grad(xp, gout, out, x, h0, w, b, fallback):
    rk = _rk(gout, out, x, h0, w, b)
    if rk is None:
        return fallback(xp, gout, out, x, h0, w, b)
    gout, x = _unit(xp, gout), _unit(xp, x)
    L, N, G = x.shape
    H = G // 3
    hprev = _prev(xp, h0, out, "h")
    hp = xp.matmul(hprev, w.T, out=_buf(xp, "pre", (L, N, G), x.dtype))
    hp += b
    flat = xp.empty(L * N * G + N * H + G * H + G, dtype=x.dtype)
    dx, dh0, dw, db = _slots(flat, (L, N, G), (N, H), (G, H), (G,))
    dhp = _buf(xp, "dhp", (L, N, G), x.dtype)
    dhr, carry = xp.zeros((N, H), dtype=x.dtype), xp.zeros((N, H), dtype=x.dtype)
    r = rk.rows
    step = rk.Step("gru_bwd", x.dtype, 8, (N, H, r(x[0]), H, r(gout[0])) if L else (0,) * 5)
    seqs = [rk.Seq(a) for a in (hp, x, hprev, gout, dx, dhp)]
    dhrp, cp = dhr.ctypes.data, carry.ctypes.data
    for t in range(L - 1, -1, -1):
        a, b_, c, d, e, f = (s[t] for s in seqs)
        step(a, b_, c, d, dhrp, cp, e, f)
        xp.matmul(dhp[t], w, out=dhr)
    dhp = dhp.reshape(L * N, G)
    xp.add(dhr, carry, out=dh0)
    xp.matmul(dhp.T, hprev.reshape(L * N, H), out=dw)
    xp.sum(dhp, 0, out=db)
    return flat
