"""A convolution's two gradients from saved (N, C*kh*kw, L) columns, image by image.

A compiled graph that holds the whole convolution lays its columns out channel-first
(:mod:`ember.graph.passes.conv_gemm`): each gradient is then one GEMM. A *backward graph
of its own* — the eager composite's (:mod:`.eager_composite`), whose forward graph went
through the passes separately — receives the columns and the output gradient ``dY`` as
inputs in the composite's batch-first layout, (N, C*K, L) and (N, Co, L). There:

* the **weight gradient** ``sum_n dY[n] @ cols[n]^T`` is the N per-image products
  accumulated in place (``beta = 1``) into the (Co, C*K) result, with Ember's float32
  GEMM (:mod:`.sgemm`) where it runs and its size rule says it pays: no (N, Co, C*K)
  stack of products and no batch sum over it (conv2 of W2: 9.6 -> 7.8 ms, one thread).
  Elsewhere (float64, small products, no AVX-512) the composite's stacked NumPy products
  and batch sum, as before;
* the **input gradient** ``fold(W2d^T @ dY)`` runs a few images at a time: the columns
  of a chunk (about :data:`CHUNK_BYTES`) are computed into a buffer that stays in L2 and
  folded from there at once, so the (N, C*K, L) column gradient never goes to memory and
  comes back (conv2 of W2: 9.5 -> 6.7 ms with NumPy's GEMM, vs a transposing copy of
  ``dY``, one GEMM and a channel-first fold).

Stride 1, float32, where Ember's GEMM would run: the input gradient is instead the
flipped convolution of ``dY`` (:func:`.conv_igemm.input_grad`: no column gradient at all;
conv2 of W2 ~8 -> ~6 ms), one FMA chain over ``(co, kh, kw)`` per element: float32
rounding differs from GEMM + ``fold``.

Values: the input gradient adds the same products in the same order as the composite's
stacked ``matmul`` and ``fold`` (bitwise equal with NumPy's GEMM); the weight gradient's
per-image products are summed into the result one image after another, in float32 by
Ember's GEMM in its own order (not bitwise the stacked NumPy products + ``sum``).
"""
from __future__ import annotations

import numpy as np

from . import conv_igemm as _ig
from . import conv_kernels as ck
from . import sgemm as _sgemm

#: bytes of column gradient computed and folded per chunk of images (fits L2 with room).
CHUNK_BYTES = 1 << 20
F32 = np.dtype(np.float32)


def _sgemm_ok(*arrays) -> bool:
    return all(a.dtype == F32 for a in arrays)


def weight_grad(dy, cols, out=None):
    """``sum_n dy[n] @ cols[n].T`` of (N, Co, L) ``dy`` and (N, CK, L) ``cols`` -> (Co, CK).

    Example:
        >>> dw = weight_grad(dy, cols)       # == (dy @ cols.transpose(0, 2, 1)).sum(0)
    """
    n, co, ll = dy.shape
    ckk = cols.shape[1]
    res = np.empty((co, ckk), dy.dtype) if out is None else out.reshape(co, ckk)
    if n == 0 or ll == 0:
        res[...] = 0
        return res
    if n > 1 and _sgemm_ok(dy, cols, res) and _sgemm.worth(co, ll, ckk) and \
            _sgemm.gemm_sum(dy, cols.transpose(0, 2, 1), res) is not None:
        return res              # the same bits as a gemm(beta=1) per image, in one call
    np.sum(np.matmul(dy, cols.transpose(0, 2, 1)), axis=0, out=res)
    return res


def input_grad(a, dy, output_size, kernel_size, dilation, padding, stride, out=None):
    """``fold(a @ dy)`` of (CK, Co) ``a`` (the 2-D weight, transposed) and (N, Co, L)
    ``dy`` -> (N, CK / (kh*kw), H, W), a chunk of images at a time (module docstring).

    Example:
        >>> dx = input_grad(w2d.T, dy, (16, 16), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))
    """
    n, co, ll = dy.shape
    ckk = a.shape[0]
    c = ckk // (kernel_size[0] * kernel_size[1])
    shape = (n, c) + tuple(output_size)
    res = np.empty(shape, dy.dtype) if out is None else out.reshape(shape)
    if res.size == 0:
        return res
    fast = _sgemm_ok(a, dy) and _sgemm.worth(ckk, co, ll)
    if fast and _ig.worth(stride, dy.dtype, c, n * ckk * co * ll):
        # stride 1: the flipped convolution of dY, no column gradient at all
        oh = output_size[0] + sum(padding[0]) - dilation[0] * (kernel_size[0] - 1)
        d4 = dy.reshape(n, co, oh, ll // oh if oh else 0)
        if _ig.input_grad(a.T, d4, output_size, kernel_size, dilation, padding,
                          out=res) is not None:
            return res
    b = max(1, min(n, CHUNK_BYTES // max(1, ckk * ll * dy.itemsize)))
    buf = np.empty((b, ckk, ll), dy.dtype)
    for n0 in range(0, n, b):
        m = min(b, n - n0)
        part, d = buf[:m], dy[n0:n0 + m]
        if not fast or _sgemm.gemm(np.broadcast_to(a, (m,) + a.shape), d, part) is None:
            np.matmul(a, d, out=part)
        ck.fold(part, output_size, kernel_size, dilation, padding, stride, out=res[n0:n0 + m])
    return res
