"""Hand-written C loops for the convolution and pooling primitives of compiled graphs.

``unfold`` (im2col) and ``fold`` (col2im) run in NumPy as strided copies and strided adds:
``kh*kw`` passes over the image with short inner loops. Max pooling is built from them
(windows -> argmax -> gather forward, scatter -> fold backward: several full-size passes).
Here each is one pass over the data, parallel over the ``N*C`` image planes on Ember's
worker pool (:mod:`.pool`):

* ``unfold(x) -> cols``   and ``fold(cols) -> x``   (any kernel/dilation/padding/stride);
* ``maxpool(x[, bias]) -> (vals, arg)``: the max of each window and its first maximal position
  (NumPy's ``argmax``: the first NaN wins, else the first maximum), padding read as
  ``pad_value`` — what ``take_along_dim(unfold(x), argmax(unfold(x)))`` gives; with a
  per-channel ``bias``, of ``relu(x + bias)`` without storing it;
* ``maxpool_grad(g, arg) -> dx``: ``fold(scatter_add(g, arg))`` (indices outside the
  window are dropped, like the padding ``fold`` crops).

Geometry is one int64 array ``g = [planes, H, W, kh, kw, dh, dw, sh, sw, pt, pl, oh, ow, C,
cf, 0]`` (``pt``/``pl``: the top/left padding; bottom/right padding only changes
``oh``/``ow``; ``C``: channels, ``cf``: a channel-first layout, below; the last unused).

Channel-first variants (``channel_first=True``) serve convolutions as single 2-D GEMMs
(:mod:`ember.graph.passes.conv_gemm`): ``unfold``/``fold`` columns laid out
(C*kh*kw, N*L) instead of (N, C*kh*kw, L) — ``weight @ cols`` is then one GEMM for the
whole batch, not N — and ``maxpool`` reading / ``maxpool_grad`` writing the full-size
planes in (c, n) order (the layout of that GEMM's (Co, N*L) output and of the gradient it
wants), while the pooled values stay in (n, c) order.

"Same" convolutions (stride 1, ``ow == w``) copy or add each tap as one contiguous run;
big channel-first columns are written with streaming stores (the C source, with the
notes on why, is :mod:`.conv_kernels_c`). float32 and float64; float16/bfloat16
(:data:`LOWP`) as eager computes them, float32 inside and rounded once: ``unfold`` and a
tiling ``maxpool_grad`` move their 16-bit values as bits; ``fold``, ``maxpool`` and an
overlapping ``maxpool_grad`` run 16-bit loops that convert each element to float32 as
they load it (exact) and round once as they store (``fold``'s overlap sums in a float32
block of planes): bit for bit what converting the operands, running the float32 loop and
rounding the result gives, without those two extra passes over memory (W2's ``fold``
and max-pools converted 26 operands a step, ~15% of its bfloat16 step). :func:`kernels`
returns None without a C compiler, and callers (:mod:`ember.graph.passes.pool`) keep the
NumPy primitives then.
"""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np

from . import pool as _pool
from .conv_kernels_c import source
from .runtime import num_threads
from .toolchain import find_compiler

#: dtypes with a kernel.
DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
#: float16/bfloat16: float32 arithmetic inside, 16-bit loads/stores (module docstring).
LOWP = {np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16"}
_state: dict = {}
_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_int64)


class _PerDtype(dict):
    """``{name_suffix: fn}`` filled one dtype at a time: the first lookup of a dtype's entry
    builds (or loads) that dtype's library only (a float32 CNN compiles a quarter of the
    C text: the float64 and 16-bit copies are built when first used)."""

    def __missing__(self, name):
        s = name.rsplit("_", 1)[1]
        loaded = _pool.load_kernels(source((s,)), [f"{op}_{s}" for op in (
            "unfold", "fold", "maxpool", "maxpool_grad")])
        if loaded is None:
            raise RuntimeError("conv_kernels: no C compiler; check available() first")
        _state["lib"][s] = loaded[0]            # NOTE: keeps the library mapped
        dict.update(self, loaded[1])
        return dict.__getitem__(self, name)


def kernels():
    """``{name_suffix: ctypes function}`` of the compiled libraries (each dtype's built on
    its first use), or None (no compiler)."""
    if "lib" not in _state:
        if find_compiler() is None:
            return None
        _state["fns"], _state["lib"] = _PerDtype(), {}
    return _state["fns"]


def supports(dtype) -> bool:
    """Whether NumPy ``dtype`` has kernels (float32/float64, float16/bfloat16)."""
    return np.dtype(dtype) in DTYPES or np.dtype(dtype) in LOWP


def available() -> bool:
    """Whether the kernels can be built here (a working C compiler)."""
    return find_compiler() is not None


def blocks(size, k, d, pads, s) -> int:
    """Windows along one dim (``ember.ops.conv._blocks``)."""
    return (size + pads[0] + pads[1] - d * (k - 1) - 1) // s + 1


def geometry(planes, h, w, kernel_size, dilation, padding, stride, channels=1,
             channel_first=False) -> np.ndarray:
    (kh, kw), (dh, dw), (sh, sw) = kernel_size, dilation, stride
    oh, ow = blocks(h, kh, dh, padding[0], sh), blocks(w, kw, dw, padding[1], sw)
    return np.array([planes, h, w, kh, kw, dh, dw, sh, sw, padding[0][0], padding[1][0],
                     max(oh, 0), max(ow, 0), max(channels, 1), int(channel_first), 0], np.int64)


def _call(name, dtype, arrays, g, pad=None, extra=()):
    fns = _state.get("fns") or kernels()     # NOTE: loaded here too, not only by the passes
    fn = fns[f"{name}_{DTYPES.get(dtype) or LOWP[dtype]}"]
    ptrs = [a.ctypes.data for a in arrays]
    if pad is not None:
        ptrs.append(ctypes.addressof(pad))
    ptrs.extend(extra)
    fn((ctypes.c_void_p * len(ptrs))(*ptrs), g.ctypes.data, num_threads())


def unfold(x, kernel_size, dilation, padding, stride, pad_value, out=None,
           channel_first=False):
    """im2col of (N, C, H, W) ``x`` -> (N, C*kh*kw, oh*ow), like the ``unfold`` primitive;
    ``channel_first``: the same columns as one (C*kh*kw, N*oh*ow) matrix."""
    x = np.ascontiguousarray(x)
    n, c, h, w = x.shape
    g = geometry(n * c, h, w, kernel_size, dilation, padding, stride, c, channel_first)
    k = kernel_size[0] * kernel_size[1]
    ll = int(g[11] * g[12])
    shape = (c * k, n * ll) if channel_first else (n, c * k, ll)
    out = np.empty(shape, x.dtype) if out is None else out
    if x.dtype in LOWP:      # a copy: the 16-bit loop moves bits, padding as its bits
        pad_value = float(np.array(pad_value, x.dtype).view(np.uint16))
    if out.size:
        _call("unfold", x.dtype, (x, out), g, ctypes.c_double(pad_value))
    return out


def fold(cols, output_size, kernel_size, dilation, padding, stride, out=None, batch=None):
    """col2im of (N, C*kh*kw, L) ``cols`` -> (N, C, H, W), like the ``fold`` primitive;
    with ``batch`` = N, of channel-first (C*kh*kw, N*L) columns (``unfold``'s)."""
    cols = np.ascontiguousarray(cols)
    if batch is None:
        n, ck, _ = cols.shape
    else:
        (ck, _), n = cols.shape, batch
    h, w = output_size
    k = kernel_size[0] * kernel_size[1]
    g = geometry(n * (ck // k), h, w, kernel_size, dilation, padding, stride, ck // k,
                 batch is not None)
    out = np.empty((n, ck // k, h, w), cols.dtype) if out is None else out
    if out.size:
        _call("fold", cols.dtype, (cols, out), g)
    return out


def maxpool(x, kernel_size, dilation, padding, stride, pad_value, bias=None, channels=None):
    """(vals, arg), each (P, 1, L), of the windows of (P, 1, H, W) ``x``.

    With ``bias`` (C values, C dividing P), the windows are those of
    ``relu(x + bias[plane % C])``: a conv block's bias and relu before its pool. With
    ``channels`` = C, ``x``'s planes are channel-first (plane (n, c) at ``c*N + n``);
    the outputs' are in (n, c) order.
    """
    x = np.ascontiguousarray(x)
    p, c, h, w = x.shape
    extra = [None]
    nch = 1 if channels is None else channels
    if bias is not None:
        bias = np.ascontiguousarray(bias, dtype=x.dtype).reshape(-1)
        if channels is not None and bias.size != channels:
            raise ValueError(f"maxpool: bias of {bias.size} values for {channels} channels")
        nch = bias.size
    if nch < 1 or (p * c) % nch:
        what = f"bias of {nch} values does" if bias is not None else f"{nch} channels do"
        raise ValueError(f"maxpool: {what} not divide the {p * c} planes of input shape "
                         f"{x.shape}")
    if bias is not None:
        extra = [bias.ctypes.data]
    g = geometry(p * c, h, w, kernel_size, dilation, padding, stride, nch, channels is not None)
    shape = (p, c, int(g[11] * g[12]))
    vals, arg = np.empty(shape, x.dtype), np.empty(shape, np.int64)
    if vals.size:
        _call("maxpool", x.dtype, (x, vals, arg), g, ctypes.c_double(pad_value), extra)
    return vals, arg


def maxpool_grad(grad, arg, output_size, kernel_size, dilation, padding, stride, out=None,
                 channels=None):
    """(P, 1, H, W) ``fold(scatter_add(grad, arg))`` of (P, 1, L) ``grad`` and ``arg``;
    with ``channels`` = C, the output planes are written channel-first (plane (n, c) at
    ``c*N + n``)."""
    grad = np.ascontiguousarray(grad)
    arg = np.ascontiguousarray(arg, dtype=np.int64)
    p, c, _ = grad.shape
    h, w = output_size
    if channels is not None and (channels < 1 or (p * c) % channels):
        raise ValueError(f"maxpool_grad: {channels} channels do not divide the {p * c} "
                         f"planes of gradient shape {grad.shape}")
    g = geometry(p * c, h, w, kernel_size, dilation, padding, stride,
                 1 if channels is None else channels, channels is not None)
    out = np.empty((p, c, h, w), grad.dtype) if out is None else out
    if out.size:
        _call("maxpool_grad", grad.dtype, (grad, arg, out), g)
    return out

