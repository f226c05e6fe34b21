"""The fused path of the recurrent layers: one ``lstm_layer``/``gru_layer``/``rnn_layer``
primitive (``ember/ops/rnn.py``) per layer and direction instead of the per-step composite
of :mod:`.rnn`."""
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


def _run_fused(mode, xp, states, weights, reverse):
    """One layer, one direction, as one primitive (an LSTM's hidden states then taken by
    ``lstm_hidden``): ``(outputs (L, N, H), h_n, c_n)``."""
    w_hh, b_hh = weights[1], weights[3]
    if reverse:
        xp = xp.flip(0)
    c = None
    if mode == "LSTM":
        H = w_hh.shape[1]
        out = lstm_layer(xp, states[0], states[1], w_hh)
        seq = lstm_hidden(out)
        h, c = seq[-1], out[-1, :, H:2 * H]
    elif mode == "GRU":
        if b_hh is None:
            b_hh = zeros(w_hh.shape[:1], dtype=xp.dtype, device=xp.device)
        seq = gru_layer(xp, states[0], w_hh, b_hh)
        h = seq[-1]
    else:
        seq = rnn_layer(xp, states[0], w_hh, relu=mode == "RNN_RELU")
        h = seq[-1]
    return (seq.flip(0) if reverse else seq), h, c
