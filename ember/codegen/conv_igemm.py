"""Implicit-GEMM float32 convolution, stride 1: products read the padded image, no columns.

A stride-1 convolution's im2col row ``k = (c, kh, kw)`` is a shifted run of the (padded)
image, so the GEMM ``W2d @ cols`` can load its vectors from a padded copy of each image
(C text: :mod:`.conv_igemm_c`) — no (C*kh*kw, L) columns written and read back. The
input gradient of a stride-1 convolution is the same kind of convolution of ``dY`` (the
weights flipped and transposed, padding ``d*(k-1) - p``), so one kernel serves both:

* :func:`forward`: ``W2d @ unfold(x) [+ bias]``, the same bits as ``unfold`` + Ember's
  GEMM (:mod:`.sgemm`: one FMA chain per output over each ``KC`` block) + the bias add;
* :func:`input_grad`: ``fold(W2d^T @ dY)`` summed in another order (one FMA chain over
  ``(co, kh, kw)`` instead of ``kh*kw`` GEMM chains over ``co`` added by ``fold``): float32
  rounding differs from the GEMM + fold path.

Variants (a library each, picked at run time like :mod:`.sgemm`'s): ``avx512`` (8 x 3
zmm tiles), ``avx2`` (4 x 3 ymm), ``generic`` (GNU C vectors). :data:`mode`
(``EMBER_CONV_IGEMM`` at import: ``auto``, a variant, ``off``) chooses; ``auto`` runs
where :mod:`.sgemm`'s ``auto`` runs (AVX-512; its GEMM is what this replaces, and its
bits are what :func:`forward` reproduces); elsewhere callers keep unfold + GEMM.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from . import conv_kernels as _ck
from . import pool as _pool
from . import sgemm as _sgemm
from .conv_igemm_c import TILES, source
from .runtime import num_threads
from .sgemm_c import KC, KC_ONE

F32 = np.dtype(np.float32)
#: ``"auto"``, a name of :data:`TILES` or ``"off"``; ``EMBER_CONV_IGEMM`` sets it at import
mode = {"0": "off"}.get(os.environ.get("EMBER_CONV_IGEMM", "auto"),
                        os.environ.get("EMBER_CONV_IGEMM", "auto"))
#: the smallest output-channel count and multiply-adds (whole batch) it runs for
MIN_CO, MIN_MACS = 8, 1 << 20
_fns: dict = {}
_koffs: dict = {}
_PTRS = ctypes.c_void_p * 7


def variant_for(variant=None):
    """The variant that runs (``variant`` or :data:`mode`), or None."""
    want = mode if variant is None else variant
    if want == "off":
        return None
    runs = _sgemm.runnable()
    if want == "auto":
        return "avx512" if "avx512" in runs and _sgemm.mode == "auto" else None
    if want not in TILES:
        raise ValueError(f"conv_igemm: unknown variant {want!r} (conv_igemm.mode or "
                         f"EMBER_CONV_IGEMM); valid: auto, off, {', '.join(TILES)}")
    return want if want in runs else None


def worth(stride, dtype, out_channels: int, macs: int) -> bool:
    """Whether callers run :func:`conv` for a convolution with this ``stride``, operand
    ``dtype``, ``out_channels`` and about ``macs`` multiply-adds: stride 1, float32, a
    variant that runs, at least :data:`MIN_CO` output channels and :data:`MIN_MACS`
    (below, fixed costs; measured in bench/RESULTS.md "Issue 19 — eager W2:
    implicit-GEMM convolution")."""
    return tuple(stride) == (1, 1) and dtype == F32 and out_channels >= MIN_CO and \
        macs >= MIN_MACS and variant_for() is not None


def _fn(name):
    f = _fns.get(name)
    if f is None:
        loaded = _pool.load_kernels(source(name), [f"conv_igemm_{name}"])
        if loaded is None:
            return None
        f = _fns[name] = (loaded[1][f"conv_igemm_{name}"], loaded[0])
    return f[0]


def _block(k: int) -> int:
    """The ``k`` block of :mod:`.sgemm`'s plan for a row-major A: one block up to
    ``KC_ONE``, else ``KC``."""
    return k if k <= KC_ONE else KC


def conv(x, w2d, bias, kernel_size, dilation, padding, pad_value=0.0, out=None,
         variant=None, block=None, cols=None):
    """Stride-1 ``W2d @ unfold(x) [+ bias]`` of float32 (N, C, H, W) ``x`` and (Co,
    C*kh*kw) ``w2d``, as (N, Co, oh, ow); None where no variant runs (nothing written).

    Args:
        x, w2d: float32 arrays (any strides; ``x`` is copied image by image).
        bias: (Co,) values or None.
        kernel_size, dilation: pairs; padding: ``((top, bottom), (left, right))``, >= 0.
        pad_value: what the padding reads.
        out: a C-contiguous float32 (N, Co, oh, ow) array, or None.
        variant: None (:data:`mode`) or a variant name.
        block: ``k`` per FMA chain (None: :mod:`.sgemm`'s blocks, for its bits).
        cols: a C-contiguous float32 (N, C*kh*kw, oh*ow) array to write ``unfold(x)``
            into as well (each image's from its padded copy, in cache), or None.

    Example:
        >>> y = conv(x, w.reshape(64, -1), b, (3, 3), (1, 1), ((1, 1), (1, 1)))
    """
    name = variant_for(variant)
    if name is None or x.dtype != F32 or w2d.dtype != F32:
        return None
    n, c, h, w = x.shape
    (kh, kw), (dh, dw) = kernel_size, dilation
    (pt, pb), (pl, pr) = padding
    co, kk = w2d.shape
    if kk != c * kh * kw or min(pt, pb, pl, pr) < 0:
        raise ValueError(f"conv_igemm: weight {w2d.shape} for input {x.shape} and kernel "
                         f"{tuple(kernel_size)} with padding {padding} (valid: (Co, C*kh*kw),"
                         f" padding >= 0)")
    oh, ow = h + pt + pb - dh * (kh - 1), w + pl + pr - dw * (kw - 1)
    y = np.empty((n, co, max(oh, 0), max(ow, 0)), F32) if out is None else out
    if y.size == 0 or kk == 0:
        if cols is not None and cols.size:      # Co == 0: the columns all the same
            _ck.unfold(x, kernel_size, dilation, padding, (1, 1), pad_value, out=cols)
        if y.size:
            y[...] = 0 if bias is None else np.asarray(bias, F32).reshape(co, 1, 1)
        return y
    fn = _fn(name)
    if fn is None:
        return None
    vl, mr, _ = TILES[name]
    nseg = -(-ow // vl)
    hp, wr = oh + dh * (kh - 1), nseg * vl + dw * (kw - 1)
    q = np.array([n, c, h, w, co, pt, pl, oh, ow, hp, wr, kk, block or _block(kk), nseg],
                 np.int64)
    koff = _koff(c, kh, kw, dh, dw, hp, wr)
    wp = _pack(w2d, mr)
    b = None if bias is None else np.ascontiguousarray(bias, F32).reshape(-1)
    xc = np.ascontiguousarray(x)
    pv = np.array([pad_value], F32)
    if cols is not None and (cols.shape != (n, kk, oh * ow) or cols.dtype != F32 or
                             not cols.flags.c_contiguous):
        raise ValueError(f"conv_igemm: cols {cols.shape} {cols.dtype} (valid: C-contiguous "
                         f"float32 {(n, kk, oh * ow)})")
    ptrs = _PTRS(xc.ctypes.data, wp.ctypes.data, None if b is None else b.ctypes.data,
                 y.ctypes.data, koff.ctypes.data, pv.ctypes.data,
                 None if cols is None else cols.ctypes.data)
    fn(ptrs, q.ctypes.data, num_threads() if n > 1 else 1)
    return y


def empty_columns(shape):
    """An uninitialised C-contiguous float32 array whose data starts on a 64-byte line:
    :func:`conv` writes such columns with streaming stores (W2's conv2: 19 MB a step,
    ~1.1 ms instead of ~3 through the caches; NumPy's large arrays start 16 or 32 bytes
    into a line)."""
    n = int(np.prod(shape))
    buf = np.empty(n + 16, F32)
    off = (-buf.ctypes.data % 64) // 4
    return buf[off:off + n].reshape(shape)


def _koff(c, kh, kw, dh, dw, hp, wr):
    """Offsets of im2col row ``(c, i, j)`` in the padded image (cached per geometry)."""
    key = (c, kh, kw, dh, dw, hp, wr)
    k = _koffs.get(key)
    if k is None:
        ci, ii, jj = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
        k = (ci * hp * wr + ii * dh * wr + jj * dw).reshape(-1).astype(np.int64)
        if len(_koffs) > 256:
            _koffs.clear()
        _koffs[key] = k
    return k


def _pack(w2d, mr):
    """(Co, K) weights as ``ceil(Co / mr)`` panels (K, mr), zero rows past Co."""
    co, kk = w2d.shape
    p = -(-co // mr)
    wp = np.zeros((p * mr, kk), F32)
    wp[:co] = w2d
    return np.ascontiguousarray(wp.reshape(p, mr, kk).transpose(0, 2, 1))


def flipped(w2d, c, kernel_size):
    """The input gradient's weights: (C, Co*kh*kw) ``w'[c, (co, i, j)] = w[co, c, kh-1-i,
    kw-1-j]`` of (Co, C*kh*kw) ``w2d``."""
    kh, kw = kernel_size
    w4 = w2d.reshape(w2d.shape[0], c, kh, kw)[:, :, ::-1, ::-1]
    return np.ascontiguousarray(w4.transpose(1, 0, 2, 3)).reshape(c, -1)


def input_grad(w2d, dy, output_size, kernel_size, dilation, padding, out=None, variant=None):
    """``fold(w2d.T @ dy)`` of a stride-1 convolution, as a convolution of (N, Co, oh, ow)
    ``dy`` -> (N, C, H, W); None where it does not run (a variant, dtypes, or a padding
    above ``d*(k-1)``: the flipped convolution would crop).

    Example:
        >>> dx = input_grad(w.reshape(64, -1), dy, (16, 16), (3, 3), (1, 1), ((1, 1), (1, 1)))
    """
    (kh, kw), (dh, dw) = kernel_size, dilation
    (pt, pb), (pl, pr) = padding
    ph, pw = dh * (kh - 1), dw * (kw - 1)
    pad = ((ph - pt, ph - pb), (pw - pl, pw - pr))
    if min(pad[0] + pad[1]) < 0 or variant_for(variant) is None or dy.dtype != F32:
        return None
    c = w2d.shape[1] // (kh * kw)
    # NOTE: one FMA chain over all of k (no bits to match): no partial sums stored and
    # read back (W2's conv2: k = 576, 3 blocks of sgemm's)
    res = conv(dy, flipped(w2d, c, kernel_size), None, kernel_size, dilation, pad,
               out=out, variant=variant, block=w2d.shape[0] * kh * kw)
    if res is not None and res.shape[2:] != tuple(output_size):
        raise ValueError(f"conv_igemm.input_grad: output {res.shape[2:]} for output_size "
                         f"{tuple(output_size)} (stride 1)")
    return res
