"""Recast: a low-precision copy of a graph input is made again where it is read late.

Under ``ember.autocast`` a training step casts each float32 weight to bfloat16 for its
forward matmul, and the matmul's VJP reads the same copy in the backward (``g @ w``): stored
as is, every weight's copy lives from the forward to the backward, a step's worth of
"activations" that are really weights. The weight itself is a graph input, alive all along,
so the backward can cast it again for the cost of one read at memory speed — what
recomputing a cheap op instead of saving it is for (see :mod:`.recompute`).

:func:`recast` gives each reader of a ``cast`` of a graph input that comes more than
:data:`GAP` nodes after the previous reader its own cast, emitted right before it. The cast
is deterministic, so results are bitwise unchanged; the memory planner frees the forward's
copy after its last nearby reader.

Not on a GPU (a graph whose values live on a device with generated kernels): there each
recast is one more launch, ~10-20 us of host Python on a compiled step that is
host-bound (48 in the GPT step of ``bench/cuda.py``), to save weight copies (~250 MB for
its 124M parameters in float16) a GPU's memory holds easily.
"""
from __future__ import annotations

from ..ir import Var, rebuild

#: readers this many nodes apart share one copy (a forward matmul and its transpose view).
GAP = 8


def recast(graph):
    """``(graph, {"recast": n})``: ``graph`` with late readers of input casts recast."""
    if any(v.device is not None and v.device.type != "cpu" for v in graph.inputs):
        return graph, {"recast": 0}         # NOTE: a GPU's graph (see the module doc)
    inputs = {v.id for v in graph.inputs}
    outputs = {v.id for v in graph.outputs}
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    users = graph.users()
    late: dict = {}                     # id(reader) -> {cast output var id: cast node}
    for n in graph.nodes:
        if getattr(n.op, "name", None) != "cast" or len(n.outs) != 1:
            continue
        x, out = n.inputs[0], n.outs[0]
        if x.__class__ is not Var or x.id not in inputs or out.id in outputs:
            continue
        prev = order[id(n)]
        for u in sorted({id(u): u for u in users.get(out.id, ())}.values(),
                        key=lambda u: order[id(u)]):
            if order[id(u)] - prev > GAP:
                late.setdefault(id(u), {})[out.id] = n
            prev = order[id(u)]
    if not late:
        return graph, {"recast": 0}
    made = [0]

    def fn(b, n, ins):
        casts = late.get(id(n))
        if casts is None:
            return None
        fresh = {}
        new_ins = []
        for old, new in zip(n.inputs, ins):
            c = casts.get(old.id) if old.__class__ is Var else None
            if c is not None:
                if old.id not in fresh:
                    o = c.outs[0]
                    src = b.inputs[[v.id for v in graph.inputs].index(c.inputs[0].id)]
                    fresh[old.id] = b.add(c.op, (src,), c.params,
                                          [(o.shape, o.dtype, o.device)], c.ct)[0]
                    made[0] += 1
                new = fresh[old.id]
            new_ins.append(new)
        return b.add(n.op, tuple(new_ins), n.params,
                     [(o.shape, o.dtype, o.device) for o in n.outs], n.ct)

    new, _ = rebuild(graph, fn)
    return new, {"recast": made[0]}
