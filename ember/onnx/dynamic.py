"""``dynamic_axes``: symbolic dimensions in an exported graph.

Ember specialises a captured graph to its shapes, so the converters write shape vectors
(``Reshape``/``Expand`` targets, ``Slice`` bounds...) as constants through
:meth:`OnnxBuilder.ints`. To export a dimension symbolically, the model is captured again
with each symbolic dimension changed (twice, to two other sizes) and converted with a
:class:`RecordingBuilder`: the entries of a shape vector that change are functions of that
dimension — ``a * n + b`` of one dimension, or ``c * n1 * n2...`` of several — and the final
conversion computes them at run time from ``Shape``/``Gather`` of the graph input that
carries the dimension. A constant array whose shape changes, or a graph whose structure
changes with the size, cannot be exported symbolically and raises a ``GraphError``.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from .builder import OnnxBuilder


class RecordingBuilder(OnnxBuilder):
    """An :class:`OnnxBuilder` that records every shape vector and constant array's shape
    it writes and, given a ``plan``, writes the planned entries as run-time expressions."""

    def __init__(self, opset: int, plan: dict | None = None, dims: dict | None = None):
        super().__init__(opset)
        self.int_calls: list = []
        self.const_shapes: list = []
        self.plan = plan or {}
        self.dims = dims or {}           # symbol -> (input position, axis)
        self.input_names: list = []      # set by to_onnx once the inputs are reserved
        self._dim_cache: dict = {}

    def ints(self, values) -> str:
        values = [int(v) for v in values]
        k = len(self.int_calls)
        self.int_calls.append(values)
        if k in self.plan:
            return self._symbolic(values, self.plan[k])
        return super().ints(values)

    def const(self, array, hint: str = "const", name: str | None = None) -> str:
        if hint != "ints" and name is None:
            self.const_shapes.append((hint, tuple(np.shape(array))))
        return super().const(array, hint, name)

    # ------------------------------------------------------------ run-time shapes
    def _one(self, v: int) -> str:
        return OnnxBuilder.ints(self, [v])

    def dim(self, symbol: str) -> str:
        """A 1-element int64 value: the size of ``symbol`` read from its graph input."""
        if symbol not in self._dim_cache:
            pos, axis = self.dims[symbol]
            shape = self.op("Shape", [self.input_names[pos]])
            self._dim_cache[symbol] = self.op("Gather", [shape, self._one(axis)], axis=0)
        return self._dim_cache[symbol]

    def _expr(self, formula) -> str:
        kind, syms, a, b = formula
        x = self.dim(syms[0])
        for s in syms[1:]:
            x = self.op("Mul", [x, self.dim(s)])
        if a != 1:
            x = self.op("Mul", [x, self._one(a)])
        if b != 0:
            x = self.op("Add", [x, self._one(b)])
        return x

    def _symbolic(self, values, entries: dict) -> str:
        pieces, run = [], []
        for i, v in enumerate(values):
            if i in entries:
                if run:
                    pieces.append(OnnxBuilder.ints(self, run))
                    run = []
                pieces.append(self._expr(entries[i]))
            else:
                run.append(v)
        if run:
            pieces.append(OnnxBuilder.ints(self, run))
        return pieces[0] if len(pieces) == 1 else self.op("Concat", pieces, axis=0)


def fit(base: list, variants: dict, symbol_sizes: dict) -> dict:
    """Per shape-vector call, the entries that depend on symbols: ``{call: {pos: formula}}``.

    Args:
        base: the example capture's shape vectors.
        variants: ``{symbol: [(shape vectors, size), ...]}`` from captures with that symbol
            at other sizes.
        symbol_sizes: the example size of each symbol.
    """
    plan: dict = {}
    for k, vec in enumerate(base):
        for pos, e in enumerate(vec):
            deps = [s for s, runs in variants.items() if any(r[0][k][pos] != e for r in runs)]
            if deps:
                plan.setdefault(k, {})[pos] = _formula(e, deps, k, pos, variants,
                                                       symbol_sizes)
    return plan


def _formula(e, deps, k, pos, variants, n0):
    if len(deps) == 1:
        s = deps[0]
        (v1, m1), (v2, m2) = variants[s][:2]
        a = (v1[k][pos] - e) // (m1 - n0[s])
        b = e - a * n0[s]
        if a * m1 + b == v1[k][pos] and a * m2 + b == v2[k][pos]:
            return ("affine", (s,), a, b)
    else:
        prod = int(np.prod([n0[s] for s in deps]))
        c = e // prod if prod else 0
        ok = c * prod == e and all(
            c * int(np.prod([m if t == s else n0[t] for t in deps])) == v[k][pos]
            for s in deps for v, m in variants[s])
        if ok:
            return ("product", tuple(deps), c, 0)
    raise GraphError(f"ember.onnx.export: a shape in the graph ({e} in shape vector #{k}) "
                     f"depends on the dynamic dims {deps} in a way that is neither a*n+b nor "
                     f"a product of them; export with fixed shapes (no dynamic_axes)")


def check_same_structure(base: RecordingBuilder, other: RecordingBuilder, symbol: str):
    """Raise unless ``other`` (captured with ``symbol`` resized) converts to the same
    sequence of shape vectors and constant arrays as ``base``."""
    if [len(v) for v in base.int_calls] != [len(v) for v in other.int_calls] or \
            len(base.nodes) != len(other.nodes):
        raise GraphError(f"ember.onnx.export: the exported graph's structure changes with "
                         f"the size of dynamic dim {symbol!r}; it cannot be symbolic")
    for (h, s1), (_, s2) in zip(base.const_shapes, other.const_shapes):
        if s1 != s2:
            raise GraphError(f"ember.onnx.export: a constant array ({h}, shape {s1}) changes "
                             f"shape with dynamic dim {symbol!r}; this op cannot be exported "
                             f"with a symbolic {symbol!r}")


def normalize(dynamic_axes, input_names, output_names) -> tuple[dict, dict]:
    """PyTorch's ``dynamic_axes`` (``{name: [axes]}`` or ``{name: {axis: "sym"}}``) as
    ``({input position: {axis: symbol}}, {output position: {axis: symbol}})``."""
    ins, outs = {}, {}
    for name, axes in (dynamic_axes or {}).items():
        if name in input_names:
            table, pos = ins, input_names.index(name)
        elif name in output_names:
            table, pos = outs, output_names.index(name)
        else:
            raise ValueError(f"ember.onnx.export: dynamic_axes names {name!r}, which is "
                             f"neither an input name {input_names} nor an output name "
                             f"{output_names}")
        if isinstance(axes, dict):
            table[pos] = {int(a): str(s) for a, s in axes.items()}
        else:
            table[pos] = {int(a): f"{name}_dynamic_axes_{i + 1}" for i, a in enumerate(axes)}
    return ins, outs
