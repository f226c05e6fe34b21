"""Sums of slot scatters become one stacking node: the backward of ``unbind`` / indexing.

The VJP of ``q, k, v = t.unbind(0)`` (and of ``t[j]``) scatters each gradient into a
zero tensor of ``t``'s shape (``as_strided_scatter`` of a constant), and the engine adds
the three full-size results. For the W3 GPT's attention that is, per layer, three
copies of a 1.5 MB zero constant, three scatters and two full-size adds — then a
``permute`` back to the ``(B, T, 3, H, D)`` layout whose ``reshape`` to ``(B, T, 3C)``
copies everything again.

``scatter_stack`` replaces ``add(add(scatter(0, g_a, slot a), scatter(0, g_b, slot b)),
...)`` — scatters into distinct slots ``j`` along dim 0 of an all-zero constant, joined
by ``add`` only — by one node writing each ``g`` into its slot of a fresh buffer (slots
no gradient reaches are zero-filled). When the sum's only reader is a ``permute``, the
node writes straight into the permuted layout and returns it C-contiguous: the
``reshape`` after it becomes a free view.

Exact: each element of the sum is ``0 + ... + g + ... + 0``, which is ``g`` except that
``-0.0`` becomes ``+0.0``; the node writes ``g + 0.0``, the same bits.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import CONSTANT, BufferOp, Graph, Var
from ._util import Rewrite
from .dce import dce


def _run_stack(xp, *grads, slots, full, dims, out=None):
    shape = tuple(full[d] for d in dims)
    if out is None:
        out = xp.empty(shape, grads[0].dtype)
    view = out.transpose(np.argsort(dims))          # out in ``full``'s axis order
    for j in range(full[0]):
        if j not in slots:
            view[j] = 0
    for g, j in zip(grads, slots):
        xp.add(g[0], 0.0, out=view[j])              # -0.0 -> +0.0, as 0 + g does
    return out


SCATTER_STACK = BufferOp("scatter_stack", _run_stack)


def _slot(graph, n):
    """``(grad var, j)`` when ``n`` scatters a ``(1, *rest)`` gradient into slot ``j`` of
    dim 0 of an all-zero constant of the output's shape (C layout), else None."""
    if n.op.name != "as_strided_scatter" or len(n.inputs) != 2:
        return None
    z, g = n.inputs
    o = n.out
    if z.__class__ is not Var or g.__class__ is not Var or not o.dtype.is_floating_point or \
            z.dtype is not o.dtype or g.dtype is not o.dtype or z.shape != o.shape or \
            not o.shape or o.shape[0] < 1:
        return None
    full = tuple(o.shape)
    rest = math.prod(full[1:])
    c_strides = tuple(math.prod(full[k + 1:]) for k in range(len(full)))
    p = n.params
    if tuple(p.get("size", ())) != (1,) + full[1:] or tuple(g.shape) != (1,) + full[1:]:
        return None
    if tuple(p.get("stride", ())) != c_strides or rest == 0:
        return None
    off = p.get("storage_offset", 0)
    if off % rest or not 0 <= off // rest < full[0]:
        return None
    zp = graph.producer(z)
    if zp is None or zp.op is not CONSTANT:
        return None
    val = zp.params["value"]
    # NOTE: a graph captured on a GPU holds a CuPy constant (checked there, once, at
    # compile time): NumPy-only, the pass never fired on the GPU (72 scatters, ~4 ms of
    # copies a GPT step on an H100)
    if getattr(val, "shape", None) != full or not hasattr(val, "any") or bool(val.any()):
        return None
    return g, off // rest


def _plans(graph: Graph) -> dict:
    """{id(node that gets replaced): (grads, slots, full, dims, out var)}."""
    users = graph.users()
    outputs = {v.id for v in graph.outputs}

    def single(v):
        return v.id not in outputs and len(users.get(v.id, ())) == 1

    leaves: dict = {}          # var id of an add (or scatter) -> [(grad, j)] or None
    internal: set = set()
    for n in graph.nodes:
        if len(n.outs) != 1:
            continue
        o = n.out
        if n.op.name == "as_strided_scatter":
            s = _slot(graph, n)
            leaves[o.id] = [s] if s is not None else None
        elif n.op.name == "add" and len(n.inputs) == 2 and n.ct in (None, o.dtype) and \
                all(x.__class__ is Var and x.shape == o.shape and x.dtype is o.dtype and
                    leaves.get(x.id) and single(x) for x in n.inputs):
            got = leaves[n.inputs[0].id] + leaves[n.inputs[1].id]
            if len({j for _, j in got}) == len(got):
                leaves[o.id] = got
                internal.update(x.id for x in n.inputs)
    plans = {}
    for n in graph.nodes:
        if n.op.name != "add" or len(n.outs) != 1 or n.out.id in internal or \
                not leaves.get(n.out.id):
            continue
        o = n.out
        got = leaves[o.id]
        full = tuple(o.shape)
        dims, target, out = tuple(range(len(full))), n, o
        readers = users.get(o.id, ())
        if single(o) and readers[0].op.name == "permute":
            target, out = readers[0], readers[0].out
            dims = tuple(target.params["dims"])
        plans[id(target)] = ([g for g, _ in got], tuple(j for _, j in got), full, dims, out)
    return plans


def scatter_stack(graph: Graph):
    """Replace sums of slot scatters; returns ``(graph, {"stacked": sums replaced})``."""
    plans = _plans(graph)
    if not plans:
        return graph, {"stacked": 0}

    def rule(rw, n, ins):
        p = plans.get(id(n))
        if p is None:
            return None
        grads, slots, full, dims, out = p
        return rw.b.add(SCATTER_STACK, tuple(rw.env[g.id] for g in grads),
                        {"slots": slots, "full": full, "dims": dims},
                        [(out.shape, out.dtype, out.device)], None)

    new, _ = dce(Rewrite(graph).run(rule))
    return new, {"stacked": len(plans)}
