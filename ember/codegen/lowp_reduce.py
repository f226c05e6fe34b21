"""Column sums of float16/bfloat16 matrices in one pass (bias gradients under autocast).

``x.sum(0)`` of a low-precision ``(rows, n)`` matrix is eager's float32 sum rounded once:
the whole operand converted to float32, NumPy's ``add.reduce`` over axis 0, the result
rounded (:func:`ember.ops.reduce._sum_kernel`). Here one C loop converts each element as
it loads it and keeps the ``n`` float32 running sums in L1, in NumPy's order: the first
row, then each next row added in turn (NumPy's reduction over a C-contiguous array's outer
axis), so the result is bit for bit the same (NumPy's/ml_dtypes' rounding, NaN payloads
included). W1's three bias gradients took 0.13 ms a step through the conversion.
"""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np

from .conv_kernels_c import ST_F16
from .pool import load_kernels
from .prelude import _BF16, _F16

_NAMES = {np.dtype(ml_dtypes.bfloat16): "colsum_bf16", np.dtype(np.float16): "colsum_f16"}

#: columns summed per block (their float32 sums stay in L1).
BLOCK = 2048

_BODY = r"""
void ember_colsum_S(char **p, const int64_t *g, int64_t nthreads) {
    const uint16_t *x = (const uint16_t *)p[0];
    uint16_t *out = (uint16_t *)p[1];
    const int64_t rows = g[0], n = g[1];
    float acc[BLOCK];
    (void)nthreads;
    for (int64_t j0 = 0; j0 < n; j0 += BLOCK) {
        const int64_t w = n - j0 < BLOCK ? n - j0 : BLOCK;
        for (int64_t j = 0; j < w; j++) acc[j] = LD(x[j0 + j]);
        for (int64_t i = 1; i < rows; i++) {
            const uint16_t *r = x + i * n + j0;
            #pragma omp simd
            for (int64_t j = 0; j < w; j++) acc[j] += LD(r[j]);
        }
        for (int64_t j = 0; j < w; j++) out[j0 + j] = ST(acc[j]);
    }
}
"""

SOURCE = ("#include <math.h>\n#include <stdint.h>\n#define EMBER_FN static inline\n"
          f"#define BLOCK {BLOCK}\n" + _BF16 + _F16 + ST_F16 + "".join(
              f"#define LD(v) {ld}(v)\n#define ST(v) {st}(v)\n"
              + _BODY.replace("_S(", f"_{s}(") + "#undef LD\n#undef ST\n"
              for s, ld, st in (("bf16", "ember_bf16_to_f32", "ember_f32_to_bf16"),
                                ("f16", "ember_f16_to_f32", "ember_st_f16"))))
_state: dict = {}


def _fns():
    if "fns" not in _state:
        loaded = load_kernels(SOURCE, list(_NAMES.values()))
        _state["fns"] = loaded[1] if loaded else {}
    return _state["fns"]


def sum_rows0(x: np.ndarray):
    """``x.sum(axis=0)`` of a C-contiguous 2-D float16/bfloat16 NumPy ``x`` with at least
    one row, in float32 rounded once to ``x``'s dtype; None where this does not apply
    (another array type, dtype, layout or rank, no rows, no compiler): the caller converts
    as before.

    Example:
        >>> s = sum_rows0(g)       # g: (128, 512) bfloat16 -> (512,) bfloat16, or None
    """
    name = _NAMES.get(x.dtype) if isinstance(x, np.ndarray) else None
    if name is None or x.ndim != 2 or not x.shape[0] or not x.flags.c_contiguous:
        return None
    fn = _fns().get(name)
    if fn is None:
        return None
    out = np.empty(x.shape[1], x.dtype)
    if out.size:
        fn((ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data),
           (ctypes.c_int64 * 2)(*x.shape), 1)
    return out
