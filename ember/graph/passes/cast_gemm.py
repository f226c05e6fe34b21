"""``cast_gemm``: a bfloat16 matmul reads its float32 weight and rounds it while packing.

Under ``ember.autocast`` a linear layer's forward is ``x @ permute(cast(w))`` and its input
gradient ``g @ cast(w)`` (``recast`` makes that copy again late in the backward): each
cast reads the float32 weight, writes a bfloat16 copy that only the product reads, and
the product's packing reads it again. The AMX GEMM packs B anyway (k-pairs in 64-column
panels), so ``matmul(x, [permute](cast(w)))`` becomes ``matmul_castb(x, [permute](w))``:
the kernel rounds each float32 value as it packs it, exactly as the cast rounds it
(:func:`ember.codegen.lowp_gemm.matmul_cast_b`), so the result is bitwise the same and the
bfloat16 copy is never made (the cast is dead unless something else reads it). W1's bf16
step spent ~0.3 ms of ~2.2 in such casts; PyTorch's autocast pays them too.

Where the kernel does not run (no AMX, ``EMBER_LOWP_GEMM``, tiny products) the op casts
and multiplies as the two nodes did. Runs after ``recast`` (whose late casts it folds).
"""
from __future__ import annotations

from ... import dtypes as _dt
from ...codegen import lowp_gemm
from ..ir import BufferOp, Graph, Var
from ._util import Rewrite


def _run_matmul_castb(xp, x, w, out=None):
    r = lowp_gemm.matmul_cast_b(x, w, out=out)
    if r is not None:
        return r
    from ...codegen.convert_kernels import from_float32
    from ...ops.linalg import _matmul_kernel
    return _matmul_kernel(xp, x, from_float32(w, x.dtype), out=out)


MATMUL_CASTB = BufferOp("matmul_castb", _run_matmul_castb, "out")


def _cast_source(producer, v):
    """``(w, transposed)`` when ``v`` is ``cast(w)`` or ``permute(cast(w), (1, 0))`` of a
    2-D float32 ``w`` to bfloat16, else None."""
    n = producer.get(v.id)
    transposed = False
    if n is not None and n.op.name == "permute" and tuple(n.params["dims"]) == (1, 0) \
            and n.inputs[0].__class__ is Var:
        transposed, n = True, producer.get(n.inputs[0].id)
    if n is None or n.op.name != "cast" or len(n.outs) != 1 or n.inputs[0].__class__ is not Var:
        return None
    w = n.inputs[0]
    if w.dtype is not _dt.float32 or n.outs[0].dtype is not _dt.bfloat16 or len(w.shape) != 2:
        return None
    return w, transposed


def _fits(n, producer):
    if n.op.name != "matmul" or hasattr(n.op, "run") or len(n.outs) != 1:
        return None
    x, y = n.inputs
    o = n.outs[0]
    if x.__class__ is not Var or y.__class__ is not Var or not (
            x.dtype is y.dtype is o.dtype is _dt.bfloat16) or len(x.shape) < 2 \
            or len(y.shape) != 2 or n.ct not in (None, _dt.bfloat16) \
            or o.device.type != "cpu" or x.numel() * y.shape[1] < lowp_gemm.MIN_MACS:
        return None                     # NOTE: tiny products stay: their kernel converts
    return _cast_source(producer, y)


def cast_gemm(graph: Graph):
    """Fold float32 -> bfloat16 casts of 2-D matmuls' B operands into the AMX kernel's
    packing; returns ``(graph, {"cast_gemm": products})``."""
    if lowp_gemm.mode != "auto":
        return graph, {"cast_gemm": 0}
    producer = {o.id: n for n in graph.nodes for o in n.outs}
    # NOTE: the graph is checked first: amx_available() builds the AMX library (~0.7 s of
    # the compiler's CPU), which a graph without a bfloat16 product never needs
    if not any(_fits(n, producer) for n in graph.nodes) or not lowp_gemm.amx_available():
        return graph, {"cast_gemm": 0}
    count = 0

    def rule(rw, n, ins):
        nonlocal count
        src = _fits(n, producer)
        if src is None:
            return None
        w, transposed = src
        wv = rw.env[w.id]
        if transposed:
            wv = rw.emit("permute", (wv,), dims=(1, 0))
        o = n.outs[0]
        count += 1
        return rw.b.add(MATMUL_CASTB, (ins[0], wv), {}, [(o.shape, o.dtype, o.device)], None)

    return Rewrite(graph).run(rule), {"cast_gemm": count}
