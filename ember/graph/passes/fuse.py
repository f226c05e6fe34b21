"""The fusion pass: chains of elementwise ops, reductions and their neighbours become
generated C kernels (one graph node each).

``fuse(graph)`` partitions the graph (:mod:`.fuse_groups`), lowers every group worth a
kernel to the codegen IR (:mod:`.fuse_lower`), compiles all of them at once (one compiler
run, cached on disk, so the first run of the graph pays nothing) and replaces each group
by one :class:`~.fuse_lower.FusedOp` node at the position of its last member.

What it fuses: elementwise chains with broadcasting (bias + activation after a matmul,
GELU and its gradient, optimizer updates: Adam's moments and parameter in one kernel with
three outputs); reductions over trailing axes with their elementwise prologue and
epilogue (layer norm forward and backward, log-softmax's backward, softmax and
log_softmax themselves). Matmul, convolution, indexing and views stay as they are.

Results are no longer bitwise eager's: a fused chain skips the intermediate roundings of
float16/bfloat16, sums in double, contracts ``a*b+c`` into FMAs (the compiler's
``-ffp-contract=fast`` default) and uses vectorised tanh/erf/exp; NaN and Inf keep
NumPy's semantics (no finite-math flags). ``EXACT_PASSES`` in :mod:`ember.graph.passes`
is the pipeline without it.

Without a C compiler the pass changes nothing (after one warning): the executor runs the
unfused nodes.
"""
from __future__ import annotations

from ...codegen import launch as _launch
from ...codegen.runtime import compile_many, warn_unavailable
from ... import dtypes as _dt
from ...codegen import eager
from ...codegen.toolchain import find_compiler
from ..ir import Graph, Node
from .fuse_groups import partition
from .fuse_lower import FusedOp, lower
from .recompute import recompute

#: elementwise ops worth a kernel of their own on large arrays (libmvec + threads win).
EXPENSIVE = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
             "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc",
             "erfinv", "pow", "atan2", "hypot"}
#: elements from which a single expensive op gets its own kernel.
SINGLE_OP_MIN = 1 << 16
_LOWP = (_dt.float16, _dt.bfloat16)


def worth(group) -> bool:
    """Whether a group beats the unfused nodes (one NumPy call each)."""
    if len(group.members) > 1:
        return True
    n, cls = group.members[0]
    if n.op.name in ("softmax", "log_softmax"):
        return True
    if n.out.dtype in _LOWP and n.out.numel() >= eager.LOWP_THRESHOLD and n.op.name != "cast" \
            and not (n.out.dtype is _dt.float16 and n.op.name in eager._numpy_f16_simd()):
        # NOTE: NumPy's float16/bfloat16 loops convert one element at a time (an add 3-6x
        # slower than a kernel): every large low-precision op gets one, as in eager mode
        # (ember/codegen/eager.py LOWP_THRESHOLD; a cast runs its own conversion kernel).
        return True
    return cls != "stage" and n.op.name in EXPENSIVE and n.out.numel() >= SINGLE_OP_MIN


def merge_scalars(graph: Graph, groups) -> list:
    """Merge the 0-d groups computed from graph inputs only (and from other such groups)
    into as few groups as the launcher's array limit allows; returns the merged groups.

    An optimizer's per-parameter scalars — Adam's bias corrections from each parameter's
    ``step`` and the learning rate — are one tiny kernel per parameter (plus a lone ``neg``):
    each launch costs ~10 us, the arithmetic nothing. Their inputs exist from the start, so
    a merged kernel may run at its *first* member's position (``fuse`` places it there):
    every reader of a member comes after that member, hence after the kernel.
    """
    inputs = {v.id for v in graph.inputs}
    outputs = {v.id for v in graph.outputs}
    users = graph.users()
    made: set = set()
    merged: list = []
    arrays: set = set()                 # the current merged group's inputs and outputs
    for g in groups:
        if g.space != () or g.naxes or not g.members:
            continue
        own = {n.out.id for n, _ in g.members}
        ext = {x.id for n, _ in g.members for x in n.var_inputs() if x.id not in own}
        if any(x not in inputs and x not in made for x in ext):
            continue
        made |= own
        # outputs: values read outside the group (an upper bound once groups merge)
        mine = {id(n) for n, _ in g.members}
        outs = {v for v in own if v in outputs or
                any(id(u) not in mine for u in users.get(v, ()))}
        if merged and len(arrays | ext | outs) <= _launch.MAX_ARRAYS:
            merged[-1].members.extend(g.members)
            g.members = []
            arrays |= ext | outs
        else:
            merged.append(g)
            arrays = ext | outs
    return merged


def lower_groups(graph: Graph, groups) -> tuple:
    """``(order, member_of, lowered)``: each node's position, its group's index, and each
    group lowered to a kernel (``None`` where it does not lower), a value kept as a kernel output when the graph
    returns it or a node outside its group reads it. Shared by the C and CUDA passes."""
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    users = graph.users()
    outputs = {v.id for v in graph.outputs}
    member_of = {id(n): gi for gi, g in enumerate(groups) for n, _ in g.members}

    def needed_by(gi):
        def needed(v):
            return v.id in outputs or any(member_of.get(id(u)) != gi
                                          for u in users.get(v.id, ()))
        return needed
    return order, member_of, [lower(g, order, needed_by(gi)) for gi, g in enumerate(groups)]


def fuse(graph: Graph):
    """Replace fusion groups by generated kernels; returns ``(graph, stats)``."""
    if find_compiler() is None:
        warn_unavailable()
        return graph, {"kernels": 0, "fused_nodes": 0, "no_compiler": 1}
    groups = [g for g in partition(graph) if worth(g)]
    graph, recomputed = recompute(graph, groups)
    groups = partition(graph)
    early = {id(g) for g in merge_scalars(graph, groups)}
    groups = [g for g in groups if g.members and worth(g)]
    if not groups:
        return graph, {"kernels": 0, "fused_nodes": 0}
    order, member_of, lowered = lower_groups(graph, groups)
    live = [lw for lw in lowered if lw is not None]
    compiled = dict(zip(map(id, live), compile_many([lw.kernel for lw in live])))
    # a kernel runs at its last member, or (merged scalars) at its first: see merge_scalars
    last = {gi: (min if id(g) in early else max)(order[id(n)] for n, _ in g.members)
            for gi, g in enumerate(groups)}
    nodes = []
    for i, n in enumerate(graph.nodes):
        gi = member_of.get(id(n))
        if gi is None:
            nodes.append(n)
        elif last[gi] == i and lowered[gi] is not None:
            lw = lowered[gi]
            op = FusedOp(lw, compiled[id(lw)])
            nodes.append(Node(op, tuple(lw.inputs), {"ops": lw.ops}, tuple(lw.outs)))
    fused = sum(len(g.members) for g in groups)
    return Graph(graph.inputs, nodes, graph.outputs, graph.name), {
        "kernels": len(live), "fused_nodes": fused, "recomputed": recomputed}
