"""The fusion pass for graphs on a GPU: the same groups as :mod:`.fuse`, as CUDA kernels.

``fuse_cuda(graph)`` partitions the graph exactly like :func:`.fuse.fuse`
(:mod:`.fuse_groups`, :mod:`.recompute`, scalar merging) and lowers each group to the same
kernel IR (:func:`.fuse_lower.lower`), then renders each kernel to CUDA C
(:mod:`ember.codegen.render_cuda`: grid-stride elementwise loops, block-per-row
warp-shuffle reductions; thread-per-row for many short rows). Each group becomes one
:class:`CudaFusedOp` node, launched through ``cupy`` (:mod:`ember.codegen.cuda_launch`).

Compile time: a kernel is named by a hash of its own text (shapes and strides are launch
arguments, so the twelve layers of a transformer share one kernel per group kind, and so
do the AdamW updates of all its parameters), the graph keeps one copy of each distinct
kernel, and each is its own source: NVRTC compiles them concurrently to cubins
(:func:`ember.codegen.cuda_launch.load_all`), each kept in the kernel cache on its own
(:mod:`ember.codegen.cuda_cache`), so another graph, or another process, with the same
kernel loads it from there. (One source for the whole graph took one NVRTC run of ~0.5 s
per kernel, one thread, and the driver's JIT of its PTX after that.)

:func:`ember.graph.passes.run_pipeline` runs it in place of ``fuse`` for graphs on a device
with the ``cuda_kernels`` capability (a real GPU; the CPU stand-in runs the C kernels).

A group of CPU scalars (an optimizer step count's chain: step + 1, Adam's bias
corrections) is no CUDA kernel: :class:`~.host_scalars.HostFusedOp` runs it with NumPy on
the host, where the executor keeps a GPU graph's CPU values (:mod:`ember.graph.host_steps`).

What is worth a kernel differs from the CPU: CuPy runs every single op as one kernel
already, so a lone op stays a node (CuPy's own kernel), except softmax/log_softmax
(two reductions and a pass: one kernel here) and large elementwise ops (vector loads,
several elements a thread: :func:`worth_cuda`).
"""
from __future__ import annotations

import copy
import hashlib
import math

from ...codegen import cuda_eager
from ...codegen.cuda_launch import CudaModule, load_all
from ...codegen.render_cuda import _render_one
from ...device.base import get_backend
from ...codegen.ir import Kernel, ReduceKernel
from ..ir import Graph, GraphOp, Node
from . import fuse_colsum
from .dce import dce
from .fuse import lower_groups
from .fuse_index import index_leaves
from .fuse_philox import Words, philox_leaves
from .fuse_groups import partition
from .host_scalars import HostFusedOp, is_host_group
from .lse_rows import lse_rows
from .recompute import recompute

__all__ = ["CudaFusedOp", "fuse_cuda", "worth_cuda"]

#: rows shorter than this, when there are many of them, get a thread each, not a block.
SHORT_ROW = 64
#: rows up to this long, when there are at least WARP_ROWS of them, get a warp each (a
#: layer norm's 768: a 256-thread block per row spent its time in two ``__syncthreads``
#: block reductions per stage for 3 elements a thread).
WARP_ROW = 4096
WARP_ROWS = 1024


def worth_cuda(group) -> bool:
    """Whether a group beats its unfused nodes on a GPU (one CuPy kernel each): several
    ops; softmax/log_softmax; a lone elementwise op over at least
    :data:`ember.codegen.cuda_eager.THRESHOLD` elements (the generated kernel moves 4
    elements a thread with vector loads where CuPy's moves one: eager takes it too)."""
    if len(group.members) > 1:
        return True
    node, cls = group.members[0]
    if cls == "full" and not group.naxes and math.prod(group.space) >= cuda_eager.THRESHOLD:
        return True
    return node.op.name in ("softmax", "log_softmax")


def strategy(k) -> str:
    """``"thread"`` for a reduction over many short rows, ``"warp"`` over many rows of
    moderate length, else ``"block"``."""
    if not isinstance(k, ReduceKernel):
        return "block"
    return _strategy(k.shape, k.naxes)


def _strategy(shape, naxes: int) -> str:
    """:func:`strategy` of a reduction over the last ``naxes`` axes of ``shape``."""
    m = 1
    for s in shape[len(shape) - naxes:]:
        m *= s
    rows = 1
    for s in shape[:len(shape) - naxes]:
        rows *= s
    if m < SHORT_ROW and rows >= 4 * SHORT_ROW:
        return "thread"
    return "warp" if m <= WARP_ROW and rows >= WARP_ROWS else "block"


class CudaFusedOp(GraphOp):
    """A graph op launching one generated CUDA kernel (the CPU's ``FusedOp`` on a GPU).

    ``accepts_out``/``accepts_outs`` as ``FusedOp``'s: the kernels load element ``i`` (a
    row, for reductions) of every input before storing element ``i`` of any output.
    """

    __slots__ = ("kernel", "ops", "module", "accepts_out", "accepts_outs")

    def __init__(self, lowered, kernel, module: CudaModule, device=None):
        name = "fused_reduce" if isinstance(kernel, ReduceKernel) else "fused"
        metas = [(v.shape, v.dtype.np) for v in lowered.outs]
        # NOTE: the GPU's arrays, never the host's (a group of CPU scalars runs there too)
        xp = get_backend(device or lowered.outs[0].device).xp
        super().__init__(name, module.runner(kernel, metas, xp))
        self.kernel, self.ops, self.module = kernel, lowered.ops, module
        outs, space = lowered.outs, lowered.group.space
        single = len(outs) == 1
        full = single and outs[0].shape == space
        self.accepts_out = ("inplace" if full else "out") if single else None
        self.accepts_outs = "inplace" if not single and isinstance(kernel, Kernel) \
            and all(v.shape == space for v in outs) else None

    def __repr__(self) -> str:
        return f"<graph op {self.name} (cuda): {self.ops}>"


def _groups(graph):
    """``(graph, groups, early, recomputed)``: the partition as :func:`.fuse.fuse` makes it."""
    # host_scalars: the executor holds a GPU graph's CPU scalars on the GPU, so their
    # arithmetic (AdamW's bias corrections, per parameter) joins kernels, merged below
    graph, _ = lse_rows(graph, "cuda")      # NOTE: a loss's log-softmax stores row values only
    # NOTE: dead nodes first (dce runs last in the pipeline): an unread expand of a row
    # value (a layer norm's backward) closed its reduction group, splitting dx in three
    graph, _ = dce(graph)
    groups = [g for g in partition(graph, "cuda", True) if worth_cuda(g)]
    graph, recomputed = recompute(graph, groups, "cuda", True)
    groups = partition(graph, "cuda", True)
    # NOTE: no merge_scalars here: the CPU's merged scalar kernel (every parameter's bias
    # corrections, tens of outputs) is one text per model and took NVRTC 12-15 s; one
    # group per parameter is one kernel text for all of them (content_name), ~1 s
    early: set = set()
    groups = [g for g in groups if g.members and worth_cuda(g)]
    if fuse_colsum.ENABLED:     # NOTE: column sums join the row kernel over their rows
        fuse_colsum.absorb_colsums(graph, groups, lambda g: _strategy(g.space, g.naxes))
    return graph, [g for g in groups if g.members], early, recomputed


#: the name a kernel is rendered under to hash its text.
_PLACEHOLDER = "ember_fused_K"


def content_name(k) -> str:
    """``ember_fused_<hash>``: the same name for kernels whose CUDA text (under
    :func:`strategy`) is the same up to the name, whatever their shapes."""
    st = strategy(k)
    text = _render_one(renamed(k, _PLACEHOLDER), st)
    return "ember_fused_" + hashlib.sha256(f"{st}\0{text}".encode()).hexdigest()[:16]


def renamed(k, name: str):
    """Kernel ``k`` named ``name``. NOTE: not ``dataclasses.replace``, which re-runs the
    IR's ``__post_init__`` (typing every expression: ~1 ms a kernel, 378 in a GPT step)."""
    k = copy.copy(k)
    object.__setattr__(k, "name", name)
    return k


def _modules(kernels) -> dict:
    """``{kernel name: CudaModule}``: one module (one source, one NVRTC program) per
    distinct kernel name; a kernel launched more than once gets its multi-launch entry
    too (the ``multi_launch`` pass may group its launches)."""
    kernels = list(kernels)
    count: dict = {}
    for k in kernels:
        count[k.name] = count.get(k.name, 0) + 1
    out: dict = {}
    for k in kernels:
        if k.name not in out:
            out[k.name] = CudaModule([k], strategy(k), k.name, multi=count[k.name] > 1)
    return out


def fuse_cuda(graph: Graph):
    """Replace fusion groups by generated CUDA kernels; returns ``(graph, stats)``."""
    graph, groups, early, recomputed = _groups(graph)
    if not groups:
        return graph, {"kernels": 0, "fused_nodes": 0}
    order, member_of, lowered = lower_groups(graph, groups)
    device = next((v.device for v in list(graph.inputs) + [o for n in graph.nodes
                                                           for o in n.outs]
                   if v.device is not None and v.device.type == "cuda"), None)
    # NOTE: groups with the same text share a name and a module; each keeps its own IR
    # (its shapes: the launch plan's)
    # NOTE: a group of CPU scalars (a step count's chain) runs on the host: no kernel
    host = {gi for gi, lw in enumerate(lowered) if lw is not None and is_host_group(lw)}
    # NOTE: an arange constant input (the one-hot's iota) becomes the loop index (fuse_index)
    lowered = [lw if gi in host else index_leaves(lw, graph.producer)
               for gi, lw in enumerate(lowered)]
    # NOTE: a device draw's sample becomes the Philox leaf of its readers (fuse_philox)
    words = Words(graph)
    lowered = [lw if gi in host else philox_leaves(lw, graph.producer, words)
               for gi, lw in enumerate(lowered)]
    kernels = {gi: renamed(lw.kernel, content_name(lw.kernel))
               for gi, lw in enumerate(lowered) if lw is not None and gi not in host}
    modules = _modules(kernels.values())
    load_all(modules.values())          # NOTE: compile (NVRTC) and load now, not mid-run
    last = {gi: (min if id(g) in early else max)(order[id(n)] for n, _ in g.members)
            for gi, g in enumerate(groups)}
    nodes = []
    for i, n in enumerate(graph.nodes):
        gi = member_of.get(id(n))
        if gi is None:
            nodes.append(n)
            nodes += words.after.get(id(n), ())
        elif last[gi] == i and gi in host:
            lw = lowered[gi]
            nodes.append(Node(HostFusedOp(lw), tuple(lw.inputs), {"ops": lw.ops},
                              tuple(lw.outs)))
        elif last[gi] == i and lowered[gi] is not None:
            lw, k = lowered[gi], kernels[gi]
            op = CudaFusedOp(lw, k, modules[k.name], device)
            nodes.append(Node(op, tuple(lw.inputs), {"ops": lw.ops}, tuple(lw.outs)))
    fused = sum(len(g.members) for g in groups)
    return Graph(graph.inputs, nodes, graph.outputs, graph.name), {
        "kernels": len(kernels), "fused_nodes": fused, "recomputed": recomputed,
        "modules": len(modules), "host_groups": len(host)}
