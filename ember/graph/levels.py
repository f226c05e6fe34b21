"""A graph's nodes by depth, for :class:`~ember.graph.executor.Program`'s ``parallel=True``
runs: the nodes of one level are independent and run together on a thread pool."""
from __future__ import annotations

from .ir import Graph, Var

__all__ = ["levels", "level_frees"]


def levels(graph: Graph) -> list:
    """Nodes grouped by depth: every node's inputs come from earlier levels."""
    depth: dict = {}
    levels: list = []
    for i, n in enumerate(graph.nodes):
        d = 0
        for x in n.inputs:
            if x.__class__ is Var and x.id in depth:
                d = max(d, depth[x.id] + 1)
        for o in n.outs:
            depth[o.id] = d
        while len(levels) <= d:
            levels.append([])
        levels[d].append(i)
    return levels


def level_frees(graph: Graph, levels, keep) -> list:
    """Per level: the vars no later level reads (dropped once the level is done)."""
    level_of = {i: d for d, lv in enumerate(levels) for i in lv}
    last: dict = {}
    for i, n in enumerate(graph.nodes):
        for x in n.inputs:
            if x.__class__ is Var:
                last[x.id] = max(last.get(x.id, -1), level_of[i])
        for o in n.outs:
            last.setdefault(o.id, level_of[i])
    out = [[] for _ in levels]
    for vid, d in last.items():
        if vid not in keep:
            out[d].append(vid)
    return out
