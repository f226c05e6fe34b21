"""Dead-code elimination: drop nodes whose values reach no graph output.

Random nodes stay even when unused: each draw advances the generator, so removing one
would change every later random number (compiled results must equal eager ones).
"""
from __future__ import annotations

from ..ir import Graph, Var


def dce(graph: Graph):
    live = {v.id for v in graph.outputs}
    keep = []
    for n in reversed(graph.nodes):
        if n.is_random() or any(o.id in live for o in n.outs):
            keep.append(n)
            for x in n.inputs:
                if x.__class__ is Var:
                    live.add(x.id)
    removed = len(graph.nodes) - len(keep)
    if not removed:
        return graph, {"removed": 0}
    keep.reverse()
    return Graph(graph.inputs, keep, graph.outputs, graph.name), {"removed": removed}
