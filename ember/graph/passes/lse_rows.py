"""A GPU graph's log-softmax as per-row log-sum-exp: the backward recomputes the rest.

A compiled training step's cross-entropy stores ``log_softmax(cast(logits))``: on a GPT's
LM head a float32 (B*T, vocab) array (1.6 GB at 8192 x 50257), written by the forward
kernel and read by the backward kernel (``exp(lsm)``, the softmax) and by the loss's
``take_along_dim`` (one value a row). The logits themselves (float16 under autocast)
exist anyway: the LM head's GEMM wrote them. So on a GPU, where those kernels are
memory-bound, :func:`lse_rows` rewrites

    lsm = log_softmax(y, dim=-1)

into primitives, ``lse = amax(y) + log(sum(exp(y - amax(y))))`` (per row, keepdim) and
``lsm = y - lse``, and each ``take_along_dim(lsm, idx, dim=-1)`` into
``take_along_dim(x, idx) -> (the elementwise ops from x to y) - lse``, gathering from the
value ``y`` was computed from by elementwise ops (the float16 logits under ``cast``; their
other inputs, a bias, gathered from a broadcast view).
The fusion groups (:mod:`.fuse_groups`) then put the whole row computation in one
reduction kernel whose only output is ``lse`` (8192 floats), and :mod:`.recompute`'s GPU
policy copies ``y - lse`` into the backward kernel, which reads the float16 logits
instead of the float32 log-softmax.

Taken only when every reader of the log-softmax is such a gather or a fusible node, and
the value is not a graph output (a graph split for an eager backward saves it: unchanged
there). Results equal the fused log-softmax's up to rounding: ``y - (m + log s)`` instead
of ``(y - m) - log s``.
"""
from __future__ import annotations

from ..ir import Graph, Var
from ._util import Rewrite, emit
from .fuse_groups import classify
from .recompute import MIN_NUMEL

#: most elementwise ops a gather is pushed back through (a cast, a scale).
MAX_DEPTH = 4


def lse_rows(graph: Graph, device: str = "cuda") -> tuple:
    """``(graph, rewritten log-softmaxes)``: ``graph`` with the rewrite above applied to
    each eligible ``log_softmax`` over the last axis of a ``device`` (type) value."""
    users = graph.users()
    outputs = {v.id for v in graph.outputs}
    chosen = {id(n) for n in graph.nodes if _eligible(n, users, outputs, device)}
    if not chosen:
        return graph, 0
    producer = {o.id: n for n in graph.nodes for o in n.outs}
    lse_of: dict = {}                     # old log-softmax var id -> (new lse, old input)

    def rule(rw, n, ins):
        if id(n) in chosen:
            lse, lsm = _decompose(rw.b, ins[0])
            lse_of[n.out.id] = (lse, n.inputs[0])
            return (lsm,)
        x = n.inputs[0] if n.op.name == "take_along_dim" else None
        if x.__class__ is Var and x.id in lse_of:
            lse, y = lse_of[x.id]
            picked = _gather(rw, y, ins[1], n.params["dim"], producer, device)
            return (rw.emit("sub", (picked, lse)),)
        return None

    return Rewrite(graph).run(rule), len(chosen)


def _eligible(n, users, outputs, device) -> bool:
    """Whether log-softmax node ``n`` is rewritten (see the module docstring)."""
    if n.op.name != "log_softmax" or classify(n, device, True) != "rowwise" or \
            n.out.id in outputs or n.out.numel() < MIN_NUMEL:
        return False
    last = n.out.ndim - 1
    readers = users.get(n.out.id, ())
    if not readers:
        return False
    for u in readers:
        if u.op.name == "take_along_dim":
            if u.inputs[0] is not n.out or u.inputs[1] is n.out or \
                    u.params.get("dim", 0) % n.out.ndim != last:
                return False
        elif classify(u, device, True) is None:
            return False
    return True


def _decompose(b, y) -> tuple:
    """``(lse, y - lse)`` for the last axis of (new) ``y``, in primitives."""
    dim = (y.ndim - 1,)
    m = emit(b, "amax", (y,), dim=dim, keepdim=True)
    s = emit(b, "sum", (emit(b, "exp", (emit(b, "sub", (y, m)),)),), dim=dim, keepdim=True)
    lse = emit(b, "add", (m, emit(b, "log", (s,))))
    return lse, emit(b, "sub", (y, lse))


def _gather(rw, y, idx, dim, producer, device):
    """``take_along_dim(y, idx, dim)`` in the new graph (``rw``'s), taken from the value
    (old) ``y`` was made from by elementwise ops."""
    path = []                             # elementwise nodes from y back to the source
    v = y
    for _ in range(MAX_DEPTH):
        p = producer.get(v.id)
        src = _full_input(p, v, device) if p is not None else None
        if src is None:
            break
        path.append((p, src))
        v = src
    out = rw.emit("take_along_dim", (rw.env[v.id], idx), dim=dim)
    for p, src in reversed(path):
        ins = tuple(out if x is src else _picked(rw, x, idx, dim, p.out) for x in p.inputs)
        params = {k: val for k, val in p.params.items() if k in p.op.params}
        out = rw.emit(p.op.name, ins, **params)
    return out


def _picked(rw, x, idx, dim, full):
    """Input ``x`` (old) of an elementwise node making ``full``, as the gathered node reads
    it: a scalar or a value of size 1 along ``dim`` as it is, any other (a bias)
    broadcast to ``full``'s shape (a view) and gathered."""
    if x.__class__ is not Var:
        return x
    new = rw.env[x.id]
    if ((1,) * (full.ndim - x.ndim) + tuple(x.shape))[dim % full.ndim] == 1:
        return new
    return rw.emit("take_along_dim", (rw.emit("expand", (new,), shape=tuple(full.shape)),
                                      idx), dim=dim)


def _full_input(p, v, device):
    """The one input of elementwise node ``p`` (making ``v``) of ``v``'s shape, when no
    other input has it; else None."""
    if classify(p, device, True) != "ew":
        return None
    full = [x for x in p.inputs if x.__class__ is Var and x.shape == v.shape]
    return full[0] if len(full) == 1 else None
