"""``take_rows``: one value per row (cross-entropy's target logits) read by one C loop.

``take_along_dim(x, idx, dim=1)`` with ``x`` of shape ``(N, C)`` and ``idx`` of shape
``(N, 1)`` is ``out[i] = x[i, idx[i]]``. The registry kernel runs NumPy's
``take_along_axis`` (broadcast fancy indices built in Python): 3.4 us alone for 128 rows,
but ~45 us inside the compiled W1 step, where its code paths run on caches the GEMMs have
just evicted (issue 19 item 7). Here it is one call of a few lines of C through
:func:`ember.codegen.launch.launcher` — exact (a copy), the same results.

An index outside ``[0, C)`` raises eager ``take_along_dim``'s ``EmberIndexError`` (an
``IndexError``; the public function checks the range before it calls the primitive, whose
NumPy kernel would count a negative index from the end). Float32/float64 ``x``; at run
time a non-contiguous operand, or no C compiler, runs the registry kernel instead.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ... import dtypes as _dt
from ...errors import EmberIndexError
from ...codegen import cache, launch
from ...codegen.toolchain import find_compiler
from ...ops.registry import REGISTRY
from ..ir import BufferOp, Graph, Var
from ._util import swap_nodes

_SOURCE = r"""
#include <stdint.h>
#define TAKE_ROWS(NAME, T)                                                              \
void NAME(char **p, const int64_t *g, const int64_t *st, int64_t nt) {                 \
    const T *x = (const T *)p[0]; const int64_t *idx = (const int64_t *)p[1];         \
    T *out = (T *)p[2]; int64_t *bad = (int64_t *)p[3];                                \
    const int64_t n = g[0], c = g[1];                                                  \
    (void)st; (void)nt;                                                                \
    bad[0] = -1;                                                                       \
    for (int64_t i = 0; i < n; i++) {                                                  \
        const int64_t j = idx[i];                                                      \
        if (j < 0 || j >= c) { bad[0] = i; return; }                                   \
        out[i] = x[i * c + j];                                                         \
    }                                                                                  \
}
TAKE_ROWS(ember_take_rows_f32, float)
TAKE_ROWS(ember_take_rows_f64, double)
"""

_state: dict = {}


def _kernels():
    """``{numpy dtype: kernel address}``, or None without a C compiler / fast launcher."""
    if "fns" not in _state:
        _state["fns"] = None
        cc = find_compiler()
        if cc is not None and launch.launcher() is not None:
            lib = cache.load(_SOURCE, cc)
            _state["lib"] = lib              # NOTE: keeps the library mapped
            _state["fns"] = {np.dtype(np.float32): ctypes.cast(lib.ember_take_rows_f32,
                                                               ctypes.c_void_p).value,
                             np.dtype(np.float64): ctypes.cast(lib.ember_take_rows_f64,
                                                               ctypes.c_void_p).value}
    return _state["fns"]


def _run_take_rows(xp, x, idx, *, dim):
    fns = _kernels() if xp is np else None
    fn = fns.get(x.dtype) if fns else None
    if fn is None or not (x.flags.c_contiguous and idx.flags.c_contiguous) or \
            idx.dtype != np.int64:
        return REGISTRY["take_along_dim"].kernel_for("cpu")(xp, x, idx, dim=dim)
    out = np.empty(idx.shape, x.dtype)
    bad = np.empty(1, np.int64)                 # the kernel sets it: -1, or the bad row
    g = launch.int64_address(x.shape)
    launch.launcher()(fn, (x, idx, out, bad), g, g, 1)
    if bad[0] >= 0:
        n, j = x.shape[1], int(idx.reshape(-1)[bad[0]])
        raise EmberIndexError(f"take_along_dim: index out of range for dim {dim} of size {n} "
                              f"(indices must be in [0, {n - 1}]; got {j} in row "
                              f"{int(bad[0])} of indices {tuple(idx.shape)})")
    return out


TAKE_ROWS = BufferOp("take_rows", _run_take_rows, accepts_out=None)


def _fits(n) -> bool:
    if n.op.name != "take_along_dim" or len(n.outs) != 1:
        return False
    x, idx = n.inputs
    if x.__class__ is not Var or idx.__class__ is not Var or len(x.shape) != 2:
        return False
    return n.params["dim"] % 2 == 1 and tuple(idx.shape) == (x.shape[0], 1) and \
        idx.dtype is _dt.int64 and x.dtype in (_dt.float32, _dt.float64) and \
        x.device.type == "cpu"


def take_rows(graph: Graph):
    """Rewrite one-per-row gathers; returns ``(graph, {"take_rows": nodes})``."""
    return swap_nodes(graph, "take_rows", _fits, TAKE_ROWS, {"dim": 1},
                      available=lambda: _kernels() is not None)
