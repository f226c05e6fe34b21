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

A group's parameters go in one launch (:func:`launch_many`, PyTorch's ``foreach`` path:
``multi_tensor_apply``) through each kernel's ``_m`` entry: a device table of records
(pointers, ``n``, first block) and a binary search per block for its record, then the very
loop the one-parameter entry runs over the same elements — the same bits. The update is
memory-bound, so this saves launches only: GPT-2 small's AdamW step was 148 launches (host
time ~10 us each through CuPy, and a GPU's per-launch gap). The table is uploaded again
only when a pointer changes (parameters and moments are updated in place; the caching
allocator usually hands new gradients the previous step's blocks).

The GradScaler's unscale of a GPU's gradients is one more entry here (``unscale``: the C
loop of ``ember/amp/_unscale_kernels.py`` per element, a non-finite value flagging a
one-element ``found`` array), launched for a whole group through ``launch_many``.

Example:
    >>> launch("adam", (p, g, m, v), scalars, flags)    # doctest: +SKIP (needs a GPU)
    >>> launch_many("adam", cupy, [(p, g, m, v), (q, h, mq, vq)], scalars, flags)  # doctest: +SKIP
"""
from __future__ import annotations

import os

import numpy as np

from .optim_kernels import ARRAYS, SCALARS, STEPS

__all__ = ["launch", "launch_many", "source", "stats", "MANY"]

#: threads per block; grids are capped at :data:`MAX_BLOCKS` (grid-stride loops).
BLOCK = 256
MAX_BLOCKS = 1 << 16
#: ``(C type, suffix, intrinsic suffix)`` per NumPy dtype with a kernel.
_TYPES = {np.dtype(np.float32): ("float", "f32", "f"), np.dtype(np.float64): ("double", "f64",
                                                                               "d")}
#: launches made, and parameters updated by ``_m`` launches (tests and benchmarks read it).
stats = {"launches": 0, "records": 0}
#: whether the optimizers update a group in one :func:`launch_many` (``EMBER_CUDA_OPTIM_MANY=0``:
#: one :func:`launch` per parameter, the A/B of ``bench/cuda_optim_many.py``).
MANY = os.environ.get("EMBER_CUDA_OPTIM_MANY", "1") != "0"
_module: dict = {}
#: per entry name, the last table: ``(host records, device copy)``.
_tables: dict = {}


#: GradScaler's unscale (``ember/amp/_unscale_kernels.py``'s C loop, PyTorch's
#: ``_amp_foreach_non_finite_check_and_unscale_``): the value is checked before it is
#: multiplied by ``inv`` (rounded once in the gradient's dtype); a non-finite one sets
#: ``found[0]`` (every writer writes 1: no atomics needed).
UNSCALE_STEP = r"""
        T gi = g[i];
        if (!isfinite(gi)) found[0] = (T)1;
        g[i] = MUL(gi, inv);
"""
#: the optimizers' entries and the GPU-only ones, as :mod:`.optim_kernels` lists them.
_ARRAYS = dict(ARRAYS, unscale=(("g", True), ("found", True)))
_SCALARS = dict(SCALARS, unscale=("inv",))
_STEPS = dict(STEPS, unscale=UNSCALE_STEP)


def _entry(name: str, ctype: str, suffix: str) -> str:
    params = [f"{'' if w else 'const '}{ctype} *{a}" for a, w in _ARRAYS[name]]
    params += [f"{ctype} {x}" for x in _SCALARS[name]] + ["int f", "int64_t n"]
    return (f'extern "C" __global__ void ember_cuda_{name}_{suffix}({", ".join(params)}) {{\n'
            "    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
            "         i += (int64_t)blockDim.x * gridDim.x) {" + _STEPS[name] + "    }\n}\n")


def _entry_m(name: str, ctype: str, suffix: str) -> str:
    """The multi-tensor entry ``..._m(recs, nrec, scalars..., f)``: ``recs`` holds ``nrec``
    records of the arrays' pointers, ``n`` and the record's first block (ascending); a
    block finds its record by binary search and runs :func:`_entry`'s loop as block
    ``blockIdx.x - first`` of the record's ``nb`` blocks (the same grid a single launch
    of the record gets: the same elements a thread, the same code)."""
    arrays = _ARRAYS[name]
    w = len(arrays) + 2
    params = ["const int64_t *__restrict__ recs", "int nrec"]
    params += [f"{ctype} {x}" for x in _SCALARS[name]] + ["int f"]
    ptrs = "".join(f"    {'' if wr else 'const '}{ctype} *{a} = ({'' if wr else 'const '}"
                   f"{ctype} *)r[{j}];\n" for j, (a, wr) in enumerate(arrays))
    return (f'extern "C" __global__ void ember_cuda_{name}_{suffix}_m({", ".join(params)}) {{\n'
            "    const int64_t b = blockIdx.x;\n"
            "    int lo = 0, hi = nrec - 1;\n"
            "    while (lo < hi) {     /* the last record whose first block is <= b */\n"
            "        const int mid = (lo + hi + 1) >> 1;\n"
            f"        if (recs[(int64_t)mid * {w} + {w - 1}] <= b) lo = mid; else hi = mid - 1;\n"
            "    }\n"
            f"    const int64_t *r = recs + (int64_t)lo * {w};\n"
            f"    const int64_t first = r[{w - 1}], n = r[{w - 2}];\n"
            f"    const int64_t nb = (lo + 1 < nrec ? r[{2 * w - 1}] : (int64_t)gridDim.x) - first;\n"
            + ptrs +
            "    for (int64_t i = (b - first) * blockDim.x + threadIdx.x; i < n;\n"
            "         i += (int64_t)blockDim.x * nb) {" + _STEPS[name] + "    }\n}\n")


def source() -> str:
    """The CUDA C text of every update kernel (float32 and float64, SGD, Adam and the
    GradScaler's unscale; one parameter and many)."""
    from .render_cuda import NVRTC_HEAD
    parts = [NVRTC_HEAD]
    for ctype, suffix, p in _TYPES.values():
        parts.append(f"#define T {ctype}\n#define MUL __{p}mul_rn\n#define ADD __{p}add_rn\n"
                     f"#define SUB __{p}sub_rn\n#define DIV __{p}div_rn\n"
                     f"#define SQRT __{p}sqrt_rn\n")
        parts += [_entry(name, ctype, suffix) for name in _STEPS]
        parts += [_entry_m(name, ctype, suffix) for name in _STEPS]
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
    """Run update ``name`` ("sgd", "adam" or "unscale") on a GPU's arrays in place (the argument
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


def has_kernel(dtype) -> bool:
    """Whether arrays of NumPy ``dtype`` have an update kernel here."""
    return dtype in _TYPES


def launch_many(name: str, xp, records, scalars, flags: int) -> bool:
    """:func:`launch` of each record of ``records`` (tuples of one dtype, each as
    :func:`launch` takes it) in one launch of the ``_m`` entry, every record with the same
    ``scalars`` and ``flags``; ``xp`` the device's array module (the table's upload).
    False when their dtype has no kernel (nothing written)."""
    t = _TYPES.get(records[0][0].dtype) if records else None
    if t is None:
        return not records
    from .cuda_launch import _ptr
    rows, first = [], 0
    for arrays in records:
        n = arrays[0].size
        if n:
            rows.append([_ptr(a) for a in arrays] + [n, first])
            first += min(-(-n // BLOCK), MAX_BLOCKS)
    if rows:
        fname = f"ember_cuda_{name}_{t[1]}_m"
        host = np.array(rows, dtype=np.int64)
        last = _tables.get(fname)
        if last is None or last[0].shape != host.shape or not np.array_equal(last[0], host):
            # NOTE: the previous device table may still be read by a queued launch: a new
            # one is made (the pool reuses the old block only after that launch, in order)
            last = _tables[fname] = (host, xp.asarray(host))
        sc = records[0][0].dtype.type
        args = (last[1], np.int32(len(rows))) + tuple(sc(x) for x in scalars) + (
            np.int32(flags),)
        _function(fname)((first,), (BLOCK,), args)
        stats["launches"] += 1
        stats["records"] += len(rows)
    return True
