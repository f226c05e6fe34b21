"""Fused attention writes its results in the layout their readers want: no copies around it.

A GPT splits one ``qkv`` projection ``(B, T, 3C)`` as ``(B, T, 3, H, D)``, permutes it to
``(3, B, H, T, D)`` and unbinds q, k, v; attention's output ``(B, H, T, D)`` is permuted
back to ``(B, T, H, D)`` and reshaped to ``(B, T, C)``. The kernels read the permuted q, k,
v views as they are, but around them a compiled step copied, per layer:

* forward: the permuted output into ``(B, T, C)`` (a strided ``reshape``), and again for
  the weight gradient's ``(B*T, C)`` (W3: 2 x 0.056 ms);
* backward: dq, dk, dv (``sdpa_grad``'s packed output, sliced apart) into the slots of the
  ``(B, T, 3, H, D)`` gradient of ``qkv`` (the ``scatter_stack`` node; W3: 0.28 ms, 128-byte
  strided runs).

Two passes rewrite them:

* ``sdpa_layout`` (default): ``scatter_stack`` of the three slices of one ``sdpa_grad``'s
  packed output (through their ``reshape``s) into one ``sdpa_grad_stacked`` node: the
  kernel writes dq, dk and dv into their slots of the stacked (and possibly permuted)
  buffer; other slots are zeros. W3: -0.15 ms a layer (the kernel's strided stores cost
  ~0.15 ms of the 0.3 ms the copy took).
* ``sdpa_out_layout`` (opt-in): ``permute(sdpa(q, k, v), dims)`` (the last dim kept last)
  into one ``sdpa_permuted`` node that computes the permuted result C-contiguous: the
  kernel stores each output row straight at its place, and the ``reshape``s after it
  become views. NOTE: not default — on the 2-core AMD EPYC this was measured on, the
  strided stores (rows 512 bytes apart) cost more than the one copy left once
  ``simplify`` makes the second reshape a view of the first (W3: +0.2 ms a step,
  interleaved medians of 200-300 steps); strided loads (the copy's) are cheap there,
  strided stores are not.

Exact: the kernels do the same arithmetic and only store elsewhere; the stacked gradient
is written as ``x + 0.0`` like ``scatter_stack`` (``-0.0`` as ``+0.0``). Without a C
compiler (or for dtypes the kernels lack) the nodes run the primitives' NumPy kernels and
copy into the layout: the same values. ``sdpa_out_layout``: CPU values only.
``sdpa_layout`` also rewrites a GPU graph's (generated kernels): the flash backward writes
the slots through their strides, ``-0.0`` kept (see ``ops.attention.sdpa_grad_into``).
``sdpa_layout`` runs after ``scatter_stack``, whose nodes it consumes.
"""
from __future__ import annotations

import numpy as np

from ...ops import attention as A
from ..ir import BufferOp, Graph, Var
from ._util import Rewrite
from .dce import dce


def _run_sdpa_permuted(xp, q, k, v, *, scale, is_causal, dims, out=None):
    shape = q.shape[:-1] + v.shape[-1:]
    if out is None:
        out = xp.empty(tuple(shape[d] for d in dims), q.dtype)
    A.sdpa_into(xp, q, k, v, out.transpose(np.argsort(dims)), scale, is_causal)
    return out


def _run_sdpa_grad_stacked(xp, g, q, k, v, *, scale, is_causal, slots, full, dims, out=None):
    if out is None:
        out = xp.empty(tuple(full[d] for d in dims), q.dtype)
    view = out.transpose(np.argsort(dims))          # out in ``full``'s axis order
    for j in range(full[0]):
        if j not in slots:
            view[j] = 0
    A.sdpa_grad_into(xp, g, q, k, v, tuple(view[j] for j in slots), scale, is_causal,
                     plus_zero=True)
    return out


SDPA_PERMUTED = BufferOp("sdpa_permuted", _run_sdpa_permuted)
SDPA_GRAD_STACKED = BufferOp("sdpa_grad_stacked", _run_sdpa_grad_stacked)


def _cpu(v) -> bool:
    return v.device.type == "cpu"


def _grad_device(v) -> bool:
    """Where ``sdpa_grad_stacked`` runs: CPU values, or a GPU's with generated kernels
    (the flash backward writes dq, dk, dv through their strides: no copy into the stack;
    an H100 GPT step spent 36 x 31 us on those copies)."""
    if _cpu(v):
        return True
    from ...device.base import get_backend
    return v.device.type == "cuda" and get_backend(v.device).has("cuda_kernels")


def _forward_plans(graph, users, outputs) -> dict:
    """{id(sdpa node): its permute reader} for sdpa outputs permuted with D kept last."""
    plans = {}
    for n in graph.nodes:
        if n.op.name != "sdpa" or len(n.outs) != 1 or not _cpu(n.out) or \
                n.out.id in outputs:
            continue
        nd = len(n.out.shape)
        pm = next((r for r in users.get(n.out.id, ()) if r.op.name == "permute" and
                   len(r.outs) == 1 and tuple(r.params["dims"])[-1] == nd - 1), None)
        if pm is not None:
            plans[id(n)] = pm
    return plans


def _packed_part(graph, users, outputs, gv, stack):
    """``(sdpa_grad node, part)`` when stack input ``gv`` is ``reshape(slice(P))`` of part
    ``part`` (0: dq, 1: dk, 2: dv) of an ``sdpa_grad``'s packed output ``P``, each read
    only on that path; else None."""
    def only(v, reader):
        rs = users.get(v.id, ())
        return v.id not in outputs and len(rs) == 1 and rs[0] is reader

    r = graph.producer(gv)
    if r is None or r.op.name != "reshape" or not only(gv, stack) or \
            r.inputs[0].__class__ is not Var:
        return None
    s = graph.producer(r.inputs[0])
    if s is None or s.op.name != "slice" or not only(r.inputs[0], r) or \
            s.inputs[0].__class__ is not Var or len(s.params["slices"]) != 1:
        return None
    p = graph.producer(s.inputs[0])
    if p is None or p.op.name != "sdpa_grad" or not _grad_device(p.out):
        return None
    sizes = [x.numel() for x in p.inputs[1:]]
    bounds = [(0, sizes[0], 1), (sizes[0], sizes[0] + sizes[1], 1),
              (sizes[0] + sizes[1], sum(sizes), 1)]
    sl = tuple(s.params["slices"][0])
    if sl not in bounds:
        return None
    part = bounds.index(sl)
    return (p, part) if tuple(gv.shape[1:]) == tuple(p.inputs[1 + part].shape) else None


def _backward_plans(graph, users, outputs) -> dict:
    """{id(scatter_stack node): (sdpa_grad node, slot of dq, dk, dv)}."""
    plans = {}
    for st in graph.nodes:
        if st.op.name != "scatter_stack" or len(st.inputs) != 3:
            continue
        found = [_packed_part(graph, users, outputs, gv, st) for gv in st.inputs]
        if None in found or len({id(p) for p, _ in found}) != 1:
            continue
        p = found[0][0]
        slot = {part: j for (_, part), j in zip(found, st.params["slots"])}
        if len(slot) != 3 or p.out.id in outputs or len(users.get(p.out.id, ())) != 3 or \
                p.out.dtype is not st.out.dtype:
            continue
        plans[id(st)] = (p, (slot[0], slot[1], slot[2]))
    return plans


def _rewrite(graph: Graph, fwd: dict, bwd: dict):
    """Apply the plans: ``fwd`` {id(sdpa): permute}, ``bwd`` {id(scatter_stack): ...}."""
    absorbed = {id(pm): nid for nid, pm in fwd.items()}    # id(permute) -> id(its sdpa)
    made: dict = {}                                         # id(sdpa) -> sdpa_permuted var

    def rule(rw, n, ins):
        if id(n) in fwd:
            pm = fwd[id(n)]
            dims = tuple(pm.params["dims"])
            o = pm.out
            y = rw.b.add(SDPA_PERMUTED, ins, {**n.params, "dims": dims},
                         [(o.shape, o.dtype, o.device)], n.ct)[0]
            made[id(n)] = y
            # other readers see the old layout as a view (dce drops it if there are none)
            return (rw.emit("permute", (y,), dims=tuple(int(d) for d in np.argsort(dims))),)
        if id(n) in absorbed:
            return (made[absorbed[id(n)]],)
        if id(n) in bwd:
            p, slots = bwd[id(n)]
            o = n.out
            params = {**p.params, "slots": slots, "full": n.params["full"],
                      "dims": n.params["dims"]}
            return rw.b.add(SDPA_GRAD_STACKED, tuple(rw.env[x.id] for x in p.inputs),
                            params, [(o.shape, o.dtype, o.device)], p.ct)
        return None

    return dce(Rewrite(graph).run(rule))[0]


def sdpa_layout(graph: Graph):
    """dq, dk, dv straight into unbind's stacked gradient; returns ``(graph,
    {"sdpa_grad_stacked": n})``."""
    bwd = _backward_plans(graph, graph.users(), {v.id for v in graph.outputs})
    return (_rewrite(graph, {}, bwd) if bwd else graph), {"sdpa_grad_stacked": len(bwd)}


def sdpa_out_layout(graph: Graph):
    """Attention's output straight in its permuted layout (opt-in, see the module);
    returns ``(graph, {"sdpa_permuted": n})``."""
    fwd = _forward_plans(graph, graph.users(), {v.id for v in graph.outputs})
    return (_rewrite(graph, fwd, {}) if fwd else graph), {"sdpa_permuted": len(fwd)}
