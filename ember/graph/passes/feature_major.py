"""``feature_major``: a linear-layer chain keeps its activations transposed, ``(features, batch)``.

OpenBLAS (SkylakeX kernels, one thread) runs a linear layer's products 8-18 % faster when
the output is feature-major: ``W @ x.T`` (a ``(512, 128)`` result) instead of ``x @ W.T``
(``(128, 512)``), and the backward's products likewise (issue 19 item 7: the W1 MLP's five
big GEMMs back to back 2.54 -> 2.42 ms). Transposing one product alone does not pay (a
transposing copy, or a fused kernel reading a strided view, costs more than it saves), so
this pass keeps whole regions transposed: every value in the region is computed as its
transpose ``vT``, and

* ``matmul(a, b)`` becomes ``matmul(bT, aT)`` (``(a @ b).T = b.T @ a.T``): a weight's
  transpose is the weight itself (``b = permute(w)``), an activation's is the region's
  value, anything else a ``permute`` view that ``matmul_t`` turns into BLAS's flags;
* an elementwise op runs on the transposed operands, a 1-D operand (a bias) broadcast as
  a column ``(F, 1)`` instead of a row, a 0-d one as it is;
* ``permute(v, (1, 0))`` of a region value *is* ``vT`` (no node);
* ``sum_rows(v)`` (a bias gradient: sum over the batch) becomes a row sum of ``vT``
  (``sum(vT, dim=1)``, contiguous rows for the fused reduction kernel).

Which values join: 2-D values made by a (float) ``matmul`` (whose left operand is in the region
or whose right one is a graph input or its transpose: a layer's forward or input-gradient
product) or by an elementwise op (all of whose full-size operands are in the region), that
are no graph output, and all of whose readers are such nodes, other products, transposes or
row sums — found by removing values until nothing changes, so a region never ends in a
strided read (the logits before ``log_softmax`` stay batch-major). Any other reader of a
region value would get a ``permute`` view back.

Not bitwise: another GEMM orientation (OpenBLAS's kernels may sum in another order) and
the bias gradients summed along rows instead of down columns. So the default pipeline
has it (before ``fuse``, which then fuses the transposed elementwise chains) and
``EXACT_PASSES`` does not.
"""
from __future__ import annotations

from ... import dtypes as _dt
from ..ir import Graph, GraphOp, Var
from ._util import Rewrite

__all__ = ["feature_major", "COLUMN"]


class _ViewOp(GraphOp):
    """A graph op whose output is always a view of its input (``view = True`` for the
    memory planner: unlike ``reshape``'s "maybe", it does not keep the input from being
    updated in place later — a bias's SGD/Adam update stays donated)."""

    __slots__ = ()
    view = True


def _run_column(xp, x):
    return x.reshape(x.shape[0], 1)         # a 1-D array: always a view


#: a 1-D value as a column ``(n, 1)``: a bias broadcast along a transposed value's rows.
COLUMN = _ViewOp("column", _run_column)

_FLOATS = (_dt.float32, _dt.float64)


def _transpose_of(n) -> bool:
    """Whether node ``n`` is a 2-D transpose."""
    return n is not None and n.op.name == "permute" and tuple(n.params["dims"]) == (1, 0) \
        and len(n.outs) == 1 and n.outs[0].ndim == 2


def _is_matmul(n) -> bool:
    if n.op.name != "matmul" or hasattr(n.op, "run") or len(n.outs) != 1:
        return False
    a, b = n.inputs
    o = n.outs[0]
    return a.__class__ is Var and b.__class__ is Var and a.ndim == 2 and b.ndim == 2 and \
        o.dtype in _FLOATS and a.dtype is o.dtype and b.dtype is o.dtype and \
        n.ct in (None, o.dtype)


def _is_elementwise(n) -> bool:
    return getattr(n.op, "elementwise", False) is True and not hasattr(n.op, "run") and \
        len(n.outs) == 1 and not getattr(n.op, "random", False)


class _Region:
    """The values kept transposed (var ids), found by a fixpoint over ``graph``."""

    def __init__(self, graph: Graph):
        self.prod = graph.producers()
        self.users = graph.users()
        self.inputs = {v.id for v in graph.inputs}
        outs = {v.id for v in graph.outputs}
        self.ids = {n.outs[0].id for n in graph.nodes
                    if (_is_matmul(n) or _is_elementwise(n)) and n.outs[0].ndim == 2
                    and n.outs[0].id not in outs}
        changed = True
        while changed:
            changed = False
            for n in graph.nodes:
                o = n.outs[0] if len(n.outs) == 1 else None
                if o is None or o.id not in self.ids:
                    continue
                if not self._joins(n) or not all(self._reads_ok(u) for u in
                                                 self.users.get(o.id, ())):
                    self.ids.discard(o.id)
                    changed = True

    def weight(self, v) -> bool:
        """A graph input, or a transpose of one (a layer's weight)."""
        if v.id in self.inputs:
            return True
        p = self.prod.get(v.id)
        return _transpose_of(p) and p.inputs[0].__class__ is Var and \
            p.inputs[0].id in self.inputs

    def _joins(self, n) -> bool:
        o = n.outs[0]
        if _is_matmul(n):
            a, b = n.inputs
            return a.id in self.ids or self.weight(b)
        inside = False
        for x in n.inputs:
            if x.__class__ is not Var or x.ndim == 0 or (x.ndim == 1 and (
                    x.shape[0] == o.shape[1] or x.shape[0] == 1)):
                continue
            if x.id not in self.ids or x.shape != o.shape:
                return False
            inside = True
        return inside

    def _reads_ok(self, u) -> bool:
        """Whether reader ``u`` of a region value takes it transposed without a copy."""
        if _is_matmul(u) or _transpose_of(u) or _is_sum_rows(u):
            return True
        return _is_elementwise(u) and u.outs[0].id in self.ids


def _is_sum_rows(n) -> bool:
    return n.op.name == "sum_rows" and len(n.inputs) == 1 and n.inputs[0].ndim == 2


def feature_major(graph: Graph):
    """Keep linear-layer chains feature-major; returns ``(graph, {"feature_major": values
    kept transposed})``."""
    region = _Region(graph)
    if not region.ids:
        return graph, {"feature_major": 0}
    ids = region.ids

    def val(rw, x):
        """New var of old ``x`` in its own layout (a region value: a transpose view)."""
        nx = rw.env[x.id]
        return rw.emit("permute", (nx,), dims=(1, 0)) if x.id in ids else nx

    def trans(rw, x):
        """New var holding old 2-D ``x`` transposed."""
        if x.id in ids:
            return rw.env[x.id]
        p = region.prod.get(x.id)
        if _transpose_of(p) and p.inputs[0].__class__ is Var:
            return val(rw, p.inputs[0])
        return rw.emit("permute", (rw.env[x.id],), dims=(1, 0))

    def rule(rw, n, ins):
        o = n.outs[0] if len(n.outs) == 1 else None
        if o is not None and o.id in ids:
            if _is_matmul(n):
                a, b = n.inputs
                return (rw.emit("matmul", (trans(rw, b), trans(rw, a))),)
            new = []
            for x, nx in zip(n.inputs, ins):
                if x.__class__ is Var and x.ndim == 1 and x.shape[0] != 1:
                    nx = rw.b.add(COLUMN, (nx,), {}, [((x.shape[0], 1), x.dtype, x.device)],
                                  None)[0]
                new.append(nx)
            shape = (o.shape[1], o.shape[0])
            return rw.b.add(n.op, tuple(new), n.params, [(shape, o.dtype, o.device)], n.ct)
        if not any(x.__class__ is Var and x.id in ids for x in n.inputs):
            return None
        if _transpose_of(n):
            return (rw.env[n.inputs[0].id],)
        if _is_sum_rows(n):
            return (rw.emit("sum", (rw.env[n.inputs[0].id],), dim=(1,), keepdim=False,
                            dtype=None),)
        new = tuple(val(rw, x) if x.__class__ is Var else nx for x, nx in zip(n.inputs, ins))
        return rw.copy(n, new)

    return Rewrite(graph).run(rule), {"feature_major": len(ids)}
