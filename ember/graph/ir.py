"""The graph IR: an immutable, topologically ordered list of nodes over typed values.

A :class:`Graph` is a pure function from its ``inputs`` to its ``outputs``::

    graph(%0: f32[4, 3], %1: f32[3]) {
      %2: f32[4, 3] = add(%0, %1)
      %3: f32[4, 3] = relu(%2)
      return (%3)
    }

Each :class:`Node` applies an op — a registry primitive (:class:`~ember.ops.registry.Op`)
or one of the few graph-only ops below (``constant``, ``random``, control flow, fused
kernels) — to input :class:`Var` values and Python scalars, with frozen ``params``. A
``Var`` carries the shape, dtype and device that abstract evaluation (the registry's
shape/dtype rules, see :mod:`ember.graph.meta`) gave it. ``Node.ct`` is the dtype the
dispatcher computed in (inputs are cast to it), so the executor runs exactly what eager ran.

Graphs are never edited in place: a pass reads one and builds another with a
:class:`GraphBuilder` (which can hash-cons nodes: identical pure nodes become one).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from ..errors import GraphError


class Var:
    """A value in a graph: ``%id: dtype[shape]`` on ``device``."""

    __slots__ = ("id", "shape", "dtype", "device", "name")

    def __init__(self, id: int, shape: tuple, dtype, device, name: str | None = None):
        self.id = id
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        self.name = name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    def type_str(self) -> str:
        return f"{_short(self.dtype)}[{', '.join(map(str, self.shape))}]"

    def __repr__(self) -> str:
        return f"%{self.id}" + (f"({self.name})" if self.name else "")


def _short(dt) -> str:
    names = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
             "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8",
             "bool": "bool", "complex64": "c64", "complex128": "c128"}
    return names.get(dt.name, dt.name)


class GraphOp:
    """An op that exists only in graphs (constants, random draws, control flow, fused kernels).

    ``run(xp, *arrays, **params)`` returns one array, or a tuple when the node has several
    outputs. ``random`` ops draw fresh values at every run and are never merged by CSE.
    """

    __slots__ = ("name", "run", "random", "pure", "__weakref__")
    elementwise = False
    view = False
    expr = None
    shape = None
    differentiable = False

    def __init__(self, name: str, run: Callable, *, random: bool = False, pure: bool = True):
        self.name = name
        self.run = run
        self.random = random
        self.pure = pure and not random

    def kernel_for(self, backend_type: str) -> Callable:
        return self.run

    def __repr__(self) -> str:
        return f"<graph op {self.name}>"


class BufferOp(GraphOp):
    """A graph op whose result is new memory and which can write it into a given buffer.

    ``run(xp, *arrays, out=None, **params)``. ``accepts_out`` tells the memory planner what
    ``out=`` may be: ``"out"`` — a dead C-contiguous buffer of the result's size; ``None`` —
    nothing (several outputs, or a kernel that cannot write into a given buffer).
    """

    __slots__ = ("accepts_out",)
    fresh_out = True

    def __init__(self, name: str, run: Callable, accepts_out: str | None = "out"):
        super().__init__(name, run)
        self.accepts_out = accepts_out


def _run_constant(xp, *, value):
    return value


CONSTANT = GraphOp("constant", _run_constant)


class Node:
    """``outs = op(*inputs, **params)``; ``ct`` is the compute dtype inputs are cast to.

    ``loc`` is the user's ``file:line`` that created the node when traced (None otherwise);
    passes copy it onto the nodes they emit in its place.
    """

    __slots__ = ("op", "inputs", "params", "outs", "ct", "loc")

    def __init__(self, op, inputs: tuple, params: dict, outs: tuple, ct=None, loc=None):
        self.op = op
        self.inputs = tuple(inputs)
        self.params = params
        self.outs = tuple(outs)
        self.ct = ct
        self.loc = loc

    @property
    def out(self) -> Var:
        if len(self.outs) != 1:
            raise GraphError(f"node {self.op.name} has {len(self.outs)} outputs")
        return self.outs[0]

    @property
    def name(self) -> str:
        return self.op.name

    def var_inputs(self) -> list:
        return [x for x in self.inputs if x.__class__ is Var]

    def is_random(self) -> bool:
        return bool(getattr(self.op, "random", False))

    def is_constant(self) -> bool:
        return self.op is CONSTANT

    def key(self):
        """A hashable identity for CSE: op, inputs (by var id), params, compute dtype."""
        ins = tuple(("v", x.id) if x.__class__ is Var else ("s", type(x).__name__, x)
                    for x in self.inputs)
        return (id(self.op), ins, freeze(self.params), self.ct)

    def format(self) -> str:
        lhs = ", ".join(f"{o}: {o.type_str()}" for o in self.outs)
        args = [repr(x) if x.__class__ is Var else _fmt_param(x) for x in self.inputs]
        args += [f"{k}={_fmt_param(v)}" for k, v in self.params.items()]
        return f"{lhs} = {self.op.name}({', '.join(args)})"

    def __repr__(self) -> str:
        return f"<Node {self.format()}>"


def _fmt_param(v) -> str:
    if isinstance(v, np.ndarray):
        if v.size <= 4:
            return np.array2string(v, separator=", ", precision=4).replace("\n", "")
        return f"array({v.dtype}[{', '.join(map(str, v.shape))}])"
    if isinstance(v, Graph):
        return f"<graph {len(v.nodes)} nodes>"
    if hasattr(v, "name") and hasattr(v, "itemsize"):   # an Ember dtype
        return v.name
    if callable(v):
        return getattr(v, "__name__", "fn")
    return repr(v)


def freeze(v) -> Any:
    """A hashable stand-in for a param value (arrays by content when small, else by id)."""
    if isinstance(v, dict):
        return tuple(sorted((k, freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(freeze(x) for x in v)
    if isinstance(v, slice):
        return ("slice", v.start, v.stop, v.step)
    if isinstance(v, np.ndarray):
        if v.size <= 64:
            return ("array", v.dtype.str, v.shape, v.tobytes())
        return ("array-id", id(v))
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return v


class Graph:
    """An immutable graph: ``inputs`` (Vars), ``nodes`` (topological order), ``outputs``.

    ``print(graph)`` shows one node per line. ``graph.verify()`` checks it is well formed.
    """

    __slots__ = ("inputs", "nodes", "outputs", "name", "_producers", "_users")

    def __init__(self, inputs: Iterable[Var], nodes: Iterable[Node], outputs: Iterable[Var],
                 name: str = "graph"):
        self.inputs = tuple(inputs)
        self.nodes = tuple(nodes)
        self.outputs = tuple(outputs)
        self.name = name
        self._producers = None
        self._users = None

    # ------------------------------------------------------------------ queries
    def producers(self) -> dict:
        """``{var id: node}`` for every var a node produces."""
        if self._producers is None:
            self._producers = {o.id: n for n in self.nodes for o in n.outs}
        return self._producers

    def users(self) -> dict:
        """``{var id: [nodes that read it]}`` (graph outputs are not nodes; see ``outputs``)."""
        if self._users is None:
            users: dict = {}
            for n in self.nodes:
                for x in n.inputs:
                    if x.__class__ is Var:
                        users.setdefault(x.id, []).append(n)
            self._users = users
        return self._users

    def producer(self, v: Var):
        return self.producers().get(v.id)

    def count(self, name: str | None = None) -> int:
        """Number of nodes (of op ``name`` when given)."""
        return sum(1 for n in self.nodes if name is None or n.op.name == name)

    def op_counts(self) -> dict:
        out: dict = {}
        for n in self.nodes:
            out[n.op.name] = out.get(n.op.name, 0) + 1
        return out

    def vars(self) -> list:
        return list(self.inputs) + [o for n in self.nodes for o in n.outs]

    # ------------------------------------------------------------------ printing
    def format(self, indent: str = "") -> str:
        sig = ", ".join(f"{v}: {v.type_str()}" for v in self.inputs)
        lines = [f"{indent}{self.name}({sig}) {{"]
        for n in self.nodes:
            lines.append(f"{indent}  {n.format()}")
            for k, v in n.params.items():
                if isinstance(v, Graph):
                    lines.append(v.format(indent + "    ").replace(v.name + "(", f"{k}(", 1))
        lines.append(f"{indent}  return ({', '.join(map(repr, self.outputs))})")
        lines.append(f"{indent}}}")
        return "\n".join(lines)

    __str__ = format

    def __repr__(self) -> str:
        return (f"<ember Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, "
                f"{len(self.outputs)} outputs>")

    # ------------------------------------------------------------------ checking
    def verify(self, check_meta: bool = True) -> "Graph":
        """Raise :class:`GraphError` unless the graph is well formed; return it.

        Checks: every var is defined once, before its uses; outputs are defined; node
        outputs agree with abstract evaluation of their op (shape and dtype).
        """
        defined = set()
        for v in self.inputs:
            if v.id in defined:
                raise GraphError(f"{self.name}: input {v} is listed twice")
            defined.add(v.id)
        for i, n in enumerate(self.nodes):
            for x in n.inputs:
                if x.__class__ is Var and x.id not in defined:
                    raise GraphError(f"{self.name}: node {i} ({n.format()}) reads {x} before "
                                     f"it is defined")
            for o in n.outs:
                if o.id in defined:
                    raise GraphError(f"{self.name}: {o} is defined twice (node {i}: "
                                     f"{n.format()})")
                defined.add(o.id)
            # NOTE: ops without a shape rule (advanced indexing, nonzero) may have
            # data-dependent shapes, which abstract evaluation can't know: not checked.
            if check_meta and len(n.outs) == 1 and not isinstance(n.op, GraphOp) and (
                    n.op.shape is not None or n.op.elementwise):
                from .meta import infer
                shape, dtype, _ = infer(n.op, n.inputs, n.params)
                o = n.outs[0]
                if tuple(shape) != o.shape or dtype is not o.dtype:
                    raise GraphError(
                        f"{self.name}: node {i} ({n.format()}) says {o.type_str()} but "
                        f"abstract evaluation of {n.op.name} gives "
                        f"{_short(dtype)}[{', '.join(map(str, shape))}]")
        for v in self.outputs:
            if v.id not in defined:
                raise GraphError(f"{self.name}: output {v} is never defined")
        return self


class GraphBuilder:
    """Builds a new :class:`Graph`; ``cse=True`` hash-conses pure nodes as they are added.

    Vars are numbered densely from 0 so an executor can keep values in a list.
    """

    def __init__(self, name: str = "graph", cse: bool = False):
        self.name = name
        self.inputs: list = []
        self.nodes: list = []
        self.cse = cse
        self._seen: dict = {}
        self._next = 0
        self.merged = 0
        self.loc = None          # source line given to the nodes added next (see Node.loc)

    def new_var(self, shape, dtype, device, name=None) -> Var:
        v = Var(self._next, shape, dtype, device, name)
        self._next += 1
        return v

    def input(self, shape, dtype, device, name=None) -> Var:
        v = self.new_var(shape, dtype, device, name)
        self.inputs.append(v)
        return v

    def add(self, op, inputs, params: dict, metas, ct=None) -> tuple:
        """Append ``op(*inputs, **params)`` with output metas ``[(shape, dtype, device)]``.

        Returns the output vars (those of an identical earlier node under ``cse``).
        """
        if self.cse and not getattr(op, "random", False) and getattr(op, "pure", True):
            node = Node(op, inputs, params, (), ct, self.loc)
            try:
                k = node.key()
                hit = self._seen.get(k)
            except TypeError:
                k, hit = None, None
            if hit is not None:
                self.merged += 1
                return hit.outs
            outs = tuple(self.new_var(*m) for m in metas)
            node.outs = outs
            self.nodes.append(node)
            if k is not None:
                self._seen[k] = node
            return outs
        outs = tuple(self.new_var(*m) for m in metas)
        self.nodes.append(Node(op, inputs, params, outs, ct, self.loc))
        return outs

    def add1(self, op, inputs, params, shape, dtype, device, ct=None) -> Var:
        return self.add(op, inputs, params, [(shape, dtype, device)], ct)[0]

    def constant(self, value: np.ndarray, dtype, device) -> Var:
        return self.add1(CONSTANT, (), {"value": value}, value.shape, dtype, device)

    def build(self, outputs) -> Graph:
        return Graph(self.inputs, self.nodes, outputs, self.name)


def rebuild(graph: Graph, fn: Callable | None = None, *, cse: bool = False,
            name: str | None = None):
    """Copy ``graph`` through a builder, renumbering vars densely.

    ``fn(builder, node, inputs) -> outs or None`` may replace a node: given the node and its
    inputs already mapped into the new graph, it returns the new output vars (or ``None`` to
    copy the node unchanged). Returns ``(new graph, builder)``.
    """
    b = GraphBuilder(name or graph.name, cse=cse)
    env: dict = {}
    for v in graph.inputs:
        env[v.id] = b.input(v.shape, v.dtype, v.device, v.name)
    for n in graph.nodes:
        ins = tuple(env[x.id] if x.__class__ is Var else x for x in n.inputs)
        b.loc = n.loc
        outs = fn(b, n, ins) if fn is not None else None
        if outs is None:
            outs = b.add(n.op, ins, n.params, [(o.shape, o.dtype, o.device) for o in n.outs],
                         n.ct)
        for o, no in zip(n.outs, outs):
            env[o.id] = no
    return b.build([env[v.id] for v in graph.outputs]), b
