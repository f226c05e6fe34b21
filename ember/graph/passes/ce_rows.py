"""``ce_rows``: a small classifier's cross-entropy, forward and backward, as one C call.

A compiled training step traces ``F.cross_entropy(z, t)`` (``reduction='mean'``, no class
weights, no label smoothing, any ``ignore_index``) and its backward into ~25 primitives
on the ``(N, C)`` logits: ``log_softmax``, the target mask and gather, the sum and count,
the one-hot scatter (``scatter_select``'s ``where(idx == iota, g, 0)``), ``exp`` of the
log-softmax, a row sum, ``mul``, ``sub``. ``fuse`` makes them ~8 kernels and small nodes;
in the compiled W1 MLP step (``N`` 128, ``C`` 10) they cost ~110 us of a ~3.8 ms step, and
the classifier's product before them (OpenBLAS, 128x512x10) ~50 us more (issue 19). This
pass replaces the whole chain by one ``ce_rows`` node (:mod:`ember.codegen.ce_rows`) with
two or three outputs: the loss, ``d(logits)`` and, when the graph sums it over the rows
(``sum_rows``: the classifier bias's gradient), that sum. Taken with it, when nothing else
reads them: the bias add before the log-softmax (``add(x, b)``, ``b`` of shape ``(C,)``)
and, for ``C <= 16``, the product making ``x`` (a 2-D float32 ``matmul``, transposed
operands read in place as ``matmul_t``), summed in the kernel instead of a BLAS call.

Under plain SGD, when ``gemm_epilogue`` made the classifier's input gradient a
``matmul_mask`` node (relu's backward of ``W.T @ d`` with its row sums, and possibly the
previous layer's bias step), the node takes the rest of the classifier's step too (the
*head*): that input gradient and its row sums, the weight gradient ``d.T @ h`` (its
``permute``/``matmul``) and the SGD steps ``sub(p, mul(grad, lr))`` of the weight, its bias
and the previous layer's bias — W1's 13 nodes after the second hidden layer's forward
become one (:func:`_head`). The weight is read before any step is written (the steps are
new arrays, written back by the replay).

The pattern is matched exactly (every intermediate read only inside it; the backward
seeded by a scalar constant, ``loss.backward()``'s 1); anything else — float64 or
low-precision logits, a log-softmax over another dim, class weights, label smoothing,
``reduction='sum'``, a log-softmax or gather read elsewhere — is left alone. Results:
the same formulas as the fused kernels (float32 rounding; the logits' product in another
summation order than BLAS's). CPU graphs only (a host pass), before ``fuse``.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as _dt
from ...codegen import ce_rows as _k
from ..ir import CONSTANT, BufferOp, Graph, Var
from ._util import Rewrite
from .matmul_t import _transposed

__all__ = ["ce_rows", "CE_ROWS"]


def _run(xp, *arrays, product=False, bias=False, db=False, ignore_index=-100, seed=1.0,
         ta=False, tb=False, head=False, bias2=False):
    i = 2 if product else 1
    a = arrays[0].T if ta and product else arrays[0]
    b = (arrays[1].T if tb else arrays[1]) if product else None
    bv = arrays[i] if bias else None
    t = arrays[i + bias]
    lr = float(arrays[i + bias + 1]) if head else None
    b2 = arrays[-1] if bias2 else None
    if xp is not np:
        a, b, bv, t, b2 = (None if v is None else xp.asnumpy(v) for v in (a, b, bv, t, b2))
    r = _k.ce_rows(a, b, bv, t, ignore_index=ignore_index, seed=seed, want_db=db, lr=lr,
                   bias2=b2)
    if xp is not np:
        r = tuple(None if v is None else xp.asarray(v) for v in r)
    return r if db else r[:2]


#: ``(loss, d_logits[, d_bias]) = ce_rows([a, b | z], [bias], targets)``: new memory each
CE_ROWS = BufferOp("ce_rows", _run, accepts_out=None)


def _is(n, name, nin=None) -> bool:
    return n is not None and n.op.name == name and not hasattr(n.op, "run") and \
        len(n.outs) == 1 and (nin is None or len(n.inputs) == nin)


class _G:
    """Producers, positions and readers of a graph's values."""

    def __init__(self, graph: Graph):
        self.prod, self.pos = {}, {}
        for i, n in enumerate(graph.nodes):
            for o in n.outs:
                self.prod[o.id], self.pos[o.id] = n, i
        self.readers = graph.users()
        self.outs = {v.id for v in graph.outputs}

    def p(self, v):
        return self.prod.get(v.id) if v.__class__ is Var else None

    def rd(self, v) -> list:
        return self.readers.get(v.id, []) if v.__class__ is Var else []

    def one(self, v):
        """The only reader of ``v`` (not a graph output), else None."""
        r = self.rd(v)
        return r[0] if len(r) == 1 and v.id not in self.outs else None

    def inner(self, v, members) -> bool:
        """Whether only ``members`` read ``v`` and it is not a graph output."""
        return v.id not in self.outs and all(id(r) in members for r in self.rd(v))


def _lit(x, value) -> bool:
    return not isinstance(x, Var) and not isinstance(x, bool) and x == value


def _const(gr, v):
    n = gr.p(v)
    return n.params["value"] if n is not None and n.op is CONSTANT else None


def _f32(v, shape=None) -> bool:
    return v.__class__ is Var and v.dtype is _dt.float32 and (shape is None or
                                                               tuple(v.shape) == shape)


def _backward(gr, lsm, v, ti, nc_v, loss, N, C):
    """The loss's backward from ``log_softmax`` ``lsm``: ``(members, d node, seed)``."""
    exps = [r for r in gr.rd(lsm) if _is(r, "exp", 1)]
    r_div = [r for r in gr.rd(nc_v) if _is(r, "div", 2) and r.inputs[1] is nc_v and
             r is not loss]
    if len(exps) != 1 or len(r_div) != 1:
        return None
    e, rd = exps[0], r_div[0]
    seed = _const(gr, rd.inputs[0])
    if not isinstance(seed, (float, np.floating)) and not (
            isinstance(seed, np.ndarray) and seed.shape == ()):
        return None
    g = gr.one(rd.outs[0])
    if not (_is(g, "where", 3) and g.inputs[0] is v and g.inputs[1] is rd.outs[0] and
            _lit(g.inputs[2], 0) and _f32(g.outs[0], (N, 1))):
        return None
    big = gr.one(g.outs[0])
    if not (_is(big, "where", 3) and big.inputs[1] is g.outs[0] and _lit(big.inputs[2], 0)
            and _f32(big.outs[0], (N, C))):
        return None
    oh = gr.p(big.inputs[0])
    iota = None if not _is(oh, "eq", 2) or oh.inputs[0] is not ti else _const(gr, oh.inputs[1])
    if not (isinstance(iota, np.ndarray) and iota.shape == (1, C) and
            np.array_equal(iota.reshape(-1), np.arange(C)) and gr.one(oh.outs[0]) is big):
        return None
    G = big.outs[0]
    s_row = [r for r in gr.rd(G) if _is(r, "sum", 1)]
    subs = [r for r in gr.rd(G) if _is(r, "sub", 2) and r.inputs[0] is G]
    if len(s_row) != 1 or len(subs) != 1 or len(gr.rd(G)) != 2 or G.id in gr.outs:
        return None
    s, sub = s_row[0], subs[0]
    dim = s.params.get("dim")
    if (tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)) not in ((1,), (-1,)) or \
            not s.params.get("keepdim") or s.params.get("dtype") is not None:
        return None
    mul = gr.one(s.outs[0])
    if not (_is(mul, "mul", 2) and set(x.id for x in mul.inputs) ==
            {e.outs[0].id, s.outs[0].id} and gr.one(e.outs[0]) is mul and
            sub.inputs[1] is mul.outs[0] and gr.one(mul.outs[0]) is sub and
            _f32(sub.outs[0], (N, C)) and _f32(mul.outs[0], (N, C))):
        return None
    return [e, rd, g, big, oh, s, mul, sub], sub, float(seed)


def _forward(gr, lsm_node):
    """The loss from ``log_softmax`` node ``lsm_node``: ``(members, loss node, v, ti,
    neg(count) var, targets var)`` or None."""
    L = lsm_node.outs[0]
    takes = [r for r in gr.rd(L) if r.op.name in ("take_rows", "take_along_dim") and
             r.inputs[0] is L and r.params.get("dim") in (1, -1)]
    if len(takes) != 1 or len(gr.rd(L)) != 2 or L.id in gr.outs:
        return None
    tk = takes[0]
    N = L.shape[0]
    ti = tk.inputs[1]
    w_ti = gr.p(ti)
    if not (_is(w_ti, "where", 3) and _lit(w_ti.inputs[2], 0) and ti.dtype is _dt.int64 and
            tuple(ti.shape) == (N, 1)):
        return None
    v, T2 = w_ti.inputs[0], w_ti.inputs[1]
    ne = gr.p(v)
    if not (_is(ne, "ne", 2) and ne.inputs[0] is T2 and not isinstance(ne.inputs[1], Var) and
            isinstance(ne.inputs[1], (int, np.integer)) and T2.__class__ is Var and
            T2.dtype is _dt.int64 and tuple(T2.shape) == (N, 1)):
        return None
    pm = gr.one(tk.outs[0])
    if not (_is(pm, "where", 3) and pm.inputs[0] is v and pm.inputs[1] is tk.outs[0] and
            _lit(pm.inputs[2], 0) and _f32(pm.outs[0], (N, 1))):
        return None
    sm = gr.one(pm.outs[0])
    if not (_is(sm, "sum", 1) and sm.params.get("dim") is None and
            not sm.params.get("keepdim") and _f32(sm.outs[0], ())):
        return None
    loss = gr.one(sm.outs[0])
    if not (_is(loss, "div", 2) and loss.inputs[0] is sm.outs[0] and _f32(loss.outs[0], ())):
        return None
    nc_v = loss.inputs[1]
    neg = gr.p(nc_v)
    cnt = gr.p(neg.inputs[0]) if _is(neg, "neg", 1) else None
    if cnt is None or cnt.op.name != "count_true" or cnt.inputs[0] is not v or \
            nc_v.dtype is not _dt.int64 or gr.one(cnt.outs[0]) is not neg:
        return None
    return [lsm_node, ne, w_ti, tk, pm, sm, loss, neg, cnt], loss, v, ti, nc_v, T2, \
        int(ne.inputs[1])


def _operands(gr, lsm_node, members):
    """``(inputs, params)`` for the logits: the product and bias folded where they can be."""
    z = lsm_node.inputs[0]
    add = gr.p(z)
    ins, params = [z], {}
    if _is(add, "add", 2) and gr.one(z) is lsm_node:
        x, b = add.inputs
        if _f32(x) and _f32(b, (z.shape[1],)) and tuple(x.shape) == tuple(z.shape):
            members.append(add)
            ins, params = [x, b], {"bias": True}
    x = ins[0]
    mm = gr.p(x)
    if (len(ins) == 2 and _is(mm, "matmul", 2) and gr.one(x) is not None and
            x.shape[1] <= _k.MAX_PRODUCT_CLASSES and mm.ct in (None, _dt.float32) and
            all(_f32(o) and len(o.shape) == 2 for o in mm.inputs)):
        members.append(mm)
        ops = []
        for o, flag in zip(mm.inputs, ("ta", "tb")):
            p = gr.p(o)
            if _transposed(p) and gr.one(o) is mm:
                members.append(p)
                ops.append(p.inputs[0])
                params[flag] = True
            else:
                ops.append(o)
        ins = ops + ins[1:]
        params["product"] = True
    return ins, params


def _sgd(gr, g, w):
    """``(mul, sub, lr)`` when ``g``'s readers update ``w`` by ``sub(w, mul(g, lr))`` (SGD
    without momentum or weight decay), else None."""
    muls = [r for r in gr.rd(g) if _is(r, "mul", 2)]
    if len(muls) != 1:
        return None
    mul = muls[0]
    lr = mul.inputs[1] if mul.inputs[0] is g else mul.inputs[0]
    sub = gr.one(mul.outs[0])
    if not (lr.__class__ is Var and lr.shape == () and lr.dtype in (_dt.float32, _dt.float64)
            and _is(sub, "sub", 2) and sub.inputs[0] is w and sub.inputs[1] is mul.outs[0]
            and _f32(sub.outs[0], tuple(w.shape)) and _f32(mul.outs[0])):
        return None
    return mul, sub, lr


def _head(gr, D, db, a_src, w, bias):
    """The classifier's backward and SGD step after ``d = D`` (its product ``a_src.T @
    w.T``): ``matmul_mask(w, D, a_src)`` (relu's backward of the input gradient, with its
    row sums), ``dw = permute(D) @ permute(a_src)``, ``w - lr * dw``, ``bias - lr * db``.
    Returns ``(members, lr, [dx, rs, dw, w_new, b_new] vars)`` or None."""
    mm = [r for r in gr.rd(D) if r.op.name == "matmul_mask"]
    if len(mm) != 1 or tuple(mm[0].inputs[:3]) != (w, D, a_src):
        return None
    mm = mm[0]
    folded = mm.params == {"ta": True, "tb": True, "rowsum": True, "bias_sgd": True} and \
        len(mm.outs) == 3 and len(mm.inputs) == 5      # the previous bias's step in it
    if not folded and (mm.params != {"ta": True, "tb": True, "rowsum": True} or
                       len(mm.outs) != 2 or len(mm.inputs) != 3):
        return None
    mmw = None
    for pd in (r for r in gr.rd(D) if _transposed(r)):
        r = gr.one(pd.outs[0])
        if _is(r, "matmul", 2) and r.inputs[0] is pd.outs[0]:
            mmw, p_d = r, pd
    if mmw is None or mmw.ct not in (None, _dt.float32) or not _f32(mmw.outs[0], tuple(w.shape)):
        return None
    pa = gr.p(mmw.inputs[1])
    if not (_transposed(pa) and pa.inputs[0] is a_src and gr.one(pa.outs[0]) is mmw):
        return None
    up_w, up_b = _sgd(gr, mmw.outs[0], w), _sgd(gr, db, bias)
    if up_w is None or up_b is None or up_w[2] is not up_b[2]:
        return None
    members = [mm, p_d, mmw, pa, up_w[0], up_w[1], up_b[0], up_b[1]]
    outs = [mm.outs[0], mm.outs[1], mmw.outs[0], up_w[1].outs[0], up_b[1].outs[0]]
    if folded:
        if mm.inputs[4] is not up_w[2]:
            return None
        return members, up_w[2], outs + [mm.outs[2]], mm.inputs[3]
    rs = mm.outs[1]
    up_r = next((u for u in [_sgd(gr, rs, r.inputs[0]) for r in gr.rd(rs) if _is(r, "mul", 2)
                             for r in gr.rd(r.outs[0]) if _is(r, "sub", 2)] if u), None)
    extra = None
    if up_r is not None and up_r[2] is up_w[2] and up_r[1].inputs[0].shape == rs.shape:
        members += [up_r[0], up_r[1]]       # the previous layer's bias: its SGD step too
        outs.append(up_r[1].outs[0])
        extra = up_r[1].inputs[0]
    return members, up_w[2], outs, extra


def _match(gr, lsm_node):
    """``(members, outs {old var id: output index}, inputs, params, emit node)`` or None."""
    z = lsm_node.inputs[0]
    if not (_is(lsm_node, "log_softmax", 1) and _f32(z) and len(z.shape) == 2 and
            lsm_node.params.get("dim") in (1, -1) and lsm_node.ct in (None, _dt.float32) and
            _f32(lsm_node.outs[0]) and 0 < z.shape[1] <= _k.MAX_CLASSES and
            z.device is not None and z.device.type == "cpu"):
        return None
    fwd = _forward(gr, lsm_node)
    if fwd is None:
        return None
    members, loss, v, ti, nc_v, T2, ii = fwd
    N, C = z.shape
    bwd = _backward(gr, lsm_node.outs[0], v, ti, nc_v, loss, N, C)
    if bwd is None:
        return None
    members += bwd[0]
    sub, seed = bwd[1], bwd[2]
    ids = {id(m) for m in members}
    if not all(gr.inner(x, ids) for x in (v, ti, nc_v)):
        return None
    D = sub.outs[0]
    sums = [r for r in gr.rd(D) if r.op.name == "sum_rows" and len(r.outs) == 1 and
            _f32(r.outs[0], (C,))]
    outs = {loss.outs[0].id: 0, D.id: 1}
    params = {"ignore_index": ii, "seed": seed}
    if sums:
        members.append(sums[0])
        outs[sums[0].outs[0].id] = 2
        params["db"] = True
    ins, more = _operands(gr, lsm_node, members)
    params.update(more)
    T = T2
    rs = gr.p(T2)
    if _is(rs, "reshape", 1) and rs.inputs[0].__class__ is Var and \
            tuple(rs.inputs[0].shape) == (N,):
        T = rs.inputs[0]                 # the reshape is left to dce
    ins.append(T)
    if params.get("product") and params.get("ta") and params.get("tb") and sums:
        hit = _head(gr, D, sums[0].outs[0], ins[0], ins[1], ins[2])
        if hit is not None:
            more, lr, new_outs, bias2 = hit
            members += more
            ins.append(lr)
            params["head"] = True
            if bias2 is not None:
                ins.append(bias2)
                params["bias2"] = True
            for k, v in enumerate(new_outs):
                outs[v.id] = 3 + k
    out_nodes = [n for n in members if any(o.id in outs for o in n.outs)]
    at = min(gr.pos[n.outs[0].id] for n in out_nodes)
    if not all(gr.pos.get(x.id, -1) < at for x in ins):
        return None                      # an input made after the first output's place
    return members, outs, ins, params, gr.prod[next(o for o in outs if gr.pos[o] == at)]


def ce_rows(graph: Graph):
    """Replace each matched cross-entropy (see the module docstring) by one ``ce_rows``
    node; returns ``(graph, {"ce_rows": n, "ce_rows_product": m})``."""
    counts = {"ce_rows": 0, "ce_rows_product": 0}
    cands = [n for n in graph.nodes if n.op.name == "log_softmax"]
    if not cands or not _k.available():
        return graph, counts
    gr = _G(graph)
    found = [m for m in (_match(gr, n) for n in cands) if m is not None]
    if not found:
        return graph, counts
    drop, emit_at = {}, {}
    for m in found:
        for n in m[0]:
            drop[id(n)] = m
        emit_at[id(m[4])] = m
        counts["ce_rows"] += 1
        counts["ce_rows_product"] += bool(m[3].get("product"))
    made: dict = {}                      # old var id -> new var

    def rule(rw, n, ins):
        m = emit_at.get(id(n))
        if m is not None:
            members, outs, vins, params, _ = m
            lsm = next(x for x in members if x.op.name == "log_softmax")
            (N, C), dev = lsm.inputs[0].shape, lsm.outs[0].device
            spec = [((), _dt.float32, dev), ((N, C), _dt.float32, dev)]
            if params.get("db"):
                spec.append(((C,), _dt.float32, dev))
            if params.get("head"):
                K = vins[0].shape[0]
                spec += [((K, N), _dt.float32, dev), ((K,), _dt.float32, dev),
                         ((C, K), _dt.float32, dev), ((C, K), _dt.float32, dev),
                         ((C,), _dt.float32, dev)]
                if params.get("bias2"):
                    spec.append(((K,), _dt.float32, dev))
            new = rw.b.add(CE_ROWS, tuple(rw.env[x.id] for x in vins), params, spec, None)
            for vid, k in outs.items():
                made[vid] = new[k]
        if id(n) in drop:
            return tuple(made.get(o.id) for o in n.outs)
        return None

    return Rewrite(graph).run(rule), counts
