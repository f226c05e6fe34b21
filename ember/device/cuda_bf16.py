"""bfloat16 on a GPU: CuPy >= 14's native ``ml_dtypes.bfloat16`` arrays.

CuPy 14 (cupy/cupy#9494) accepts ``ml_dtypes.bfloat16`` as an array dtype: allocation,
host<->device copies (bit copies of ``ml_dtypes``' host layout), ``astype``, most ufuncs,
the reductions (float32 sums inside, rounded once) and ``matmul``. A bfloat16 tensor on a
GPU is such an array, like a float16 tensor is a float16 one, and every path computes on
it as it does on float16: generated CUDA kernels (``render_cuda``: loads/stores through
``__nv_bfloat16``, float32 inside), cuBLAS GemmEx (``codegen/cuda_gemm.py``,
``CUDA_R_16BF``), the flash-attention kernels (``codegen/cuda_attention*.py``), the
column sums (``codegen/cuda_reduce.py``), CuPy's ufuncs and reductions for the rest.

What CuPy 14 lacks for bfloat16 (cupy/cupy#9630: ``cupyx`` kernels — ``add.at``'s
scatter-add included —, ``cupyx.jit``, FFT, some rounding ufuncs, ``divmod``, thrust's
sorts) raises (:data:`NO_LOOP`) or fails to compile a kernel. Two
answers, both "compute in float32, round once" (ARCHITECTURE, "float16 / bfloat16"):

* known cases route themselves (``ops/index.py``'s ``_index_put_cuda``: an embedding
  gradient's scatter-add accumulates in float32);
* every other ``"cuda"`` kernel is wrapped by :func:`widening` (``Op.kernel_for`` asks
  :func:`device_kernel`, on a backend with native bfloat16): when the kernel raises one
  of those errors on bfloat16 inputs, it runs again on float32 copies of them and its
  floating outputs are rounded once to bfloat16 (the op is remembered: later calls widen
  at once). Only the error path does work; every call pays the wrapper's frame, ~0.2-0.3
  us measured on the CPU (a GPU op's dispatch is ~10 us), on a GPU whose CuPy has
  bfloat16 only. ``cast`` also passes the backend's bfloat16 gate (:func:`_gated_cast`).

:func:`probe` decides whether a CuPy module has native bfloat16 (``CuPyRuntime`` asks at
backend creation: no kernel is compiled); :func:`roundtrip` checks, on the first
bfloat16 allocation, that an ``astype`` kernel compiles and rounds like ``ml_dtypes``.
Older CuPy keeps refusing bfloat16 tensors with :func:`unsupported_message`'s TypeError.

History: CuPy <= 13 had no bfloat16 dtype; a plan to store bfloat16 as ``uint16`` bit
patterns (with NVRTC conversion kernels) was dropped unfinished once CuPy 14 shipped it.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import bfloat16 as _bfloat16

__all__ = ["MIN_CUPY", "NO_LOOP", "device_kernel", "probe", "roundtrip", "unsupported_message",
           "widening"]

_BF16 = np.dtype(_bfloat16.np)
#: the first CuPy release with ``ml_dtypes.bfloat16`` arrays.
MIN_CUPY = (14, 0)


def _version(text: str) -> tuple:
    """(major, minor) of a version string ("14.2.0", "14.0.0rc1"); (0, 0) if unreadable."""
    parts = []
    for p in str(text).split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit()) if p[:1].isdigit() else ""
        if not digits:
            return (0, 0)
        parts.append(int(digits))
    return tuple(parts) if len(parts) == 2 else (0, 0)


def probe(cupy, ml_dtypes=None) -> tuple:
    """``(ok, why)``: whether ``cupy`` holds ``ml_dtypes.bfloat16`` arrays natively.

    Cheap (no kernel compiled, no synchronisation, no device memory): CuPy's version is
    at least :data:`MIN_CUPY`, ``ml_dtypes`` imports, and CuPy makes an empty array of
    that dtype. ``ml_dtypes``: the module (None: imported here).

    Example:
        >>> probe(cupy)            # doctest: +SKIP (needs CuPy)
        (True, '')
    """
    version = getattr(cupy, "__version__", "?")
    if _version(version) < MIN_CUPY:
        return False, f"CuPy {version} has no bfloat16 dtype"
    if ml_dtypes is None:
        try:
            import ml_dtypes
        except ImportError:
            return False, f"CuPy {version} needs ml_dtypes for bfloat16, which is not installed"
    bf16 = np.dtype(ml_dtypes.bfloat16)
    try:
        a = cupy.empty((0,), dtype=bf16)      # NOTE: size 0: the pool reserves nothing
    except Exception as e:  # noqa: BLE001 - any refusal means "no bfloat16 here"
        return False, f"CuPy {version} refused a bfloat16 array ({type(e).__name__}: {e})"
    if np.dtype(a.dtype) != bf16:
        return False, f"CuPy {version} made a {a.dtype} array when asked for bfloat16"
    return True, ""


#: float32 values whose bfloat16 rounding tests a conversion: exact, ties to even (both
#: directions), above a tie, negative, the largest finite, infinity.
_PROBE = np.array([1.0, 1.00390625, 1.01171875, 1.0039063, -2.5, 3.3895314e38, np.inf],
                  np.float32)


def roundtrip(cupy, bf16) -> tuple:
    """``(ok, why)``: a float32 -> bfloat16 -> float32 ``astype`` on the device (kernels
    compiled on first use) equals ``ml_dtypes``' rounding on the host, bit for bit."""
    try:
        dev = cupy.asarray(_PROBE).astype(bf16)
        back = cupy.asnumpy(dev.astype(np.float32))
        host = cupy.asnumpy(dev)
    except Exception as e:  # noqa: BLE001 - a failed compile or copy: report it
        return False, f"a bfloat16 astype failed on the GPU ({type(e).__name__}: {e})"
    want = _PROBE.astype(bf16)
    if np.dtype(host.dtype) != bf16 or not np.array_equal(
            np.asarray(host).view(np.uint16), want.view(np.uint16)) or not np.array_equal(
            np.asarray(back, np.float32).view(np.uint32), want.astype(np.float32).view(
                np.uint32)):
        return False, "a bfloat16 astype on the GPU did not round like ml_dtypes"
    return True, ""


def unsupported_message(why: str) -> str:
    """The TypeError text for a bfloat16 tensor on a GPU whose CuPy cannot hold one."""
    return (f"cuda: bfloat16 tensors need CuPy >= {MIN_CUPY[0]} with ml_dtypes installed "
            f"(CuPy's native bfloat16 arrays); here: {why}; valid: float16, float32, "
            f"float64 on the GPU, or keep bfloat16 tensors on the CPU "
            f"(e.g. pip install -U 'cupy-cuda13x>=14' ml_dtypes)")


#: errors a CuPy routine without a bfloat16 loop raises: no ufunc loop (TypeError),
#: "not supported" (NotImplementedError), an unknown dtype in a type table (ValueError,
#: KeyError); a compile error's type is added by :func:`device_kernel` (CuPy's). A
#: genuine error raises again in float32, and the first one is what the caller sees.
NO_LOOP = (TypeError, NotImplementedError, ValueError, KeyError)
#: ops whose kernel failed on bfloat16 once: they widen at once from then on.
_widened: set = set()


def widening(name: str, kernel, bf16, errors=NO_LOOP):
    """``kernel`` (an op's ``"cuda"`` kernel) that, when it raises one of ``errors`` on
    bfloat16 arrays, runs again on float32 copies of them and rounds its floating results
    once to bfloat16 (``bf16``: the NumPy dtype). Other failures, and kernels given a
    bfloat16 buffer to write (an array among ``params``), raise as before."""
    f32 = np.dtype(np.float32)

    def has_bf16(arrays) -> bool:
        return any(getattr(a, "dtype", None) == bf16 for a in arrays)

    def widen(xp, arrays, params):
        wide = [a.astype(f32) if getattr(a, "dtype", None) == bf16 else a for a in arrays]
        res = kernel(xp, *wide, **params)
        return tuple(_round(r, f32, bf16) for r in res) if isinstance(res, tuple) else \
            _round(res, f32, bf16)

    def run(xp, *arrays, **params):
        if name in _widened and has_bf16(arrays) and not has_bf16(params.values()):
            return widen(xp, arrays, params)
        try:
            return kernel(xp, *arrays, **params)
        except errors:
            if not has_bf16(arrays) or has_bf16(params.values()):
                raise
            try:
                res = widen(xp, arrays, params)
            except Exception:  # noqa: BLE001 - float32 failed too: the first error stands
                res = _FAILED
            if res is _FAILED:
                raise
            _widened.add(name)
            return res
    run.__name__ = f"{getattr(kernel, '__name__', name)}_bf16"
    run.__wrapped__ = kernel
    return run


_FAILED = object()


def _round(r, f32, bf16):
    """A widened kernel's result: float32 arrays back to bfloat16, anything else as is."""
    return r.astype(bf16) if getattr(r, "dtype", None) == f32 else r


def device_kernel(name: str, kernel):
    """Op ``name``'s ``"cuda"`` kernel as the registry should run it: on a GPU whose CuPy
    holds bfloat16 arrays, wrapped by :func:`widening` (what CuPy lacks for bfloat16 runs
    in float32, rounded once), ``cast`` on any GPU by :func:`_gated_cast`; elsewhere (the
    stand-in) ``kernel`` itself."""
    from .base import _backends
    be = _backends.get("cuda")
    if be is None or be.is_fake:
        return kernel
    if name == "cast":
        kernel = _gated_cast(be, kernel)
    if "bfloat16" not in be.capabilities:
        return kernel
    errors = NO_LOOP + be.runtime.compile_errors()
    return widening(name, kernel, _BF16, errors)


def _gated_cast(be, kernel):
    """``cast``'s kernel, which makes bfloat16 arrays without ``empty``/``asarray``: a cast
    to bfloat16 passes the backend's gate first (the old-CuPy TypeError, or the first-use
    round trip), so ``x.to(bfloat16)`` says what ``ember.zeros(..., dtype=bfloat16)`` says."""
    def cast(xp, x, *args, **params):
        dtype = params.get("dtype", args[0] if args else None)
        if getattr(dtype, "np", None) is _BF16 and not be._bf16_ready:
            be._bf16()
        return kernel(xp, x, *args, **params)
    cast.__name__ = f"{getattr(kernel, '__name__', 'cast')}_gated"
    return cast
