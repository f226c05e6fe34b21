"""Graph-level reverse mode: gradients as more graph nodes, from the registry's VJP rules.

:func:`backprop` walks recorded nodes backwards and applies each op's VJP rule to the
tensors that stand for the node's values — placeholder ("meta") tensors under a
:class:`~ember.graph.trace.GraphCapture`, so every op of the rule is recorded as a new
node; real tensors anywhere else, so the same code also computes. Gradients are reduced
to their input's shape and dtype in one place (:func:`_fit`), like the eager engine,
and fan-in is summed.

:func:`replay` re-emits a sub-graph's nodes in the current context, and :func:`graph_vjp`
= replay + backprop: what the VJPs of control-flow ops (:mod:`ember.graph.control`) are
made of.
"""
from __future__ import annotations

from ..autograd.graph import ShapeOnly
from ..errors import GraphError
from ..ops import dispatch as _dispatch
from ..tensor import Tensor
from .ir import CONSTANT, GraphOp, Var


def is_float(dtype) -> bool:
    return dtype.is_floating_point


def depends_on(nodes, wrt_ids: set) -> set:
    """Ids of the vars (``wrt_ids`` included) whose value depends on one in ``wrt_ids``."""
    live = set(wrt_ids)
    for n in nodes:
        if any(x.__class__ is Var and x.id in live for x in n.inputs):
            live.update(o.id for o in n.outs)
    return live


def backprop(nodes, value, seeds: dict, wrt) -> list:
    """Gradients of the seeded vars with respect to ``wrt`` (vars), as tensors or None.

    Args:
        nodes: the nodes to walk, in topological order.
        value: ``fn(var) -> tensor`` standing for that var in the current context.
        seeds: ``{var id: cotangent tensor}`` for the outputs being differentiated.
        wrt: the vars to return gradients for (None where no path reaches them).
    """
    live = depends_on(nodes, {v.id for v in wrt})
    grads = {k: g for k, g in seeds.items() if k in live}
    for n in reversed(nodes):
        gouts = [grads.get(o.id) for o in n.outs]
        if all(g is None for g in gouts):
            continue
        need = [x.__class__ is Var and x.id in live and is_float(x.dtype) for x in n.inputs]
        if not any(need):
            continue
        in_grads = _node_vjp(n, gouts, value, need)
        for x, ok, g in zip(n.inputs, need, in_grads):
            if ok and g is not None:
                g = _fit(g, x, n)
                cur = grads.get(x.id)
                grads[x.id] = g if cur is None else cur + g
    return [grads.get(v.id) for v in wrt]


def _node_vjp(n, gouts, value, need) -> list:
    op = n.op
    if isinstance(op, GraphOp):
        if getattr(op, "vjp", None) is None:
            raise GraphError(f"gradients: can't differentiate through graph op {op.name}")
        ins = [value(x) if x.__class__ is Var else x for x in n.inputs]
        return list(op.vjp(gouts, [value(o) for o in n.outs], ins, n.params, need))
    if not op.differentiable:
        return [None] * len(n.inputs)
    saved_in = op.save in ("inputs", "both")
    if saved_in:
        ins = [value(x) if x.__class__ is Var else x for x in n.inputs]
    else:
        ins = [ShapeOnly(x.shape, x.dtype, x.device) if x.__class__ is Var else None
               for x in n.inputs]
    out = value(n.outs[0]) if op.save in ("output", "both") else None
    g = gouts[0]
    if op.vjp.__class__ is tuple:   # one rule per input: only the gradients needed
        res = [rule(g, out, *ins, **n.params) if ok and rule is not None else None
               for rule, ok in zip(op.vjp, need)]
    else:
        res = op.vjp(g, out, *ins, **n.params)
    if not isinstance(res, (tuple, list)):
        res = (res,)
    if len(res) != len(n.inputs):
        raise GraphError(f"gradients: the VJP of {op.name} returned {len(res)} gradients for "
                         f"{len(n.inputs)} inputs")
    return list(res)


def _fit(g, x: Var, n) -> Tensor:
    """Reduce a gradient to its input's shape and cast it to its dtype (like the engine)."""
    if tuple(g.shape) != x.shape:
        from ..ops.reduce import sum_to
        try:
            g = sum_to(g, x.shape)
        except Exception:
            raise GraphError(f"gradients: {n.op.name} gave a gradient of shape "
                             f"{tuple(g.shape)} for an input of shape {x.shape}") from None
    if g.dtype is not x.dtype:
        g = g.to(x.dtype)
    return g


def replay(graph, inputs) -> dict:
    """Re-emit ``graph``'s nodes on ``inputs`` (tensors) here; ``{var id: tensor}``."""
    env = {v.id: t for v, t in zip(graph.inputs, inputs)}
    for n in graph.nodes:
        ins = [env[x.id] if x.__class__ is Var else x for x in n.inputs]
        op = n.op
        if op is CONSTANT:
            from ..ops.factories import tensor
            o = n.outs[0]
            outs = [tensor(n.params["value"], dtype=o.dtype, device=o.device)]
        elif hasattr(op, "stage"):
            outs = op.stage(ins, n.params)
        elif isinstance(op, GraphOp):
            raise GraphError(f"gradients: can't replay graph op {op.name} (random draws "
                             f"inside control flow are not differentiable)")
        else:
            outs = [_dispatch.apply(op, ins, n.params)]
        for o, t in zip(n.outs, outs):
            env[o.id] = t
    return env


def graph_vjp(graph, inputs, cotangents) -> list:
    """Gradients of ``graph``'s outputs (weighted by ``cotangents``) w.r.t. its inputs.

    Emits ``graph``'s forward and backward in the current context. Returns one tensor or
    None (no path, or not floating point) per graph input.
    """
    env = replay(graph, inputs)
    seeds: dict = {}
    for o, c in zip(graph.outputs, cotangents):
        if c is not None:
            seeds[o.id] = c if o.id not in seeds else seeds[o.id] + c
    return backprop(graph.nodes, lambda v: env[v.id], seeds, graph.inputs)
