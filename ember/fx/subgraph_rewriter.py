"""``ember.fx.subgraph_rewriter``: :func:`replace_pattern`, find every copy of a traced
pattern in a GraphModule and splice a traced replacement in its place."""
from __future__ import annotations

from typing import Callable, NamedTuple

from .graph_module import GraphModule
from .node import Node

__all__ = ["Match", "replace_pattern"]


class Match(NamedTuple):
    """One replaced occurrence: the graph Node that matched the pattern's output
    (``anchor``) and the map from pattern Nodes to graph Nodes."""
    anchor: Node
    nodes_map: dict


def _leaves(a) -> list:
    if isinstance(a, (tuple, list)):
        return [x for e in a for x in _leaves(e)]
    if isinstance(a, dict):
        return [x for k in sorted(a) for x in _leaves(a[k])]
    return [a]


def _match(pn: Node, gn: Node, m: dict) -> bool:
    if pn in m:
        return m[pn] is gn
    if pn.op == "placeholder":
        m[pn] = gn
        return True
    if pn.op != gn.op or pn.target != gn.target or set(pn.kwargs) != set(gn.kwargs):
        return False
    pa, ga = _leaves((pn.args, pn.kwargs)), _leaves((gn.args, gn.kwargs))
    if len(pa) != len(ga):
        return False
    m[pn] = gn
    for p, g in zip(pa, ga):
        if isinstance(p, Node):
            if not isinstance(g, Node) or not _match(p, g, m):
                return False
        elif isinstance(g, Node) or type(p) is not type(g) or p != g:
            return False
    return True


def _self_contained(m: dict, anchor_p: Node) -> bool:
    """Only the anchor's value may be read outside the match."""
    inner = {g for p, g in m.items() if p.op != "placeholder"}
    return all(u in inner for p, g in m.items()
               if p.op != "placeholder" and p is not anchor_p for u in g.users)


def _trace(f):
    from ._symbolic_trace import symbolic_trace
    return f if isinstance(f, GraphModule) else symbolic_trace(f)


def replace_pattern(gm: GraphModule, pattern: Callable, replacement: Callable) -> list[Match]:
    """Replace each non-overlapping occurrence of ``pattern`` in ``gm`` by
    ``replacement`` (both traced with :func:`~ember.fx.symbolic_trace`; they take the
    same inputs, in order). Matching is structural: same ops and targets, equal
    constants; the pattern's inputs match any value. ``gm`` is recompiled.

    Returns:
        One :class:`Match` per replacement.

    Example:
        >>> def pattern(x, y):
        ...     return ember.relu(ember.add(x, y))
        >>> def replacement(x, y):
        ...     return ember.relu(ember.mul(x, y))
        >>> replace_pattern(gm, pattern, replacement)
    """
    pg, rg = _trace(pattern).graph, _trace(replacement).graph
    p_out = [n for n in pg.nodes if n.op == "output"][0]
    if not isinstance(p_out.args[0], Node):
        raise ValueError("replace_pattern: the pattern must return one value (a single "
                         f"Node), got {p_out.args[0]!r}")
    anchor_p = p_out.args[0]
    p_inputs = [n for n in pg.nodes if n.op == "placeholder"]
    graph, matches, used = gm.graph, [], set()
    for gn in list(graph.nodes):
        if gn._erased:
            continue
        m: dict = {}
        if not _match(anchor_p, gn, m) or not _self_contained(m, anchor_p):
            continue
        inner = [m[p] for p in pg.nodes if p in m and p.op != "placeholder"]
        if any(g in used for g in inner):
            continue
        used.update(inner)
        matches.append(Match(gn, dict(m)))
    replaced: dict[Node, Node] = {}      # an earlier match's anchor -> its replacement
    for match in matches:
        for p in p_inputs:
            while match.nodes_map[p] in replaced:
                match.nodes_map[p] = replaced[match.nodes_map[p]]
        replaced[match.anchor] = _splice(graph, rg, match, p_inputs, anchor_p)
    gm.recompile()
    return matches


def _splice(graph, rg, match: Match, p_inputs: list, anchor_p: Node) -> Node:
    r_inputs = [n for n in rg.nodes if n.op == "placeholder"]
    if len(r_inputs) != len(p_inputs):
        raise ValueError(f"replace_pattern: pattern takes {len(p_inputs)} inputs but "
                         f"replacement takes {len(r_inputs)}")
    val_map = {r: match.nodes_map[p] for r, p in zip(r_inputs, p_inputs)}
    with graph.inserting_before(match.anchor):
        out = graph.graph_copy(rg, val_map)
    match.anchor.replace_all_uses_with(out)
    for p in reversed(list(anchor_p.graph.nodes)):
        g = match.nodes_map.get(p)
        if g is not None and p.op != "placeholder" and not g.users and not g._erased:
            graph.erase_node(g)
    return out
