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
stored) and at most one leaf is full-size (so the reader reads no more than it did).

What is cheap depends on the device (:class:`Policy`). On a CPU (:data:`CPU`)
transcendental ops and divisions are never recomputed: a libm call per element costs
more than the memory it saves. A GPU (:data:`CUDA`) runs elementwise kernels far below
its arithmetic rate (an H100 does ~60 FLOP per byte of DRAM traffic), so there a tanh,
an exp or a division is recomputed too, chains may be longer, and a reader that is in no
group (a lone ``g * xhat`` before a bias-gradient sum) takes the chain as well: the copy
and the reader become one kernel, which reads the chain's leaves instead of the value.
A GELU's forward kernel then writes its activation only, and a layer norm's no
normalised ``x``.

Values are computed by the same expressions from the same inputs: results equal the
stored ones up to the rounding differences fusion already allows (the default pipeline is
not bitwise; ``EXACT_PASSES`` does not fuse).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph, GraphBuilder, Var
from .fuse_groups import classify

#: ops never recomputed on a CPU (a libm call per element costs more than the memory it
#: saves).
_EXPENSIVE = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "erfinv", "pow", "atan2",
    "hypot", "sqrt", "rsqrt", "div", "floor_divide", "remainder", "fmod"})
#: most nodes one recomputed chain may copy (CPU).
MAX_CHAIN = 8


@dataclass(frozen=True)
class Policy:
    """What :func:`recompute` may copy on a device.

    Attributes:
        expensive: op names never recomputed.
        max_chain: most nodes one recomputed chain may copy.
        lone_readers: whether a fusible reader in no group (a lone elementwise node of the
            value's shape) may take the chain (it and the copy then form a group).
        through_taken: whether a chain goes on through a value already recomputed for all
            its readers (else such a value counts as stored: a GELU's ``1 + tanh(u)``
            would keep ``tanh(u)`` stored for its own copy).
    """

    expensive: frozenset
    max_chain: int
    lone_readers: bool
    through_taken: bool


#: a CPU's policy: cheap arithmetic only, short chains, readers already in a group.
CPU = Policy(_EXPENSIVE, MAX_CHAIN, False, False)
#: a GPU's: any elementwise op, longer chains (a GELU's ``1 + tanh(...)`` from the GEMM
#: output and the bias is 8 nodes), readers in no group too. NOTE: no op is expensive there: the kernels are
#: memory-bound by a wide margin, and a recomputed chain reads at most one full-size value.
CUDA = Policy(frozenset(), 16, True, True)
#: a value at most this fraction of the recomputed one's size is "small" (a row statistic,
#: a bias, a scalar): reading it costs nothing worth counting.
SMALL = 8
#: smallest value worth recomputing (elements): below it a stored copy is in cache anyway.
MIN_NUMEL = 1 << 14


def recompute(graph: Graph, groups, device: str = "cpu", host_scalars: bool = False,
              policy: Policy | None = None) -> tuple:
    """``(graph, recomputed values)``: ``graph`` with the rewrites described above.

    ``device``/``host_scalars``: as :func:`.fuse_groups.classify` (``"cuda"``, True for
    :mod:`.fuse_cuda`'s groups: the default classifies every GPU node unfusible, so
    nothing would be recomputed there). ``policy``: what may be copied; by default
    :data:`CUDA` for ``device="cuda"``, else :data:`CPU`."""
    if policy is None:
        policy = CUDA if device == "cuda" else CPU
    member = {}                                  # node id -> group index
    for gi, g in enumerate(groups):
        for n, _ in g.members:
            member[id(n)] = gi
    producer = {o.id: n for n in graph.nodes for o in n.outs}
    users = graph.users()
    outputs = {v.id for v in graph.outputs}
    cls_of = {id(n): c for g in groups for n, c in g.members}
    taken_ids: set = set()

    def outside_users(v, gi):
        return [u for u in users.get(v.id, ()) if member.get(id(u)) != gi]

    def anchor(w, size, skip) -> bool:
        """``w`` exists at run time whatever this rewrite does."""
        if w.__class__ is not Var:
            return True
        p = producer.get(w.id)
        if p is None or id(p) not in member or w.id in outputs or w.numel() * SMALL <= size:
            return True
        if policy.through_taken and w.id in taken_ids:
            return False
        return any(u is not skip for u in outside_users(w, member[id(p)]))

    def chain(v, size, skip, gi, out) -> bool:
        """Append to ``out`` (in order) the nodes recomputing ``v``; False if it can't."""
        if anchor(v, size, skip):
            return True
        p = producer[v.id]
        if member.get(id(p)) != gi or cls_of.get(id(p)) != "full" or \
                p.op.name in policy.expensive or \
                classify(p, device, host_scalars) != "ew" or len(out) >= policy.max_chain:
            return False
        for x in p.inputs:
            if not chain(x, size, skip, gi, out):
                return False
        if p not in out:
            out.append(p)
        return True

    def reader_group(u, v):
        """The group ``u`` reads ``v`` in (a key), or None if ``u`` can't take a chain."""
        if classify(u, device, host_scalars) is None:
            return None
        if id(u) in member:
            return member[id(u)]
        lone = policy.lone_readers and classify(u, device, host_scalars) == "ew" and \
            u.out.shape == v.shape
        return ("lone", id(u)) if lone else None

    plans = {}                                   # id(reader node) -> [(v, chain nodes)]
    taken = []
    for gi, g in enumerate(groups):
        for p, c in g.members:
            v = p.out
            if c != "full" or v.id in outputs or p.op.name in policy.expensive or \
                    v.numel() < MIN_NUMEL:
                continue
            readers = outside_users(v, gi)
            keys = [reader_group(u, v) for u in readers]
            if not readers or any(k is None for k in keys):
                continue
            by_group: dict = {}
            for u, k in zip(readers, keys):
                by_group.setdefault(k, u)                 # first reader in each group
            found = {}
            for hg, u in by_group.items():
                nodes: list = []
                if not _chain_of(p, v.numel(), u, gi, nodes, chain, policy.max_chain) or \
                        _full_leaves(nodes, v.numel()) > 1:
                    found = None
                    break
                found[hg] = nodes
            if not found:
                continue
            taken.append(v)
            taken_ids.add(v.id)
            for u, k in zip(readers, keys):
                plans.setdefault(id(u), []).append((v, found[k], k))
    if not taken:
        return graph, 0
    return _rebuild(graph, plans), len(taken)


def _chain_of(p, size, u, gi, nodes, chain, max_chain: int = MAX_CHAIN) -> bool:
    """The chain recomputing ``p``'s output for reader ``u``: its inputs' chains, then ``p``."""
    for x in p.inputs:
        if not chain(x, size, u, gi, nodes):
            return False
    if len(nodes) >= max_chain:
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
