"""A convolution's forward whose columns are kept (for a backward graph), a chunk at a time.

The eager composite's forward graph (:mod:`.eager_composite`) computes ``cols =
unfold(x)``, ``y = W2d @ cols + bias`` and returns ``cols`` for its separate backward
graph, so the (N, C*K, L) columns must exist in full. Run op by op, each step is a pass
over memory: the columns are written, read back from memory by the GEMM, the output is
written and read back by the bias add into a new array. :func:`forward` does it a chunk of
images at a time (about :data:`CHUNK_BYTES` of columns): the chunk's columns are still in
cache when its GEMM reads them and its output when the bias is added in place (W2's
conv1 3.4 -> 2.3 ms, conv2 9.7 -> 9.0 ms, one thread).

Values are the composite's bit for bit: the same ``unfold`` loop, the GEMM that the
``matmul`` primitive's kernel runs (Ember's float32 GEMM where its size rule picks it,
else NumPy's; each image's product is the same whatever the chunking), then ``y + bias``.

Exception, stride-1 float32 convolutions where :func:`.conv_igemm.worth` says so: the
output is the implicit-GEMM kernel's (:mod:`.conv_igemm`, products read from the padded
image; the columns are still written, for the backward), W2's conv2 9.0 -> ~5.5 ms. Its
bits are ``unfold`` + Ember's GEMM + bias: the composite's where that GEMM ran (e.g.
W2's conv2); where the composite's per-image product went to OpenBLAS (under
:func:`.sgemm.worth`: W2's conv1, 32x27 @ 27x1024) the last bits change to Ember's GEMM's
(those of a compiled whole-graph conv, whose one big product runs Ember's GEMM).
"""
from __future__ import annotations

import numpy as np

from . import conv_igemm as _ig
from . import conv_kernels as ck
from . import sgemm as _sgemm

#: bytes of columns per chunk of images.
CHUNK_BYTES = 2 << 20


def _gemm(w, c, out) -> None:
    """``out = w @ c`` as the ``matmul`` primitive computes it (``ops/linalg.py``)."""
    if out.dtype != np.float32 or _sgemm.matmul(w, c, out=out) is None:
        np.matmul(w, c, out=out)


def forward(x, w2d, bias, kernel_size, dilation, padding, stride, pad_value=0.0):
    """``(W2d @ unfold(x) + bias, unfold(x))`` of (N, C, H, W) ``x`` and (Co, C*kh*kw)
    ``w2d``: the output (N, Co, oh, ow) and the columns (N, C*kh*kw, oh*ow).

    ``bias``: a (Co, 1, 1) array or None.

    Example:
        >>> y, cols = forward(x, w.reshape(co, -1), b.reshape(co, 1, 1), (3, 3), (1, 1),
        ...                   ((1, 1), (1, 1)), (1, 1))
    """
    x = np.ascontiguousarray(x)
    n, c, h, w = x.shape
    co, ckk = w2d.shape
    oh = ck.blocks(h, kernel_size[0], dilation[0], padding[0], stride[0])
    ow = ck.blocks(w, kernel_size[1], dilation[1], padding[1], stride[1])
    ll = max(oh, 0) * max(ow, 0)
    if w2d.dtype == x.dtype and _ig.worth(stride, x.dtype, co, n * co * ckk * ll):
        cols = _ig.empty_columns((n, ckk, ll))
        y = _ig.conv(x, w2d, None if bias is None else np.asarray(bias).reshape(co),
                     kernel_size, dilation, padding, pad_value, cols=cols)
        if y is not None:                       # columns written from the padded copies
            return y, cols
    cols = np.empty((n, ckk, ll), x.dtype)
    y = np.empty((n, co, ll), x.dtype)
    b = None if bias is None else np.asarray(bias).reshape(co, 1)
    step = max(1, CHUNK_BYTES // max(1, ckk * ll * x.itemsize))
    for n0 in range(0, n if y.size else 0, step):
        cc, yy = cols[n0:n0 + step], y[n0:n0 + step]
        ck.unfold(x[n0:n0 + step], kernel_size, dilation, padding, stride, pad_value, out=cc)
        _gemm(w2d, cc, yy)
        if b is not None:
            np.add(yy, b, out=yy)
    return y.reshape(n, co, max(oh, 0), max(ow, 0)), cols
