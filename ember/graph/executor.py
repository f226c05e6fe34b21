"""The executor: runs a :class:`~ember.graph.ir.Graph` with each node's kernel.

:class:`Program` lowers a graph once — kernels looked up, input casts and output dtypes
resolved, each value's last use found — so a run is one tight loop: gather the inputs,
cast where the dispatcher would have cast, call the kernel, drop every buffer right after
its last reader. Values live in a flat list indexed by var id.

``parallel=True`` runs the graph level by level on a thread pool: the nodes of one level
are independent, and NumPy releases the GIL inside BLAS and most ufuncs. Whether that is
faster depends on the graph (on two cores, BLAS already uses both): measure with
``bench/compile.py``.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..device.base import _backends
from ..dtypes import bool_ as _bool
from .ir import Graph, Var


class _Step:
    __slots__ = ("kernel", "args", "casts", "params", "outs", "odts", "free", "name", "multi",
                 "reuse", "ufunc")


#: elementwise primitives whose kernel is one ufunc: they can write into a dead input.
_UFUNCS = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide",
           "neg": "negative", "exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh",
           "abs": "absolute", "maximum": "maximum", "minimum": "minimum", "sin": "sin",
           "cos": "cos"}


class Program:
    """A graph lowered for execution. ``program.run(input_arrays) -> output arrays``."""

    def __init__(self, graph: Graph, parallel: bool = False, workers: int = 2):
        self.graph = graph
        self.parallel = parallel
        nvars = max((v.id for v in graph.vars()), default=-1) + 1
        slots = nvars
        consts: list = []
        last_use: dict = {}
        for i, n in enumerate(graph.nodes):
            for x in n.inputs:
                if x.__class__ is Var:
                    last_use[x.id] = i
        keep = {v.id for v in graph.outputs}
        steps = []
        frees: dict = {}
        for vid, i in last_use.items():
            if vid not in keep:
                frees.setdefault(i, []).append(vid)
        # values a node defines but nobody reads are dropped at once
        for i, n in enumerate(graph.nodes):
            for o in n.outs:
                if o.id not in last_use and o.id not in keep:
                    frees.setdefault(i, []).append(o.id)
        reuse = _reuse_plan(graph, last_use, keep) if not parallel else {}
        for i, n in enumerate(graph.nodes):
            s = _Step()
            s.reuse = reuse.get(i)
            s.ufunc = _UFUNCS.get(n.op.name) if s.reuse is not None else None
            dev = n.outs[0].device if n.outs else None
            btype = dev.type if dev is not None else "cpu"
            s.kernel = n.op.kernel_for(btype)
            args = []
            for x in n.inputs:
                if x.__class__ is Var:
                    args.append(x.id)
                else:
                    consts.append(x)
                    args.append(slots)
                    slots += 1
            s.args = tuple(args)
            s.casts = _casts(n) if n.ct is not None else None
            s.params = n.params
            s.outs = tuple(o.id for o in n.outs)
            s.multi = len(n.outs) != 1
            s.odts = tuple(o.dtype.np for o in n.outs)
            s.free = tuple(frees.get(i, ()))
            s.name = n.op.name
            steps.append(s)
        self.steps = steps
        self.nslots = slots
        self._consts = consts
        self._const_base = nvars
        self.input_ids = tuple(v.id for v in graph.inputs)
        self.output_ids = tuple(v.id for v in graph.outputs)
        btype = graph.inputs[0].device.type if graph.inputs else "cpu"
        self.xp = _backends[btype].xp
        for st in steps:
            if st.ufunc is not None:
                st.ufunc = getattr(self.xp, st.ufunc)
        self.reused = sum(1 for st in steps if st.ufunc is not None)
        self._levels = _levels(graph) if parallel else None
        self._level_frees = _level_frees(graph, self._levels, keep) if parallel else None
        self._pool = ThreadPoolExecutor(workers) if parallel else None

    def run(self, arrays) -> list:
        vals = [None] * self.nslots
        vals[self._const_base:] = self._consts
        for vid, a in zip(self.input_ids, arrays):
            vals[vid] = a
        xp = self.xp
        if self._levels is not None:
            self._run_levels(vals, xp)
        else:
            for s in self.steps:
                _exec(s, vals, xp)
        return [vals[i] for i in self.output_ids]

    def _run_levels(self, vals, xp):
        steps = self.steps
        for level, frees in zip(self._levels, self._level_frees):
            if len(level) == 1:
                _exec(steps[level[0]], vals, xp, free=False)
            else:
                list(self._pool.map(lambda i: _exec(steps[i], vals, xp, free=False), level))
            for f in frees:
                vals[f] = None


def _exec(s: _Step, vals, xp, free: bool = True):
    args = [vals[i] for i in s.args]
    if s.casts is not None:
        args = [a if c is None or a.dtype == c else a.astype(c) for a, c in zip(args, s.casts)]
    if s.ufunc is not None:
        buf = vals[s.reuse]
        if buf.flags.writeable and buf.flags.c_contiguous:
            res = s.ufunc(*args, out=buf)     # the input dies here: write into its buffer
        else:
            res = s.kernel(xp, *args, **s.params)
    else:
        res = s.kernel(xp, *args, **s.params)
    if s.multi:
        for o, r, dt in zip(s.outs, res, s.odts):
            vals[o] = r
    else:
        if res.__class__ is not xp.ndarray:
            res = xp.asarray(res)
        dt = s.odts[0]
        if res.dtype != dt:
            res = res.astype(dt)
        vals[s.outs[0]] = res
    if free:
        for f in s.free:
            vals[f] = None


#: ops whose kernels always return a new array (some others may return their input as is).
_FRESH = set(_UFUNCS) | {"matmul", "relu", "sigmoid", "where", "softmax", "log_softmax", "erf",
                         "pow", "scatter_add_along_dim"}


def _reuse_plan(graph: Graph, last_use: dict, keep: set) -> dict:
    """``{node index: var id}``: elementwise nodes that may write into a dying input.

    The input must be made by this graph (never a graph input, a constant or an output),
    by an op that does not alias (no view, no view of it taken anywhere), read last by
    this node, and have the output's shape and dtype.
    """
    made, aliased = {}, set()
    for n in graph.nodes:
        if n.op.view or n.op.name not in _FRESH:
            aliased.update(x.id for x in n.inputs if x.__class__ is Var)
            aliased.update(o.id for o in n.outs)
        for o in n.outs:
            made[o.id] = n
    plan = {}
    for i, n in enumerate(graph.nodes):
        if n.op.name not in _UFUNCS or len(n.outs) != 1:
            continue
        o = n.outs[0]
        for x in n.inputs:
            if x.__class__ is Var and x.id in made and x.id not in aliased and \
                    x.id not in keep and last_use.get(x.id) == i and x.shape == o.shape and \
                    x.dtype is o.dtype and (n.ct is None or n.ct is o.dtype) and \
                    sum(1 for y in n.inputs if y.__class__ is Var and y.id == x.id) == 1:
                plan[i] = x.id
                break
    return plan


def _casts(n):
    """Per input: the NumPy dtype the dispatcher cast it to, or None (see dispatch)."""
    ct = n.ct
    keep_bool = n.op.elementwise and any(
        x.__class__ is Var and x.dtype is ct for x in n.inputs)
    out = []
    for x in n.inputs:
        if x.__class__ is Var and x.dtype is not ct and not (keep_bool and x.dtype is _bool):
            out.append(ct.np)
        else:
            out.append(None)
    return out if any(c is not None for c in out) else None


def _levels(graph: Graph) -> list:
    """Nodes grouped by depth: every node's inputs come from earlier levels."""
    depth: dict = {}
    levels: list = []
    for i, n in enumerate(graph.nodes):
        d = 0
        for x in n.inputs:
            if x.__class__ is Var and x.id in depth:
                d = max(d, depth[x.id] + 1)
        for o in n.outs:
            depth[o.id] = d
        while len(levels) <= d:
            levels.append([])
        levels[d].append(i)
    return levels


def _level_frees(graph: Graph, levels, keep) -> list:
    """Per level: the vars no later level reads (dropped once the level is done)."""
    level_of = {i: d for d, lv in enumerate(levels) for i in lv}
    last: dict = {}
    for i, n in enumerate(graph.nodes):
        for x in n.inputs:
            if x.__class__ is Var:
                last[x.id] = max(last.get(x.id, -1), level_of[i])
        for o in n.outs:
            last.setdefault(o.id, level_of[i])
    out = [[] for _ in levels]
    for vid, d in last.items():
        if vid not in keep:
            out[d].append(vid)
    return out


def run_graph(graph: Graph, arrays) -> list:
    """Run ``graph`` once on NumPy/CuPy ``arrays`` (one per graph input)."""
    return Program(graph).run([np.asarray(a) if not hasattr(a, "dtype") else a
                               for a in arrays])
