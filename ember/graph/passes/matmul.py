"""Stacks of small matrix products run as one C loop (``small_bmm``), not NumPy's matmul.

NumPy's stacked ``matmul`` calls BLAS once per matrix; for attention's ``(B, H, T, D)``
products (the W3 GPT: 64 matrices of 64x64 by 64x32 per call, 24 calls a step) each call
is too small for BLAS's threads, and permuted/transposed operands are fine for BLAS but
not free. :mod:`ember.codegen.bmm_kernels` does the whole stack in one call, split over
the batch on Ember's worker pool, reading any strides directly.

A ``matmul`` node is rewritten when both operands have the same 1 or 2 batch dims, one
float dtype (no casts), and ``N``/``K`` fit the kernel (:func:`bmm_kernels.fits`). Sums
run in another order than BLAS's: float results differ in the last bits, so the pass is
in the default pipeline (with ``fuse``), not in ``EXACT_PASSES``. Without a C compiler it
changes nothing.
"""
from __future__ import annotations

from ...codegen import bmm_kernels
from ..ir import Graph, GraphOp, Var
from ._util import Rewrite


def _run_small_bmm(xp, x, y, out=None):
    return bmm_kernels.bmm(x, y, out=out)


class _SmallBmmOp(GraphOp):
    """New memory; takes ``out=`` (a C-contiguous buffer of the result's shape)."""

    __slots__ = ()
    fresh_out = True
    accepts_out = "out"


SMALL_BMM = _SmallBmmOp("small_bmm", _run_small_bmm)


def _fits(n) -> bool:
    if n.op.name != "matmul" or hasattr(n.op, "run") or len(n.outs) != 1:
        return False
    x, y = n.inputs
    o = n.out
    if x.__class__ is not Var or y.__class__ is not Var or not (x.dtype is y.dtype is o.dtype):
        return False
    if n.ct not in (None, o.dtype) or o.device.type != "cpu":
        return False
    return bmm_kernels.fits(x.shape, y.shape, o.dtype.np)


def small_bmm(graph: Graph):
    """Rewrite fitting batched matmuls; returns ``(graph, {"small_bmm": nodes})``."""
    if not any(_fits(n) for n in graph.nodes):
        return graph, {"small_bmm": 0}
    if not bmm_kernels.available():
        return graph, {"small_bmm": 0}
    count = 0

    def rule(rw, n, ins):
        nonlocal count
        if not _fits(n):
            return None
        count += 1
        o = n.out
        return rw.b.add(SMALL_BMM, ins, {}, [(o.shape, o.dtype, o.device)], None)

    new = Rewrite(graph).run(rule)
    return new, {"small_bmm": count}
