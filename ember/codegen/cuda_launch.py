"""Running generated CUDA kernels: ``cupy.RawModule`` over :func:`render_cuda`'s text.

:func:`launch_plan` turns a kernel and its arrays into the grid, block and argument list
the rendered signature expects (pure Python: tested in CI on NumPy arrays);
:class:`CudaKernel` compiles the text once (CuPy compiles with NVRTC and keeps the binary in
its on-disk kernel cache, ``~/.cupy/kernel_cache``, keyed by the source) and launches it.

Reductions reduce over one trailing axis: a kernel over ``naxes > 1`` trailing axes gets
its inputs viewed (copied if need be) with those axes merged.
"""
from __future__ import annotations

import math

import numpy as np

from .ir import Kernel, ReduceKernel
from .render_cuda import render_cuda

#: threads per block (a multiple of 32: the block reduction's warp shuffles need it).
BLOCK = 256
#: at most this many blocks (grid-stride loops cover the rest).
MAX_BLOCKS = 65535


def _merged_shape(k) -> tuple:
    if isinstance(k, ReduceKernel):
        lead = tuple(k.shape[:len(k.shape) - k.naxes])
        return lead + (math.prod(k.shape[len(k.shape) - k.naxes:]),)
    return tuple(k.out.shape)


def launch_plan(k, arrays, xp=np, strategy: str = "block"):
    """``(grid, block, args, outputs)`` to launch kernel ``k`` on ``arrays``.

    Inputs are broadcast to the loop shape (stride 0 where broadcast) and, for reductions,
    their reduced axes merged into one; outputs are made contiguous with ``xp.empty``.
    """
    space = tuple(k.shape) if isinstance(k, ReduceKernel) else tuple(k.out.shape)
    loop = _merged_shape(k)
    ins, strides = [], []
    for a, spec in zip(arrays, k.inputs):
        v = xp.broadcast_to(xp.asarray(a, dtype=spec.dtype.np), space)
        if len(loop) != len(space):
            v = v.reshape(loop)      # NOTE: copies only when the reduced axes can't merge
        ins.append(v)
        strides += [s // v.itemsize for s in v.strides]
    outs = []
    for d, _e, *full in k.outputs:      # Kernel: (dtype, expr); ReduceKernel: + full
        per_row = isinstance(k, ReduceKernel) and not full[0]
        outs.append(xp.empty(loop[:-1] if per_row else space, d.np))
    if not loop:                        # NOTE: a 0-d kernel loops over one element
        loop, strides = (1,), [0] * len(ins)
    ndim = len(loop)
    shape_arr = xp.asarray(loop, dtype=np.int64)
    stride_arr = xp.asarray(strides or [0], dtype=np.int64)
    if isinstance(k, ReduceKernel):
        n = math.prod(loop[:-1])
        grid = min(max(n, 1), MAX_BLOCKS) if strategy == "block" else \
            min(max(-(-n // BLOCK), 1), MAX_BLOCKS)
    else:
        n = math.prod(loop)
        grid = min(max(-(-n // BLOCK), 1), MAX_BLOCKS)
    args = tuple(ins) + tuple(outs) + (shape_arr, stride_arr, np.int32(ndim), np.int64(n))
    return (grid,), (BLOCK,), args, outs


class CudaKernel:
    """A generated kernel compiled for the GPU (needs CuPy and a GPU to run).

    Example:
        >>> k = CudaKernel(Kernel([InputSpec(float32, (1,))], OutSpec(float32, (n,)),
        ...                       call("exp", Load(0))))
        >>> (y,) = k(cupy.arange(n, dtype=cupy.float32))
    """

    def __init__(self, kernel, strategy: str = "block"):
        import cupy
        self.kernel, self.strategy, self.cupy = kernel, strategy, cupy
        self.source = render_cuda(kernel, strategy)
        from .nvrtc import include_dirs   # cuda_fp16.h/cuda_bf16.h (the runtime wheel's)
        opts = ("--std=c++17",) + tuple(f"-I{d}" for d in include_dirs())
        self.module = cupy.RawModule(code=self.source, options=opts)
        self.fn = self.module.get_function(kernel.name)

    def __call__(self, *arrays):
        grid, block, args, outs = launch_plan(self.kernel, arrays, self.cupy, self.strategy)
        self.fn(grid, block, args)
        return tuple(outs)


__all__ = ["BLOCK", "CudaKernel", "launch_plan", "Kernel", "ReduceKernel"]
