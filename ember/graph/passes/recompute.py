"""Recompute cheap elementwise values in the kernel that reads them, instead of storing them.

A training step's forward kernels write, besides their results, the intermediates the
backward reads: a GELU's forward kernel stores ``h``, ``h * 0.5`` and ``h * 0.7071`` next to
its output, a layer norm's stores ``x - mean`` and the normalised ``x``. Each is a full-size
array written once and read once, a whole step later: memory traffic, and memory held
through the step. When such a value is a short chain of cheap elementwise ops over
values that exist anyway (graph inputs, matmul outputs, values stored for another
reader, per-row statistics), the backward kernel can compute it again from those for a
few arithmetic instructions per element — what PyTorch's inductor does when it
partitions the joint graph ("recompute pointwise ops").

:func:`recompute` rewrites a graph given its fusion groups (:mod:`.fuse_groups`): a full-size
value ``v`` made by a cheap elementwise member of a group and read *only* by fusible nodes of
later groups is replaced, for each of those groups, by a copy of the chain that made it,
inserted before its first reader there (the copy then fuses into that group). The
rewrite is taken only when every leaf of the chain is available anyway (so no new value is
stored) and at most one leaf is full-size (so the reader reads no more than it did);
transcendental ops and divisions are never recomputed.

Values are computed by the same expressions from the same inputs: results equal the
stored ones up to the rounding differences fusion already allows (the default pipeline is
not bitwise; ``EXACT_PASSES`` does not fuse).
"""
from __future__ import annotations

from ..ir import Graph, GraphBuilder, Var
from .fuse_groups import classify

#: ops never recomputed (a libm call per element costs more than the memory it saves).
_EXPENSIVE = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "erfinv", "pow", "atan2",
    "hypot", "sqrt", "rsqrt", "div", "floor_divide", "remainder", "fmod"})
#: most nodes one recomputed chain may copy.
MAX_CHAIN = 8
#: a value at most this fraction of the recomputed one's size is "small" (a row statistic,
#: a bias, a scalar): reading it costs nothing worth counting.
SMALL = 8
#: smallest value worth recomputing (elements): below it a stored copy is in cache anyway.
MIN_NUMEL = 1 << 14


def recompute(graph: Graph, groups, device: str = "cpu", host_scalars: bool = False) -> tuple:
    """``(graph, recomputed values)``: ``graph`` with the rewrites described above.

    ``device``/``host_scalars``: as :func:`.fuse_groups.classify` (``"cuda"``, True for
    :mod:`.fuse_cuda`'s groups: the default classifies every GPU node unfusible, so
    nothing would be recomputed there)."""
    member = {}                                  # node id -> group index
    for gi, g in enumerate(groups):
        for n, _ in g.members:
            member[id(n)] = gi
    producer = {o.id: n for n in graph.nodes for o in n.outs}
    users = graph.users()
    outputs = {v.id for v in graph.outputs}
    cls_of = {id(n): c for g in groups for n, c in g.members}

    def outside_users(v, gi):
        return [u for u in users.get(v.id, ()) if member.get(id(u)) != gi]

    def anchor(w, size, skip) -> bool:
        """``w`` exists at run time whatever this rewrite does."""
        if w.__class__ is not Var:
            return True
        p = producer.get(w.id)
        if p is None or id(p) not in member or w.id in outputs or w.numel() * SMALL <= size:
            return True
        return any(u is not skip for u in outside_users(w, member[id(p)]))

    def chain(v, size, skip, gi, out) -> bool:
        """Append to ``out`` (in order) the nodes recomputing ``v``; False if it can't."""
        if anchor(v, size, skip):
            return True
        p = producer[v.id]
        if member.get(id(p)) != gi or cls_of.get(id(p)) != "full" or \
                p.op.name in _EXPENSIVE or classify(p, device, host_scalars) != "ew" or \
                len(out) >= MAX_CHAIN:
            return False
        for x in p.inputs:
            if not chain(x, size, skip, gi, out):
                return False
        if p not in out:
            out.append(p)
        return True

    plans = {}                                   # id(reader node) -> [(v, chain nodes)]
    taken = []
    for gi, g in enumerate(groups):
        for p, c in g.members:
            v = p.out
            if c != "full" or v.id in outputs or p.op.name in _EXPENSIVE or \
                    v.numel() < MIN_NUMEL:
                continue
            readers = outside_users(v, gi)
            if not readers or any(classify(u, device, host_scalars) is None or
                                  id(u) not in member for u in readers):
                continue
            by_group: dict = {}
            for u in readers:
                by_group.setdefault(member[id(u)], u)     # first reader in each group
            found = {}
            for hg, u in by_group.items():
                nodes: list = []
                if not _chain_of(p, v.numel(), u, gi, nodes, chain) or \
                        _full_leaves(nodes, v.numel()) > 1:
                    found = None
                    break
                found[hg] = nodes
            if not found:
                continue
            taken.append(v)
            for u in readers:
                plans.setdefault(id(u), []).append((v, found[member[id(u)]],
                                                    member[id(u)]))
    if not taken:
        return graph, 0
    return _rebuild(graph, plans), len(taken)


def _chain_of(p, size, u, gi, nodes, chain) -> bool:
    """The chain recomputing ``p``'s output for reader ``u``: its inputs' chains, then ``p``."""
    for x in p.inputs:
        if not chain(x, size, u, gi, nodes):
            return False
    if len(nodes) >= MAX_CHAIN:
        return False
    nodes.append(p)
    return True


def _full_leaves(nodes, size) -> int:
    """How many distinct values of more than ``size / SMALL`` elements ``nodes`` read from
    outside the chain: recomputing must not read more full-size arrays than it saves."""
    made = {p.out.id for p in nodes}
    return len({x.id for p in nodes for x in p.inputs
                if x.__class__ is Var and x.id not in made and x.numel() * SMALL > size})


def _rebuild(graph: Graph, plans) -> Graph:
    """Copy ``graph``; before each planned reader, emit (once per reading group) its chains."""
    b = GraphBuilder(graph.name)
    env = {}
    for v in graph.inputs:
        env[v.id] = b.input(v.shape, v.dtype, v.device, v.name)
    copies: dict = {}                            # (reading group, old var id) -> new var

    def mapped(x, local):
        if x.__class__ is not Var:
            return x
        return local.get(x.id, env[x.id]) if local is not None else env[x.id]

    for n in graph.nodes:
        b.loc = n.loc
        local = None
        plan = plans.get(id(n))
        if plan is not None:
            local = {}
            for v, nodes, hg in plan:
                for p in nodes:
                    key = (hg, p.out.id)
                    if key not in copies:
                        ins = tuple(mapped(x, {k[1]: c for k, c in copies.items()
                                               if k[0] == hg}) for x in p.inputs)
                        copies[key] = b.add(p.op, ins, p.params,
                                            [(o.shape, o.dtype, o.device) for o in p.outs],
                                            p.ct)[0]
                local[v.id] = copies[(hg, v.id)]
        ins = tuple(mapped(x, local) for x in n.inputs)
        outs = b.add(n.op, ins, n.params, [(o.shape, o.dtype, o.device) for o in n.outs],
                     n.ct)
        for o, no in zip(n.outs, outs):
            env[o.id] = no
    return b.build([env[v.id] for v in graph.outputs])
