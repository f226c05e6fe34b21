"""Subgraph rewriting: patterns of several nodes replaced by cheaper equivalents.

* :func:`fuse_linear_act` — ``act(add(matmul(x, w), b))`` (``act`` in relu/tanh/sigmoid)
  becomes one :data:`~.fused.LINEAR_ACT` node; bitwise exact.
* :func:`fold_conv_affine` — a convolution (``reshape(matmul(W, unfold(x)))``, how
  ``F.conv2d`` is traced) followed by per-channel ``add/sub/mul/div`` (its bias, then an
  eval-mode BatchNorm: ``(y - mean) * rsqrt(var + eps) * gamma + beta``) becomes one
  convolution with scaled weights ``W * s`` and one shift ``t``. The scale and shift are
  emitted as small graph nodes: when the weights and statistics are constants (see
  :func:`~.freeze.freeze`), :func:`~.fold.fold` turns them into constants; otherwise they
  cost O(C·K) per run instead of four full-size passes. Not bitwise (``(W·x)·s`` vs
  ``(W·s)·x`` round differently), so it is not in the default pipeline.

Intermediate values must have exactly one user and not be graph outputs, so gradients
and other readers never lose a value they need.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Var
from ._util import Rewrite, is_float
from .fused import ACTIVATIONS, LINEAR_ACT


def _only_use(graph, v, user) -> bool:
    """``v`` is read by ``user`` alone (once) and is not a graph output."""
    us = graph.users().get(v.id, ())
    return len(us) == 1 and us[0] is user and \
        sum(1 for x in user.inputs if x.__class__ is Var and x.id == v.id) == 1 and \
        all(o.id != v.id for o in graph.outputs)


def _made_by(graph, v, name):
    p = graph.producer(v) if v.__class__ is Var else None
    return p if p is not None and p.op.name == name and len(p.outs) == 1 else None


# ---------------------------------------------------------------------- linear + activation
def _match_linear_act(graph, act):
    """``(x, w, b, matmul node, add node)`` when ``act`` is ``act(matmul(x, w) + b)``."""
    dt = act.outs[0].dtype
    add = _made_by(graph, act.inputs[0], "add")
    if add is None or not is_float(dt) or act.ct not in (None, dt) or \
            not _only_use(graph, add.outs[0], act):
        return None
    for mv, b in (add.inputs, add.inputs[::-1]):
        mm = _made_by(graph, mv, "matmul")
        if mm is None or b.__class__ is not Var or not _only_use(graph, mv, add):
            continue
        x, w = mm.inputs
        out = mm.outs[0]
        if x.ndim >= 2 and w.ndim == 2 and all(v.dtype is dt for v in (x, w, b, out)) and \
                add.ct in (None, dt) and mm.ct in (None, dt) and \
                np.broadcast_shapes(out.shape, b.shape) == out.shape == act.outs[0].shape:
            return x, w, b, mm, add
    return None


def fuse_linear_act(graph: Graph):
    """Fuse ``act(x @ w + b)`` into one node. Returns ``(graph, {"fused": n})``."""
    plan, dropped = {}, set()
    for n in graph.nodes:
        if n.op.name in ACTIVATIONS and len(n.outs) == 1:
            m = _match_linear_act(graph, n)
            if m is not None:
                plan[id(n)] = m
                dropped.update((id(m[3]), id(m[4])))
    if not plan:
        return graph, {"fused": 0}

    def rule(rw, n, ins):
        if id(n) in dropped:
            return (None,)                 # read by the fused node only: never needed
        m = plan.get(id(n))
        if m is None:
            return None
        o = n.outs[0]
        x, w, b = (rw.env[v.id] for v in m[:3])
        return (rw.b.add1(LINEAR_ACT, (x, w, b), {"act": n.op.name}, o.shape, o.dtype,
                          o.device),)

    return Rewrite(graph).run(rule), {"fused": len(plan)}


# ---------------------------------------------------------------------- conv + affine
_AFFINE = ("add", "sub", "mul", "div")


def _channel_operand(v, c):
    """Whether ``v`` broadcasts per output channel: shape (C,1,1), (1,C,1,1) or a scalar."""
    if v.__class__ is Var:
        return v.shape in ((c, 1, 1), (1, c, 1, 1))
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _match_conv_affine(graph, start):
    """``(matmul, reshape, [(op, operand)], last node)`` for a conv then per-channel ops."""
    mm = start if start.op.name == "matmul" else None
    if mm is None or len(mm.outs) != 1:
        return None
    w, cols = mm.inputs
    if w.ndim != 2 or cols.ndim != 3 or not is_float(w.dtype) or cols.dtype is not w.dtype:
        return None
    c = w.shape[0]
    users = graph.users().get(mm.outs[0].id, ())
    if len(users) != 1 or users[0].op.name != "reshape" or not _only_use(graph, mm.outs[0],
                                                                         users[0]):
        return None
    rs = users[0]
    shape = rs.outs[0].shape
    if len(shape) != 4 or shape[1] != c:
        return None
    chain, cur = [], rs
    while True:
        us = graph.users().get(cur.outs[0].id, ())
        if len(us) != 1 or not _only_use(graph, cur.outs[0], us[0]):
            break
        n = us[0]
        if n.op.name not in _AFFINE or len(n.inputs) != 2 or n.outs[0].shape != shape or \
                n.outs[0].dtype is not w.dtype or n.ct not in (None, w.dtype):
            break
        a, b = n.inputs
        other = b if a.__class__ is Var and a.id == cur.outs[0].id else a
        if (other is a and n.op.name in ("sub", "div")) or not _channel_operand(other, c) or \
                (other.__class__ is Var and other.dtype is not w.dtype):
            break
        chain.append((n.op.name, other))
        cur = n
    if len(chain) < 1 or not any(op in ("mul", "div") for op, _ in chain):
        return None
    return mm, rs, chain, cur


def _emit_conv_affine(rw, m):
    """New nodes for ``reshape(matmul(W * s, cols)) + t``; returns the output var."""
    mm, rs, chain, last = m
    w, cols = (rw.env[v.id] for v in mm.inputs)
    c = w.shape[0]
    s = t = None

    def chan(v):
        v = rw.env[v.id] if v.__class__ is Var else v
        return rw.emit("reshape", (v,), shape=(c, 1, 1)) if v.__class__ is Var and \
            v.shape != (c, 1, 1) else v

    def op(name, a, b):
        if a.__class__ is not Var and b.__class__ is not Var:
            return {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b}[name]
        return rw.emit(name, (a, b))

    for name, v in chain:                  # y = conv * s + t, updated op by op
        v = chan(v)
        if name in ("add", "sub"):
            t = (v if name == "add" else op("mul", v, -1)) if t is None else op(name, t, v)
        else:
            s = (v if name == "mul" else op("div", 1.0, v)) if s is None else op(name, s, v)
            t = None if t is None else op(name, t, v)
    scale = rw.emit("reshape", (s,), shape=(c, 1)) if s.__class__ is Var else s
    y = rw.emit("matmul", (rw.emit("mul", (w, scale)), cols))
    y = rw.emit("reshape", (y,), shape=rs.outs[0].shape)
    return y if t is None else rw.emit("add", (y, t))


def fold_conv_affine(graph: Graph):
    """Fold per-channel affine ops after a convolution into its weights and one shift."""
    plan, dropped = {}, set()
    for n in graph.nodes:
        if n.op.name == "matmul" and id(n) not in dropped:
            m = _match_conv_affine(graph, n)
            if m is not None:
                plan[id(m[3])] = m
                users = graph.users()
                cur = m[1]
                dropped.update((id(m[0]), id(m[1])))
                while cur is not m[3]:
                    cur = users[cur.outs[0].id][0]
                    dropped.add(id(cur))
                dropped.discard(id(m[3]))
    if not plan:
        return graph, {"conv_affine": 0}

    def rule(rw, n, ins):
        m = plan.get(id(n))
        if m is not None:
            return (_emit_conv_affine(rw, m),)
        return (None,) if id(n) in dropped else None

    return Rewrite(graph).run(rule), {"conv_affine": len(plan)}


def rewrite(graph: Graph):
    """Both rewrites: conv+affine folding, then linear+activation fusion."""
    g, a = fold_conv_affine(graph)
    g, b = fuse_linear_act(g)
    return g, {**a, **b}
