"""SGD's ``w - lr * g`` on a small float32 vector as one C call (a GEMM epilogue's follower).

The compiled graphs' fused kernel for ``sub(w, mul(g, lr))`` rounds once (its C contracts
the multiply and the subtraction into an FMA); :func:`step` computes the same,
``fmaf(-lr, g, w)`` with ``lr`` rounded to float32 first (the ``mul``'s cast), for a node
that makes ``g`` and wants the update without a kernel launch of its own (``gemm_epilogue``'s
``matmul_mask`` with its row sums: a layer's bias gradient). Without a C compiler it runs
NumPy in float64, one rounding to float32 (the FMA's bits but for double rounding).
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import cache, launch
from .toolchain import find_compiler

__all__ = ["step"]

_SOURCE = r"""
#include <math.h>
#include <stdint.h>
/* p: w, g, lr[1] (float32), out; g[0]: n */
void ember_sgd_vec(char **p, const int64_t *g, const int64_t *st, int64_t nt) {
    const float *w = (const float *)p[0], *gr = (const float *)p[1];
    const float lr = ((const float *)p[2])[0];
    float *out = (float *)p[3];
    (void)st; (void)nt;
    for (int64_t i = 0; i < g[0]; i++) out[i] = fmaf(-lr, gr[i], w[i]);
}
"""

_F32 = np.dtype(np.float32)
_state: dict = {}
_GEOM: dict = {}


def _kernel():
    if "fn" not in _state:
        _state["fn"] = None
        cc = find_compiler()
        if cc is not None and launch.launcher() is not None:
            lib = cache.load(_SOURCE, cc)
            _state["lib"] = lib                 # NOTE: keeps it mapped
            _state["run"] = launch.launcher()
            _state["fn"] = ctypes.cast(lib.ember_sgd_vec, ctypes.c_void_p).value
    return _state["fn"]


def _geometry(n: int) -> int:
    try:
        return _GEOM[n][1]
    except KeyError:
        if len(_GEOM) >= 64:
            _GEOM.clear()
        a = np.array([n], np.int64)
        _GEOM[n] = (a, a.ctypes.data)
        return _GEOM[n][1]


def step(w, g, lr):
    """``w - lr * g`` (float32 arrays of one shape, ``lr`` a number rounded to float32),
    rounded once, as a new C-contiguous array."""
    fn = _state["fn"] if "fn" in _state else _kernel()
    if fn is None or w.dtype != _F32 or g.dtype != _F32 or w.shape != g.shape or \
            not (w.flags.c_contiguous and g.flags.c_contiguous):
        lr64 = np.float64(np.float32(lr))
        return (w.astype(np.float64) - g.astype(np.float64) * lr64).astype(w.dtype)
    out = np.empty(w.shape, _F32)
    geom = _geometry(w.size)
    _state["run"](fn, (w, g, np.array([lr], _F32), out), geom, geom, 1)
    return out
