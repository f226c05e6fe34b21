"""Helpers shared by the passes: a rebuilding walker with a var map, and node emission.

:class:`Rewrite` copies a graph node by node into a :class:`GraphBuilder`, like
:func:`~ember.graph.ir.rebuild`, but lets a rule look at the new graph built so far
(``producer`` of a new var) and map an old var straight to an existing new one
(``return (var,)``): that is how "replace ``x * 1`` by ``x``" is written.
"""
from __future__ import annotations

import numpy as np

from ...ops.registry import REGISTRY
from ..ir import CONSTANT, Graph, GraphBuilder, Var
from ..meta import infer

#: dtype-rule kinds whose nodes carry no compute dtype (the tracer records ``ct=None``).
_NO_CT = ("same", "bool", "int64")


def swap_nodes(graph: Graph, name: str, fits, op, params=None, available=None):
    """Replace each node ``fits(node)`` accepts by one node of graph op ``op`` on the same
    inputs and with the same output (``params``: its parameters, default none); returns
    ``(graph, {name: replaced})``. ``available()``, asked only when some node fits, says
    whether ``op``'s kernel can run here (e.g. a C compiler exists)."""
    if not any(fits(n) for n in graph.nodes) or (available is not None and not available()):
        return graph, {name: 0}
    count = 0

    def rule(rw, n, ins):
        nonlocal count
        if not fits(n):
            return None
        count += 1
        o = n.outs[0]
        return rw.b.add(op, ins, dict(params or {}), [(o.shape, o.dtype, o.device)], None)

    return Rewrite(graph).run(rule), {name: count}


class Rewrite:
    """Walk ``graph`` into a new builder; ``rule(rw, node, ins)`` returns outs or None."""

    def __init__(self, graph: Graph, cse: bool = False):
        self.old = graph
        self.b = GraphBuilder(graph.name, cse=cse)
        self.env: dict = {}
        self._prod: dict = {}
        self._seen = 0
        self.outputs = {v.id for v in graph.outputs}
        for v in graph.inputs:
            self.env[v.id] = self.b.input(v.shape, v.dtype, v.device, v.name)

    def producer(self, v):
        """The node of the *new* graph that defines new var ``v`` (None for inputs)."""
        if v.__class__ is not Var:
            return None
        nodes = self.b.nodes
        for n in nodes[self._seen:]:
            for o in n.outs:
                self._prod[o.id] = n
        self._seen = len(nodes)
        return self._prod.get(v.id)

    def copy(self, n, ins) -> tuple:
        return self.b.add(n.op, ins, n.params, [(o.shape, o.dtype, o.device) for o in n.outs],
                          n.ct)

    def emit(self, name: str, ins, **params) -> Var:
        """Add registry op ``name`` on new vars/scalars ``ins``, typed by abstract eval."""
        return emit(self.b, name, ins, **params)

    def run(self, rule) -> Graph:
        for n in self.old.nodes:
            ins = tuple(self.env[x.id] if x.__class__ is Var else x for x in n.inputs)
            self.b.loc = n.loc           # emitted nodes keep the user's source line
            outs = rule(self, n, ins)
            if outs is None:
                outs = self.copy(n, ins)
            for o, no in zip(n.outs, outs):
                self.env[o.id] = no
        return self.b.build([self.env[v.id] for v in self.old.outputs])


def emit(b: GraphBuilder, name: str, ins, **params) -> Var:
    """Append registry op ``name`` to builder ``b``; its shape, dtype and ct come from meta."""
    op = REGISTRY[name]
    full = dict(op.params)
    full.update(params)
    shape, dtype, ct = infer(op, tuple(ins), full)
    dev = next(x for x in ins if x.__class__ is Var).device
    return b.add1(op, tuple(ins), full, shape, dtype, dev,
                  None if isinstance(op.dtype, str) and op.dtype in _NO_CT else ct)


def constant_of(producer, v):
    """The value of ``v`` when it is a Python scalar or made by a CONSTANT node, else None."""
    if v.__class__ is not Var:
        return v if isinstance(v, (bool, int, float)) else None
    n = producer(v)
    if n is not None and n.op is CONSTANT:
        return n.params["value"]
    return None


def host_array(val, limit: int | None = None):
    """``val`` (a CONSTANT's value) as a NumPy array when it is an array on a device (a
    graph captured on a GPU holds CuPy constants; passes inspect them on the host), else
    ``val`` itself. ``limit``: None (leave ``val``) for a device array of more elements."""
    if isinstance(val, np.ndarray) or not hasattr(val, "__cuda_array_interface__") and \
            not hasattr(val, "get"):
        return val
    if limit is not None and val.size > limit:
        return None
    return val.get() if callable(getattr(val, "get", None)) else np.asarray(val)


def is_all(producer, v, c) -> bool:
    """Whether ``v`` is a scalar/constant whose every element equals ``c`` (bools excluded)."""
    val = constant_of(producer, v)
    if val is not None and not isinstance(val, (bool, int, float, np.ndarray)):
        val = host_array(val, 4096)     # NOTE: a device constant (a GPU graph's)
    if val is None or isinstance(val, bool):
        return False
    if isinstance(val, np.ndarray):
        if val.dtype.kind == "b" or val.size == 0 or val.size > 4096:
            return False
        return bool(np.all(val == c))
    return val == c


def is_float(dtype) -> bool:
    """Floating (or complex) dtypes: where ``x * 0`` need not be 0 (inf, nan)."""
    return dtype.is_floating_point or dtype.name.startswith("complex")
