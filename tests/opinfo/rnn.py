"""OpInfos for the fused recurrent layers (``ember/ops/rnn.py``): ``lstm_layer``,
``gru_layer``, ``rnn_layer`` and, through their VJPs, the ``*_grad`` primitives; and
``lstm_hidden`` (an lstm_layer output's hidden states).

The references run PyTorch's documented step formulas one step at a time in float64
(sigmoid as ``1 / (1 + exp(-x))``), independent of Ember's kernels.
"""
import numpy as np

from ember.ops.rnn import gru_layer, lstm_hidden, lstm_layer, rnn_layer

from .core import OpInfo, Sample, rand


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def ref_lstm(x, h0, c0, w_ih, w, b):
    H, outs = h0.shape[-1], []
    h, c = h0.astype(np.float64), c0.astype(np.float64)
    for t in range(x.shape[0]):
        pre = x[t].astype(np.float64) @ w_ih.astype(np.float64).T + b + \
            h @ w.astype(np.float64).T
        i, f, g, o = _sig(pre[:, :H]), _sig(pre[:, H:2 * H]), np.tanh(pre[:, 2 * H:3 * H]), \
            _sig(pre[:, 3 * H:])
        c = f * c + i * g
        h = o * np.tanh(c)
        outs.append(np.concatenate([h, c, i, f, g, o], -1))
    out = np.stack(outs) if outs else np.zeros(x.shape[:2] + (6 * H,))
    return out.astype(x.dtype)


def ref_gru(x, h0, w, b):
    H, outs, h = h0.shape[-1], [], h0.astype(np.float64)
    for t in range(x.shape[0]):
        hp = h @ w.astype(np.float64).T + b
        xt = x[t].astype(np.float64)
        r, z = _sig(xt[:, :H] + hp[:, :H]), _sig(xt[:, H:2 * H] + hp[:, H:2 * H])
        n = np.tanh(xt[:, 2 * H:] + r * hp[:, 2 * H:])
        h = (1 - z) * n + z * h
        outs.append(h)
    return (np.stack(outs) if outs else np.zeros(x.shape[:2] + (H,))).astype(x.dtype)


def ref_rnn(x, h0, w, relu=False):
    outs, h = [], h0.astype(np.float64)
    for t in range(x.shape[0]):
        pre = x[t] + h @ w.astype(np.float64).T
        h = np.maximum(pre, 0) if relu else np.tanh(pre)
        outs.append(h)
    return (np.stack(outs) if outs else np.zeros(x.shape)).astype(x.dtype)


# (L, N, H, in the gradient checks)
_SHAPES = [(3, 2, 3, True), (1, 3, 2, True), (4, 1, 1, True), (9, 5, 16, False),
           (0, 2, 3, False), (3, 0, 4, False)]


def _samples(gates, extra, lstm=False):
    def make(rng, dtype):
        out = []
        for k, (L, N, H, grad) in enumerate(_SHAPES):
            IN = (H + 1, 2, 0, 24, 3, 5)[k] if lstm else gates * H    # the LSTM's input size
            args = (rand(rng, (L, N, IN), dtype), rand(rng, (N, H), dtype, -1, 1))
            args += tuple(rand(rng, s, dtype, -1, 1) for s in extra(N, H, IN))
            out.append(Sample(args, grad=grad, name=f"L{L} N{N} H{H} IN{IN}"))
        return out
    return make


def _rnn_samples(rng, dtype):
    base = _samples(1, lambda N, H, IN: [(H, H)])(rng, dtype)
    # NOTE: relu's kink: values kept away from 0 by the uniform draw are smooth enough
    return base + [Sample(s.args, {"relu": True}, grad=s.grad, name=s.name + " relu")
                   for s in base]


def _hidden_samples(rng, dtype):
    shapes = [((3, 2, 12), True), ((1, 1, 6), True), ((2, 18), True), ((5, 4, 3, 24), False),
              ((0, 2, 6), False), ((2, 0), False)]
    return [Sample((rand(rng, s, dtype),), grad=grad, name=str(s)) for s, grad in shapes]


OPINFOS = [
    OpInfo("lstm_layer", lstm_layer, ref_lstm,
           _samples(4, lambda N, H, IN: [(N, H), (4 * H, IN), (4 * H, H), (4 * H,)], lstm=True),
           ("lstm_layer", "lstm_layer_grad")),
    OpInfo("lstm_hidden", lstm_hidden, lambda out: out[..., :out.shape[-1] // 6],
           _hidden_samples, ("lstm_hidden",)),
    OpInfo("gru_layer", gru_layer, ref_gru,
           _samples(3, lambda N, H, IN: [(3 * H, H), (3 * H,)]),
           ("gru_layer", "gru_layer_grad")),
    OpInfo("rnn_layer", rnn_layer, ref_rnn, _rnn_samples, ("rnn_layer", "rnn_layer_grad")),
]
