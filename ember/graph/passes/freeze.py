"""``freeze(graph, {input: array})``: turn chosen graph inputs into constants.

Compiled training graphs read parameters as inputs (they change every step). For
inference or export with fixed weights, freezing them lets :func:`~.fold.fold` evaluate
everything that depends only on weights — e.g. the scaled convolution weights
:func:`~.rewrite.fold_conv_affine` emits for a Conv+BatchNorm pair.

Example:
    >>> g2 = freeze(g, {"model.0.weight": w})       # keys: Var, var id or input name
    >>> g3, _ = run_pipeline(g2, ["rewrite", "fold", "dce"])
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..ir import Graph, GraphBuilder, Var


def _lookup(graph: Graph, key) -> Var:
    for v in graph.inputs:
        if v is key or (isinstance(key, Var) and v.id == key.id) or \
                (isinstance(key, int) and not isinstance(key, bool) and v.id == key) or \
                (isinstance(key, str) and v.name == key):
            return v
    raise GraphError(f"freeze: {key!r} is not an input of {graph.name}")


def freeze(graph: Graph, values: dict) -> Graph:
    """A new graph whose inputs named in ``values`` are constants with those values.

    Values are copied and checked against the input's shape; they are cast to its dtype.
    """
    frozen = {}
    for key, val in values.items():
        v = _lookup(graph, key)
        arr = np.array(getattr(val, "_data", val), dtype=v.dtype.np, copy=True)
        if arr.shape != v.shape:
            raise GraphError(f"freeze: {v} is {v.type_str()} but the value has shape "
                             f"{arr.shape}")
        frozen[v.id] = arr
    b = GraphBuilder(graph.name)
    env = {}
    for v in graph.inputs:
        if v.id not in frozen:
            env[v.id] = b.input(v.shape, v.dtype, v.device, v.name)
    for v in graph.inputs:
        if v.id in frozen:
            env[v.id] = b.constant(frozen[v.id], v.dtype, v.device)
    for n in graph.nodes:
        ins = tuple(env[x.id] if x.__class__ is Var else x for x in n.inputs)
        outs = b.add(n.op, ins, n.params, [(o.shape, o.dtype, o.device) for o in n.outs], n.ct)
        env.update((o.id, no) for o, no in zip(n.outs, outs))
    return b.build([env[v.id] for v in graph.outputs])
