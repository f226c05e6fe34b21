"""Which forward values a split backward graph reads: save inputs and reductions,
recompute elementwise chains.

When :mod:`.joint` splits a traced call into a forward and a backward graph, every forward
value the backward reads becomes an extra forward output ("saved"). Traced as written, a
GELU's backward reads ``x * 0.5``, ``x * 0.7071`` and ``1 + erf(...)``, a layer norm's
``x - mean`` and the normalised ``x``: each a full-size array the forward kernel writes and
the backward kernel reads back. PyTorch's kernels save the input (and a layer norm's
mean and rstd) and recompute the rest inside one backward kernel; AOTAutograd's min-cut
partitioner and JAX's ``remat`` policies do the same for elementwise chains.

:func:`recompute_pointwise` does that before the split: for each saved value made by a
fusible elementwise node, it tries recomputing it in the backward from the chain of
elementwise nodes that made it, down to *leaves* (graph inputs, outputs of
non-elementwise nodes such as reductions and matmuls, values the forward returns anyway,
small values such as row statistics, and values the forward writes anyway: returned, or
made or read by a non-fusible node such as a matmul), and keeps the change when the saved
bytes weighed by their traffic go down: a value the forward would write only to save it
counts twice (written, then read), one that exists anyway once. Transcendental ops
(``erf``, ``exp``, ``tanh``...) are not recomputed: at these sizes the arithmetic costs
more than the memory it saves (a GELU saves its input and its ``1 + erf`` term).
The copies are ordinary nodes at the start of the backward graph, so ``fuse`` puts them
into the backward's kernel.

Numerics: a copy is the same op with the same inputs and parameters as the node it
recomputes, so the backward reads the same values (bit for bit, where the kernels
evaluate the same expression the same way, which the code generator does: no FMA
contraction across ops, the same libm calls).
"""
from __future__ import annotations

from .ir import Node, Var
from .passes.fuse_groups import classify
from .passes.recompute import _EXPENSIVE

#: most forward nodes one saved value's recomputation may copy.
MAX_CHAIN = 16
#: a value at most this fraction of the recomputed one's size is kept as a leaf (a row
#: statistic, a bias, a scalar): saving it costs nothing worth counting.
SMALL = 8


def recompute_pointwise(b, fwd_nodes, bwd_nodes, gvars, fwd_outs) -> tuple:
    """``(backward nodes, gradient vars)`` with recomputed elementwise chains prepended.

    ``b``: the trace's :class:`~.ir.GraphBuilder` (new vars come from it); ``fwd_nodes`` /
    ``bwd_nodes``: the trace's nodes before / after the split; ``gvars``: the gradient
    vars (None where unused); ``fwd_outs``: the forward graph's outputs (vars). The
    forward nodes are left as they are: those no output needs any more are dead code
    that the forward pipeline's ``dce`` removes.
    """
    producer = {o.id: n for n in fwd_nodes for o in n.outs}
    inputs = {v.id for v in b.inputs}
    free = inputs | {v.id for v in fwd_outs if v.__class__ is Var} | _materialised(fwd_nodes)
    chosen: dict = {}                       # id(node) -> node, the nodes to recompute
    first = _saved(bwd_nodes, gvars, producer, inputs, chosen)
    cost = _cost(first, free)
    big = max((x.numel() for x in first), default=0)
    for v in first:             # small values (row statistics) stay saved
        p = producer.get(v.id)
        if p is None or v.id in free or id(p) in chosen or v.numel() * SMALL <= big or \
                not _pointwise(p):
            continue
        chain: dict = {}
        if not _chain(v, v.numel(), producer, free, chain):
            continue
        trial = dict(chosen)
        trial.update(chain)
        c = _cost(_saved(bwd_nodes, gvars, producer, inputs, trial), free)
        if c < cost:
            chosen, cost = trial, c
    if not chosen:
        return bwd_nodes, gvars
    return _rewrite(b, fwd_nodes, bwd_nodes, gvars, chosen)


def _pointwise(n) -> bool:
    """A cheap fusible elementwise node: recomputing it costs a few instructions."""
    return len(n.outs) == 1 and n.op.name not in _EXPENSIVE and \
        classify(n, n.out.device.type) == "ew"


def _materialised(fwd_nodes) -> set:
    """Ids of the values the forward writes to memory whatever is saved: those a
    non-fusible node (a matmul, a view, a gather...) makes or reads."""
    out = set()
    for n in fwd_nodes:
        if classify(n, n.outs[0].device.type if n.outs else "cpu") is None:
            out.update(o.id for o in n.outs)
            out.update(x.id for x in n.inputs if x.__class__ is Var)
    return out


def _chain(v, size, producer, free, out) -> bool:
    """Add to ``out`` the nodes recomputing ``v`` from leaves; False if too long."""
    p = producer.get(v.id)
    if p is None or v.id in free or v.numel() * SMALL <= size or not _pointwise(p):
        return True                         # a leaf: saved as it is
    if id(p) in out:
        return True
    if len(out) >= MAX_CHAIN:
        return False
    out[id(p)] = p
    return all(_chain(x, size, producer, free, out) for x in p.inputs if x.__class__ is Var)


def _saved(bwd_nodes, gvars, producer, inputs, chosen) -> list:
    """The forward vars (made by a forward node, or graph inputs) the backward reads
    when the ``chosen`` nodes are recomputed."""
    made = {o.id for n in chosen.values() for o in n.outs}
    out, seen = [], set()
    readers = [n.inputs for n in bwd_nodes] + [n.inputs for n in chosen.values()] + \
        [[g for g in gvars if g is not None]]
    for ins in readers:
        for x in ins:
            if x.__class__ is Var and x.id not in made and x.id not in seen and \
                    (x.id in producer or x.id in inputs):
                seen.add(x.id)
                out.append(x)
    return out


def _cost(saved, free) -> int:
    """Bytes moved for the saved values: written and read, or only read if free."""
    return sum(x.nbytes() * (1 if x.id in free else 2) for x in saved)


def _rewrite(b, fwd_nodes, bwd_nodes, gvars, chosen) -> tuple:
    """Copies of the ``chosen`` nodes (forward order) first, then the backward nodes
    reading the copies."""
    env: dict = {}

    def m(x):
        return env.get(x.id, x) if x.__class__ is Var else x

    new = []
    for n in fwd_nodes:
        if id(n) in chosen:
            outs = tuple(b.new_var(o.shape, o.dtype, o.device, o.name) for o in n.outs)
            new.append(Node(n.op, tuple(m(x) for x in n.inputs), n.params, outs, n.ct, n.loc))
            for o, c in zip(n.outs, outs):
                env[o.id] = c
    for n in bwd_nodes:
        if any(x.__class__ is Var and x.id in env for x in n.inputs):
            n = Node(n.op, tuple(m(x) for x in n.inputs), n.params, n.outs, n.ct, n.loc)
        new.append(n)
    return new, [m(g) if g is not None else None for g in gvars]


__all__ = ["recompute_pointwise"]
