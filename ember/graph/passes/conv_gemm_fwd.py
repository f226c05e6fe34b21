"""The ``conv_fwd`` pass: a convolution whose columns are a graph output, a chunk at a time.

The eager composite's forward graph (:mod:`ember.codegen.eager_composite`) returns the
columns ``cols = unfold_c(x)`` for its separate backward graph (``conv_bwd``), so
``conv_gemm`` leaves it alone (it keeps columns channel-first only inside one graph). This
pass rewrites

    cols = unfold_c(x);  y = reshape(matmul(W2d, cols), (N, Co, oh, ow))  [+ bias (Co, 1, 1)]

with ``cols`` a graph output read by that ``matmul`` only, into one ``conv_fwd(x, W2d
[, bias]) -> (y, cols)`` node: unfold, GEMM and bias add a chunk of images at a time, each
reading what the previous step left in cache (:mod:`ember.codegen.conv_kernels_fwd`: the
composite's values bit for bit). Runs after ``pool`` (which makes ``unfold_c``) and before
``conv_gemm``. float32/float64 on the CPU; without a C compiler nothing changes.
"""
from __future__ import annotations

from ...codegen import conv_kernels as ck
from ...codegen import conv_kernels_fwd as kf
from ..ir import BufferOp, Graph, Node, Var
from .conv_gemm_bwd import _plain_mm
from .dce import dce


def _run_conv_fwd(xp, x, w2d, *bias, kernel_size, dilation, padding, stride, pad_value):
    return kf.forward(x, w2d, bias[0] if bias else None, kernel_size, dilation, padding,
                      stride, pad_value)


CONV_FWD = BufferOp("conv_fwd", _run_conv_fwd, None)


def _only_user(v, users, outputs):
    us = users.get(v.id, ())
    return us[0] if len(us) == 1 and v.id not in outputs else None


def _bias_add(y, users, outputs):
    """(add node, bias var) when ``y`` (N, Co, oh, ow) is read only by ``y + b`` with a
    (Co, 1, 1) ``b`` of its dtype; else None."""
    a = _only_user(y, users, outputs)
    if a is None or a.op.name != "add" or len(a.inputs) != 2 or a.params or \
            a.ct not in (None, y.dtype) or tuple(a.outs[0].shape) != tuple(y.shape):
        return None
    b = a.inputs[1] if a.inputs[0] is y else a.inputs[0]
    if b is y or b.__class__ is not Var or b.dtype is not y.dtype or \
            tuple(b.shape) != (y.shape[1], 1, 1) or a.outs[0].dtype is not y.dtype:
        return None
    return a, b


def _convs(graph, users, outputs):
    """{id(last replaced node): (conv_fwd node, ids of the replaced nodes)}."""
    found = {}
    for u in graph.nodes:
        if u.op.name != "unfold_c" or u.outs[0].id not in outputs or \
                u.inputs[0].__class__ is not Var:
            continue
        cols = u.outs[0]
        us = users.get(cols.id, ())
        if len(us) != 1 or not _plain_mm(us[0]) or us[0].inputs[1] is not cols:
            continue
        m = us[0]
        w2d = m.inputs[0]
        if len(w2d.shape) != 2 or w2d.shape[1] != cols.shape[1] or w2d is cols or \
                cols.dtype is not u.inputs[0].dtype:
            continue
        r = _only_user(m.outs[0], users, outputs)
        n, co, ll = m.outs[0].shape
        if r is None or r.op.name != "reshape" or len(r.outs[0].shape) != 4 or \
                tuple(r.outs[0].shape[:2]) != (n, co):
            continue
        y, last, ins = r.outs[0], r, (u.inputs[0], w2d)
        ba = _bias_add(y, users, outputs)
        if ba is not None:
            y, last, ins = ba[0].outs[0], ba[0], ins + (ba[1],)
        node = Node(CONV_FWD, ins, dict(u.params), (y, cols), loc=m.loc)
        found[id(last)] = (node, {id(u), id(m), id(r), id(last)})
    return found


def conv_fwd(graph: Graph):
    """Rewrite convolutions whose columns are graph outputs (module docstring); returns
    ``(graph, {"conv_fwd": n, "bias": n})``."""
    if not ck.available():
        return graph, {"no_compiler": 1}
    graph, _ = dce(graph)
    users = graph.users()
    outputs = {v.id for v in graph.outputs}
    found = _convs(graph, users, outputs)
    if not found:
        return graph, {"conv_fwd": 0, "bias": 0}
    drop = set().union(*(ids for _, ids in found.values()))
    nodes = []
    for n in graph.nodes:
        if id(n) in found:
            nodes.append(found[id(n)][0])
        elif id(n) not in drop:
            nodes.append(n)
    bias = sum(len(node.inputs) == 3 for node, _ in found.values())
    return Graph(graph.inputs, nodes, graph.outputs, graph.name), {"conv_fwd": len(found),
                                                                  "bias": bias}
