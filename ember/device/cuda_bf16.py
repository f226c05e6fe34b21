"""bfloat16 on a GPU whose array library has no bfloat16 dtype (CuPy).

A bfloat16 tensor on such a device keeps its values as a ``uint16`` array of bfloat16 bit
patterns while its Ember dtype says bfloat16 — the layout ``ml_dtypes`` gives the CPU's
bfloat16 arrays, so copies between host and device are bit copies (:func:`to_storage`,
:func:`from_storage`). Arithmetic follows Ember's low-precision rule (ARCHITECTURE,
"float16 / bfloat16"): operands are widened exactly to float32, the float32 kernel runs,
and the result is rounded once to nearest-even.

The two conversions exist twice:

* :data:`SOURCE`, CUDA C kernels on ``__nv_bfloat16`` (``__bfloat162float``,
  ``__float2bfloat16_rn``), compiled by NVRTC (in CI: ``tests/cuda/test_bf16_storage.py``)
  and run through ``cupy.RawModule`` on a GPU (:func:`widen`, :func:`round_to_bf16`);
* :func:`widen_bits` / :func:`round_bits`, the same conversions as array operations on
  any ``xp`` — the reference the kernels are checked against (bit-exact with
  ``ml_dtypes``), and what runs where no GPU module can be loaded.

NaN rounds to the quiet NaN ``0x7FC0`` with the input's sign (``ml_dtypes``'); CUDA's
intrinsic may pick another quiet NaN, so tests compare NaN-ness there.

Status: the stand-in holds real bfloat16 arrays; a GPU still refuses bfloat16 tensors
(``cuda._no_bf16``, a clear TypeError). Storing them as bits needs every place that
computes on a tensor's array without knowing its dtype to know: the dispatcher (widen
inputs, run the float32 kernel, round the output, view ops on the raw bits), the
in-place fast paths (``ops/inplace.py``: ``xp.add(self._data, ..., out=self._data)``),
the host reads (``Tensor.numpy/tolist/item``, ``_repr``, ``factories._nested_arrays``:
view the uint16 host copy as bfloat16) and the CUDA launch plan (``xp.asarray(a,
dtype=bf16)``); until then uint16 bits would be computed on as integers, silently.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["SOURCE", "from_storage", "round_bits", "round_to_bf16", "to_storage", "widen",
           "widen_bits"]

#: The conversion kernels (grid-stride loops over ``n`` contiguous elements).
SOURCE = r"""
#include <cuda_bf16.h>

extern "C" __global__ void ember_bf16_widen(const __nv_bfloat16 *__restrict__ x,
                                            float *__restrict__ y, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    y[i] = __bfloat162float(x[i]);
}

extern "C" __global__ void ember_bf16_round(const float *__restrict__ x,
                                            __nv_bfloat16 *__restrict__ y, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}
"""
KERNELS = ("ember_bf16_widen", "ember_bf16_round")
_BLOCK, _MAX_BLOCKS = 256, 65535


def widen_bits(xp, bits):
    """float32 values of the bfloat16 bit patterns ``bits`` (uint16): exact."""
    return (xp.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bits(xp, x):
    """bfloat16 bit patterns (uint16) of float32 ``x``, rounded to nearest-even."""
    u = xp.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    # NOTE: uint32 wraps only for NaN bit patterns, which the where() replaces
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = ((u >> 16) & np.uint32(0x8000)) | np.uint32(0x7FC0)
    return xp.where(nan, quiet, rounded).astype(np.uint16)


def to_storage(host):
    """The uint16 bit view a bfloat16 host array is stored as on the device."""
    return host.view(np.uint16)


def from_storage(bits, np_bf16):
    """The bfloat16 host array (dtype ``np_bf16``) of the device's bit patterns."""
    return np.asarray(bits).view(np_bf16)


@functools.lru_cache(maxsize=None)
def _module(device_index: int):
    """The conversion kernels loaded on a GPU (NVRTC via ``cupy.RawModule``)."""
    import cupy
    from ..codegen.nvrtc import include_dirs
    with cupy.cuda.Device(device_index):
        return cupy.RawModule(code=SOURCE, options=tuple(
            f"-I{d}" for d in include_dirs()) + ("--std=c++17",))


def _launch(name: str, src, out):
    import cupy
    n = src.size
    if n:
        fn = _module(cupy.cuda.Device().id).get_function(name)
        grid = min(max(-(-n // _BLOCK), 1), _MAX_BLOCKS)
        fn((grid,), (_BLOCK,), (src, out, np.int64(n)))
    return out


def widen(bits):
    """float32 CuPy array of a uint16 CuPy array of bfloat16 bits (kernel on the GPU)."""
    import cupy
    src = cupy.ascontiguousarray(bits)
    return _launch("ember_bf16_widen", src, cupy.empty(src.shape, np.float32))


def round_to_bf16(x):
    """uint16 CuPy array of bfloat16 bits of a float32 CuPy array (kernel on the GPU)."""
    import cupy
    src = cupy.ascontiguousarray(x, dtype=np.float32)
    return _launch("ember_bf16_round", src, cupy.empty(src.shape, np.uint16))
