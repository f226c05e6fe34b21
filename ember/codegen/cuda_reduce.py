"""Eager sums over leading or trailing dims on a GPU through generated CUDA kernels.

CuPy's axis reductions are slow where training needs them most: a bias or LayerNorm-weight
gradient sums an ``(8192, 768)`` float16/float32 matrix over its rows and took ~145 us
(99 calls of the GPT step: 14 ms of its GPU time). :func:`sum` takes a large ``sum`` over

* **leading dims** (``x.sum(0)``, ``x.sum((0, 1))``): a column sum of the contiguous
  ``(R, C)`` matrix. Two kernels, no atomics (the same bits at every run): a block of 256
  threads owns 64 columns and a chunk of rows; its 4 lanes of 64 threads each sum a
  column over every 4th row of the chunk (consecutive threads read consecutive columns,
  so a warp's loads are coalesced), add their 4 partial sums in a fixed order through
  shared memory and write the chunk's partial row; the second kernel adds each column's
  chunk partials in order and rounds once. Chunks are sized so the grid has ~1024 blocks.
* **trailing dims** (``x.sum(-1)``): one block per row, the compiled graphs' row reduction
  (:func:`~ember.codegen.render_cuda.render_cuda`'s warp-shuffle block reduction over a
  :class:`~ember.codegen.ir.ReduceKernel`), launched through :mod:`.cuda_launch` — only
  when :data:`ROW_SUMS` is on (off by default: slower than CuPy's, measured).

float16/bfloat16 are converted on load and summed in float32 (float64 for float64), the
result rounded once to the input dtype — what eager's float32 sum rounded once computes,
in another order (order-insensitive tolerance: ``tests/cuda/test_cuda_reduce_emu.py``).
Anything else (a ``dtype=`` argument, integers, a full or middle-dims sum, a
non-contiguous input, fewer than :data:`THRESHOLD` elements, too few rows or columns for
the GPU to be busy) returns None and runs CuPy's ``sum`` as before.
"""
from __future__ import annotations

import math

import numpy as np

from .. import config
from .. import dtypes as _dt
from .cuda_launch import CudaModule, kernel_plan
from .ir import InputSpec, Load, OutSpec, Reduce, ReduceKernel

__all__ = ["THRESHOLD", "sum", "source", "stats"]

#: minimum input elements (a guess: below it CuPy's launch costs about as much; the
#: integrator's ``bench/cuda.py --only colsum`` rows time both).
THRESHOLD = 1 << 17
#: a column sum needs at least this many columns, a row sum this many rows (a block each).
MIN_COLS = 16
MIN_ROWS = 128
#: columns per block and row lanes per column (BLOCK = COLS * LANES threads).
COLS, LANES = 64, 4
BLOCK = COLS * LANES
#: blocks a column sum aims at (~8 per SM of an H100/H200) and rows a chunk has at least.
TARGET_BLOCKS = 1024
MIN_CHUNK_ROWS = 64
#: route trailing-dim sums here too. Off: on an H200 (``bench/cuda_reduce_optim.py --quick``,
#: 2026-11-26) the block-per-row kernel took 99-106 us for (8192, 768) and 525-624 us for
#: (4096, 50257) where CuPy's took 31-33 and 145-247 (torch 34 and 121-212): CuPy keeps them.
ROW_SUMS = False
_DTYPES = {"float16": _dt.float16, "bfloat16": _dt.bfloat16, "float32": _dt.float32,
           "float64": _dt.float64}
#: kernels launched (tests and benchmarks read it).
stats = {"colsum": 0, "rowsum": 0}
_cache: dict = {}

_COLSUM = r"""
extern "C" __global__ void ember_colsum_part_{S}(const {T} *__restrict__ x,
        {A} *__restrict__ part, int64_t R, int64_t C, int64_t rows_per) {
    __shared__ {A} sh[{BLOCK}];
    const int cx = threadIdx.x % {COLS}, ry = threadIdx.x / {COLS};
    const int64_t tiles = (C + {COLS} - 1) / {COLS};
    const int64_t r0 = (int64_t)blockIdx.y * rows_per;
    const int64_t r1 = r0 + rows_per < R ? r0 + rows_per : R;
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int64_t c = t * {COLS} + cx;
        {A} acc = 0;
        if (c < C) {
            #pragma unroll 8
            for (int64_t r = r0 + ry; r < r1; r += {LANES}) acc += {LOAD};
        }
        sh[threadIdx.x] = acc;
        __syncthreads();
        if (ry == 0 && c < C) {
            {A} s = sh[cx];
            for (int l = 1; l < {LANES}; l++) s += sh[l * {COLS} + cx];
            part[(int64_t)blockIdx.y * C + c] = s;
        }
        __syncthreads();
    }
}

extern "C" __global__ void ember_colsum_final_{S}(const {A} *__restrict__ part,
        {T} *__restrict__ out, int64_t chunks, int64_t C) {
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C;
         c += (int64_t)blockDim.x * gridDim.x) {
        {A} s = 0;
        for (int64_t k = 0; k < chunks; k++) s += part[k * C + c];
        out[c] = {STORE};
    }
}
"""


def source(d) -> str:
    """CUDA C text of the column-sum kernels for dtype ``d`` (an Ember float dtype)."""
    from .render_cuda import NVRTC_HEAD
    from .render_cuda_ew import _convert, _ptr_type, _store
    acc = "double" if d is _dt.float64 else "float"
    acc_d = _dt.float64 if d is _dt.float64 else _dt.float32
    text = _COLSUM
    for k, v in (("{S}", d.name), ("{T}", _ptr_type(d)), ("{A}", acc),
                 ("{LOAD}", f"({acc}){_convert('x[r * C + c]', d)}"),
                 ("{STORE}", _store("s", acc_d, d)), ("{BLOCK}", str(BLOCK)),
                 ("{COLS}", str(COLS)), ("{LANES}", str(LANES))):
        text = text.replace(k, v)
    return NVRTC_HEAD + text


def sum(xp, x, dim, keepdim):  # noqa: A001 - the op's name
    """``x.sum(dim, keepdim)`` of a GPU array through a generated kernel, or None (module
    docstring). ``dim``: the ``sum`` primitive's normalised dims (a sorted tuple or None).

    A column sum's launches are planned once per layout (kept in ``_cache``: shape,
    strides, dtype, dims, the gates) and replayed: ~20 us of Python a call on a GPU, on each of a
    compiled GPT step's ~100 bias and norm-weight gradient sums (the step was host-bound).
    """
    if not config.EAGER_KERNELS or dim is None or not dim:
        return None
    key = ("plan", x.shape, x.strides, x.dtype, dim, keepdim, THRESHOLD, ROW_SUMS,
           MIN_COLS, MIN_ROWS, TARGET_BLOCKS, MIN_CHUNK_ROWS)
    plan = _cache.get(key)
    if plan is None:
        plan = _module(key, lambda: _plan(x, dim, keepdim))
    return None if plan is False else plan(xp, x)


def _plan(x, dim, keepdim):
    """The replay of ``x.sum(dim, keepdim)`` for ``x``'s layout, or False (see :func:`sum`)."""
    d = _DTYPES.get(x.dtype.name)
    if x.size < THRESHOLD or d is None or not x.flags.c_contiguous:
        return False
    nd, k = x.ndim, len(dim)
    shape = tuple(1 if i in dim else n for i, n in enumerate(x.shape)) if keepdim else \
        tuple(n for i, n in enumerate(x.shape) if i not in dim)
    if dim == tuple(range(k)) and k < nd:
        return _col_plan(d, math.prod(x.shape[:k]), math.prod(x.shape[k:]), shape)
    if ROW_SUMS and dim == tuple(range(nd - k, nd)) and k < nd:
        R, C = math.prod(x.shape[:nd - k]), math.prod(x.shape[nd - k:])

        def run_rows(xp, x):
            r = _rowsum(xp, x, d, R, C)
            return None if r is None else r.reshape(shape)
        return run_rows if R >= MIN_ROWS else False
    return False


def _module(key, make):
    mod = _cache.get(key)
    if mod is None:
        if len(_cache) > 512:          # NOTE: many row shapes: start over (modules reload
            _cache.clear()             # from the PTX memo)
        mod = _cache[key] = make()
    return mod


def _col_plan(d, R, C, shape):
    """The two launches of an (R, C) column sum into a new array of ``shape`` (C
    elements), or False when it has too few columns."""
    if C < MIN_COLS:
        return False
    part_fn, final_fn = _module(("col", d.name), lambda: _col_functions(d))
    tiles = -(-C // COLS)
    chunks = max(1, min(-(-TARGET_BLOCKS // tiles), R // MIN_CHUNK_ROWS, 65535))
    rows_per = -(-R // chunks)
    chunks = -(-R // rows_per)
    acc = np.float64 if d is _dt.float64 else np.float32
    g1, tail1 = (min(tiles, 65535), chunks), (np.int64(R), np.int64(C), np.int64(rows_per))
    g2, tail2 = (min(-(-C // 256), 65535),), (np.int64(chunks), np.int64(C))
    part_shape, block = (chunks, C), (BLOCK,)

    def run(xp, x):
        part = xp.empty(part_shape, acc)
        out = xp.empty(shape, x.dtype)       # NOTE: C contiguous elements, any shape
        part_fn(g1, block, (x, part) + tail1)
        final_fn(g2, (256,), (part, out) + tail2)
        stats["colsum"] += 1
        return out
    return run


def _col_functions(d):
    from .cuda_cache import load_module
    mod = load_module(source(d), f"ember_colsum_{d.name}")
    return (mod.get_function(f"ember_colsum_part_{d.name}"),
            mod.get_function(f"ember_colsum_final_{d.name}"))


def _rowsum(xp, x, d, R, C):
    if R < MIN_ROWS:
        return None
    mod, k, geo = _module(("row", d.name, R, C), lambda: _row_kernel(d, R, C))
    name, grid, block, args, outs = kernel_plan(k, [x.reshape(R, C)], xp, "block", None, geo)
    mod.function(name)(grid, block, args)
    stats["rowsum"] += 1
    return outs[0]


def _row_kernel(d, R, C):
    # NOTE: the text does not depend on (R, C) (runtime shape arguments): one NVRTC run per
    # dtype (the PTX cache's memo); the kernel object and its device shape/stride arrays
    # are per shape
    k = ReduceKernel([InputSpec(d, (R, C))], (R, C), 1, [Reduce("sum", Load(0))], None,
                     OutSpec(d, (R,)), name=f"ember_rowsum_{d.name}")
    mods = _cache.setdefault(("rowmod", d.name), [])
    if not mods:
        mods.append(CudaModule([k], "block", k.name))
    return mods[0], k, {}
