"""Common-subexpression elimination: identical pure nodes become one (hash-consing).

Two nodes are identical when their :meth:`~ember.graph.ir.Node.key` (op, inputs by var,
params, compute dtype) and their output types agree. Walking in topological order with
inputs already renamed to their representatives merges whole identical subtrees in one
pass (``x @ w`` computed twice, the SGD step's ``neg(lr)`` once per parameter...).
Random draws are never merged: two ``dropout`` masks must differ.
"""
from __future__ import annotations

from ..ir import Graph, Node
from ._util import Rewrite


def cse(graph: Graph):
    """Merge identical pure nodes. Returns ``(graph, {"merged": n})``."""
    seen: dict = {}
    merged = 0

    def rule(rw, n, ins):
        nonlocal merged
        if n.is_random() or not getattr(n.op, "pure", True):
            return None
        try:
            k = (Node(n.op, ins, n.params, (), n.ct).key(),
                 tuple((o.shape, o.dtype.name) for o in n.outs))
            hit = seen.get(k)
        except TypeError:          # an unhashable param: keep the node
            return None
        if hit is not None:
            merged += 1
            return hit
        seen[k] = rw.copy(n, ins)
        return seen[k]

    out = Rewrite(graph).run(rule)
    return (out if merged else graph), {"merged": merged}
