"""The epilogue calls of Ember's float32 GEMM (:func:`.sgemm.gemm`'s ``bias_rows``,
``relu``, ``mask``, ``row_sums`` and ``update``): their plans and checks, apart from the
plain calls' path (the compiled graphs' ``gemm_epilogue`` nodes make them)."""
from __future__ import annotations

import numpy as np

from . import sgemm as _sg
from .sgemm import F32, _DATA_OFF, _ITEMS_OFF, _strides


def gemm_epi(isa, a, b, c, alpha, beta, variant, nthreads, bias, update, rows, relu,
             mask=None, rsum=None):
    """:func:`.sgemm.gemm` with a bias column, relu, relu's backward mask, row sums or the
    SGD update (its arguments, ``isa`` resolved): the plan of a call seen before is
    replayed with no checks but the dtypes'; a new one is checked and planned by
    ``sgemm._gemm_new``. Returns ``c`` or None (nothing written)."""
    w = wo = None
    if update is not None:
        w, wo, lr = update
    key = (isa, a.shape, a.strides, b.shape, b.strides,
           None if c is None else (c.shape, c.strides), _sg.KC, _sg.KC_T, _sg.KC_ONE, _sg.MC,
           _sg.NC, _sg.COLS, _sg.ONE_BLOCK_BYTES,
           None if bias is None else bias.shape, rows, relu,
           None if w is None else (w.strides, wo.strides),
           None if mask is None else mask.strides, rsum is None)
    e = _sg._plans.get(key)
    if e is None or a.dtype != F32 or b.dtype != F32 or (c is not None and c.dtype != F32) \
            or (bias is not None and (bias.dtype != F32 or not bias.flags.c_contiguous)) \
            or (w is not None and (w.dtype != F32 or wo.dtype != F32)) \
            or (mask is not None and mask.dtype != F32) or (rsum is not None and (
                rsum.dtype != F32 or not rsum.flags.c_contiguous)):
        return _sg._gemm_new(isa, key, a, b, c, alpha, beta, variant, nthreads, bias, update,
                             rows, relu, mask, rsum)
    g, addr, big, shape, run, fast = e
    if c is None:
        c, beta = np.empty(shape, F32), 0.0
        if (w is not None and w.strides != c.strides) or \
                (mask is not None and mask.strides != c.strides):   # not the planned layout
            return None
    if nthreads is None:
        nthreads = _sg._threads() if big else 1
    if w is None:
        ab = _sg._AB.get((alpha, beta))
        if ab is None:
            ab = np.array([alpha, beta], F32)
        w = wo = c
    else:
        ab = np.array([alpha, beta, lr], F32)
    arrays = (a, b, c, ab, c if bias is None else bias, w, wo, c if mask is None else mask,
              c if rsum is None else rsum)
    run(fast, arrays, addr, addr, nthreads, 9, _ITEMS_OFF, _DATA_OFF)
    return c


def update_ok(a, b, c, update) -> bool:
    """Whether ``update = (w, w_out, lr)`` suits :func:`gemm`'s SGD epilogue: float32
    arrays of the product's shape and one layout (whole elements, unit last stride),
    ``w_out`` either ``w`` or apart from it, neither overlapping ``a``, ``b`` or ``c``."""
    w, wo, _ = update
    shape = a.shape[:-1] + b.shape[-1:]
    if w.shape != shape or wo.shape != shape or w.dtype != F32 or wo.dtype != F32 or \
            w.strides != wo.strides or _strides(w) is None or \
            (shape[-1] > 1 and w.strides[-1] != 4):
        return False
    if wo is not w and np.may_share_memory(w, wo):
        return False
    ops = (a, b) if c is None else (a, b, c)
    return not any(np.may_share_memory(x, y) for x in (w, wo) for y in ops)


def update_numpy(c, update) -> None:
    """The SGD epilogue on NumPy (an empty ``k``): ``w_out = w - lr * c``, one rounding."""
    w, wo, lr = update
    r = (w.astype(np.float64) - c.astype(np.float64) * np.float64(np.float32(lr)))
    wo[...] = r.astype(F32)
