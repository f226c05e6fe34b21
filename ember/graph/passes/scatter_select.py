"""``scatter_select``: a one-hot scatter becomes an elementwise select that fuses.

``scatter_add_along_dim(g, idx, dim, shape)`` where ``idx`` holds one index per slice
along ``dim`` (``idx.shape[dim] == 1``, ``g`` and ``idx`` of one shape, equal to ``shape``
in every other dim) writes each ``g`` value to exactly one place and zeros elsewhere:
nothing collides. That is ``where(idx == iota, g, 0)`` with ``iota = arange(shape[dim])``
along ``dim`` (a constant) and broadcasting — the select the registry's kernel already
computes for short dims (``ops/sort.py``: ``_scatter_one_kernel``), here written in
primitives so the ``fuse`` pass puts it inside its consumer's kernel.

Where it matters: cross-entropy's backward (``nll_loss``'s VJP scatters ``-1/n`` at each
target). In the compiled W1 step (batch 128, 10 classes) the scatter node cost ~45 us
in the step — a loop of NumPy calls on caches the GEMMs had just evicted — and the select
now runs inside log-softmax's backward kernel (issue 19, item 7).

On a GPU graph the select's sum over ``dim`` (log-softmax's backward sums its incoming
gradient over the row: ``g - exp(y) * sum(g)``) is written without the row: exactly one
element of a row is selected when the index is in ``[0, shape[dim])``, so the sum is
``where((idx >= 0) & (idx < shape[dim]), g, 0)``, one value per row. The cross-entropy
backward's kernel then reads its (8192, 50257) logits once, not twice (a reduction
stage over each row, then the row again), and no int64 iota in the first pass. Bits: the
same, but for the sign of a zero (a sum starting from +0.0 made ``-0.0`` ``+0.0``). CPU
graphs keep the sum (``ce_rows`` matches their form; their rows are short).

Semantics: bitwise the registry kernel's result for every value (NaN and -0.0 included;
a select, not an add), and like it an index outside ``[0, shape[dim])`` selects nothing
(its row of the gradient is zero). The general (``bincount``) kernel adds to +0.0, so a
``-0.0`` there became ``+0.0``: here it stays ``-0.0`` (they compare equal).
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as _dt
from ...device.base import get_backend
from ..ir import Graph, Var
from ._util import Rewrite


def _fits(n) -> bool:
    if n.op.name != "scatter_add_along_dim" or len(n.outs) != 1:
        return False
    g, idx = n.inputs
    if g.__class__ is not Var or idx.__class__ is not Var or idx.dtype is not _dt.int64:
        return False
    dim, shape = n.params["dim"], tuple(n.params["shape"])
    if len(shape) != len(idx.shape) or tuple(g.shape) != tuple(idx.shape):
        return False
    if idx.shape[dim] != 1 or shape[dim] < 1:
        return False
    return all(a == b for d, (a, b) in enumerate(zip(idx.shape, shape)) if d != dim) \
        and not g.dtype.name.startswith("complex") and g.dtype is not _dt.bool_


def scatter_select(graph: Graph):
    """Rewrite one-hot scatters; returns ``(graph, {"scatter_select": nodes})``."""
    # NOTE: not a scatter that a ``fold`` reads: that is a max-pool's backward, which the
    # ``pool`` pass turns into one ``maxpool_grad`` C loop (W2 bf16: 27 -> 40 ms without)
    folded = {f.inputs[0].id for f in graph.nodes
              if f.op.name == "fold" and f.inputs[0].__class__ is Var}
    if not any(_fits(n) and n.outs[0].id not in folded for n in graph.nodes):
        return graph, {"scatter_select": 0}
    count = 0
    made: dict = {}         # a GPU graph's select (new var id) -> (idx, g, n, dim, zero)

    def rule(rw, n, ins):
        nonlocal count
        if n.op.name == "sum":
            return _row_sum(rw, n, ins, made)
        if not _fits(n) or n.outs[0].id in folded:
            return None
        count += 1
        g, idx = ins
        dim, shape = n.params["dim"], tuple(n.params["shape"])
        ax = [1] * len(shape)
        ax[dim] = shape[dim]
        iota = np.arange(shape[dim], dtype=np.int64).reshape(ax)
        iota.flags.writeable = False
        if g.device.type != "cpu":          # NOTE: a GPU graph's constants live on the GPU
            iota = get_backend(g.device).asarray(iota)
        c = rw.b.constant(iota, _dt.int64, g.device)
        hit = rw.emit("eq", (idx, c))
        zero = False if g.dtype is _dt.bool_ else (0.0 if g.dtype.is_floating_point else 0)
        out = rw.emit("where", (hit, g, zero))
        if g.device.type != "cpu":
            made[out.id] = (idx, g, shape[dim], dim, zero)
        return (out,)

    new = Rewrite(graph).run(rule)
    return new, {"scatter_select": count}


def _row_sum(rw, n, ins, made):
    """``sum(select, dim, keepdim=True)`` of a select ``made`` on a GPU graph, as the one
    value each row selects (module doc); None where it is not that sum."""
    x = ins[0]
    if len(ins) != 1 or x.__class__ is not Var or x.id not in made:
        return None
    idx, g, size, dim, zero = made[x.id]
    p = n.params
    dims = p.get("dim")
    dims = (dims,) if isinstance(dims, int) else tuple(dims or ())
    if p.get("dtype") is not None or not p.get("keepdim") or \
            tuple(d % x.ndim for d in dims) != (dim,):
        return None
    o = n.outs[0]
    if o.dtype is not g.dtype or tuple(o.shape) != tuple(idx.shape):
        return None
    ok = rw.emit("logical_and", (rw.emit("ge", (idx, 0)), rw.emit("lt", (idx, size))))
    return (rw.emit("where", (ok, g, zero)),)
