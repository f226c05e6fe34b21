"""Horizontal fusion: sibling matmuls that share their left input become one GEMM.

``x @ w1``, ``x @ w2``, ``x @ w3`` (a transformer's Q/K/V projections, a GRU's gate GEMMs)
become ``y = x @ cat([w1, w2, w3], -1)`` and three column slices of ``y`` (free views).
Valid only for the same ``x`` var, 2-D weights with the same K and one dtype throughout,
and only for weights already defined where the first matmul runs, or transposes of such
(so no cycle appears).

The concatenation copies the weights at every run, and a wider GEMM may sum in another
order (float results can differ in the last bits), so this pass is opt-in, not default.
"""
from __future__ import annotations

from ..ir import Graph, Var
from ._util import Rewrite


def _groups(graph: Graph) -> list:
    """Lists of matmul nodes (≥2, in graph order) that can share one GEMM."""
    where = {v.id: -1 for v in graph.inputs}
    for i, n in enumerate(graph.nodes):
        for o in n.outs:
            where[o.id] = i
    by_x: dict = {}
    for i, n in enumerate(graph.nodes):
        if n.op.name != "matmul" or len(n.outs) != 1:
            continue
        x, w = n.inputs
        o = n.outs[0]
        if x.__class__ is not Var or w.__class__ is not Var or x.ndim < 2 or w.ndim != 2 or \
                not (x.dtype is w.dtype is o.dtype) or n.ct not in (None, o.dtype):
            continue
        by_x.setdefault((x.id, w.shape[0], o.dtype.name), []).append((i, n))
    groups = []
    for members in by_x.values():
        first = members[0][0]
        ok = [n for i, n in members if _available(graph, n.inputs[1], first, where)]
        if len(ok) >= 2:
            groups.append(ok)
    return groups


def _available(graph, w, first, where) -> bool:
    """``w`` exists before node ``first``, or is a transpose of a value that does (it is
    then re-taken there: ``F.linear`` transposes each weight right before its matmul)."""
    if where[w.id] < first:
        return True
    p = graph.producer(w)
    return p is not None and p.op.name == "permute" and where[p.inputs[0].id] < first


def _weight(rw, w):
    """``w`` in the new graph at the fused GEMM's place (a late transpose taken again)."""
    new = rw.env.get(w.id)
    if new is not None:
        return new
    p = rw.old.producer(w)
    return rw.emit("permute", (rw.env[p.inputs[0].id],), dims=tuple(p.params["dims"]))


def hfuse(graph: Graph):
    """Merge sibling matmuls. Returns ``(graph, {"merged": matmuls removed})``."""
    groups = _groups(graph)
    if not groups:
        return graph, {"merged": 0}
    lead = {id(g[0]): g for g in groups}
    done: dict = {}

    def rule(rw, n, ins):
        if id(n) in done:
            return (done.pop(id(n)),)
        g = lead.get(id(n))
        if g is None:
            return None
        x = ins[0]
        ws = [_weight(rw, m.inputs[1]) for m in g]
        y = rw.emit("matmul", (x, rw.emit("cat", ws, dim=1)))
        lead_slices = tuple((0, d, 1) for d in y.shape[:-1])
        off = 0
        for m, w in zip(g, ws):
            sl = lead_slices + ((off, off + w.shape[1], 1),)
            done[id(m)] = rw.emit("slice", (y,), slices=sl)
            off += w.shape[1]
        return (done.pop(id(n)),)

    return Rewrite(graph).run(rule), {"merged": sum(len(g) - 1 for g in groups)}
