"""The fused path of the recurrent layers: one ``lstm_layer``/``gru_layer``/``rnn_layer``
primitive (``ember/ops/rnn.py``) per layer and direction instead of the per-step composite
of :mod:`.rnn` (an LSTM's from the layer input: its projection and biases are inside)."""
from __future__ import annotations

from ... import dtypes as _dt
from ...ops.factories import zeros
from ...ops.rnn import gru_layer, lstm_hidden, lstm_layer, rnn_layer

#: The fused primitives (``ember/ops/rnn.py``) run whole layers; tests turn this off to
#: compare against the per-step composite of :mod:`.rnn`.
_FUSED = True


def _fused_ok(xp, mask, w_hr):
    """Fused unless packed (masked), projected (``proj_size``), empty or low precision."""
    return _FUSED and mask is None and w_hr is None and xp.shape[0] > 0 and \
        xp.dtype in (_dt.float32, _dt.float64)


def lstm_bias(w_ih, b_ih, b_hh):
    """``lstm_layer``'s bias ``b_ih + b_hh`` (zeros without biases)."""
    if b_ih is None or b_hh is None:
        return zeros(w_ih.shape[:1], dtype=w_ih.dtype, device=w_ih.device)
    return b_ih + b_hh


def _run_lstm(x, states, weights, reverse):
    """One LSTM layer, one direction, from its input ``x`` (L, N, IN) as one ``lstm_layer``
    (the input projection and the biases inside it), its hidden states taken by
    ``lstm_hidden``: ``(outputs (L, N, H), h_n, c_n)``."""
    w_ih, w_hh, b_ih, b_hh = weights[:4]
    if reverse:
        x = x.flip(0)
    H = w_hh.shape[1]
    out = lstm_layer(x, states[0], states[1], w_ih, w_hh, lstm_bias(w_ih, b_ih, b_hh))
    seq = lstm_hidden(out)
    return (seq.flip(0) if reverse else seq), seq[-1], out[-1, :, H:2 * H]


def _run_fused(mode, xp, states, weights, reverse):
    """One GRU/RNN layer, one direction, from its input projections as one primitive:
    ``(outputs (L, N, H), h_n, None)``."""
    w_hh, b_hh = weights[1], weights[3]
    if reverse:
        xp = xp.flip(0)
    c = None
    if mode == "GRU":
        if b_hh is None:
            b_hh = zeros(w_hh.shape[:1], dtype=xp.dtype, device=xp.device)
        seq = gru_layer(xp, states[0], w_hh, b_hh)
        h = seq[-1]
    else:
        seq = rnn_layer(xp, states[0], w_hh, relu=mode == "RNN_RELU")
        h = seq[-1]
    return (seq.flip(0) if reverse else seq), h, c
