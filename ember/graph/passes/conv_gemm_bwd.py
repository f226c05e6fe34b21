"""The ``conv_bwd`` pass: a separate backward graph's convolution gradients, image by image.

``conv_gemm`` lays a convolution's columns out channel-first when the graph computes them
(``unfold_c``): its three products are then single GEMMs. A backward graph traced on its
own — the eager composite's (:mod:`ember.codegen.eager_composite`), its forward graph
having gone through the passes separately — instead receives the saved columns (N, C*K, L)
and the output gradient ``dY`` (N, Co, L) as *inputs*, in the composite's layout. For such
a graph this pass rewrites

* ``sum(matmul(dY, permute(cols, (0, 2, 1))), dim=0)`` with ``cols`` a graph input into
  ``conv_wgrad(dY, cols)``: the per-image products accumulated in place (no stack of N
  products, no batch sum);
* ``fold_c(matmul(A, dY))`` (2-D ``A`` = the transposed weight) with ``dY`` a graph input
  (through reshapes) into ``conv_igrad(A, dY)``: the column gradient computed and folded a
  few images at a time, so it never leaves the cache (instead of ``conv_gemm``'s
  transposing copy of ``dY``, one GEMM and a fold over 19 MB of columns for W2's conv2).

Kernels and values: :mod:`ember.codegen.conv_kernels_bwd`. Runs after ``pool`` (which
makes the ``fold_c`` nodes) and before ``conv_gemm`` (which would otherwise take the
input gradient); products whose operands the graph computes itself are left to
``conv_gemm``. float32/float64 on the CPU; without a C compiler nothing changes.
"""
from __future__ import annotations

from ...codegen import conv_kernels as ck
from ...codegen import conv_kernels_bwd as kb
from ..ir import BufferOp, Graph, Node, Var
from .dce import dce

_DTYPES = ("float32", "float64")


def _run_wgrad(xp, dy, cols, out=None):
    return kb.weight_grad(dy, cols, out=out)


def _run_igrad(xp, a, dy, *, output_size, kernel_size, dilation, padding, stride, out=None):
    return kb.input_grad(a, dy, output_size, kernel_size, dilation, padding, stride, out=out)


CONV_WGRAD = BufferOp("conv_wgrad", _run_wgrad, "out")
CONV_IGRAD = BufferOp("conv_igrad", _run_igrad, "out")


def _plain_mm(n) -> bool:
    """A matmul of CPU float32/float64 graph values of one dtype, no casts."""
    o = n.outs[0]
    return n.op.name == "matmul" and not hasattr(n.op, "run") and n.ct in (None, o.dtype) \
        and o.dtype.name in _DTYPES and o.device.type == "cpu" \
        and all(x.__class__ is Var and x.dtype is o.dtype for x in n.inputs)


def _is_input(v, producer, inputs) -> bool:
    """Whether ``v`` is a graph input, or reshapes of one."""
    while v.id not in inputs:
        p = producer.get(v.id)
        if p is None or p.op.name != "reshape" or p.inputs[0].__class__ is not Var:
            return False
        v = p.inputs[0]
    return True


def _wgrads(graph, producer, users, inputs, outputs):
    """{id(sum node): (dY, cols)} of the weight-gradient pattern over input columns."""
    found = {}
    for s in graph.nodes:
        if s.op.name != "sum" or s.params.get("keepdim") or s.params.get("dtype") is not None \
                or s.inputs[0].__class__ is not Var or len(s.inputs[0].shape) != 3:
            continue
        dim = s.params.get("dim")
        if tuple(d % 3 for d in ((dim,) if isinstance(dim, int) else dim or ())) != (0,):
            continue
        w = producer.get(s.inputs[0].id)
        if w is None or not _plain_mm(w) or w.outs[0].id in outputs or \
                len(users.get(w.outs[0].id, ())) != 1:
            continue
        d, pv = w.inputs
        p = producer.get(pv.id)
        if p is None or p.op.name != "permute" or tuple(p.params["dims"]) != (0, 2, 1):
            continue
        cols = p.inputs[0]
        if cols.__class__ is not Var or cols.id not in inputs or len(d.shape) != 3 or \
                d.shape[0] != cols.shape[0] or d.shape[2] != cols.shape[2]:
            continue
        found[id(s)] = (d, cols)
    return found


def _igrads(graph, producer, users, inputs, outputs):
    """{id(fold_c node): matmul node} of ``fold_c(matmul(A, dY))`` with input ``dY``."""
    found = {}
    for f in graph.nodes:
        if f.op.name != "fold_c" or f.inputs[0].__class__ is not Var:
            continue
        m = producer.get(f.inputs[0].id)
        if m is None or not _plain_mm(m) or m.outs[0].id in outputs or \
                len(users.get(m.outs[0].id, ())) != 1:
            continue
        a, d = m.inputs
        if len(a.shape) == 2 and len(d.shape) == 3 and a is not d and \
                _is_input(d, producer, inputs):
            found[id(f)] = m
    return found


def conv_bwd(graph: Graph):
    """Rewrite a separate backward graph's convolution gradients (module docstring);
    returns ``(graph, {"weight_grad": n, "input_grad": n})``."""
    if not ck.available():
        return graph, {"no_compiler": 1}
    graph, _ = dce(graph)
    producer = {o.id: n for n in graph.nodes for o in n.outs}
    users = graph.users()
    inputs = {v.id for v in graph.inputs}
    outputs = {v.id for v in graph.outputs}
    wg = _wgrads(graph, producer, users, inputs, outputs)
    ig = _igrads(graph, producer, users, inputs, outputs)
    if not wg and not ig:
        return graph, {"weight_grad": 0, "input_grad": 0}
    nodes = []
    for n in graph.nodes:
        if id(n) in wg:
            nodes.append(Node(CONV_WGRAD, wg[id(n)], {}, n.outs, loc=n.loc))
        elif id(n) in ig:
            nodes.append(Node(CONV_IGRAD, ig[id(n)].inputs, dict(n.params), n.outs,
                              loc=n.loc))
        else:
            nodes.append(n)
    graph, _ = dce(Graph(graph.inputs, nodes, graph.outputs, graph.name))
    return graph, {"weight_grad": len(wg), "input_grad": len(ig)}
