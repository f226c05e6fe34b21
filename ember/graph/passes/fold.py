"""Constant folding: nodes whose inputs are all constants (or Python scalars) become constants.

A foldable node is run once, at pass time, by the executor itself (its kernel, the input
casts to ``node.ct`` and the cast to the output dtype), so a folded value is bitwise what
the graph would have computed. Never folded: random draws (they differ at every run),
graph-only ops, results above :data:`MAX_ELEMENTS`, views that would grow (an ``expand``
of a scalar stays a free view) and values that are graph outputs (a constant array would
then be handed to the caller, who may write into it).

Example: ``x + (c2 + c3)`` with 0-d constants ``c2 = 2``, ``c3 = 3`` becomes ``x + c`` with
one constant ``c = 5``.
"""
from __future__ import annotations

import numpy as np

from ..ir import CONSTANT, Graph, GraphBuilder, GraphOp, Var
from ._util import Rewrite

#: the largest result (in elements, all outputs together) the folder stores as a constant.
MAX_ELEMENTS = 1 << 20


def fold(graph: Graph):
    """Fold constant subexpressions. Returns ``(graph, {"folded": n})``."""
    folded = 0

    def rule(rw, n, ins):
        nonlocal folded
        values = _constant_inputs(rw, n, ins)
        if values is None or any(o.id in rw.outputs for o in n.outs):
            return None
        size = sum(o.numel() for o in n.outs)
        if size > MAX_ELEMENTS or (n.op.view and size > sum(
                v.size for v in values if isinstance(v, np.ndarray))):
            return None
        try:
            results = _evaluate(n, ins, values)
        except Exception:          # noqa: BLE001 - a kernel that fails here fails at run time
            return None
        folded += 1
        # NOTE: r.copy(), not np.array(r): a GPU graph's constants are CuPy arrays
        return tuple(rw.b.constant(r.copy(), o.dtype, o.device)
                     for r, o in zip(results, n.outs))

    out = Rewrite(graph).run(rule)
    return (out if folded else graph), {"folded": folded}


def _constant_inputs(rw, n, ins):
    """The constant values of ``n``'s Var inputs (scalars pass through), or None."""
    if isinstance(n.op, GraphOp) or n.is_random() or not n.outs:
        return None
    values = []
    for x in ins:
        if x.__class__ is Var:
            p = rw.producer(x)
            if p is None or p.op is not CONSTANT:
                return None
            values.append(p.params["value"])
    return values if values else None


def _evaluate(n, ins, values) -> list:
    """Run ``n`` alone on its constant inputs through the executor; one array per output."""
    from ..executor import Program
    b = GraphBuilder("fold")
    it = iter(values)
    args = tuple(b.constant(next(it), x.dtype, x.device) if x.__class__ is Var else x
                 for x in ins)
    outs = b.add(n.op, args, n.params, [(o.shape, o.dtype, o.device) for o in n.outs], n.ct)
    return Program(b.build(list(outs))).run([])
