"""A fused GPU kernel reads no ``arange`` constant: its loop index is the value.

``scatter_select`` writes a one-hot as ``where(idx == iota, g, 0)`` with ``iota =
arange(V)`` along the class axis, a graph constant (and ``F.one_hot``'s traced
``arange`` is one too). Lowered as it is, that constant is a kernel input every element
loads: in the GPT's cross-entropy backward, 8 bytes of int64 per element of a
(8192, 50257) float16 pass that otherwise reads 2 (the logits) and writes 2.

:func:`index_leaves` replaces such an input of a lowered group by the
:class:`~ember.codegen.ir.Index` leaf of its axis: the coordinate the kernel computes
from the element's flat position (a remainder by a constant, see
:func:`ember.codegen.cexpr.index_c`). An input qualifies when it is made by a
``constant`` node, has an integer dtype, varies along one axis of the kernel's loop
space (stride 1 there, 0 elsewhere: ``arange(n)`` broadcast) or along a run of
consecutive axes as one C-contiguous block (``arange(h * w).reshape(1, 1, h, w)``), and
holds exactly ``0, 1, ..., n - 1``. Values are the same integers, so results are
bitwise unchanged.

Only ``fuse_cuda`` calls it (GPU graphs). CPU graphs keep their iota input: a C loop's
``omp simd`` body would turn a 64-bit remainder per element into scalar code (x86 has
no vector 64-bit multiply-high), and their small classifiers' cross-entropy is one
``ce_rows`` call that matches the constant itself.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ... import dtypes as _dt
from ...codegen.ir import Apply, Index, Kernel, Load, ReduceKernel
from ..ir import CONSTANT
from ._util import host_array
from .fuse_lower import Lowered

__all__ = ["index_leaves", "iota_leaf", "read_bytes"]

#: constants longer than this are not looked at (the check copies a GPU constant to the host).
MAX_IOTA = 1 << 24


def iota_leaf(value, strides, space, dtype=_dt.int64) -> Index | None:
    """The :class:`~ember.codegen.ir.Index` leaf equal to ``value`` (a constant with
    kernel-input strides ``strides`` over loop space ``space``) when it is ``arange(n)``
    laid out C-contiguously over a run of consecutive axes and broadcast along the others
    (one axis: a one-hot's iota; several: ``arange(h * w).reshape(1, 1, h, w)``), else
    None."""
    axes = [d for d, s in enumerate(strides) if s]
    if not axes or strides[axes[-1]] != 1:
        return None
    first, last = axes[0], axes[-1]
    step = 1
    for d in range(last, first - 1, -1):          # C-contiguous over the run
        if space[d] != 1 and strides[d] != step:
            return None
        step *= space[d]
    n = step
    if n < 2 or n > MAX_IOTA or getattr(value, "size", None) != n:
        return None
    v = host_array(value, MAX_IOTA)
    if not isinstance(v, np.ndarray) or v.dtype.kind not in "iu" or \
            not np.array_equal(v.reshape(-1), np.arange(n)):
        return None
    inner = 1
    for s in space[last + 1:]:
        inner *= s
    return Index(n, inner, dtype)


def index_leaves(lw: Lowered | None, producer) -> Lowered | None:
    """``lw`` with each ``arange`` constant input (module doc) replaced by its
    :class:`~ember.codegen.ir.Index` leaf; ``lw`` itself when it has none.
    ``producer(var)``: the node making ``var`` (``Graph.producer``)."""
    if lw is None:
        return None
    k = lw.kernel
    space = tuple(k.shape) if isinstance(k, ReduceKernel) else tuple(k.out.shape)
    table: dict = {}
    keep: list = []
    for j, (x, spec) in enumerate(zip(lw.inputs, k.inputs)):
        n = producer(x)
        leaf = None
        if n is not None and n.op is CONSTANT and x.dtype.category == _dt.INT:
            leaf = iota_leaf(n.params["value"], spec.strides, space, x.dtype)
        if leaf is None:
            table[j] = Load(len(keep))
            keep.append(j)
        else:
            table[j] = leaf
    if len(keep) == len(lw.inputs):
        return lw
    sub = _substitute(table)
    specs = [k.inputs[j] for j in keep]
    if isinstance(k, Kernel):
        nk = Kernel(specs, k.out, sub(k.body), k.name,
                    extra=tuple((d, sub(e)) for d, e in k.extra))
    else:
        cls, more = ReduceKernel, {}
        if getattr(k, "cols", ()):          # NOTE: column sums (fuse_colsum) kept
            from ...codegen.cuda_rowcols import ColReduceKernel
            cls, more = ColReduceKernel, {"cols": tuple((d, sub(e)) for d, e in k.cols)}
        nk = cls(specs, k.shape, k.naxes,
                 tuple(replace(st, body=sub(st.body)) for st in k.stages),
                 None if k.epilogue is None else sub(k.epilogue), k.out, k.full,
                 k.name, extra=tuple((d, None if e is None else sub(e), f)
                                     for d, e, f in k.extra), **more)
    return Lowered(nk, [lw.inputs[j] for j in keep], lw.outs, lw.ops, lw.group)


def _substitute(table: dict):
    """``fn(expr)``: ``expr`` with each ``Load(j)`` replaced by ``table[j]`` (shared
    subtrees stay shared)."""
    memo: dict = {}

    def go(e):
        got = memo.get(e)
        if got is not None:
            return got
        if isinstance(e, Load):
            r = table[e.index]
        elif isinstance(e, Apply):
            r = replace(e, args=tuple(go(a) for a in e.args))
        else:
            r = e                       # Const, Row, Index
        memo[e] = r
        return r
    return go


def read_bytes(k) -> int:
    """Bytes an element of kernel ``k``'s loop loads from its inputs that vary along the
    row's last axis (full-size operands and repeated rows, each read per element; scalars
    and per-row values are left out): what ``index_leaves`` saves shows here."""
    return sum(s.dtype.itemsize for s in k.inputs if s.strides and s.strides[-1])
