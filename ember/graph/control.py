"""Control flow for eager code and graphs: ``cond``, ``while_loop``, ``fori_loop``, ``scan``.

JAX's semantics. Eagerly (no tracer active) they are plain Python — ``cond`` calls one
branch, the loops loop — so eager autograd differentiates them like any Python code.

Under a tracer (the declarative API's :class:`~ember.graph.trace.GraphCapture` or the
concrete :class:`~ember.graph.trace.Tracer` of ``ember.compile``) each call records ONE
node whose params hold sub-graphs: the branch/body functions traced abstractly on
placeholders by a nested :class:`SubCapture`. Tensors the functions close over become
extra inputs of the sub-graphs and of the node (``captured``), so they are read from the
enclosing graph. The executor runs the node with :meth:`ControlOp.run`, which runs cached
:class:`~ember.graph.executor.Program`\\ s of the sub-graphs (the seeds' Switch/Merge/
While, chapter 004, as one structured op each). Under the concrete tracer the node also
computes its real outputs at trace time, through an autograd ``Function`` whose backward
records the VJP — so compiled training steps differentiate through control flow.

Gradients in graphs (:func:`ember.gradients`, or ``backward()`` under ``ember.compile``):
``cond``'s VJP is a ``cond`` of the branches' VJPs; ``scan``'s (and so ``fori_loop``'s
with static bounds) is a reverse ``scan`` over the carries stored by the forward;
``while_loop`` (dynamic trip count) is forward-only in graphs, like JAX.
"""
from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.grad_mode import state
from ..device.base import _backends
from ..errors import GraphError
from ..tensor import Tensor, _wrap
from .autodiff import is_float
from .executor import Program
from .ir import GraphOp
from .passes.dce import dce
from .trace import GraphCapture, Tracer

__all__ = ["cond", "while_loop", "fori_loop", "scan", "ControlOp", "SubCapture"]


# --------------------------------------------------------------------- abstract tracing
class SubCapture(GraphCapture):
    """A nested abstract tracer: tensors it did not make are captured as extra inputs."""

    def __init__(self, name="body"):
        super().__init__(name)
        self.captured: list = []      # the enclosing context's tensors, in input order

    def read(self, t: Tensor):
        v = self.env.get(id(t._data))
        if v is None:
            v = self.b.input(t._data.shape, t._dtype, t._device, f"captured{len(self.captured)}")
            self.captured.append(t)
            self.bind(t, v)
        return v


class _Traced:
    __slots__ = ("graph", "captured", "present")


def _meta(t: Tensor) -> tuple:
    return tuple(t._data.shape), t._dtype, t._device


def _as_tensor(x) -> Tensor:
    if isinstance(x, Tensor):
        return x
    from ..ops.factories import tensor
    return tensor(x)


def trace_fn(fn, metas, name: str) -> _Traced:
    """Trace ``fn(*tensors) -> flat list`` (None entries allowed) on placeholders."""
    sub = SubCapture(name)
    with sub:
        ins = [sub.placeholder(s, d, dev, None) for s, d, dev in metas]
        outs = list(fn(*ins))
        present = [o is not None for o in outs]
        ovars = [sub.read(_as_tensor(o)) for o in outs if o is not None]
    r = _Traced()
    r.graph, _ = dce(sub.b.build(ovars))     # a VJP replays the forward: drop what is unused
    r.captured, r.present = sub.captured, present
    return r


def _union(*captured_lists) -> tuple:
    """The distinct captured tensors, and per list the positions of its tensors in them."""
    seen: dict = {}
    union: list = []
    positions = []
    for caps in captured_lists:
        pos = []
        for t in caps:
            k = id(t._data)
            if k not in seen:
                seen[k] = len(union)
                union.append(t)
            pos.append(seen[k])
        positions.append(pos)
    return union, positions


def _mode():
    m = state.modes[-1] if state.modes else None
    return m if isinstance(m, (GraphCapture, Tracer)) else None


def _check_same(what, metas_a, metas_b, a="the first", b="the second"):
    for i, (x, y) in enumerate(zip(metas_a, metas_b)):
        if x[0] != y[0] or x[1] is not y[1]:
            raise GraphError(f"{what}: output {i} is {x[1].name}{list(x[0])} in {a} but "
                             f"{y[1].name}{list(y[0])} in {b}")


# --------------------------------------------------------------------- the graph op
class ControlOp(GraphOp):
    """A graph-only control-flow op; ``run`` executes its sub-graphs with cached Programs."""

    __slots__ = ("metas", "_runner", "_vjp", "_progs")
    differentiable = True

    def __init__(self, name, runner, metas, vjp):
        super().__init__(name, self._call)
        self.metas = list(metas)
        self._runner, self._vjp, self._progs = runner, vjp, {}

    def program(self, graph) -> Program:
        e = self._progs.get(id(graph))
        if e is None or e[0] is not graph:
            e = self._progs[id(graph)] = (graph, Program(graph))
        return e[1]

    def _call(self, xp, *arrays, **params):
        res = self._runner(self, xp, arrays, **params)
        return res[0] if len(self.metas) == 1 else tuple(res)

    def vjp(self, gouts, outs, ins, params, need) -> list:
        """Input gradients (tensors or None) in the current context."""
        if self._vjp is None:
            raise GraphError(f"gradients: {self.name} is not differentiable in graphs")
        gouts = [g if g is not None or not is_float(o.dtype) else _zeros(o)
                 for g, o in zip(gouts, outs)]
        return self._vjp(self, gouts, outs, ins, params, need)

    def stage(self, inputs, params) -> list:
        """Apply this op to ``inputs`` here: record it, compute it, or both."""
        m = _mode()
        if isinstance(m, GraphCapture):
            vs = m.b.add(self, [m.read(t) for t in inputs], params, self.metas)
            return [m.tensor_for(v) for v in vs]
        if state.grad_enabled and any(t._requires_grad for t in inputs):
            outs = _Staged.apply(self, params, *inputs)
            return list(outs) if isinstance(outs, tuple) else [outs]
        return _run_now(self, inputs, params, m)


def _zeros(t):
    from ..ops.factories import zeros_like
    return zeros_like(t)


def _run_now(op, inputs, params, m) -> list:
    """Compute ``op`` on real tensors; under the concrete tracer also record the node."""
    arrays = [t._data for t in inputs]
    xp = _backends[inputs[0]._device.type].xp if inputs else np
    res = op._runner(op, xp, arrays, **params)
    outs = []
    for a, (shape, dt, dev) in zip(res, op.metas):
        if any(np.may_share_memory(a, b) for b in arrays):
            a = a.copy()     # NOTE: the tracer tells values apart by the identity of arrays
        outs.append(_wrap(xp.asarray(a), dt, dev))
    if isinstance(m, Tracer):
        vs = m.b.add(op, [m.read(t) for t in inputs], params, op.metas)
        for o, v in zip(outs, vs):
            m.bind(o, v)
            m.internal.add(id(o._data))
    return outs


class _Staged(Function):
    """One autograd node for a control-flow op applied to real tensors."""

    @staticmethod
    def forward(ctx, op, params, *inputs):
        outs = _run_now(op, list(inputs), params, _mode())
        ctx.op, ctx.params, ctx.nin = op, params, len(inputs)
        ctx.save_for_backward(*inputs, *outs)
        return tuple(outs) if len(outs) != 1 else outs[0]

    @staticmethod
    def backward(ctx, *gouts):
        saved = ctx.saved_tensors
        ins, outs = saved[:ctx.nin], saved[ctx.nin:]
        need = [is_float(t._dtype) and r for t, r in zip(ins, ctx.needs_input_grad[2:])]
        grads = ctx.op.vjp(list(gouts), list(outs), list(ins), ctx.params, need)
        return (None, None) + tuple(grads)


def _emit(name, runner, vjp, metas, inputs, params) -> list:
    return ControlOp(name, runner, metas, vjp).stage(list(inputs), params)


from . import _cond_while, _scan  # noqa: E402  (they build on the machinery above)

cond = _cond_while.cond
while_loop = _cond_while.while_loop
fori_loop = _scan.fori_loop
scan = _scan.scan
