"""``cond`` and ``while_loop`` (see :mod:`ember.graph.control` for the design)."""
from __future__ import annotations

from ..errors import GraphError
from ..func._tree import tree_flatten, tree_unflatten
from ..tensor import Tensor
from .autodiff import graph_vjp
from .control import _as_tensor, _check_same, _emit, _meta, _mode, _union, _zeros, trace_fn


def _flat_call(fn, leaves, spec, idx, unpack):
    """``fn`` over the tensor leaves ``idx`` of a pytree (other leaves stay as they are)."""
    def call(*tensors):
        full = list(leaves)
        for i, t in zip(idx, tensors):
            full[i] = t
        tree = tree_unflatten(full, spec)
        out = fn(*tree) if unpack else fn(tree)
        flat, ospec = tree_flatten(out)
        call.spec = ospec
        return flat
    return call


# --------------------------------------------------------------------- cond
def cond(pred, true_fn, false_fn, *operands):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)`` (``jax.lax.cond``).

    Eagerly, ``pred`` is read with ``bool()`` and one branch runs. Inside a graph (under
    :class:`ember.Graph` or ``ember.compile``) both branches are traced into sub-graphs
    and one ``cond`` node picks at run time; the branches must return the same structure,
    shapes and dtypes. Differentiable eagerly and in graphs.

    Example:
        >>> y = ember.cond(x.sum() > 0, lambda x: x * 2, lambda x: -x, x)
    """
    m = _mode()
    if m is None or not isinstance(pred, Tensor):
        return true_fn(*operands) if bool(pred) else false_fn(*operands)
    if pred.numel() != 1:
        raise GraphError(f"cond: pred must have one element, got shape {tuple(pred.shape)}")
    leaves, spec = tree_flatten(tuple(operands))
    idx = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)]
    metas = [_meta(leaves[i]) for i in idx]
    ft = _flat_call(true_fn, leaves, spec, idx, True)
    ff = _flat_call(false_fn, leaves, spec, idx, True)
    gt, gf = trace_fn(ft, metas, "true_branch"), trace_fn(ff, metas, "false_branch")
    if ft.spec != ff.spec or gt.present != gf.present:
        raise GraphError(f"cond: the branches return different structures: {ft.spec} and "
                         f"{ff.spec}")
    omt = [(v.shape, v.dtype, v.device) for v in gt.graph.outputs]
    _check_same("cond", omt, [(v.shape, v.dtype, v.device) for v in gf.graph.outputs],
                "true_fn", "false_fn")
    caps, (pt, pf) = _union(gt.captured, gf.captured)
    k = 1 + len(idx)
    params = {"true_graph": gt.graph, "false_graph": gf.graph,
              "true_in": tuple(range(1, k)) + tuple(k + p for p in pt),
              "false_in": tuple(range(1, k)) + tuple(k + p for p in pf)}
    inputs = [pred] + [leaves[i] for i in idx] + caps
    outs = iter(_emit("cond", _run_cond, _cond_vjp, omt, inputs, params))
    flat = [next(outs) if p else None for p in gt.present]
    return tree_unflatten(flat, ft.spec)


def _run_cond(op, xp, arrays, *, true_graph, false_graph, true_in, false_in):
    g, idx = (true_graph, true_in) if bool(arrays[0]) else (false_graph, false_in)
    return op.program(g).run([arrays[i] for i in idx])


def _cond_vjp(op, gouts, outs, ins, params, need):
    """``cond(pred, vjp of true branch, vjp of false branch)``."""
    pred, rest = ins[0], list(ins[1:])
    want = [i for i in range(1, len(ins)) if need[i]]
    n = len(rest)

    def branch(graph, idx):
        def f(*args):
            gin = graph_vjp(graph, [args[i - 1] for i in idx], list(args[n:]))
            acc: dict = {}
            for i, g in zip(idx, gin):
                if g is not None:
                    acc[i] = g if i not in acc else acc[i] + g
            return [acc[i] if i in acc else _zeros(args[i - 1]) for i in want]
        return f

    gs = [g for g in gouts if g is not None]
    pos = [j for j, g in enumerate(gouts) if g is not None]

    def with_cot(f):       # the branch sees cotangents at the output positions they had
        def g(*args):
            cot = [None] * len(gouts)
            for j, c in zip(pos, args[n:]):
                cot[j] = c
            return f(*args[:n], *cot)
        return g

    res = cond(pred, with_cot(branch(params["true_graph"], params["true_in"])),
               with_cot(branch(params["false_graph"], params["false_in"])), *rest, *gs)
    grads = [None] * len(ins)
    for i, r in zip(want, res):
        grads[i] = r
    return grads


# --------------------------------------------------------------------- while_loop
def while_loop(cond_fn, body_fn, init):
    """``val = init; while cond_fn(val): val = body_fn(val)`` (``jax.lax.while_loop``).

    ``init`` is a tensor or a pytree (tuple/list/dict) of tensors; ``body_fn`` must return
    the same structure, shapes and dtypes. Eagerly a Python loop (differentiable by eager
    autograd). In graphs one ``while`` node; the trip count is dynamic, so reverse-mode is
    not available there (use :func:`fori_loop` with static bounds or :func:`scan`).

    Example:
        >>> n, x = ember.while_loop(lambda s: s[1] > 1, lambda s: (s[0] + 1, s[1] / 2),
        ...                         (ember.tensor(0), ember.tensor(100.0)))
    """
    m = _mode()
    if m is None:
        val = init
        while bool(cond_fn(val)):
            val = body_fn(val)
        return val
    leaves, spec = tree_flatten(init)
    leaves = [_as_tensor(x) for x in leaves]
    idx = list(range(len(leaves)))
    metas = [_meta(t) for t in leaves]
    fc = _flat_call(cond_fn, leaves, spec, idx, False)
    fb = _flat_call(body_fn, leaves, spec, idx, False)
    gc, gb = trace_fn(fc, metas, "cond"), trace_fn(fb, metas, "body")
    if len(gc.graph.outputs) != 1 or gc.graph.outputs[0].numel() != 1:
        raise GraphError("while_loop: cond_fn must return one boolean scalar")
    if fb.spec != spec or not all(gb.present):
        raise GraphError(f"while_loop: body_fn must return the structure of init ({spec}), "
                         f"got {fb.spec}")
    _check_same("while_loop", metas, [(v.shape, v.dtype, v.device)
                                      for v in gb.graph.outputs], "init", "body_fn's result")
    caps, (pc, pb) = _union(gc.captured, gb.captured)
    k = len(leaves)
    params = {"cond_graph": gc.graph, "body_graph": gb.graph,
              "cond_in": tuple(idx) + tuple(k + p for p in pc),
              "body_in": tuple(idx) + tuple(k + p for p in pb), "n": k}
    outs = _emit("while", _run_while, _while_vjp, metas, leaves + caps, params)
    return tree_unflatten(outs, spec)


def _run_while(op, xp, arrays, *, cond_graph, body_graph, cond_in, body_in, n):
    vals = list(arrays)
    pc, pb = op.program(cond_graph), op.program(body_graph)
    while bool(pc.run([vals[i] for i in cond_in])[0]):
        vals[:n] = pb.run([vals[i] for i in body_in])
    return vals[:n]


def _while_vjp(op, gouts, outs, ins, params, need):
    raise GraphError("gradients through while_loop are not supported in graphs (its trip "
                     "count is dynamic): use fori_loop with Python int bounds or scan, or "
                     "run it eagerly")
