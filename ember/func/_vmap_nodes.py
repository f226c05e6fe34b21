"""Autograd nodes recorded on batched values inside ``vmap`` (``vmap(grad(f))``).

:class:`_LogicalOp` wraps a primitive recorded on batched tensors: its VJP (Ember ops) runs
on batched values through the same vmap level. :class:`_PerExampleOp` is the node of a
``per_example`` composite's batched result: it differentiates each example's own graph.
"""
from __future__ import annotations

from ..autograd.grad_mode import state
from ._batched import BatchedTensor, make_batched

__all__ = ["_LogicalOp", "_PerExampleOp"]


class _LogicalOp:
    """The op of a node recorded on batched values: its VJP sees the batched output."""

    __slots__ = ("op", "out", "name", "node")
    differentiable = True

    def __init__(self, op, out):
        self.op, self.out, self.name, self.node = op, out, op.name, None

    def vjp(self, g, out, *inputs, **params):
        if self.out is not None:
            out = make_batched(*self.out)
            if state.grad_enabled and self.node is not None:     # create_graph
                out._grad_fn, out._requires_grad = self.node(), True
        rule = self.op.vjp
        if rule.__class__ is tuple:     # one rule per input: only those with an edge run
            node = self.node() if self.node is not None else None
            edges = node.next if node is not None else [True] * len(rule)
            return [None if r is None or e is None else r(g, out, *inputs, **params)
                    for r, e in zip(rule, edges)]
        return rule(g, out, *inputs, **params)


class _PerExampleOp:
    """The node of a ``per_example`` composite's batched result: its VJP differentiates each
    example's own graph (kept from the forward loop) and stacks the gradients."""

    differentiable = True

    def __init__(self, name, outs, ins, level):
        self.name, self.outs, self.ins, self.level = name, outs, ins, level

    def vjp(self, g, out, *inputs, **params):
        from ..autograd.engine import grad as autograd_grad
        from ..ops.factories import zeros_like
        from ..ops.join import stack
        gs = list(g) if isinstance(g, (list, tuple)) else [g]
        per = []
        for outs, ins in zip(self.outs, self.ins):
            b = len(per)
            pairs = [(o, c if c.__class__ is not BatchedTensor or c._level != self.level
                      else c._phys.select(c._bdim, b)) for o, c in zip(outs, gs)
                     if c is not None and o._requires_grad]
            res = autograd_grad([p[0] for p in pairs], ins, [p[1] for p in pairs],
                                retain_graph=True, create_graph=state.grad_enabled,
                                allow_unused=True) if pairs else [None] * len(ins)
            per.append([zeros_like(x) if r is None else r for r, x in zip(res, ins)])
        return tuple(make_batched(stack([p[i] for p in per]), 0, self.level)
                     for i in range(len(self.ins[0])))
