"""One C call per dtype group: unscale every gradient in place and flag inf/NaN.

PyTorch's ``_amp_foreach_non_finite_check_and_unscale_``: each value is checked *before*
it is multiplied by ``inv_scale`` (so a finite scaled gradient is never flagged), and
the product is rounded once in the gradient's dtype. The check reads the exponent bits,
so no compiler flag can fold it away. float32 and float64 contiguous buffers go through
the kernel; anything else (float16/bfloat16, strided views, no C compiler) takes the
NumPy path, :func:`unscale_numpy`, which the tests hold the kernel to.

A GPU's gradients (:func:`unscale_group_gpu`): the same loop as a generated CUDA kernel,
one multi-tensor launch for the group (``codegen/cuda_optim.py``'s ``unscale``), the flag
read back once; other dtypes, strided views or a device without generated kernels take
the array passes of :func:`unscale_numpy` in the device's array module.
"""
from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["unscale_group", "unscale_group_gpu", "unscale_numpy", "available"]

_SOURCE = r"""
#include <stdint.h>
#include <string.h>
/* ptrs = [t_0 .. t_{n-1}, &inv (double), &found (int64)]; g = [n, size_0 .. size_{n-1}] */
#define EMBER_UNSCALE(name, T, U, EXP)                                                 \
void ember_##name(char **ptrs, const int64_t *g, int64_t nthreads) {                  \
    (void)nthreads;                                                                   \
    const int64_t n = g[0];                                                           \
    double invd; memcpy(&invd, ptrs[n], sizeof invd);                                 \
    const T inv = (T)invd;                                                            \
    U bad = 0;                                                                        \
    for (int64_t t = 0; t < n; t++) {                                                 \
        T *a = (T *)ptrs[t];                                                          \
        const int64_t m = g[1 + t];                                                   \
        for (int64_t i = 0; i < m; i++) {                                             \
            U bits; memcpy(&bits, &a[i], sizeof bits);                                \
            bad |= (U)((bits & EXP) == EXP);                                          \
            a[i] = a[i] * inv;                                                        \
        }                                                                             \
    }                                                                                 \
    int64_t found = bad != 0; memcpy(ptrs[n + 1], &found, sizeof found);              \
}
EMBER_UNSCALE(unscale_f32, float, uint32_t, 0x7f800000u)
EMBER_UNSCALE(unscale_f64, double, uint64_t, 0x7ff0000000000000ull)
"""

_NAMES = {np.dtype(np.float32): "unscale_f32", np.dtype(np.float64): "unscale_f64"}
_state: dict = {}


def _fns() -> dict:
    fns = _state.get("fns")
    if fns is None:
        from ..codegen.pool import load_kernels
        try:
            loaded = load_kernels(_SOURCE, list(_NAMES.values()))
        except (OSError, RuntimeError):   # NOTE: a failed build falls back to NumPy
            loaded = None
        fns = _state["fns"] = loaded[1] if loaded else {}
        _state["lib"] = loaded[0] if loaded else None
    return fns


def available() -> bool:
    """Whether the fused kernels could be built here (a working C compiler)."""
    return bool(_fns())


def unscale_numpy(arrays: list, inv: np.float32) -> bool:
    """The reference: ``a *= inv`` in float32 arithmetic (or float64's), True if any input
    value was inf/NaN."""
    bad = False
    with np.errstate(all="ignore"):
        for a in arrays:
            bad |= not bool(np.isfinite(a).all())
            if a.dtype.itemsize < 4:   # NOTE: float32 arithmetic, one rounding (as PyTorch)
                a[...] = np.multiply(a.astype(np.float32), inv)
            else:
                np.multiply(a, a.dtype.type(inv), out=a)
    return bad


def unscale_group(arrays: list, inv: np.float32, use_kernel: bool = True) -> bool:
    """Unscale ``arrays`` (one dtype) in place; True if any held inf/NaN.

    Example:
        >>> a = np.array([2.0, np.inf], np.float32)
        >>> unscale_group([a], np.float32(0.5)), a.tolist()
        (True, [1.0, inf])
    """
    dt = arrays[0].dtype
    fn = _fns().get(_NAMES.get(dt)) if use_kernel else None
    fast = [a for a in arrays if a.flags.c_contiguous and a.size] if fn else []
    rest = [a for a in arrays if not (fn and a.flags.c_contiguous)]
    bad = unscale_numpy(rest, inv) if rest else False
    if fast:
        n = len(fast)
        ptrs = (ctypes.c_void_p * (n + 2))(*[a.ctypes.data for a in fast])
        inv_d, found = np.array([float(inv)], np.float64), np.zeros(1, np.int64)
        ptrs[n], ptrs[n + 1] = inv_d.ctypes.data, found.ctypes.data
        g = np.array([n] + [a.size for a in fast], np.int64)
        fn(ptrs, g.ctypes.data, 1)
        bad |= bool(found[0])
    return bad


def unscale_group_gpu(xp, arrays: list, inv: np.float32, kernels: bool) -> bool:
    """:func:`unscale_group` on a GPU's arrays (``xp``: CuPy): float32/float64 contiguous
    ones in one launch of the ``unscale`` kernel where the device runs generated kernels
    (``kernels``), the rest through :func:`unscale_numpy`'s passes; the inf/NaN flag is
    kept on the device and read once (PyTorch's ``found_inf``, read by its ``step``)."""
    from ..codegen import cuda_optim       # NOTE: codegen sits above amp's kernels
    live = [a for a in arrays if a.size]
    if not live:
        return False
    dt = live[0].dtype
    fast = [a for a in live if a.flags.c_contiguous] if kernels and \
        cuda_optim.has_kernel(dt) else []
    bad = None
    if fast:
        found = xp.zeros(1, dt)
        cuda_optim.launch_many("unscale", xp, [(a, found) for a in fast], (inv,), 0)
        bad = found[0] != 0
    for a in live:
        if fast and a.flags.c_contiguous:
            continue
        nonfinite = ~xp.isfinite(a).all()
        bad = nonfinite if bad is None else bad | nonfinite
        if a.dtype.itemsize < 4:   # NOTE: float32 arithmetic, one rounding (as PyTorch)
            a[...] = xp.multiply(a.astype(xp.float32), inv)
        else:
            xp.multiply(a, a.dtype.type(inv), out=a)
    return bool(bad)
