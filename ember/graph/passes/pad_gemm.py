"""``pad_gemm``: a GPU graph pads a value once for all the padded GEMMs that read it.

An unaligned float16/bfloat16 GEMM of at least ``cuda_gemm.PAD_MIN_FLOPS`` runs on padded
buffers (:mod:`ember.codegen.cuda_gemm`: each unaligned operand copied into a buffer whose
leading dim is a multiple of 8, zeros in the pad). An LM head's odd vocabulary V pads
twice per value: the (N, V) logits gradient is copied for ``dx = dl @ W`` and again for
``dW = dl.mT @ x`` (the same buffer both times: (N, ceil8(V)), zero columns), and the
(V, d) float16 weight for ``logits = x @ W.mT`` and again for ``dx`` ((ceil8(V), d), zero
rows). At GPT-2 size (N = 8192) a copy of the gradient moves 2 x 0.8 GB.

Here such a value, when at least two big GEMMs read it (directly or through reshapes
over its leading dims and 2-D transposes), is copied once by a ``pad_gemm`` node
(:func:`ember.codegen.cuda_gemm.zero_padded`): its result is the value, a view of the
registered padded buffer, which those GEMMs read in place of their copies — the same
cuBLAS calls, so the same bits. Other readers keep the value itself.

No copy at all where the kernels allow (:mod:`ember.codegen.cuda_pitch`): a value only
big GEMMs read, made by a fused elementwise kernel (the cross-entropy backward's logits
gradient), is written by that kernel straight into a zero-padded buffer (its ``NAME_rp``
entry); and a big GEMM whose unaligned output (the logits) only reductions, gathers and
such pitched kernels read returns the view of its padded buffer, not a copy of it.

Only graphs on a device with ``cuda_kernels`` (a GPU, or the stand-in given them).
"""
from __future__ import annotations

import math

from ...codegen import cuda_gemm
from ...codegen.ir import Kernel, ReduceKernel
from ...device.base import get_backend
from ..ir import Graph, GraphOp, Node, Var
from .fuse_cuda import CudaFusedOp, strategy

__all__ = ["PAD", "PAD_ROWS", "PITCHED_MATMUL", "pad_gemm"]

_VIEWS = ("reshape", "permute")


def _run_cols(xp, a):
    return cuda_gemm.zero_padded(a, xp)


def _run_rows(xp, a):
    return cuda_gemm.zero_padded(a, xp, rows=True)


_MATMUL = cuda_gemm.matmul


def _run_pitched_matmul(xp, x, y):
    # NOTE: a stand-in that replaced cuda_gemm.matmul (bench/cuda_gap.py's, without
    # cuBLAS) gets its plain call: a contiguous product is a pitched one's readers' too
    if cuda_gemm.matmul is not _MATMUL:
        return cuda_gemm.matmul(xp, x, y)
    return cuda_gemm.matmul(xp, x, y, pitched=True)


#: the value in a buffer whose rows are padded to a multiple of 8 columns / whose row
#: count is (2-D): module-level, so graphs holding them can be cached (graph_pickle)
PAD = GraphOp("pad_gemm", _run_cols)
PAD_ROWS = GraphOp("pad_gemm_rows", _run_rows)
#: a big 2-byte product whose padded output is returned as the padded buffer's view
PITCHED_MATMUL = GraphOp("matmul_pitched", _run_pitched_matmul)


def _gpu(graph) -> bool:
    devs = {v.device for v in graph.vars() if v.device is not None and v.device.type != "cpu"}
    return bool(devs) and all(get_backend(d).has("cuda_kernels") for d in devs)


def _kind(v) -> str | None:
    """``"cols"`` (last dim unaligned), ``"rows"`` (2-D, rows unaligned, columns aligned)
    or None, for a 2-byte value of at least 2 dims."""
    if v.ndim < 2 or v.dtype.itemsize != 2 or not v.dtype.is_floating_point:
        return None
    if v.shape[-1] % 8:
        return "cols"
    if v.ndim == 2 and v.shape[0] % 8:
        return "rows"
    return None


def _keeps_layout(n, kind) -> bool:
    """Whether view node ``n`` keeps its input's rows: a reshape over the leading dims
    (columns kind), or a 2-D transpose."""
    x, o = n.inputs[0], n.outs[0]
    if n.op.name == "permute":
        return x.ndim == 2 and tuple(n.params.get("dims", ())) == (1, 0)
    return kind == "cols" and o.ndim >= 2 and o.shape[-1] == x.shape[-1]


def _big(n) -> bool:
    """Whether matmul node ``n`` is a 2-byte GEMM big enough to run padded."""
    x, y = n.inputs
    if x.__class__ is not Var or y.__class__ is not Var or x.dtype is not y.dtype:
        return False
    o = n.outs[0]
    return x.dtype.itemsize == 2 and 2 * o.numel() * x.shape[-1] >= cuda_gemm.PAD_MIN_FLOPS


def _gemm_chains(v, users, kind, outs) -> list:
    """The readers of ``v`` that start a chain of layout-keeping views ending in big
    matmuls only (each view read once, not a graph output)."""
    found = []
    for n in users.get(v.id, ()):
        if n.op.name == "matmul":
            if _big(n):
                found.append(n)
            continue
        m, ok = n, True
        while ok and m.op.name in _VIEWS and len(m.inputs) == 1:
            ok = _keeps_layout(m, kind) and m.outs[0].id not in outs
            nxt = users.get(m.outs[0].id, ())
            if not ok or len(nxt) != 1:
                ok = False
                break
            m = nxt[0]
        if ok and m.op.name == "matmul" and _big(m):
            found.append(n)
    return found


def _writes_padded(graph, v, users, outs, readers) -> bool:
    """Whether ``v`` (columns kind) can be written padded by its producer: a fused
    elementwise kernel of one output over ``v``'s shape, ``v`` read by big GEMMs only."""
    n = graph.producer(v)
    if n is None or v.id in outs or len(readers) != len(users.get(v.id, ())):
        return False
    op = n.op
    return isinstance(op, CudaFusedOp) and isinstance(op.kernel, Kernel) and \
        len(n.outs) == 1 and tuple(op.kernel.out.shape) == tuple(v.shape) and \
        len(n.inputs) <= 8 and all(_row_operand(x, v.shape) for x in n.inputs)


def _row_operand(x, shape) -> bool:
    """Whether input ``x`` of a kernel over ``shape`` is what the row entries take: a
    number, one element, the full shape, a repeated row or a per-row column."""
    if x.__class__ is not Var or x.numel() == 1 or tuple(x.shape) == tuple(shape):
        return True
    s = tuple(x.shape)
    while s and s[0] == 1:
        s = s[1:]
    return s == (shape[-1],) or (s[-1:] == (1,) and s[:-1] == tuple(shape[-len(s):-1]) and
                                  x.numel() == math.prod(shape[:-1]))


def _pitched_op(n, v):
    """The graph op running fused node ``n``'s kernel into a zero-padded buffer."""
    from ...codegen.cuda_launch import load_all
    from ...codegen.cuda_pitch import PitchedFusedOp, pitched_module
    k = n.op.kernel
    mod = pitched_module(k, strategy(k))
    load_all([mod])                     # NOTE: compiled now, not mid-run
    xp = get_backend(v.device).xp
    run = PitchedFusedOp(k, mod, (v.shape, v.dtype.np), xp, fallback=n.op.run)
    return GraphOp("fused_pitched", run)


def _pitch_readers(o, users, outs, pitched) -> bool:
    """Whether every reader of product ``o`` (through reshapes keeping its rows) takes a
    pitched operand as cheaply as a contiguous one: reductions (strided entries),
    gathers, kernels made pitched (``pitched``: node ids)."""
    todo, seen = [o], 0
    while todo:
        v = todo.pop()
        if v.id in outs:
            return False
        for n in users.get(v.id, ()):
            seen += 1
            if n.op.name == "reshape" and _keeps_layout(n, "cols"):
                todo.append(n.outs[0])
            elif not (id(n) in pitched or n.op.name == "take_along_dim" and
                      n.inputs[0].id == v.id or isinstance(n.op, CudaFusedOp) and
                      isinstance(n.op.kernel, ReduceKernel)):
                return False
    return seen > 0


def pad_gemm(graph: Graph):
    """Insert ``pad_gemm`` nodes, padded writers and pitched products (module doc);
    returns ``(graph, counts)``."""
    zero = {"pad_gemm": 0, "padded_writers": 0, "pitched_products": 0}
    if not any(n.op.name == "matmul" for n in graph.nodes) or not _gpu(graph):
        return graph, zero
    users, outs = graph.users(), {v.id for v in graph.outputs}
    plan: dict = {}                 # id(first reader) -> (value, its padded var, op)
    swap: dict = {}                 # id(node) -> its new op
    next_id = max((v.id for v in graph.vars()), default=-1) + 1
    for v in graph.vars():
        kind = _kind(v)
        if kind is None:
            continue
        readers = _gemm_chains(v, users, kind, outs)
        if kind == "cols" and readers and _writes_padded(graph, v, users, outs, readers):
            n = graph.producer(v)
            swap[id(n)] = _pitched_op(n, v)
            continue
        if len(readers) < 2:
            continue
        p = Var(next_id, v.shape, v.dtype, v.device)
        next_id += 1
        op = PAD if kind == "cols" else PAD_ROWS
        for i, r in enumerate(readers):
            plan[id(r)] = (v, p, op if i == 0 else None)
    writers = len(swap)
    for n in graph.nodes:
        if n.op.name == "matmul" and _big(n) and _kind(n.outs[0]) == "cols" and \
                _pitch_readers(n.outs[0], users, outs, swap):
            swap[id(n)] = PITCHED_MATMUL
    if not plan and not swap:
        return graph, zero
    nodes, count = [], 0
    for n in graph.nodes:
        hit = plan.get(id(n))
        if id(n) in swap:
            n = Node(swap[id(n)], n.inputs, n.params, n.outs, n.ct, n.loc)
        if hit is not None:
            v, p, op = hit
            if op is not None:          # NOTE: before its first reader (v's last use)
                nodes.append(Node(op, (v,), {}, (p,)))
                count += 1
            ins = tuple(p if x.__class__ is Var and x.id == v.id else x for x in n.inputs)
            n = Node(n.op, ins, n.params, n.outs, n.ct, n.loc)
        nodes.append(n)
    return Graph(graph.inputs, nodes, graph.outputs, graph.name), {
        "pad_gemm": count, "padded_writers": writers, "pitched_products": len(swap) - writers}
