"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their single-step cells.

Parameter names, shapes, gate order (LSTM: i, f, g, o; GRU: r, z, n) and initialisation
U(-1/sqrt(hidden), 1/sqrt(hidden)) follow PyTorch, so state dicts load across. Each layer and
direction is one fused primitive (``ember/ops/rnn.py``: per-step GEMM and in-place gate
updates forward, BPTT with time-batched weight gradients backward); a GRU's and an RNN's
input projection is ONE matmul before it, an LSTM's is inside it (``lstm_layer`` takes the
layer input, ``W_ih`` and ``b_ih + b_hh``, as PyTorch's ``_VF.lstm``). Packed sequences,
``proj_size`` and float16/bfloat16 take the per-step composite path.
"""
from __future__ import annotations

import math
import numbers
import warnings

from ... import dtypes as _dt
from ...autograd.grad_mode import no_grad, state
from ...errors import ShapeError
from ...ops.factories import arange, empty, zeros
from ...ops.select import where
from ...ops.join import cat, stack
from ...ops.linalg import addmm, matmul
from ...ops.rnn import gru_layer, lstm_layer, rnn_layer
from ._rnn_fused import _fused_ok, _run_fused, _run_lstm, lstm_bias
from ...tensor import Tensor
from ..module import Module
from ..parameter import Parameter
from ..utils.rnn import PackedSequence

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ---------------------------------------------------------------- one time step
# ``xp`` is the input projection of this step (x @ W_ihᵀ + biases, see ``_project``).
def _rnn_step(xp, h, w_hh_t, b_hh, relu):
    pre = addmm(xp, h, w_hh_t)
    return pre.relu() if relu else pre.tanh()


def _lstm_step(xp, h, c, w_hh_t):
    i, f, g, o = addmm(xp, h, w_hh_t).chunk(4, 1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def _gru_step(xp, h, w_hh_t, b_hh):
    # NOTE: b_hn stays inside r * (...): n = tanh(W_in x + b_in + r * (W_hn h + b_hn)).
    hp = matmul(h, w_hh_t) if b_hh is None else addmm(b_hh, h, w_hh_t)
    xr, xz, xn = xp.chunk(3, 1)
    hr, hz, hn = hp.chunk(3, 1)
    r = (xr + hr).sigmoid()
    z = (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return n + z * (h - n)


def _project(x, w_ih, b_ih, b_hh, mode):
    """Input projections for every time step at once: ``x @ W_ihᵀ (+ biases)``."""
    if b_ih is not None and b_hh is not None and mode != "GRU":
        bias = b_ih + b_hh  # RNN/LSTM: both biases sit outside the nonlinearity
    else:
        bias = b_ih
    lead, F = tuple(x.shape[:-1]), x.shape[-1]
    x2 = x.reshape(-1, F)
    out = matmul(x2, w_ih.t()) if bias is None else addmm(bias, x2, w_ih.t())
    return out.reshape(*lead, w_ih.shape[0])


def _uniform_init(module, hidden_size):
    stdv = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    with no_grad():
        for w in module.parameters():
            w.uniform_(-stdv, stdv)


def _check_dims(input_size, hidden_size, name):
    for what, v in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name}: {what} must be a non-negative integer, got {v!r}")
    if hidden_size <= 0:
        raise ValueError(f"{name}: hidden_size must be greater than zero, got {hidden_size}")


# ---------------------------------------------------------------- multi-layer sequence modules
class RNNBase(Module):
    """Shared machinery of :class:`RNN`, :class:`LSTM` and :class:`GRU` (``torch.nn.RNNBase``)."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        _check_dims(input_size, hidden_size, name)
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) \
                or not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] representing "
                             f"the probability of an element being zeroed, got {dropout!r}")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                          f"non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"{name}: num_layers must be a positive integer, got {num_layers!r}")
        if proj_size < 0 or (proj_size and mode != "LSTM"):
            raise ValueError(f"{name}: proj_size must be 0 (or, for LSTM only, a positive int "
                             f"smaller than hidden_size), got {proj_size}")
        if proj_size >= hidden_size:
            raise ValueError(f"{name}: proj_size has to be smaller than hidden_size")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional = float(dropout), bidirectional
        self.proj_size = proj_size
        self._init_weights(device, dtype)
        self.reset_parameters()

    def _init_weights(self, device, dtype):
        dt = dtype or _dt.get_default_dtype()
        G, H = _GATES[self.mode] * self.hidden_size, self.hidden_size
        H_out = self.proj_size or H
        D = 2 if self.bidirectional else 1
        self._flat_weights_names = []
        for layer in range(self.num_layers):
            in_size = self.input_size if layer == 0 else H_out * D
            for suffix in ("", "_reverse")[:D]:
                shapes = [(f"weight_ih_l{layer}{suffix}", (G, in_size)),
                          (f"weight_hh_l{layer}{suffix}", (G, H_out))]
                if self.bias:
                    shapes += [(f"bias_ih_l{layer}{suffix}", (G,)),
                               (f"bias_hh_l{layer}{suffix}", (G,))]
                if self.proj_size:
                    shapes.append((f"weight_hr_l{layer}{suffix}", (self.proj_size, H)))
                for n, shape in shapes:
                    setattr(self, n, Parameter(empty(shape, dtype=dt, device=device)))
                    self._flat_weights_names.append(n)

    def reset_parameters(self) -> None:
        """Re-draw every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        _uniform_init(self, self.hidden_size)

    def flatten_parameters(self) -> None:
        """No-op (cuDNN weight compaction in PyTorch); kept for API compatibility."""

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        """Parameters grouped per layer and direction, as in PyTorch."""
        w = self._flat_weights
        k = len(w) // (self.num_layers * (2 if self.bidirectional else 1))
        return [w[i:i + k] for i in range(0, len(w), k)]

    def _layer_weights(self, layer, reverse):
        s = f"l{layer}{'_reverse' if reverse else ''}"
        g = lambda n: getattr(self, n + s) if hasattr(self, n + s) else None  # noqa: E731
        return g("weight_ih_"), g("weight_hh_"), g("bias_ih_"), g("bias_hh_"), g("weight_hr_")

    # ------------------------------------------------------------ input checking
    def _check_input(self, input, hx):
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: input must be a Tensor, got {type(input).__name__}")
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D tensor "
                             f"instead")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input.size(-1) must be equal to input_size. Expected "
                             f"{self.input_size}, got {input.shape[-1]} (input shape "
                             f"{tuple(input.shape)})")
        batched = input.ndim == 3
        if not batched:
            input = input.unsqueeze(0 if self.batch_first else 1)
        N = input.shape[0 if self.batch_first else 1]
        D = 2 if self.bidirectional else 1
        H_out = self.proj_size or self.hidden_size
        want = [(self.num_layers * D, N, H_out)]
        if self.mode == "LSTM":
            want.append((self.num_layers * D, N, self.hidden_size))
        states = self._check_hx(hx, want, batched, input)
        return input, states, batched

    def _check_hx(self, hx, want, batched, input):
        name = type(self).__name__
        if hx is None:
            return [zeros(w, dtype=input.dtype, device=input.device) for w in want]
        hs = list(hx) if self.mode == "LSTM" else [hx]
        if self.mode == "LSTM" and (not isinstance(hx, (tuple, list)) or len(hs) != 2):
            raise TypeError(f"{name}: hx must be a tuple (h_0, c_0)")
        out = []
        for i, (h, w) in enumerate(zip(hs, want)):
            if not isinstance(h, Tensor):
                raise TypeError(f"{name}: hx must be a Tensor, got {type(h).__name__}")
            if h.ndim != (3 if batched else 2):
                raise ShapeError(f"{name}: For {'batched 3' if batched else 'unbatched 2'}-D "
                                 f"input, hx should also be {3 if batched else 2}-D but got "
                                 f"{h.ndim}-D tensor")
            h = h if batched else h.unsqueeze(1)
            if tuple(h.shape) != w:
                what = f"hidden[{i}]" if self.mode == "LSTM" else "hidden"
                raise ShapeError(f"{name}: Expected {what} size {w}, got {tuple(h.shape)}")
            out.append(h)
        return out

    # ------------------------------------------------------------ forward
    def _run_direction(self, xp, states, weights, reverse, mask=None):
        """Run one layer in one direction over time-major projections ``xp`` (L, N, G);
        return the time-major outputs (L, N, H_out) and the last ``h`` and ``c``.

        ``mask`` (L, N, 1), for packed input: rows past their length keep their state, so
        the reverse direction starts at each sequence's own last step."""
        if _fused_ok(xp, mask, weights[4]):
            return _run_fused(self.mode, xp, states, weights, reverse)
        _, w_hh, _, b_hh, w_hr = weights
        w_hh_t, w_hr_t = w_hh.t(), None if w_hr is None else w_hr.t()
        L = xp.shape[0]
        outs = [None] * L
        h = states[0]
        c = states[1] if len(states) > 1 else None
        for t in (range(L - 1, -1, -1) if reverse else range(L)):
            h_prev, c_prev = h, c
            if self.mode == "LSTM":
                h, c = _lstm_step(xp[t], h, c, w_hh_t)
                if w_hr_t is not None:
                    h = matmul(h, w_hr_t)
            elif self.mode == "GRU":
                h = _gru_step(xp[t], h, w_hh_t, b_hh)
            else:
                h = _rnn_step(xp[t], h, w_hh_t, b_hh, self.mode == "RNN_RELU")
            if mask is not None:
                h = where(mask[t], h, h_prev)
                c = None if c is None else where(mask[t], c, c_prev)
            outs[t] = h
        return stack(outs, 0), h, c

    def forward(self, input, hx=None):
        return self._forward(input, hx, self._layer_weights)

    def _forward(self, input, hx, layer_weights):
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx, layer_weights)
        return self._forward_padded(input, hx, layer_weights)

    def _forward_packed(self, packed, hx, layer_weights):
        """A ``PackedSequence`` in, one out: run padded with the padding masked, repack.

        ``hx`` and ``h_n`` are in the caller's batch order (permuted by the packed
        sequence's ``sorted_indices``/``unsorted_indices``, as PyTorch)."""
        from ..utils.rnn import pack_padded_sequence, pad_packed_sequence
        padded, lengths = pad_packed_sequence(PackedSequence(packed.data, packed.batch_sizes))
        L = padded.shape[0]
        mask = (arange(L).unsqueeze(1) < lengths.unsqueeze(0)).unsqueeze(-1)
        order, undo = packed.sorted_indices, packed.unsorted_indices
        if hx is not None and order is not None:
            hx = tuple(h.index_select(1, order) for h in hx) if self.mode == "LSTM" \
                else hx.index_select(1, order)
        x = padded.transpose(0, 1) if self.batch_first else padded
        out, h = self._forward_padded(x, hx, layer_weights, mask)
        out = out.transpose(0, 1) if self.batch_first else out
        data = pack_padded_sequence(out, lengths).data
        if undo is not None:
            h = tuple(t.index_select(1, undo) for t in h) if self.mode == "LSTM" \
                else h.index_select(1, undo)
        return PackedSequence(data, packed.batch_sizes, order, undo), h

    def _forward_padded(self, input, hx, layer_weights, mask=None):
        x, states, batched = self._check_input(input, hx)
        D = 2 if self.bidirectional else 1
        h_n, c_n = [], []
        # NOTE: layers run time-major; only the first input / last output are batch-first.
        # The input turns time-major before its projection (a copy of x, not of the 4x
        # wider projections and their gradient; an LSTM's kernel reads the transposed view).
        if self.batch_first:
            x = x.transpose(0, 1)
        for layer in range(self.num_layers):
            last = layer == self.num_layers - 1
            out_time = 1 if last and self.batch_first else 0
            outs = []
            for d in range(D):
                w = layer_weights(layer, d == 1)
                st = [s[layer * D + d] for s in states]
                if self.mode == "LSTM" and _fused_ok(x, mask, w[4]):
                    seq, h, c = _run_lstm(x, st, w, d == 1)
                else:
                    xp = _project(x, w[0], w[2], w[3], self.mode)
                    seq, h, c = self._run_direction(xp, st, w, d == 1, mask)
                outs.append(seq.transpose(0, 1).contiguous() if out_time else seq)
                h_n.append(h)
                c_n.append(c)
            x = outs[0] if D == 1 else cat(outs, -1)
            if not last and self.dropout > 0 and self.training:
                from ..functional import dropout
                x = dropout(x, self.dropout, training=True)
        return self._finish(x, stack(h_n), stack(c_n) if self.mode == "LSTM" else None,
                            batched)

    def _finish(self, out, h_n, c_n, batched):
        if not batched:
            out = out.squeeze(0 if self.batch_first else 1)
            h_n = h_n.squeeze(1)
            c_n = None if c_n is None else c_n.squeeze(1)
        return out, (h_n if c_n is None else (h_n, c_n))

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN: ``h_t = act(x_t W_ihᵀ + b_ih + h_{t-1} W_hhᵀ + b_hh)`` (``torch.nn.RNN``).

    Example:
        >>> rnn = ember.nn.RNN(4, 8, num_layers=2, batch_first=True)
        >>> out, h_n = rnn(ember.randn(3, 5, 4))
        >>> tuple(out.shape), tuple(h_n.shape)
        ((3, 5, 8), (2, 3, 8))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None):
        modes = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}
        if nonlinearity not in modes:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             f"'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__(modes[nonlinearity], input_size, hidden_size, num_layers, bias,
                         batch_first, dropout, bidirectional, device=device, dtype=dtype)


class LSTM(RNNBase):
    """Long short-term memory (``torch.nn.LSTM``); gates i, f, g, o; ``forward(input,
    (h_0, c_0))`` returns ``(output, (h_n, c_n))``. ``proj_size > 0`` adds ``weight_hr``.

    Example:
        >>> lstm = ember.nn.LSTM(4, 8, bidirectional=True)
        >>> out, (h_n, c_n) = lstm(ember.randn(5, 3, 4))
        >>> tuple(out.shape), tuple(c_n.shape)
        ((5, 3, 16), (2, 3, 8))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        table = state.autocast
        if table is None or self.proj_size or "mkldnn_rnn_layer" not in table:
            return self._forward(input, hx, self._layer_weights)
        # NOTE: PyTorch's CPU LSTM runs oneDNN's mkldnn_rnn_layer, on the CPU autocast list:
        # input, states and weights in the lower dtype (a projected LSTM, a GRU, an RNN and
        # the cells take other paths there and keep their ops' own policies)
        from ...amp.autocast_mode import cast_inputs
        entries = table["mkldnn_rnn_layer"]
        (input, hx), _ = cast_inputs("mkldnn_rnn_layer", entries, (input, hx))

        def layer_weights(layer, reverse):
            return cast_inputs("mkldnn_rnn_layer", entries,
                               self._layer_weights(layer, reverse))[0]
        state.autocast = None
        try:
            return self._forward(input, hx, layer_weights)
        finally:
            state.autocast = table


class GRU(RNNBase):
    """Gated recurrent unit (``torch.nn.GRU``); gates r, z, n with
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``.

    Example:
        >>> gru = ember.nn.GRU(4, 8)
        >>> tuple(gru(ember.randn(5, 3, 4))[0].shape)
        (5, 3, 8)
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)


# ---------------------------------------------------------------- single-step cells
class RNNCellBase(Module):
    """Parameters ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` of one cell."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        _check_dims(input_size, hidden_size, type(self).__name__)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        dt, G = dtype or _dt.get_default_dtype(), num_chunks * hidden_size
        self.weight_ih = Parameter(empty((G, input_size), dtype=dt, device=device))
        self.weight_hh = Parameter(empty((G, hidden_size), dtype=dt, device=device))
        if bias:
            self.bias_ih = Parameter(empty((G,), dtype=dt, device=device))
            self.bias_hh = Parameter(empty((G,), dtype=dt, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _uniform_init(self, self.hidden_size)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _prepare(self, input, hx, n_states):
        """Check shapes; return (2-D input, list of 2-D states, batched)."""
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: input must be a Tensor, got {type(input).__name__}")
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input has inconsistent input_size: got "
                             f"{input.shape[-1]} expected {self.input_size}")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        if hx is None:
            z = zeros((x.shape[0], self.hidden_size), dtype=x.dtype, device=x.device)
            return x, [z] * n_states, batched
        if n_states == 2 and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"{name}: hx must be a tuple (h, c) of Tensors")
        hs = list(hx) if n_states == 2 else [hx]
        states = []
        for h in hs:
            if not isinstance(h, Tensor) or h.ndim != input.ndim:
                got = f"{h.ndim}D" if isinstance(h, Tensor) else type(h).__name__
                raise ValueError(f"{name}: Expected hidden to be {input.ndim}D like the input, "
                                 f"got {got}")
            h = h if batched else h.unsqueeze(0)
            if tuple(h.shape) != (x.shape[0], self.hidden_size):
                raise ShapeError(f"{name}: Expected hidden size {(x.shape[0], self.hidden_size)}"
                                 f", got {tuple(h.shape)}")
            states.append(h)
        return x, states, batched


class RNNCell(RNNCellBase):
    """One Elman RNN step: ``h' = act(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)`` (``torch.nn.RNNCell``).

    Example:
        >>> cell = ember.nn.RNNCell(4, 8)
        >>> tuple(cell(ember.randn(3, 4)).shape)
        (3, 8)
    """

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, hx, 1)
        xp = _project(x, self.weight_ih, self.bias_ih, self.bias_hh, "RNN")
        if _fused_ok(xp.unsqueeze(0), None, None):
            h = rnn_layer(xp.unsqueeze(0), h, self.weight_hh, self.nonlinearity == "relu")[0]
        else:
            h = _rnn_step(xp, h, self.weight_hh.t(), None, self.nonlinearity == "relu")
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step; ``forward(input, (h, c))`` returns ``(h', c')`` (``torch.nn.LSTMCell``).

    Example:
        >>> cell = ember.nn.LSTMCell(4, 8)
        >>> h, c = cell(ember.randn(3, 4))
        >>> tuple(c.shape)
        (3, 8)
    """

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        x, (h, c), batched = self._prepare(input, hx, 2)
        if _fused_ok(x.unsqueeze(0), None, None):
            b = lstm_bias(self.weight_ih, self.bias_ih, self.bias_hh)
            hc = lstm_layer(x.unsqueeze(0), h, c, self.weight_ih, self.weight_hh, b)[0]
            h, c = hc[:, :self.hidden_size], hc[:, self.hidden_size:2 * self.hidden_size]
        else:
            xp = _project(x, self.weight_ih, self.bias_ih, self.bias_hh, "LSTM")
            h, c = _lstm_step(xp, h, c, self.weight_hh.t())
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step (``torch.nn.GRUCell``).

    Example:
        >>> cell = ember.nn.GRUCell(4, 8)
        >>> tuple(cell(ember.randn(3, 4)).shape)
        (3, 8)
    """

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, hx, 1)
        xp = _project(x, self.weight_ih, self.bias_ih, None, "GRU")
        if _fused_ok(xp.unsqueeze(0), None, None):
            b = self.bias_hh if self.bias_hh is not None else \
                zeros(self.weight_hh.shape[:1], dtype=xp.dtype, device=xp.device)
            h = gru_layer(xp.unsqueeze(0), h, self.weight_hh, b)[0]
        else:
            h = _gru_step(xp, h, self.weight_hh.t(), self.bias_hh)
        return h if batched else h.squeeze(0)
