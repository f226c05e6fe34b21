"""The ``pool`` pass: convolution windows and max pooling as hand-written C loops.

Eager Ember writes a convolution as ``weight @ unfold(x)`` and a max-pool as
``take_along_dim(w, argmax(w))`` over the windows ``w = unfold(x, pad_value=-inf)``, with
the backward ``fold(scatter_add_along_dim(g, arg))``. In NumPy those are several full-size
strided passes each. This pass rewrites, in a compiled graph:

* ``argmax(w, dim=1, keepdim=True)`` and its ``take_along_dim(w, arg, dim=1)`` over the
  windows of one-channel planes (how :func:`ember.nn.functional.max_pool2d` unfolds) into one
  ``maxpool`` node computing both outputs straight from the image; the unfolded windows are
  then dead (``dce`` drops them);
* ``fold(scatter_add_along_dim(g, arg, dim=1))`` (the max-pool backward) into one
  ``maxpool_grad`` node: each gradient added at its window's maximal pixel;
* every other ``unfold`` / ``fold`` (the convolutions' im2col and col2im) into the same
  primitive run by a C loop (:mod:`ember.codegen.conv_kernels`).

And around a conv block ``max_pool(relu(conv + bias))`` (runs before ``fuse``, which would
hide these elementwise ops):

* relu's backward ``threshold_backward(dx, relu_out, 0)`` (or ``mul(dx, gt(relu_out, 0))``)
  after the pool's scatter becomes the same op on ``(g, vals)`` at the pooled size before
  it (``vals`` are the inputs at the maxima);
* a per-channel ``sum`` of that gradient (the bias's gradient) sums the pooled values
  (windows without padding: off the maxima the gradient is 0);
* the forward ``relu(x + bias)`` read only by the pool is computed inside it
  (``maxpool_bias_relu``): the full-size activation is never stored.

Values are eager's: ``unfold``, ``maxpool`` and the argmax are bitwise equal; ``fold``,
``maxpool_grad`` and the channel sums add the same terms, possibly in another order.
float32/float64/float16/bfloat16 on the CPU (16-bit: float32 arithmetic inside, ``x + bias``
rounded to the dtype as eager's add: :mod:`ember.codegen.conv_kernels`); without
a C compiler the pass changes nothing (the executor runs the NumPy primitives).
"""
from __future__ import annotations

from ...codegen import conv_kernels as ck
from ...ops.registry import REGISTRY
from ..ir import BufferOp, Graph, Node, Var


def _run_unfold(xp, x, *, kernel_size, dilation, padding, stride, pad_value, out=None):
    return ck.unfold(x, kernel_size, dilation, padding, stride, pad_value, out=out)


def _run_fold(xp, cols, *, output_size, kernel_size, dilation, padding, stride, out=None):
    return ck.fold(cols, output_size, kernel_size, dilation, padding, stride, out=out)


def _run_maxpool(xp, x, *, kernel_size, dilation, padding, stride, pad_value):
    return ck.maxpool(x, kernel_size, dilation, padding, stride, pad_value)


def _run_maxpool_grad(xp, g, arg, *, output_size, kernel_size, dilation, padding, stride,
                      out=None):
    return ck.maxpool_grad(g, arg, output_size, kernel_size, dilation, padding, stride, out=out)


def _run_maxpool_bias_relu(xp, x, b, *, kernel_size, dilation, padding, stride, pad_value):
    return ck.maxpool(x, kernel_size, dilation, padding, stride, pad_value, bias=b)


UNFOLD = BufferOp("unfold_c", _run_unfold, "out")
MAXPOOL_BIAS_RELU = BufferOp("maxpool_bias_relu", _run_maxpool_bias_relu, None)
FOLD = BufferOp("fold_c", _run_fold, "out")
MAXPOOL = BufferOp("maxpool", _run_maxpool, None)
MAXPOOL_GRAD = BufferOp("maxpool_grad", _run_maxpool_grad, "out")

_GEOM = ("kernel_size", "dilation", "padding", "stride")


def _ok(v) -> bool:
    """A value the C loops handle: float32/float64/float16/bfloat16 on the CPU."""
    return v.device.type == "cpu" and ck.supports(v.dtype.np)


def _maxpools(graph, users, producer):
    """{id(argmax node): (argmax, take node or None, unfold node)} of the max-pool pattern."""
    found = {}
    for a in graph.nodes:
        if a.op.name != "argmax" or a.params.get("dim") not in (1, -2) or \
                not a.params.get("keepdim") or a.inputs[0].__class__ is not Var:
            continue
        u = producer.get(a.inputs[0].id)
        if u is None or u.op.name != "unfold" or u.inputs[0].shape[1] != 1 or \
                len(u.inputs[0].shape) != 4 or not _ok(u.inputs[0]):
            continue
        take = next((t for t in users.get(a.outs[0].id, ()) if t.op.name == "take_along_dim"
                     and t.params.get("dim") in (1, -2) and t.inputs[0] is u.outs[0]
                     and t.inputs[1] is a.outs[0]), None)
        found[id(a)] = (a, take, u)
    return found


def _maxpool_grads(graph, users, producer, outputs):
    """{id(fold node): scatter node} of ``fold(scatter_add_along_dim(g, arg, dim=1))``."""
    found = {}
    for f in graph.nodes:
        if f.op.name != "fold" or f.inputs[0].__class__ is not Var:
            continue
        s = producer.get(f.inputs[0].id)
        if s is None or s.op.name != "scatter_add_along_dim" or \
                s.params.get("dim") not in (1, -2):
            continue
        g, arg = s.inputs
        kh, kw = f.params["kernel_size"]
        sv = s.outs[0]
        if (g.__class__ is not Var or arg.__class__ is not Var or len(sv.shape) != 3
                or sv.shape[1] != kh * kw or tuple(g.shape) != (sv.shape[0], 1, sv.shape[2])
                or tuple(arg.shape) != tuple(g.shape) or not _ok(g) or sv.id in outputs
                or len(users.get(sv.id, ())) != 1):
            continue
        found[id(f)] = s
    return found


def _relu_masks(graph, users, producer, outputs, pools, grads):
    """{id(mul node): (fold node, pool key, gt node, reshape node, [sum nodes])} of
    ``mul(reshape(maxpool_grad), gt(x, 0))`` (gt node None: ``threshold_backward(
    reshape(maxpool_grad), x, 0)``) where the max-pool read ``x`` (or a reshape of
    it): relu's backward after the pool's; the sums are per-channel sums of the result (a
    conv bias's gradient)."""
    by_arg = {a.outs[0].id: key for key, (a, _, _) in pools.items()}
    found = {}
    for fid, s in grads.items():
        key = by_arg.get(s.inputs[1].id)
        if key is None:
            continue
        a, _, u = pools[key]
        f = next(n for n in users[s.outs[0].id])
        if any(f.params[k] != u.params[k] for k in _GEOM):
            continue
        r = users.get(f.outs[0].id, ())
        if len(r) != 1 or r[0].op.name != "reshape" or f.outs[0].id in outputs:
            continue
        r = r[0]
        m = users.get(r.outs[0].id, ())
        if len(m) != 1 or r.outs[0].id in outputs:
            continue
        m = m[0]
        if m.op.name == "threshold_backward":
            found.update(_threshold_mask(m, f, key, r, u, producer, users))
            continue
        if m.op.name != "mul":
            continue
        other = m.inputs[1] if m.inputs[0] is r.outs[0] else m.inputs[0]
        gt = producer.get(other.id) if other.__class__ is Var else None
        if gt is None or gt.op.name != "gt" or gt.inputs[1].__class__ is Var or \
                gt.inputs[1] != 0 or m.outs[0].shape != r.outs[0].shape or \
                other.shape != m.outs[0].shape:
            continue
        x = u.inputs[0]
        px = producer.get(x.id)
        if gt.inputs[0] is not x and not (px is not None and px.op.name == "reshape"
                                          and px.inputs[0] is gt.inputs[0]):
            continue
        found[id(m)] = (f, key, gt, r, _chan_sums(m, r, u, users))
    return found


def _chan_sums(m, r, u, users):
    """The per-channel sums (a conv bias's gradient) of the masked gradient ``m``."""
    n4 = len(r.outs[0].shape) == 4
    # NOTE: only without padding: a padded window's maximum may be a pad cell, whose
    # gradient maxpool_grad drops (and a channel sum of the pooled values would not)
    nopad = all(q <= 0 for pr in u.params["padding"] for q in pr)
    return [x for x in users.get(m.outs[0].id, ()) if x.op.name == "sum" and n4 and nopad
            and tuple(sorted(d % 4 for d in x.params["dim"] or ())) == (0, 2, 3)
            and x.params.get("dtype") is None and x.outs[0].dtype is m.outs[0].dtype]


def _threshold_mask(m, f, key, r, u, producer, users):
    """``{id(m): (f, key, None, r, sums)}`` when ``m`` is relu's eager-form backward
    ``threshold_backward(reshape(maxpool_grad), x, 0)`` on the max-pool's input ``x`` (or
    what it reshapes), else ``{}``."""
    y, x = m.inputs[1], u.inputs[0]
    px = producer.get(x.id)
    if (m.inputs[0] is not r.outs[0] or y.__class__ is not Var or m.params["threshold"] != 0
            or y.shape != m.outs[0].shape or m.outs[0].shape != r.outs[0].shape):
        return {}
    if y is not x and not (px is not None and px.op.name == "reshape" and px.inputs[0] is y):
        return {}
    return {id(m): (f, key, None, r, _chan_sums(m, r, u, users))}


def _bias_relus(graph, users, producer, outputs, pools, masks):
    """{pool key: (x, bias)} of max-pools reading ``relu(x + bias)`` (a per-channel bias of
    shape (C, 1, 1) or (1, C, 1, 1) on 4-D ``x``) that nothing else reads, once the relu
    masks are moved (:func:`_relu_masks`): the pool computes the prologue itself."""
    moved = {id(gt) for (_, _, gt, _, _) in masks.values() if gt is not None}
    mul_of = set(masks)
    found = {}
    for key, (a, t, u) in pools.items():
        xv = u.inputs[0]
        px = producer.get(xv.id)
        rv = px.inputs[0] if px is not None and px.op.name == "reshape" else xv
        relu = producer.get(rv.id)
        if relu is None or relu.op.name != "relu" or rv.id in outputs:
            continue
        readers = users.get(rv.id, ())
        if not all(r is px or r is u or id(r) in mul_of or (id(r) in moved and all(
                id(m) in mul_of for m in users.get(r.outs[0].id, ()))) for r in readers):
            continue
        add = producer.get(relu.inputs[0].id)
        if add is None or add.op.name != "add" or relu.inputs[0].id in outputs or \
                len(users.get(relu.inputs[0].id, ())) != 1:
            continue
        x, b = add.inputs
        if x.__class__ is not Var or b.__class__ is not Var or len(x.shape) != 4:
            continue
        n, c, h, w = x.shape
        if (tuple(b.shape) not in ((c, 1, 1), (1, c, 1, 1)) or x.dtype is not b.dtype
                or add.outs[0].shape != x.shape or add.outs[0].dtype is not x.dtype
                or add.ct not in (None, x.dtype) or tuple(xv.shape) != (n * c, 1, h, w)
                or not _ok(x)):
            continue
        found[key] = (x, b)
    return found


def pool(graph: Graph):
    """Rewrite max-pools, their gradients and the remaining unfold/fold nodes (see above)."""
    if not ck.available():
        return graph, {"no_compiler": 1}
    if any(n.op.name in ("unfold", "fold") for n in graph.nodes):
        ck.kernels()                   # build (or load) the library once, at compile time
    users = graph.users()
    producer = {o.id: n for n in graph.nodes for o in n.outs}
    outputs = {v.id for v in graph.outputs}
    pools = _maxpools(graph, users, producer)
    grads = _maxpool_grads(graph, users, producer, outputs)
    masks = _relu_masks(graph, users, producer, outputs, pools, grads)
    prologues = _bias_relus(graph, users, producer, outputs, pools, masks)
    drop = {id(t) for _, t, _ in pools.values() if t is not None}
    drop |= {id(s) for s in grads.values()}
    drop |= {id(x) for f, _, _, r, _ in masks.values() for x in (f, r)}
    # per-channel sums of a masked max-pool gradient: summed at the pooled size (the
    # full-size gradient is 0 off the window maxima)
    chan_sums = {id(x): mid for mid, (*_, sums) in masks.items() for x in sums}
    pooled = {}
    # the windows only the max-pool read: left for dce, not rewritten
    windows = {id(u) for a, t, u in pools.values()
               if all(x is a or x is t for x in users.get(u.outs[0].id, ()))}
    next_id = [max((v.id for v in graph.vars()), default=-1) + 1]

    def new(like, dtype, shape=None):
        v = Var(next_id[0], like.shape if shape is None else shape, dtype, like.device)
        next_id[0] += 1
        return v
    vals = {key: (t.outs[0] if t is not None else new(a.outs[0], u.outs[0].dtype))
            for key, (a, t, u) in pools.items()}
    nodes, stats = [], {"maxpool": 0, "maxpool_grad": 0, "relu_mask": 0,
                        "channel_sum": 0, "bias_relu": 0, "unfold": 0,
                        "fold": 0}
    for n in graph.nodes:
        if id(n) in drop:
            continue
        if id(n) in pools:
            a, take, u = pools[id(n)]
            if id(n) in prologues:
                x, b = prologues[id(n)]
                xr = new(x, x.dtype, u.inputs[0].shape)
                nodes.append(Node(REGISTRY["reshape"], (x,), {"shape": xr.shape}, (xr,),
                                  loc=n.loc))
                nodes.append(Node(MAXPOOL_BIAS_RELU, (xr, b), dict(u.params),
                                  (vals[id(n)], a.outs[0]), loc=n.loc))
                stats["bias_relu"] += 1
            else:
                nodes.append(Node(MAXPOOL, (u.inputs[0],), dict(u.params),
                                  (vals[id(n)], a.outs[0]), loc=n.loc))
            stats["maxpool"] += 1
        elif id(n) in masks:
            # NOTE: the relu mask read at the window maxima only: ``vals`` holds exactly
            # the input values there, so ``g * (vals > 0)`` scattered equals the mask
            # applied to the scattered gradient (0 elsewhere; inf * 0 = NaN kept).
            f, key, gt, r, _ = masks[id(n)]
            g, arg = grads[id(f)].inputs
            g2 = new(g, n.outs[0].dtype)
            if gt is None:      # threshold_backward(g, vals, 0): the mask in the same op
                nodes.append(Node(n.op, (g, vals[key]), dict(n.params), (g2,), n.ct,
                                  loc=n.loc))
            else:
                mk = new(g, gt.outs[0].dtype)
                nodes.append(Node(gt.op, (vals[key],) + tuple(gt.inputs[1:]),
                                  dict(gt.params), (mk,), gt.ct, loc=n.loc))
                nodes.append(Node(n.op, (g, mk), dict(n.params), (g2,), n.ct, loc=n.loc))
            pooled[id(n)] = (g2, r)
            dx = new(f.outs[0], f.outs[0].dtype)
            nodes.append(Node(MAXPOOL_GRAD, (g2, arg), dict(f.params), (dx,), loc=n.loc))
            nodes.append(Node(r.op, (dx,), dict(r.params), n.outs, r.ct, loc=n.loc))
            stats["maxpool_grad"] += 1
            stats["relu_mask"] += 1
        elif id(n) in chan_sums:
            g2, r = pooled[chan_sums[id(n)]]
            nb, c = r.outs[0].shape[:2]
            flat = new(g2, g2.dtype, (nb, c, g2.numel() // (nb * c)))
            nodes.append(Node(r.op, (g2,), dict(r.params, shape=flat.shape), (flat,), r.ct,
                              loc=n.loc))
            tot = new(g2, n.outs[0].dtype, (c,))
            nodes.append(Node(n.op, (flat,), dict(n.params, dim=(0, 2), keepdim=False),
                              (tot,), n.ct, loc=n.loc))
            nodes.append(Node(r.op, (tot,), dict(r.params, shape=n.outs[0].shape), n.outs,
                              r.ct, loc=n.loc))
            stats["channel_sum"] += 1
        elif id(n) in grads:
            s = grads[id(n)]
            nodes.append(Node(MAXPOOL_GRAD, tuple(s.inputs), dict(n.params), n.outs, loc=n.loc))
            stats["maxpool_grad"] += 1
        elif n.op.name == "unfold" and id(n) not in windows and len(n.inputs[0].shape) == 4 \
                and _ok(n.inputs[0]):
            nodes.append(Node(UNFOLD, n.inputs, dict(n.params), n.outs, loc=n.loc))
            stats["unfold"] += 1
        elif n.op.name == "fold" and len(n.inputs[0].shape) == 3 and _ok(n.inputs[0]):
            nodes.append(Node(FOLD, n.inputs, dict(n.params), n.outs, loc=n.loc))
            stats["fold"] += 1
        else:
            nodes.append(n)
    if not any(stats.values()):
        return graph, stats
    return Graph(graph.inputs, nodes, graph.outputs, graph.name), stats
