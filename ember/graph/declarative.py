"""The declarative API: build a graph first, run it later (the seeds' define-then-run style).

::

    g = ember.Graph()
    with g:
        x = ember.placeholder((3,), name="x")
        w = ember.Variable(np.ones(3, np.float32), name="w")
        loss = (x * w).sum()
        (dw,) = ember.gradients(loss, [w])
        step = w.assign(w - 0.1 * dw)
    print(g)                                   # the IR
    g.run(loss, {x: np.arange(3.0)})           # -> NumPy array
    g.run([loss, step], {x: ...})              # also updates w

Inside ``with g:`` ordinary Ember ops are recorded by the abstract tracer
(:class:`~ember.graph.trace.GraphCapture`) on placeholder tensors: they have shapes and
dtypes but no values (reading one into Python raises). :func:`gradients` adds gradient
nodes (graph-level reverse mode, :mod:`ember.graph.autodiff`). :meth:`Graph.run` prunes
the graph to what the fetches need, lowers that to a :class:`~ember.graph.executor.Program`
(cached per fetch set) and returns NumPy arrays, like TF1's ``Session.run``.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..device import device as _device
from ..errors import GraphError
from ..func._tree import tree_flatten, tree_unflatten
from ..tensor import Tensor
from .autodiff import backprop, depends_on
from .executor import Program
from .ir import Graph as _IRGraph
from .ir import Var
from .trace import GraphCapture

__all__ = ["Graph", "placeholder", "Variable", "gradients", "Assign", "get_default_graph"]

_STACK: list = []


def get_default_graph() -> "Graph":
    """The innermost graph being built (``with g:``)."""
    if not _STACK:
        raise GraphError("no graph is being built: use `with ember.Graph() as g:`")
    return _STACK[-1]


class _VarState:
    __slots__ = ("var", "value", "name")


class Variable(Tensor):
    """A graph variable: persistent state the :class:`Graph` holds across runs.

    ``ember.Variable(initial_value, name=...)`` (inside ``with g:``) returns a graph tensor
    usable in any op; ``v.assign(value)`` / ``v.assign_add(delta)`` return an
    :class:`Assign` that, when fetched by :meth:`Graph.run`, stores the new value.
    """

    __slots__ = ()

    def __new__(cls, initial_value, name: str | None = None, dtype=None):
        return get_default_graph().variable(initial_value, name=name, dtype=dtype)

    def assign(self, value) -> "Assign":
        return _owner(self).assign(self, value)

    def assign_add(self, delta) -> "Assign":
        return _owner(self).assign(self, self + delta)


def _owner(v) -> "Graph":
    for g in reversed(_STACK):
        if id(v._data) in g._vars:
            return g
    raise GraphError("this Variable's graph is not being built: assign inside `with g:`")


class Assign:
    """A pending update ``variable <- value``; fetch it with :meth:`Graph.run`."""

    __slots__ = ("graph", "variable", "value")

    def __init__(self, graph, variable, value):
        self.graph, self.variable, self.value = graph, variable, value

    def __repr__(self) -> str:
        return f"<Assign {self.variable.name or self.variable} <- {self.value}>"


def placeholder(shape, dtype=None, name: str | None = None) -> Tensor:
    """A graph input fed at :meth:`Graph.run` time (``feed_dict={ph: array}``).

    Shapes are static (no ``None`` dimensions): each feed must match exactly.
    """
    return get_default_graph().placeholder(shape, dtype, name)


def gradients(ys, xs, grad_ys=None):
    """Symbolic gradients of ``sum(ys)`` w.r.t. each of ``xs`` (``tf.gradients``).

    ``ys``/``xs``: a graph tensor or a list of them; a non-scalar ``y`` is seeded with ones
    unless ``grad_ys`` gives its cotangent. Returns a list (one per ``x``; None where no
    path from ``x`` reaches ``ys``, or ``x`` is not floating point).
    """
    single_y = isinstance(ys, Tensor)
    ys = [ys] if single_y else list(ys)
    xs = [xs] if isinstance(xs, Tensor) else list(xs)
    if grad_ys is not None:
        grad_ys = [grad_ys] if isinstance(grad_ys, Tensor) else list(grad_ys)
    g = _graph_of(ys[0])
    return g.gradients(ys, xs, grad_ys)


def _graph_of(t) -> "Graph":
    for g in reversed(_STACK):
        if id(t._data) in g._cap.env:
            return g
    raise GraphError("gradients: ys must be tensors of the graph being built (`with g:`)")


class Graph:
    """A declarative graph (``ember.Graph``; the IR class is :class:`ember.graph.Graph`)."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self._cap = GraphCapture(name)
        self._vars: dict = {}          # id(variable tensor's array) -> _VarState
        self._placeholders: dict = {}  # var id -> name
        self._programs: dict = {}
        self.runs = 0

    # ------------------------------------------------------------ building
    def __enter__(self) -> "Graph":
        _STACK.append(self)
        self._cap.__enter__()
        return self

    def __exit__(self, *exc):
        self._cap.stop()
        _STACK.remove(self)
        return False

    def placeholder(self, shape, dtype=None, name=None) -> Tensor:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if any(s is None or s < 0 for s in shape):
            raise GraphError(f"placeholder {name or ''}: shapes are static in Ember graphs, "
                             f"got {shape}")
        dtype = _dt.get_default_dtype() if dtype is None else _dt.as_dtype(dtype)
        name = name or f"placeholder{len(self._placeholders)}"
        t = self._cap.placeholder(shape, dtype, _device("cpu"), name)
        self._placeholders[self._cap.env[id(t._data)].id] = name
        return t

    def variable(self, initial_value, name=None, dtype=None) -> Variable:
        arr = np.array(initial_value.detach().cpu()._data if isinstance(initial_value, Tensor)
                       else initial_value, copy=True)     # NOTE: its graph runs on the CPU
        dtype = (_dt.as_dtype(dtype) if dtype is not None else initial_value._dtype
                 if isinstance(initial_value, Tensor) else
                 _dt.get_default_dtype() if arr.dtype.kind == "f" else _dt.as_dtype(arr.dtype))
        name = name or f"variable{len(self._vars)}"
        t = self._cap.placeholder(arr.shape, dtype, _device("cpu"), name)
        t.__class__ = Variable
        s = _VarState()
        s.var, s.value, s.name = self._cap.env[id(t._data)], arr.astype(dtype.np), name
        self._vars[id(t._data)] = s
        return t

    def assign(self, variable, value) -> Assign:
        if id(variable._data) not in self._vars:
            raise GraphError("assign: the target is not a Variable of this graph")
        s = self._vars[id(variable._data)]
        if not isinstance(value, Tensor):
            value = self._constant(value, s.var.dtype)
        v = self._var_of(value, "assign")
        if v.shape != s.var.shape:
            raise GraphError(f"assign: {s.name} has shape {s.var.shape}, the value {v.shape}")
        return Assign(self, variable, value)

    def _constant(self, value, dtype) -> Tensor:
        from ..ops.factories import tensor
        pushed = self._cap not in _modes()
        if pushed:
            self._cap.__enter__()
        try:
            return tensor(value, dtype=dtype)
        finally:
            if pushed:
                self._cap.stop()

    def gradients(self, ys, xs, grad_ys=None) -> list:
        cap = self._cap
        from ..ops.factories import ones
        pushed = cap not in _modes()
        if pushed:
            cap.__enter__()
        try:
            seeds: dict = {}
            for k, y in enumerate(ys):
                v = self._var_of(y, "gradients")
                c = grad_ys[k] if grad_ys is not None and grad_ys[k] is not None else \
                    ones((), dtype=v.dtype).expand(*v.shape)
                seeds[v.id] = c if v.id not in seeds else seeds[v.id] + c
            wrt = [self._var_of(x, "gradients") for x in xs]
            memo: dict = {}

            def value(var):
                if var.id not in memo:
                    memo[var.id] = cap.tensor_for(var)
                return memo[var.id]

            self._store_scan_carries(wrt)
            return backprop(list(cap.b.nodes), value, seeds, wrt)
        finally:
            if pushed:
                cap.stop()

    def _store_scan_carries(self, wrt) -> None:
        """Scans on the gradient's path store their carries for the reverse scan.

        NOTE: the node is replaced in place (same outputs plus the stored carries), so the
        backward reads them instead of running the forward scan again.
        """
        from ._scan import with_saved_carries
        nodes = self._cap.b.nodes
        live = depends_on(nodes, {v.id for v in wrt})
        for i, n in enumerate(nodes):
            if n.op.name == "scan" and hasattr(n.op, "stage") and not n.params["save"] and \
                    any(o.id in live for o in n.outs):
                nodes[i] = with_saved_carries(n, self._cap.b)

    def _var_of(self, t, what) -> Var:
        v = self._cap.env.get(id(t._data)) if isinstance(t, Tensor) else None
        if v is None:
            raise GraphError(f"{what}: expected a tensor of graph {self.name!r}, got "
                             f"{type(t).__name__}")
        return v

    # ------------------------------------------------------------ running
    def run(self, fetches, feed_dict=None):
        """Compute ``fetches`` (a tensor, Assign, or a list/tuple/dict of them).

        ``feed_dict`` maps placeholders (or any graph tensor, to override it) to arrays,
        tensors or Python numbers. Only the nodes the fetches need run. Returns NumPy arrays
        in the structure of ``fetches``; fetched :class:`Assign`\\ s return the new value and
        update their variable after the run.
        """
        leaves, spec = tree_flatten(fetches)
        targets, assigns = [], []
        for x in leaves:
            if isinstance(x, Assign):
                assigns.append((len(targets), self._vars[id(x.variable._data)]))
                x = x.value
            targets.append(self._var_of(x, "run"))
        feeds = {}
        for k, val in (feed_dict or {}).items():
            v = self._var_of(k, "feed_dict")
            feeds[v.id] = (v, val)
        prog, in_vars = self._program(targets, feeds)
        arrays = [self._feed(v, feeds[v.id][1]) if v.id in feeds else
                  self._vars_by_id()[v.id].value for v in in_vars]
        out = prog.run(arrays)
        self.runs += 1
        for pos, s in assigns:
            s.value = np.array(out[pos], dtype=s.var.dtype.np, copy=True)
        return tree_unflatten([np.asarray(a) for a in out], spec)

    def pruned(self, fetches, feed_dict=None) -> _IRGraph:
        """The graph :meth:`run` would execute for these fetches (for inspection)."""
        leaves, _ = tree_flatten(fetches)
        targets = [self._var_of(x.value if isinstance(x, Assign) else x, "pruned")
                   for x in leaves]
        feeds = {self._var_of(k, "feed_dict").id: None for k in (feed_dict or {})}
        feeds.update({vid: None for vid in self._placeholders})   # inspection: none missing
        return self._program(targets, feeds)[0].graph

    def _vars_by_id(self) -> dict:
        return {s.var.id: s for s in self._vars.values()}

    def _program(self, targets, feeds):
        nodes = self._cap.b.nodes
        key = (tuple(v.id for v in targets), tuple(sorted(feeds)), len(nodes))
        hit = self._programs.get(key)
        if hit is not None:
            return hit
        live = {v.id for v in targets}
        keep = []
        for n in reversed(nodes):
            if any(o.id in live for o in n.outs) and not all(o.id in feeds for o in n.outs):
                keep.append(n)
                live.update(x.id for x in n.inputs if x.__class__ is Var)
        keep.reverse()
        produced = {o.id for n in keep for o in n.outs}
        byid = self._vars_by_id()
        in_vars = []
        for v in self._cap.b.inputs + [o for n in nodes for o in n.outs if o.id in feeds]:
            if v.id not in live or v.id in produced:
                continue
            if v.id not in feeds and v.id not in byid:
                raise GraphError(f"run: placeholder {self._placeholders.get(v.id, v)!r} "
                                 f"({v.type_str()}) is needed by the fetches but was not fed")
            in_vars.append(v)
        prog = Program(_IRGraph(in_vars, keep, targets, self.name))
        self._programs[key] = (prog, in_vars)
        return prog, in_vars

    def _feed(self, v: Var, val):
        label = self._placeholders.get(v.id) or repr(v)
        arr = val._data if isinstance(val, Tensor) else np.asarray(val)
        if tuple(arr.shape) != v.shape:
            raise GraphError(f"feed_dict: {label!r} expects shape {v.shape}, got "
                             f"{tuple(arr.shape)}")
        if arr.dtype != v.dtype.np:
            if not np.can_cast(arr.dtype, v.dtype.np, "same_kind"):
                raise GraphError(f"feed_dict: {label!r} expects {v.dtype.name}, got "
                                 f"{arr.dtype} (cast it first)")
            arr = arr.astype(v.dtype.np)
        return arr

    # ------------------------------------------------------------ inspection
    @property
    def ir(self) -> _IRGraph:
        """Every recorded node as an IR graph (no outputs)."""
        return _IRGraph(self._cap.b.inputs, self._cap.b.nodes, (), self.name)

    def __str__(self) -> str:
        return str(self.ir)

    def __repr__(self) -> str:
        return (f"<ember.Graph {self.name}: {len(self._placeholders)} placeholders, "
                f"{len(self._vars)} variables, {len(self._cap.b.nodes)} nodes>")


def _modes():
    from ..autograd.grad_mode import state
    return state.modes
