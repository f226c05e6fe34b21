"""DDP's collectives as graph nodes, for ``ember.compile`` of a data-parallel step.

While ``ember.compile`` traces a step, the reducer averages each full bucket with Ember
ops (``cat`` of the gradients, divided by the world size) and one ``all_reduce`` graph
node, whose run calls MPI at every replay of the graph; the buffers' broadcast from rank
0 before the forward becomes ``broadcast`` nodes whose results are copied into the
buffers (written back after each run). The node returns a new array
(it never writes its input, so the memory planner may reuse that buffer) and takes the
previous all-reduce's output as an extra input: the nodes keep one order on every rank
whatever the passes do, so the ranks' collectives always match. The collective itself
is blocking inside the graph (no overlap with the rest of backward, unlike eager DDP).
"""
from __future__ import annotations

from ...graph.ir import GraphOp


def _run_collective(xp, flat, *after, reduce):
    return reduce(flat)


#: never merged by CSE, never folded: they talk to the other ranks at every run
ALL_REDUCE = GraphOp("all_reduce", _run_collective, random=True)
BROADCAST = GraphOp("broadcast", _run_collective, random=True)


def active_tracer():
    """The ``ember.compile`` tracer recording this call, or None."""
    from ...autograd.grad_mode import state
    for mode in reversed(state.modes):
        if hasattr(mode, "b") and hasattr(mode, "internal") and hasattr(mode, "read"):
            return mode
    return None


def all_reduce_node(tr, flat, after, dist, group):
    """All-reduce ``flat`` now (eagerly, on a copy) and record it in ``tr`` as a node.

    Returns the reduced tensor, bound to the node's output.
    """
    return _node(tr, ALL_REDUCE, flat, after, lambda t: dist.all_reduce(t, group=group))


def broadcast_node(tr, t, after, dist, group, src: int = 0):
    """``t``'s value on rank ``src`` (a new tensor), recorded in ``tr`` as a node."""
    return _node(tr, BROADCAST, t, after, lambda x: dist.broadcast(x, src, group=group))


def _node(tr, op, flat, after, collective):
    import numpy as np

    from ...ops.factories import from_numpy

    def reduce(arr):
        buf = np.array(arr, copy=True, order="C")
        collective(from_numpy(buf))
        return buf

    with tr.suspended():
        out = from_numpy(reduce(flat._data))
    ins = (tr.read(flat),) + ((tr.read(after),) if after is not None else ())
    v = tr.b.add1(op, ins, {"reduce": reduce}, out._data.shape, out._dtype,
                  out._device)
    tr.bind(out, v)
    tr.internal.add(id(out._data))
    return out
