"""Elementwise kernels over row-pitched operands: an LM head's padded (N, V) values.

An unaligned float16 GEMM runs on padded buffers (:mod:`.cuda_gemm`): rows of
``ceil8(V)`` elements. The row entry (``NAME_r``, :func:`~.render_cuda_ew.render_row_entry`)
reads full operands contiguously; this module's ``NAME_rp`` entry is that entry with
some full operands *pitched*: input ``k`` with bit ``k`` of ``pmask`` set, output ``o``
with bit ``16 + o``, hold the element ``i`` of the (rows, cols) loop at
``(i / cols) * pitch + i % cols``::

    NAME_rp(const T0 *in0, ..., TO *out, ..., int flags, I n, I cols, int pmask, I pitch)

so the cross-entropy backward kernel reads the logits where the padded GEMM left them
(no copy out of the padded buffer) and writes the logits gradient into a zero-padded
buffer the dx and dW GEMMs read as it is (no copy into one). Pitched operands move
element by element (one division a element, shared by them); the others as ``NAME_r``.

:func:`pitched_plan` makes the launch (pure Python: tested on NumPy arrays),
:class:`PitchedFusedOp` is the graph op (``ember.graph.passes.pad_gemm`` puts it in
place of the kernel's :class:`~ember.graph.passes.fuse_cuda.CudaFusedOp`).
"""
from __future__ import annotations

import math

import numpy as np

from .cuda_launch import BLOCK, MAX_BLOCKS_EW, CudaModule, _asarray, _aligned
from .render_cuda_ew import (ALIGNED, COL_BIT, ILP, ROW_BIT, _compute, _ind, _names,
                             _params, _ptr_type, _row_load, _vec_store, row_body)

__all__ = ["OUT_BIT", "PitchedFusedOp", "pitch_of", "pitched_plan", "render_pitched_entry"]

#: ``pmask`` bit ``OUT_BIT + o``: output ``o`` is pitched (bit ``k < OUT_BIT``: input k).
OUT_BIT = 16


def render_pitched_entry(k) -> str:
    """CUDA C of kernel ``k``'s ``NAME_rp`` entry (module doc); needs ``VEC_HEAD``."""
    ins = [s.dtype for s in k.inputs]
    outs = [o[0] for o in k.outputs]
    name, names = k.name, _names(ins, outs)
    params = _params(ins, outs)
    sig = ", ".join(params + ["int flags", "I n", "I cols", "int pmask", "I pitch"])
    decl = [f"__align__(16) {_ptr_type(d)} v{i}[{ILP}];" for i, d in enumerate(ins)]
    decl += [f"__align__(16) {_ptr_type(d)} r{o}[{ILP}];" for o, d in enumerate(outs)]
    decl += [f"I at[{ILP}];", "#pragma unroll",
             f"for (int j = 0; j < {ILP}; j++) {{",
             "    const I e = base + j < n ? base + j : base;",
             "    at[j] = e / cols * pitch + e % cols;", "}"]
    loads = []
    for i, d in enumerate(ins):
        loads += [f"if (pmask & {1 << i}) {{", "    #pragma unroll",
                  f"    for (int j = 0; j < {ILP}; j++) v{i}[j] = in{i}[at[j]];",
                  "} else {"] + _ind(_row_load(i, d), 1) + ["}"]
    stores = []
    for o, d in enumerate(outs):
        nm = f"out{o or ''}"
        stores += [f"if (pmask & {1 << (OUT_BIT + o)}) {{", "    #pragma unroll",
                   f"    for (int j = 0; j < {ILP}; j++) if (base + j < n) "
                   f"{nm}[at[j]] = r{o}[j];",
                   "} else {"] + _ind(_vec_store(o, d), 1) + ["}"]
    lines = row_body(f"{name}_rpbody", sig, decl + loads, _compute(k, ins, "base + (I)j"),
                     stores)
    head = ", ".join(params + ["int flags", "int64_t n", "int64_t cols", "int pmask",
                               "int64_t pitch"])
    lines += [f'extern "C" __global__ void {name}_rp({head}) {{',
              "    if (n < 0x7fffffffLL && (n / cols) * pitch < 0x7fffffffLL)",
              f"        {name}_rpbody<unsigned>({names}, flags, (unsigned)n, (unsigned)cols, "
              "pmask, (unsigned)pitch);",
              "    else",
              f"        {name}_rpbody<int64_t>({names}, flags, n, cols, pmask, pitch);", "}"]
    return "\n".join(lines) + "\n"


def pitch_of(a, shape) -> int | None:
    """The row pitch (elements) of ``a`` when it holds a (..., cols) ``shape`` as rows of
    contiguous elements, its leading dims merging into rows a pitch apart; 0 when ``a``
    is C-contiguous; None otherwise."""
    if tuple(a.shape) != tuple(shape) or not shape:
        return None
    if a.flags.c_contiguous:
        return 0
    it = a.itemsize
    st = a.strides
    if len(shape) < 2 or st[-1] != it or st[-2] % it:
        return None
    p = st[-2] // it
    step = p
    for s, n in zip(reversed(st[:-1]), reversed(shape[:-1])):
        if n > 1 and s != step * it:
            return None
        step *= n
    return p if p >= shape[-1] else None


def pitched_plan(k, arrays, shape, xp, outs):
    """The ``NAME_rp`` launch ``(name, grid, block, args)`` of elementwise kernel ``k`` over
    the loop ``shape``: inputs numbers, full arrays (contiguous or pitched), C-contiguous
    rows repeated over the leading dims or per-row columns (as ``NAME_r``); ``outs`` full
    arrays (contiguous or pitched). Every pitched operand has one pitch. Else None."""
    shape = tuple(shape)
    if len(arrays) > COL_BIT or len(shape) < 2:
        return None
    cols, rows_of = shape[-1], math.prod(shape[:-1])
    flags = pmask = 0
    pitch, ins = None, []
    for i, a in enumerate(arrays):
        if not isinstance(a, xp.ndarray):
            a = _asarray(xp, a, k.inputs[i].dtype.np)
        p = pitch_of(a, shape) if a.size > 1 else None
        if a.size == 1:
            flags |= 1 << i
        elif p:
            if pitch not in (None, p):
                return None
            pitch, pmask = p, pmask | 1 << i
        elif p is None:
            bit = _broadcast_bit(a, shape, rows_of, i)
            if bit is None:
                return None
            flags |= 1 << bit
        ins.append(a)
    for o, a in enumerate(outs):
        p = pitch_of(a, shape) if a.dtype == k.outputs[o][0].np else None
        if p is None or p and pitch not in (None, p):
            return None
        if p:
            pitch, pmask = p, pmask | 1 << (OUT_BIT + o)
    if cols % ILP == 0 and _aligned([a for i, a in enumerate(ins) if not flags >> i & 1]
                                    + list(outs)):
        flags |= ALIGNED
    n = math.prod(shape)
    grid = (min(max(-(-n // (BLOCK * ILP)), 1), MAX_BLOCKS_EW),)
    args = tuple(ins) + tuple(outs) + (np.int32(flags), np.int64(n), np.int64(cols),
                                       np.int32(pmask), np.int64(pitch or cols))
    return k.name + "_rp", grid, (BLOCK,), args


def _broadcast_bit(a, shape, rows_of, i):
    """``NAME_r``'s flag bit of a C-contiguous repeated row / per-row column, or None."""
    if not a.flags.c_contiguous:
        return None
    s = tuple(a.shape)
    while s and s[0] == 1:
        s = s[1:]
    if s == shape[len(shape) - len(s):]:
        return ROW_BIT + i if a.size == shape[-1] else None
    if i < ROW_BIT - COL_BIT and s and s[-1] == 1 and a.size == rows_of and \
            s[:-1] == shape[len(shape) - len(s):-1]:
        return COL_BIT + i
    return None


def pitched_module(k, strategy: str = "block") -> CudaModule:
    """A module of kernel ``k`` with its ``NAME_rp`` entry (one NVRTC program)."""
    m = CudaModule([k], strategy, k.name + "_p")
    m.source += render_pitched_entry(k)
    return m


class PitchedFusedOp:
    """The run function of a fused elementwise kernel whose output (one) is written into
    a zero-padded buffer (:func:`ember.codegen.cuda_gemm.padded_empty`: a view of it,
    registered, so padded GEMMs read it as it is) and whose inputs may be pitched.

    ``fallback``: the kernel's own runner (``CudaModule.runner``), for inputs the pitched
    entry does not take (a layout :func:`pitched_plan` refuses): its result is copied
    into the padded buffer."""

    __slots__ = ("kernel", "module", "meta", "xp", "fallback", "_fn")

    def __init__(self, kernel, module, meta, xp, fallback=None):
        self.kernel, self.module, self.meta, self.xp = kernel, module, meta, xp
        self.fallback, self._fn = fallback, None

    def __call__(self, xp, *arrays, **_params):
        from .cuda_gemm import _copy, padded_empty
        xp = self.xp or xp
        shape, dt = self.meta
        out = padded_empty(shape, dt, xp)
        plan = pitched_plan(self.kernel, arrays, shape, xp, [out])
        if plan is None:
            if self.fallback is None:
                raise ValueError(
                    f"{self.kernel.name}: no pitched launch over {tuple(shape)} for inputs "
                    f"{[getattr(a, 'strides', a) for a in arrays]} (numbers, full arrays "
                    "with rows one pitch apart, C-contiguous rows or per-row columns)")
            _copy(out, self.fallback(xp, *arrays))
            return out
        name, grid, block, args = plan
        if self._fn is None:
            self._fn = self.module.function(name)
        if int(args[-4]):
            self._fn(grid, block, args)
        return out
