"""DDP's collectives as graph nodes, for ``ember.compile`` of a data-parallel step.

While ``ember.compile`` traces a step, the reducer averages each full bucket with Ember
ops (``cat`` of the gradients, divided by the world size) and all-reduce nodes (below),
whose runs call MPI at every replay of the graph; the buffers' broadcast from rank
0 before the forward becomes ``broadcast`` nodes whose results are copied into the
buffers (written back after each run). A node returns a new array
(it never writes its input, so the memory planner may reuse that buffer) and each
collective node takes the previous one's output as an extra input: the nodes keep one order on every rank
whatever the passes do, so the ranks' collectives always match.

A bucket's all-reduce is two nodes, so that it overlaps the rest of the backward pass
as in eager DDP: ``all_reduce_start`` (recorded when the bucket is full) copies the
averaged gradients into a new array, launches the nonblocking all-reduce on it and
returns a 0-d *token* naming the in-flight request; ``all_reduce_wait`` (recorded at the
end of backward, so every later backward node comes before it in the schedule — the
graph's node order is its execution order) waits for it and returns the reduced array.
Between the two, MPI progresses in ``all_reduce_poll`` nodes (recorded wherever backward
made another gradient: they ``Test`` the in-flight requests, as eager DDP's hooks do)
and, opt-in, on a progress thread (``ember.distributed.progress``).
The array moves from start to wait outside the graph's values, so the memory planner
never sees it while MPI writes it; the wait hands it over as new memory.
"""
from __future__ import annotations

from ...graph.ir import GraphOp


def _run_collective(xp, flat, *after, reduce):
    return reduce(flat)


#: never merged by CSE, never folded: they talk to the other ranks at every run
BROADCAST = GraphOp("broadcast", _run_collective, random=True)


def active_tracer():
    """The ``ember.compile`` tracer recording this call, or None."""
    from ...autograd.grad_mode import state
    for mode in reversed(state.modes):
        if hasattr(mode, "b") and hasattr(mode, "internal") and hasattr(mode, "read"):
            return mode
    return None


class _InFlight:
    """The all-reduces started by a graph's start nodes and not yet waited: token -> work."""

    def __init__(self):
        import collections
        self.next, self.works = 0, {}
        self.log = collections.deque(maxlen=256)   # (wait entered, done) per wait node

    def start(self, arr, dist, group):
        import numpy as np

        from ...ops.factories import from_numpy
        buf = np.array(arr, copy=True, order="C")
        self.next += 1
        from ...distributed import groups, progress   # NOTE: late: nn sits below it
        work = dist.all_reduce(from_numpy(buf), group=group, async_op=True)
        comm = groups.resolve(group, "all_reduce").comm
        if progress.enabled(comm) and not work.is_completed():
            progress.watch(comm)   # NOTE: MPI progress while the graph computes
        else:
            comm = None
        self.works[self.next] = (buf, work, comm, progress)
        return np.array(self.next, dtype=np.int64)

    def poll(self):
        """Test the in-flight all-reduces, oldest first (MPI progresses inside Test)."""
        import numpy as np
        for _, work, _, _ in self.works.values():   # NOTE: launch order
            if not work.is_completed():
                break
        return np.zeros((), dtype=np.int64)

    def wait(self, token, wait):
        import time
        buf, work, comm, progress = self.works.pop(int(token))
        t0 = time.perf_counter()
        try:
            wait(work)
            self.log.append((t0, time.perf_counter()))
        finally:
            if comm is not None:
                progress.unwatch(comm)
        return buf


_IN_FLIGHT = _InFlight()


def _run_start(xp, flat, *after, start):
    return start(flat)


def _run_wait(xp, token, wait):
    return wait(token)


def _run_poll(xp, token, poll):
    return poll()


ALL_REDUCE_START = GraphOp("all_reduce_start", _run_start, random=True)
ALL_REDUCE_WAIT = GraphOp("all_reduce_wait", _run_wait, random=True)
ALL_REDUCE_POLL = GraphOp("all_reduce_poll", _run_poll, random=True)


def start_all_reduce(tr, flat, after, dist, group):
    """Launch the all-reduce of ``flat`` (now, and as a start node in ``tr``).

    Returns the token tensor, bound to the node's output; pass it to
    :func:`wait_all_reduce` and as ``after`` to the next collective node.
    """
    def start(arr):
        return _IN_FLIGHT.start(arr, dist, group)
    return _record(tr, ALL_REDUCE_START, flat, after, {"start": start})


def wait_all_reduce(tr, token, wait_fn):
    """Wait for the all-reduce of ``token`` (now, and as a wait node in ``tr``); returns
    the reduced tensor."""
    def wait(tok):
        return _IN_FLIGHT.wait(tok, wait_fn)
    return _record(tr, ALL_REDUCE_WAIT, token, None, {"wait": wait})


def poll_all_reduces(tr, token):
    """Record a node that tests the in-flight all-reduces (after ``token``'s start).

    NOTE: placed where backward made a gradient, like eager DDP's hooks: MPI moves a
    nonblocking collective only inside MPI calls, and these Tests on the graph's own
    thread need no GIL hand-off nor another core (cf. the progress thread).
    """
    return _record(tr, ALL_REDUCE_POLL, token, None, {"poll": _IN_FLIGHT.poll})


def _record(tr, op, x, after, params):
    from ...ops.factories import from_numpy
    with tr.suspended():
        out = from_numpy(op.run(None, x._data, **params))
    ins = (tr.read(x),) + ((tr.read(after),) if after is not None else ())
    v = tr.b.add1(op, ins, params, out._data.shape, out._dtype, out._device)
    tr.bind(out, v)
    tr.internal.add(id(out._data))
    return out


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
