"""The ``conv_gemm`` pass: a convolution's three GEMMs as single 2-D GEMMs.

Eager Ember convolves as ``W2d @ unfold(x)`` with columns ``cols`` of shape (N, C*K, L):
NumPy runs that as N stacked products (N small BLAS calls), the weight gradient as N
products ``dY[n] @ cols[n]^T`` and a sum over the batch, and the input gradient as N
products ``W2d^T @ dY[n]``. With the columns laid out channel-first, ``cols_t`` of shape
(C*K, N*L), each is one large GEMM (BLAS runs much faster on one big product than on
many small ones, and the batch sum disappears into the product's inner dimension):

* ``unfold_c(x)`` -> ``unfold_t(x)``: (C*K, N*L) columns (a C loop, :mod:`.conv_kernels`);
* ``matmul(W2d, cols)`` -> ``Y_t = W2d @ cols_t``, (Co, N*L): a max-pool reading it (the
  ``pool`` pass's ``maxpool``/``maxpool_bias_relu`` over its (N*Co, 1, h, w) planes, through
  reshapes only) reads the channel-first planes directly; any other reader gets the
  (N, Co, L) result back by a transposing copy;
* ``sum(matmul(dY, permute(cols)), dim=0)`` -> ``dY_t @ cols_t^T``;
* ``fold_c(matmul(W2d^T, dY))`` -> ``fold_t(W2d^T @ dY_t)``, the fold reading channel-first
  columns;

where ``dY_t`` (Co, N*L) is written channel-first by the max-pool gradient when
``dY`` is only its reshaped output and only these GEMMs read it, else a transposing copy.

Runs after ``pool`` (it rewrites that pass's ``unfold_c``/``fold_c``/max-pool nodes).
Values are eager's up to float rounding: the GEMMs sum the same products in another
order (the weight gradient's batch sum inside the GEMM), the copies and pools are exact.
Only the patterns above are rewritten (a grouped conv's 4-D matmuls are not); float32/
float64/float16/bfloat16 on the CPU (16-bit GEMMs: float32 BLAS on converted operands, as
eager's); without a C compiler the pass changes nothing.
"""
from __future__ import annotations

from ...codegen import conv_kernels as ck
from ...ops.registry import REGISTRY
from ..ir import BufferOp, Graph, Node, Var
from .dce import dce
from .pool import _ok


def _run_unfold_t(xp, x, *, kernel_size, dilation, padding, stride, pad_value, out=None):
    return ck.unfold(x, kernel_size, dilation, padding, stride, pad_value, out=out,
                     channel_first=True)


def _run_fold_t(xp, cols, *, output_size, kernel_size, dilation, padding, stride, batch,
                out=None):
    return ck.fold(cols, output_size, kernel_size, dilation, padding, stride, out=out,
                   batch=batch)


def _run_maxpool_cf(xp, x, *, kernel_size, dilation, padding, stride, pad_value, channels):
    return ck.maxpool(x, kernel_size, dilation, padding, stride, pad_value, channels=channels)


def _run_maxpool_bias_relu_cf(xp, x, b, *, kernel_size, dilation, padding, stride, pad_value,
                              channels):
    return ck.maxpool(x, kernel_size, dilation, padding, stride, pad_value, bias=b,
                      channels=channels)


def _run_maxpool_grad_cf(xp, g, arg, *, output_size, kernel_size, dilation, padding, stride,
                         channels, out=None):
    return ck.maxpool_grad(g, arg, output_size, kernel_size, dilation, padding, stride,
                           out=out, channels=channels)


UNFOLD_T = BufferOp("unfold_t", _run_unfold_t, "out")
FOLD_T = BufferOp("fold_t", _run_fold_t, "out")
MAXPOOL_CF = BufferOp("maxpool_cf", _run_maxpool_cf, None)
MAXPOOL_BIAS_RELU_CF = BufferOp("maxpool_bias_relu_cf", _run_maxpool_bias_relu_cf, None)
MAXPOOL_GRAD_CF = BufferOp("maxpool_grad_cf", _run_maxpool_grad_cf, "out")
_CF = {"maxpool": MAXPOOL_CF, "maxpool_bias_relu": MAXPOOL_BIAS_RELU_CF}


def _mm(n) -> bool:
    return n.op.name == "matmul" and n.ct in (None, n.outs[0].dtype) and all(
        x.__class__ is Var and x.dtype is n.outs[0].dtype for x in n.inputs)


def _dims(dim) -> tuple:
    """A reduction's ``dim`` param as a tuple of non-negative dims of a 3-D value."""
    return tuple(x % 3 for x in ((dim,) if isinstance(dim, int) else dim or ()))


def _chain(v, users, outputs, end):
    """(reshape nodes, end node) when ``v`` reaches exactly one node with ``end(node)``
    through single-reader reshapes, none of whose values is a graph output; else None."""
    chain = []
    while v.id not in outputs:
        us = users.get(v.id, ())
        if len(us) != 1:
            return None
        if us[0].op.name != "reshape":
            return (chain, us[0]) if end(us[0]) else None
        chain.append(us[0])
        v = us[0].outs[0]
    return None


def _convs(graph, users, outputs):
    """{id(unfold_c node): (forward matmuls, [(permute, weight-grad matmul, sum)])} of the
    unfolds whose columns only these read: ``matmul(W2d, cols)`` with 2-D ``W2d`` and
    ``sum(matmul(dY, permute(cols, (0, 2, 1))), dim=0)``."""
    found = {}
    for u in graph.nodes:
        if u.op.name != "unfold_c" or u.outs[0].id in outputs or not _ok(u.inputs[0]):
            continue
        cols = u.outs[0]
        n, ck_, ll = cols.shape
        fwd, wgrad, ok = [], [], True
        for m in users.get(cols.id, ()):
            if _mm(m) and m.inputs[1] is cols and m.inputs[0] is not cols and \
                    len(m.inputs[0].shape) == 2 and m.inputs[0].shape[1] == ck_:
                fwd.append(m)
            elif m.op.name == "permute" and tuple(m.params["dims"]) == (0, 2, 1) and \
                    m.outs[0].id not in outputs and users.get(m.outs[0].id):
                for w in users[m.outs[0].id]:
                    d = w.inputs[0]
                    s = users.get(w.outs[0].id, ())
                    if not (_mm(w) and w.inputs[1] is m.outs[0] and len(d.shape) == 3
                            and d.shape[0] == n and d.shape[2] == ll
                            and w.outs[0].id not in outputs and len(s) == 1
                            and s[0].op.name == "sum"
                            and _dims(s[0].params["dim"]) == (0,)
                            and not s[0].params["keepdim"] and s[0].params["dtype"] is None
                            and s[0].outs[0].dtype is w.outs[0].dtype):
                        ok = False
                        break
                    wgrad.append((m, w, s[0]))
            else:
                ok = False
            if not ok:
                break
        if ok and (fwd or wgrad):
            found[id(u)] = (fwd, wgrad)
    return found


def _input_grads(graph, users, outputs):
    """{id(fold_c node): matmul} of ``fold_c(matmul(A, dY))`` with 2-D ``A`` (Ci*K, Co)
    and (N, Co, L) ``dY`` read by nothing else: a conv's input gradient."""
    producer = {o.id: n for n in graph.nodes for o in n.outs}
    found = {}
    for f in graph.nodes:
        if f.op.name != "fold_c" or f.inputs[0].__class__ is not Var:
            continue
        m = producer.get(f.inputs[0].id)
        if m is None or not _mm(m) or m.outs[0].id in outputs or \
                len(users.get(m.outs[0].id, ())) != 1:
            continue
        a, d = m.inputs
        if len(a.shape) == 2 and len(d.shape) == 3 and a is not d:
            found[id(f)] = m
    return found


def conv_gemm(graph: Graph):
    """Rewrite convolutions' GEMMs over channel-first columns (see above)."""
    if not ck.available():
        return graph, {"no_compiler": 1}
    if any(n.op.name in ("unfold_c", "fold_c", "maxpool", "maxpool_bias_relu", "maxpool_grad")
           for n in graph.nodes):
        ck.kernels()                   # the library is built only for graphs that use it
    # NOTE: ``pool`` leaves the nodes it replaced for dce; their reads would hide that a
    # conv output reaches only its max-pool
    graph, _ = dce(graph)
    users = graph.users()
    producer = {o.id: n for n in graph.nodes for o in n.outs}
    outputs = {v.id for v in graph.outputs}
    convs = _convs(graph, users, outputs)
    igrads = _input_grads(graph, users, outputs)
    drop = set()
    # dY values read by rewritten GEMMs, and the GEMM nodes that read them
    dys, gemms = {}, set()
    for fwd, wgrad in convs.values():
        for p, w, s in wgrad:
            dys[w.inputs[0].id] = w.inputs[0]
            gemms.add(id(w))
            drop |= {id(p), id(s)}
    for m in igrads.values():
        dys[m.inputs[1].id] = m.inputs[1]
        gemms.add(id(m))
    # a dY made by a max-pool gradient through reshapes and read only by the rewritten
    # GEMMs: the gradient is written channel-first, dY_t is a reshape of it
    dy_pool = {}
    for vid, d in dys.items():
        pg = producer.get(vid)
        chain = []
        while pg is not None and pg.op.name == "reshape" and pg.inputs[0].__class__ is Var:
            chain.append(pg)
            pg = producer.get(pg.inputs[0].id)
        if pg is None or pg.op.name != "maxpool_grad" or not chain or vid in outputs or \
                not all(id(x) in gemms for x in users.get(vid, ())):
            continue
        planes = pg.outs[0]
        if planes.shape[1] != 1 or len(planes.shape) != 4 or \
                planes.shape[2] * planes.shape[3] != d.shape[2] or \
                planes.shape[0] != d.shape[0] * d.shape[1] or \
                any(len(users.get(x.outs[0].id, ())) != 1 or x.outs[0].id in outputs
                    for x in [pg] + chain[1:]):
            continue
        dy_pool[id(pg)] = d
        drop |= {id(x) for x in chain}
    # forward outputs read by a max-pool through reshapes only: it reads channel-first
    fwd_pool = {}
    for fwd, _ in convs.values():
        for m in fwd:
            n, co, ll = m.outs[0].shape
            ch = _chain(m.outs[0], users, outputs, lambda x: x.op.name in _CF)
            if ch is None:
                continue
            chain, mp = ch
            x = mp.inputs[0]
            if chain and x is chain[-1].outs[0] and tuple(x.shape[:2]) == (n * co, 1) and \
                    x.shape[2] * x.shape[3] == ll:
                fwd_pool[id(mp)] = m
                drop |= {id(r) for r in chain}
    next_id = [max((v.id for v in graph.vars()), default=-1) + 1]

    def new(like, shape, dtype=None):
        v = Var(next_id[0], shape, like.dtype if dtype is None else dtype, like.device)
        next_id[0] += 1
        return v

    def node(op, ins, params, outs, ct=None, loc=None):
        op = REGISTRY[op] if isinstance(op, str) else op
        nodes.append(Node(op, tuple(ins), params, tuple(outs), ct, loc=loc))
        return outs[0]

    def transposed(v, loc):
        """(A, B, C) -> contiguous (B, A*C) matrix of ``v``."""
        a, b, c = v.shape
        pv = node("permute", (v,), {"dims": (1, 0, 2)}, (new(v, (b, a, c)),), loc=loc)
        cv = node("contiguous", (pv,), {}, (new(v, (b, a, c)),), loc=loc)
        return node("reshape", (cv,), {"shape": (b, a * c)}, (new(v, (b, a * c)),), loc=loc)

    cols_t, y_t, dy_t = {}, {}, {}

    def get_dy_t(d, loc):
        if d.id not in dy_t:
            dy_t[d.id] = transposed(d, loc)
        return dy_t[d.id]

    wg_of = {id(w): (uid, s) for uid, (_, wgrad) in convs.items() for _, w, s in wgrad}
    fwd_of = {id(m): uid for uid, (fwd, _) in convs.items() for m in fwd}
    ig_of = {id(m) for m in igrads.values()}
    stats = {"unfold_t": 0, "conv_gemm": 0, "weight_grad": 0, "input_grad": 0,
             "pool_cf": 0, "pool_grad_cf": 0, "transposes": 0}
    nodes = []
    for n in graph.nodes:
        loc = n.loc
        if id(n) in drop:
            continue
        if id(n) in convs:
            x = n.inputs[0]
            nb, c = x.shape[:2]
            cv = n.outs[0]
            cols_t[id(n)] = node(UNFOLD_T, (x,), dict(n.params),
                                 (new(cv, (cv.shape[1], nb * cv.shape[2])),), loc=loc)
            stats["unfold_t"] += 1
        elif id(n) in fwd_of:
            a, cv = n.inputs
            nb, co, ll = n.outs[0].shape
            yt = node("matmul", (a, cols_t[fwd_of[id(n)]]), {},
                      (new(n.outs[0], (co, nb * ll)),), n.ct, loc)
            stats["conv_gemm"] += 1
            if any(m is n for m in fwd_pool.values()):
                y_t[id(n)] = yt
            else:
                # NOTE: another reader wants (N, Co, L): one transposing copy of the output
                r = node("reshape", (yt,), {"shape": (co, nb, ll)}, (new(yt, (co, nb, ll)),),
                         loc=loc)
                pv = node("permute", (r,), {"dims": (1, 0, 2)}, (new(r, (nb, co, ll)),),
                          loc=loc)
                node("contiguous", (pv,), {}, n.outs, loc=loc)
                stats["transposes"] += 1
        elif id(n) in fwd_pool:
            m = fwd_pool[id(n)]
            yt = y_t[id(m)]
            x = n.inputs[0]
            xr = node("reshape", (yt,), {"shape": x.shape}, (new(yt, x.shape),), loc=loc)
            node(_CF[n.op.name], (xr,) + tuple(n.inputs[1:]),
                 dict(n.params, channels=m.outs[0].shape[1]), n.outs, loc=loc)
            stats["pool_cf"] += 1
        elif id(n) in dy_pool:
            d = dy_pool[id(n)]
            g = new(n.outs[0], n.outs[0].shape)
            node(MAXPOOL_GRAD_CF, n.inputs, dict(n.params, channels=d.shape[1]), (g,), loc=loc)
            nb, co, ll = d.shape
            dy_t[d.id] = node("reshape", (g,), {"shape": (co, nb * ll)},
                              (new(g, (co, nb * ll)),), loc=loc)
            stats["pool_grad_cf"] += 1
        elif id(n) in wg_of:
            uid, s = wg_of[id(n)]
            d = n.inputs[0]
            if d.id not in dy_t:
                stats["transposes"] += 1
            dt = get_dy_t(d, loc)
            ct = cols_t[uid]
            pt = node("permute", (ct,), {"dims": (1, 0)}, (new(ct, ct.shape[::-1]),), loc=loc)
            w = node("matmul", (dt, pt), {}, (new(dt, (dt.shape[0], pt.shape[1])),), n.ct,
                     loc)
            node("reshape", (w,), {"shape": s.outs[0].shape}, s.outs, loc=loc)
            stats["weight_grad"] += 1
        elif id(n) in ig_of:
            a, d = n.inputs
            if d.id not in dy_t:
                stats["transposes"] += 1
            dt = get_dy_t(d, loc)
            y_t[id(n)] = node("matmul", (a, dt), {}, (new(dt, (a.shape[0], dt.shape[1])),),
                              n.ct, loc)
        elif id(n) in igrads:
            m = igrads[id(n)]
            node(FOLD_T, (y_t[id(m)],), dict(n.params, batch=m.outs[0].shape[0]), n.outs,
                 loc=loc)
            stats["input_grad"] += 1
        else:
            nodes.append(n)
    if not any(stats.values()):
        return graph, stats
    return Graph(graph.inputs, nodes, graph.outputs, graph.name), stats
