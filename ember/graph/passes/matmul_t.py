"""``matmul_t``: a 2-D ``matmul`` reads its transposed operands through BLAS's flags.

A linear layer's step has a ``permute(w, (1, 0))`` before each forward product and
transposes of the output gradient before each weight-gradient product: views, free in
themselves, but each a node the executor calls on every run. In a training step those
calls land between GEMMs that have just streamed megabytes through the caches, so a
view costs 4-8 us there instead of the ~0.5 us it takes alone (the compiled W1 MLP step,
batch 128: six of them, issue 19 item 7). ``matmul(permute(a), b)`` becomes
``matmul_t(a, b, ta=True)``: the same call on ``a.T`` as eager's matmul kernel makes (NumPy's
``matmul``, or for float32 Ember's own GEMM where :func:`ember.codegen.sgemm.worth` picks
it) — the same bits — with one node fewer. A permute that something else also reads
stays (its other readers need it).

Runs late in the pipeline (after ``fuse``), so the passes that look for ``matmul`` nodes
(``hfuse``, ``conv_gemm``, ``sum_rows``...) have already seen them. Float32/float64
operands of one dtype, no casts; other matmuls are left alone.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as _dt
from ...codegen import sgemm
from ..ir import BufferOp, Graph, Var
from ._util import Rewrite


def _run_matmul_t(xp, x, y, out=None, *, ta=False, tb=False):
    a, b = x.T if ta else x, y.T if tb else y
    if xp is np and a.dtype == _F32 and b.dtype == _F32:
        # NOTE: the float32 GEMM eager's matmul kernel runs (Ember's own where its size
        # rule says it is faster, reading transposed operands in place; else None):
        # the same call, so the same bits as eager's matmul(permute(a), b)
        r = sgemm.matmul(a, b, out=out)
        if r is not None:
            return r
    return xp.matmul(a, b, out=out)


_F32 = np.dtype(np.float32)
MATMUL_T = BufferOp("matmul_t", _run_matmul_t)
_DTYPES = (_dt.float32, _dt.float64)


def _transposed(n) -> bool:
    """Whether node ``n`` is a 2-D transpose of a graph value."""
    return n is not None and n.op.name == "permute" and tuple(n.params["dims"]) == (1, 0) \
        and n.inputs[0].__class__ is Var and len(n.inputs[0].shape) == 2


def _fits(n) -> bool:
    if n.op.name != "matmul" or hasattr(n.op, "run") or len(n.outs) != 1:
        return False
    x, y = n.inputs
    o = n.outs[0]
    return x.__class__ is Var and y.__class__ is Var and len(x.shape) == 2 and \
        len(y.shape) == 2 and o.dtype in _DTYPES and x.dtype is o.dtype and \
        y.dtype is o.dtype and n.ct in (None, o.dtype)


def matmul_t(graph: Graph):
    """Fold 2-D transposes into the products that alone read them; returns
    ``(graph, {"matmul_t": products rewritten})`` (``dce`` drops the dead permutes)."""
    prod = {o.id: n for n in graph.nodes for o in n.outs}
    readers: dict = {}
    for n in graph.nodes:
        for x in n.inputs:
            if x.__class__ is Var:
                readers[x.id] = readers.get(x.id, 0) + 1
    outs = {v.id for v in graph.outputs}

    def folds(v) -> bool:
        p = prod.get(v.id)
        return _transposed(p) and readers.get(v.id) == 1 and v.id not in outs

    todo = {id(n) for n in graph.nodes if _fits(n) and any(folds(v) for v in n.inputs)}
    if not todo:
        return graph, {"matmul_t": 0}

    def rule(rw, n, ins):
        if id(n) not in todo:
            return None
        new, flags = [], {}
        for v, nv, flag in zip(n.inputs, ins, ("ta", "tb")):
            if folds(v):
                nv = rw.env[prod[v.id].inputs[0].id]
                flags[flag] = True
            new.append(nv)
        o = n.outs[0]
        return rw.b.add(MATMUL_T, tuple(new), flags, [(o.shape, o.dtype, o.device)], None)

    return Rewrite(graph).run(rule), {"matmul_t": len(todo)}
