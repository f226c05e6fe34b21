"""The default SGD/Adam/AdamW update on a GPU: one generated CUDA kernel per parameter.

The optimizers' for-loop step (``optim/sgd.py``, ``optim/adam.py``) updates each parameter
with one pass over its elements wherever a kernel can run it (:mod:`.optim_kernels`). On
a device with ``cuda_kernels`` that pass is a CUDA kernel rendered here from the *same*
per-element steps the CPU's C loops are made of (:data:`.optim_kernels.SGD_STEP`,
:data:`.optim_kernels.ADAM_STEP`): a grid-stride loop over the elements, the scalars
passed by value (converted to the parameter's dtype by NumPy, as the C loops' are), each
``MUL``/``ADD``/``SUB``/``DIV``/``SQRT`` CUDA's correctly rounded, never-contracted
intrinsic (``__fmul_rn``, ``__dadd_rn``, ``__fsqrt_rn``...). So an update reads ``p``,
``grad`` and the moments once and writes them once (Adam: 7 parameter-sized transfers, was
~13 CuPy passes with their temporaries), and its values are those of the passes evaluated
element by element in the parameter's dtype.

float16 and bfloat16 parameters have no kernel here (:func:`launch` says False): their
update runs the optimizer's array passes (CuPy's float32-inside ufuncs), as before.

One launch per parameter, as PyTorch's ``foreach`` path runs one multi-tensor launch per
~100 chunks: the update is memory-bound, so a multi-tensor launch saves launch latency
only (GPT-2 small: ~150 parameters).

Example:
    >>> launch("adam", (p, g, m, v), scalars, flags)    # doctest: +SKIP (needs a GPU)
"""
from __future__ import annotations

import numpy as np

from .optim_kernels import ARRAYS, SCALARS, STEPS

__all__ = ["launch", "source", "stats"]

#: threads per block; grids are capped at :data:`MAX_BLOCKS` (grid-stride loops).
BLOCK = 256
MAX_BLOCKS = 1 << 16
#: ``(C type, suffix, intrinsic suffix)`` per NumPy dtype with a kernel.
_TYPES = {np.dtype(np.float32): ("float", "f32", "f"), np.dtype(np.float64): ("double", "f64",
                                                                               "d")}
#: launches made (tests and benchmarks read it).
stats = {"launches": 0}
_module: dict = {}


def _entry(name: str, ctype: str, suffix: str) -> str:
    params = [f"{'' if w else 'const '}{ctype} *{a}" for a, w in ARRAYS[name]]
    params += [f"{ctype} {x}" for x in SCALARS[name]] + ["int f", "int64_t n"]
    return (f'extern "C" __global__ void ember_cuda_{name}_{suffix}({", ".join(params)}) {{\n'
            "    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
            "         i += (int64_t)blockDim.x * gridDim.x) {" + STEPS[name] + "    }\n}\n")


def source() -> str:
    """The CUDA C text of every update kernel (float32 and float64, SGD and Adam)."""
    from .render_cuda import NVRTC_HEAD
    parts = [NVRTC_HEAD]
    for ctype, suffix, p in _TYPES.values():
        parts.append(f"#define T {ctype}\n#define MUL __{p}mul_rn\n#define ADD __{p}add_rn\n"
                     f"#define SUB __{p}sub_rn\n#define DIV __{p}div_rn\n"
                     f"#define SQRT __{p}sqrt_rn\n")
        parts += [_entry(name, ctype, suffix) for name in STEPS]
        parts.append("#undef T\n#undef MUL\n#undef ADD\n#undef SUB\n#undef DIV\n#undef SQRT\n")
    return "".join(parts)


def _function(name: str):
    fns = _module.get("fns")
    if fns is None:
        from .cuda_cache import load_module
        mod = load_module(source(), "ember_cuda_optim")
        fns = _module["fns"] = {}
        _module["mod"] = mod
    fn = fns.get(name)
    if fn is None:
        fn = fns[name] = _module["mod"].get_function(name)
    return fn


def launch(name: str, arrays, scalars, flags: int) -> bool:
    """Run update ``name`` ("sgd" or "adam") on a GPU's arrays in place (the argument
    layout of :mod:`.optim_kernels`); False when their dtype has no kernel."""
    a0 = arrays[0]
    t = _TYPES.get(a0.dtype)
    if t is None:
        return False
    n = a0.size
    if n:
        sc = a0.dtype.type
        grid = (min(-(-n // BLOCK), MAX_BLOCKS),)
        args = tuple(arrays) + tuple(sc(x) for x in scalars) + (np.int32(flags), np.int64(n))
        _function(f"ember_cuda_{name}_{t[1]}")(grid, (BLOCK,), args)
        stats["launches"] += 1
    return True
