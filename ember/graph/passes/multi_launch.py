"""Independent launches of one generated CUDA kernel become one launch (GPU graphs).

A compiled training step on a GPU is host-bound: every launch costs Python and CuPy time
(bench/RESULTS.md, issue 21), and AdamW launches one fused update kernel per parameter —
the same kernel text for every 2-D weight, another for every 1-D one. ``multi_launch``
groups :class:`~.fuse_cuda.CudaFusedOp` nodes running the same kernel text over operands
that are contiguous by their specs (:func:`~ember.codegen.cuda_launch.wants_multi`) and
that do not depend on each other into one :class:`MultiFusedOp` node, launched through the
kernel's multi-tensor entry (:mod:`ember.codegen.cuda_multi`: PyTorch's
``multi_tensor_apply``).

Grouping is one walk in schedule order: a node joins the open group of its kernel unless
it reads a value the group makes; a node reading such a value closes the group first.
The group's node takes the place of its last member, so every member's inputs exist by
then and no reader of a member's outputs comes before it (the nodes in between read none
of them). The memory planner sees one multi-output kernel that may write each output over
its own donated state (``accepts_outs = "inplace"``, as each member did); the runner gives
a new array to an output whose donated buffer another member reads.

Only graphs with generated CUDA kernels change (the ``cuda_kernels`` device's
``fuse_cuda`` output); CPU graphs have none. ``EMBER_MULTI_LAUNCH=0`` turns it off.
"""
from __future__ import annotations

import os

from ..ir import Graph, GraphOp, Node, Var
from .dce import dce

__all__ = ["MAX_GROUP", "MultiFusedOp", "multi_launch"]

#: members per group at most (the runner launches 256 records at a time anyway).
MAX_GROUP = 1024


class MultiFusedOp(GraphOp):
    """One node for several independent launches of one generated CUDA kernel: inputs and
    outputs are the members', one member after another (``sizes``: per member its input
    and output counts). New memory, or each output over its own donated input."""

    __slots__ = ("kernels", "module", "ops", "sizes", "accepts_out", "accepts_outs",
                 "fresh_out")

    def __init__(self, members: list):
        ops = [n.op for n in members]
        self.kernels = [op.kernel for op in ops]
        self.module = ops[0].module
        metas = [[(o.shape, o.dtype.np) for o in n.outs] for n in members]
        xp = _device_xp(members)
        super().__init__("fused", self.module.multi_runner(self.kernels, metas, xp))
        self.accepts_out = None
        self.ops = tuple(op.ops for op in ops)
        self.sizes = tuple((len(n.inputs), len(n.outs)) for n in members)
        self.accepts_outs = "inplace" if all(
            "inplace" in (op.accepts_out, op.accepts_outs) for op in ops) else None
        self.fresh_out = True

    def __repr__(self) -> str:
        return f"<graph op fused x{len(self.kernels)} (cuda, one launch): {self.ops[0]}>"


def _device_xp(members):
    from ...device.base import get_backend
    dev = next(o.device for n in members for o in n.outs if o.device is not None)
    return get_backend(dev).xp


def _candidate(n) -> str | None:
    """The kernel name of a node that may join a group, else None."""
    op = n.op
    mod = getattr(op, "module", None)
    k = getattr(op, "kernel", None)
    if type(op).__name__ != "CudaFusedOp" or k is None or k.name not in getattr(
            mod, "multi", ()):
        return None
    return k.name


def _groups(nodes) -> list:
    """Lists of node indices, each a group of at least two (see the module doc)."""
    done, open_, made_by = [], {}, {}

    def close(name):
        g = open_.pop(name)
        for i in g:
            for o in nodes[i].outs:
                made_by.pop(o.id, None)
        if len(g) > 1:
            done.append(g)

    for i, n in enumerate(nodes):
        for name in {made_by[x.id] for x in n.inputs
                     if x.__class__ is Var and x.id in made_by}:
            if name in open_:
                close(name)
        name = _candidate(n)
        if name is None:
            continue
        if len(open_.get(name, ())) >= MAX_GROUP:
            close(name)
        open_.setdefault(name, []).append(i)
        for o in n.outs:
            made_by[o.id] = name
    for name in list(open_):
        close(name)
    return done


def multi_launch(graph: Graph):
    """Group independent launches of one CUDA kernel (module doc); returns
    ``(graph, {"groups": ..., "launches_saved": ...})``."""
    if os.environ.get("EMBER_MULTI_LAUNCH", "1") == "0" or \
            not any(_candidate(n) for n in graph.nodes):
        return graph, {"groups": 0}
    graph, _ = dce(graph)               # NOTE: a dead member would keep a group's outputs
    groups = _groups(graph.nodes)
    if not groups:
        return graph, {"groups": 0}
    at = {g[-1]: g for g in groups}
    moved = {i for g in groups for i in g}
    nodes = []
    for i, n in enumerate(graph.nodes):
        if i in at:
            members = [graph.nodes[j] for j in at[i]]
            op = MultiFusedOp(members)
            nodes.append(Node(op, tuple(x for m in members for x in m.inputs),
                              {"ops": op.ops}, tuple(o for m in members for o in m.outs),
                              loc=members[0].loc))
        elif i not in moved:
            nodes.append(n)
    return Graph(graph.inputs, nodes, graph.outputs, graph.name), {
        "groups": len(groups), "launches_saved": sum(len(g) - 1 for g in groups)}
