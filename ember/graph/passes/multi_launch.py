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

Autocast's casts of parameters (float32 weights to float16: CuPy's ``astype`` one launch
each) become one generated cast kernel's multi-launch per dtype pair, hoisted to the
first cast's place: their inputs exist from the start, and the float16 copies of the
weights live into the backward anyway (a GPU graph keeps them: no ``recast``); a large
copy read only right after its cast (inference) is not moved (:func:`_kept`).

The host steps of such a graph (:class:`~.host_scalars.HostFusedOp`: AdamW's bias
corrections, one chain per parameter, run with NumPy) of one expression become one
:class:`HostBatchOp` each: one NumPy call per operation over all the members' values
stacked (~150 chains of ~8 operations each in a GPT step: ~1200 NumPy calls a run become
~8), element by element the same operations. Each parameter's update reads its chain, so
these groups are made differently (:func:`_host_groups`): a chain joins the first one of
its expression when every value it reads exists there already (graph inputs: the step
counts), and the group's node takes the first member's place.

Only graphs on a device with the ``cuda_kernels`` capability change (a GPU: CPU graphs and
the stand-in's host kernels are untouched). ``EMBER_MULTI_LAUNCH=0`` turns the pass off,
``EMBER_MULTI_LAUNCH=nocasts`` leaves the casts alone (measurements).
"""
from __future__ import annotations

import math
import os

from ..ir import Graph, GraphOp, Node, Var
from .dce import dce
from .fuse_cuda import CudaFusedOp, content_name, renamed
from .host_scalars import HostFusedOp, batch_runner

__all__ = ["MAX_GROUP", "SMALL_CAST", "HostBatchOp", "MultiFusedOp", "multi_launch"]

#: members per group at most (the runner launches 256 records at a time anyway).
MAX_GROUP = 1024
#: bytes of a cast's output always worth hoisting into the casts' launch (a bias's copy).
SMALL_CAST = 1 << 20


class MultiFusedOp(GraphOp):
    """One node for several independent launches of one generated CUDA kernel: inputs and
    outputs are the members', one member after another (``sizes``: per member its input
    and output counts). New memory, or each output over its own donated input.
    ``kernel`` is the first member's IR (every member runs its text), ``kernels`` all."""

    __slots__ = ("kernels", "kernel", "module", "ops", "sizes", "accepts_out",
                 "accepts_outs", "fresh_out")

    def __init__(self, members: list, kernels=None, module=None):
        """``members``: the nodes grouped, :class:`~.fuse_cuda.CudaFusedOp` nodes, or
        registry nodes with ``kernels`` (theirs, one text) and its ``module`` given."""
        ops = [n.op for n in members]
        fused = kernels is None
        self.kernels = [op.kernel for op in ops] if fused else list(kernels)
        self.module = ops[0].module if fused else module
        self.kernel = self.kernels[0]           # NOTE: the text every record runs
        metas = [[(o.shape, o.dtype.np) for o in n.outs] for n in members]
        xp = _device_xp(members)
        super().__init__("fused", self.module.multi_runner(self.kernels, metas, xp))
        self.accepts_out = None
        # NOTE: the members' ops (one kernel text: one list), as a fused op's string
        self.ops = ops[0].ops if fused else ops[0].name
        self.sizes = tuple((len(n.inputs), len(n.outs)) for n in members)
        self.accepts_outs = "inplace" if fused and all(
            "inplace" in (op.accepts_out, op.accepts_outs) for op in ops) else None
        self.fresh_out = True

    def __repr__(self) -> str:
        return f"<graph op fused x{len(self.kernels)} (cuda, one launch): {self.ops}>"


class HostBatchOp(GraphOp):
    """One host step for several independent :class:`~.host_scalars.HostFusedOp` nodes of
    one expression (:func:`~.host_scalars.batch_runner`); inputs and outputs are the
    members', one member after another. New memory (``host``: NumPy arrays, see
    :mod:`ember.graph.host_steps`)."""

    __slots__ = ("kernel", "ops", "sizes")
    host = True

    def __init__(self, members: list):
        self.kernel = members[0].op.kernel
        self.ops = members[0].op.ops
        self.sizes = tuple((len(n.inputs), len(n.outs)) for n in members)
        super().__init__("fused", batch_runner(self.kernel, len(members[0].outs),
                                               len(members)))

    def __repr__(self) -> str:
        return f"<graph op fused x{len(self.sizes)} (host, one pass): {self.ops}>"


def _device_xp(members):
    from ...device.base import get_backend
    dev = next(o.device for n in members for o in n.outs if o.device is not None)
    return get_backend(dev).xp


def _candidate(n):
    """The group key of a node that may join a group (its kernel's name; a host step's
    expressions, input layouts and shape), else None."""
    op = n.op
    if isinstance(op, HostFusedOp):
        k = op.kernel
        return ("host", tuple(k.outputs), tuple((s.dtype, s.strides) for s in k.inputs),
                tuple(k.out.shape), len(n.outs))
    mod = getattr(op, "module", None)
    k = getattr(op, "kernel", None)
    if not isinstance(op, CudaFusedOp) or k is None or k.name not in getattr(
            mod, "multi", ()):
        return None
    return k.name


def _groups(nodes, skip=frozenset()) -> list:
    """Lists of node indices, each a group of at least two (see the module doc); nodes
    in ``skip`` join none."""
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
        name = _candidate(n) if i not in skip else None
        if name is None or isinstance(name, tuple):      # NOTE: host steps: _host_groups
            continue
        if len(open_.get(name, ())) >= MAX_GROUP:
            close(name)
        open_.setdefault(name, []).append(i)
        for o in n.outs:
            made_by[o.id] = name
    for name in list(open_):
        close(name)
    return done


def _host_groups(nodes) -> list:
    """Lists of indices of :class:`~.host_scalars.HostFusedOp` nodes of one expression
    (at least two) whose inputs all exist before the first one's place (module doc)."""
    made_at: dict = {}
    first: dict = {}
    for i, n in enumerate(nodes):
        if isinstance(n.op, HostFusedOp):
            key = _candidate(n)
            g = first.get(key)
            if g is None:
                first[key] = [i]
            elif len(g) < MAX_GROUP and all(
                    made_at.get(x.id, -1) < g[0] for x in n.inputs if x.__class__ is Var):
                g.append(i)
        for o in n.outs:
            made_at[o.id] = i
    return [g for g in first.values() if len(g) > 1]


def _generated_cuda(graph) -> bool:
    """Whether ``graph`` runs generated CUDA kernels: its device has the ``cuda_kernels``
    capability (a GPU; never a CPU graph or the stand-in's host kernels)."""
    from ...device.base import get_backend
    devs = {v.device for v in graph.inputs if v.device is not None and v.device.type != "cpu"}
    return any(get_backend(d).has("cuda_kernels") and not get_backend(d).has("host_kernels")
               for d in devs)


def _input_cast(n, inputs) -> tuple | None:
    """``(source, target)`` dtypes of a registry ``cast`` of a floating graph input on a
    GPU to another floating dtype (autocast's float16 weight copies), else None."""
    if n.op.name != "cast" or hasattr(n.op, "run") or len(n.inputs) != 1 or \
            n.ct is not None or len(n.outs) != 1:
        return None
    x, o = n.inputs[0], n.outs[0]
    if x.__class__ is not Var or x.id not in inputs or x.device is None or \
            x.device.type != "cuda" or x.shape != o.shape or not x.shape:
        return None
    if not (x.dtype.is_floating_point and o.dtype.is_floating_point) or x.dtype is o.dtype:
        return None
    return x.dtype, o.dtype


def _cast_kernel(n, src, dst):
    from ...codegen.ir import InputSpec, Kernel, Load, OutSpec, call
    shape = tuple(n.outs[0].shape)
    strides = tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))
    k = Kernel([InputSpec(src, strides)], OutSpec(dst, shape),
               call("cast", Load(0), dtype=dst), "ember_cast")
    return renamed(k, content_name(k))


def _reads(graph) -> tuple:
    """``({var id: first reader's index}, {var id: last reader's index})`` (a graph output:
    read past the end)."""
    first, last = {}, {}
    for i, n in enumerate(graph.nodes):
        for x in n.inputs:
            if x.__class__ is Var:
                first.setdefault(x.id, i)
                last[x.id] = i
    for v in graph.outputs:
        last[v.id] = len(graph.nodes)
    return first, last


def _kept(nodes, ix, reads) -> list:
    """The casts of ``ix`` worth hoisting: a small copy (a bias's: :data:`SMALL_CAST`
    bytes at most), or one read again after every cast's copy has had its first reader (a
    training step's float16 weight copy, read by the backward: alive through the forward
    anyway). NOTE: an inference graph's large copies, each read only right after its
    cast, stay where they are: hoisted, all would be alive at once (the peak would grow
    by the model's float16 weights)."""
    first, last = reads
    outs = [nodes[i].outs[0] for i in ix]
    lim = max(first.get(o.id, -1) for o in outs)
    return [i for i, o in zip(ix, outs) if last.get(o.id, -1) > lim or
            math.prod(o.shape) * o.dtype.itemsize <= SMALL_CAST]


def _hoist_casts(graph: Graph):
    """``(graph, casts grouped)``: the casts of graph inputs (:func:`_input_cast`) of one
    dtype pair, wherever they are, as one :class:`MultiFusedOp` at the first one's place
    (their inputs exist from the start; each cast's readers come after it)."""
    from ...codegen.cuda_launch import CudaModule, load_all
    inputs = {v.id for v in graph.inputs}
    pairs: dict = {}
    for i, n in enumerate(graph.nodes):
        pair = _input_cast(n, inputs)
        if pair is not None:
            pairs.setdefault(pair, []).append(i)
    reads = _reads(graph)
    pairs = {p: ix for p, ix in ((p, _kept(graph.nodes, ix, reads))
                                 for p, ix in pairs.items()) if len(ix) > 1}
    if not pairs:
        return graph, 0
    at, moved = {}, set()
    for (src, dst), ix in pairs.items():
        members = [graph.nodes[i] for i in ix]
        kernels = [_cast_kernel(n, src, dst) for n in members]
        module = CudaModule(kernels[:1], "block", kernels[0].name, multi=True)
        load_all([module])          # NOTE: compile (NVRTC) and load now, not mid-run
        op = MultiFusedOp(members, kernels, module)
        at[ix[0]] = Node(op, tuple(n.inputs[0] for n in members), {"ops": op.ops},
                         tuple(n.outs[0] for n in members), loc=members[0].loc)
        moved.update(ix)
    nodes = [at.get(i, n) for i, n in enumerate(graph.nodes) if i in at or i not in moved]
    return Graph(graph.inputs, nodes, graph.outputs, graph.name), len(moved)


def multi_launch(graph: Graph):
    """Group independent launches of one CUDA kernel (module doc); returns
    ``(graph, {"groups": ..., "launches_saved": ...})``."""
    mode = os.environ.get("EMBER_MULTI_LAUNCH", "1")
    if mode == "0" or not _generated_cuda(graph):
        return graph, {"groups": 0}
    graph, _ = dce(graph)               # NOTE: a dead member would keep a group's outputs
    graph, casts = _hoist_casts(graph) if mode != "nocasts" else (graph, 0)
    host = _host_groups(graph.nodes)
    groups = _groups(graph.nodes, skip={i for g in host for i in g})
    if not groups and not host:
        return graph, {"groups": 0, "casts": casts}
    at = {g[-1]: g for g in groups}
    at.update((g[0], g) for g in host)
    moved = {i for g in groups + host for i in g}
    nodes = []
    for i, n in enumerate(graph.nodes):
        if i in at:
            members = [graph.nodes[j] for j in at[i]]
            op = HostBatchOp(members) if isinstance(members[0].op, HostFusedOp) else \
                MultiFusedOp(members)
            nodes.append(Node(op, tuple(x for m in members for x in m.inputs),
                              {"ops": op.ops}, tuple(o for m in members for o in m.outs),
                              loc=members[0].loc))
        elif i not in moved:
            nodes.append(n)
    return Graph(graph.inputs, nodes, graph.outputs, graph.name), {
        "groups": len(groups), "launches_saved": sum(len(g) - 1 for g in groups),
        "casts": casts, "host_groups": len(host),
        "host_steps_saved": sum(len(g) - 1 for g in host)}
