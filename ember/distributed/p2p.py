"""Point-to-point (``send``/``recv``/``isend``/``irecv``) and all-to-all on Ember tensors."""
from __future__ import annotations

import time

import numpy as np

from ..errors import DTypeError, ShapeError
from . import health
from .backend import Work
from .collectives import _check_count, _check_tensor, _desc, _Keep, _run, _Stage, xp_of
from .groups import resolve, timeout_error


def _p2p_work(name, tensor, peer, group, tag, start_fn):
    """Start a send/recv with ``peer`` (a global rank or None) and return its Work."""
    from . import debug
    _check_tensor(tensor, name)
    grp = resolve(group, name)
    if grp.comm is None:
        return None
    me = grp.ranks[grp.comm.rank]
    if peer is not None:
        if peer == me:
            raise ValueError(f"{name}: rank {me} cannot {name} to/from itself")
        peer = grp.group_rank(peer, "peer", name)
    call = {"op": name, "seq": 0, "shape": list(tensor.shape), "dtype": tensor.dtype.name,
            "peer": peer if peer is None else grp.ranks[peer], "tag": tag,
            "where": debug.caller_site()}
    req, finish = start_fn(grp, peer, int(tag))
    t0 = time.monotonic()
    return Work([req], timeout=grp.timeout, finish=finish, poll=lambda: health.serve(call, t0),
                result=lambda: grp.ranks[req.source if peer is None else peer],
                on_timeout=lambda e: timeout_error(grp, call, e))


def isend(tensor, dst: int, group=None, tag: int = 0):
    """Start sending ``tensor`` to rank ``dst``; returns a :class:`Work`."""
    def start(grp, peer, tag):
        st = _Stage(tensor)
        return grp.comm.send(st.buf, peer, tag), None
    return _p2p_work("send", tensor, dst, group, tag, start)


def irecv(tensor, src: int | None = None, group=None, tag: int = 0):
    """Start receiving into ``tensor`` from rank ``src`` (None: any rank); returns a Work.

    ``work.wait()`` then ``work.result()`` gives the sender's rank.
    """
    def start(grp, peer, tag):
        st = _Stage(tensor)
        return grp.comm.recv(st.buf, peer, tag), st.write_back
    return _p2p_work("recv", tensor, src, group, tag, start)


def send(tensor, dst: int, group=None, tag: int = 0) -> None:
    """Send ``tensor`` to rank ``dst`` (waits until the buffer can be reused).

    Example:
        >>> if dist.get_rank() == 0:
        ...     dist.send(t, dst=1)
        ... else:
        ...     dist.recv(t, src=0)
    """
    work = isend(tensor, dst, group, tag)
    if work is not None:
        work.wait()


def recv(tensor, src: int | None = None, group=None, tag: int = 0) -> int:
    """Receive into ``tensor`` from ``src`` (None: any rank); returns the sender's rank."""
    work = irecv(tensor, src, group, tag)
    if work is None:
        return -1
    work.wait()
    return work.result()


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """Rank ``r`` sends ``input_tensor_list[j]`` to rank ``j``, which gets it in
    ``output_tensor_list[r]``. Tensors may have different shapes; one dtype.

    Example:
        >>> dist.all_to_all(outs, ins)     # outs[j] on rank r == ins[r] on rank j
    """
    def start(grp):
        n = grp.size()
        _check_count(output_tensor_list, n, "all_to_all", "output_tensor_list")
        _check_count(input_tensor_list, n, "all_to_all", "input_tensor_list")
        ts = list(output_tensor_list) + list(input_tensor_list)
        for i, t in enumerate(ts):
            _check_tensor(t, "all_to_all", f"tensor {i}")
            if t.dtype is not ts[0].dtype:
                raise DTypeError(f"all_to_all: every tensor must have one dtype; got "
                                 f"{_desc(ts[0])} and {_desc(t)}")
        xp = xp_of(ts[0]) if ts else np
        send = xp.concatenate([xp.ascontiguousarray(t._data).reshape(-1).view(np.uint8)
                               for t in input_tensor_list]) if n else xp.empty(0, np.uint8)
        recv_counts = [t._data.nbytes for t in output_tensor_list]
        recv = xp.empty(sum(recv_counts), np.uint8)
        req = grp.comm.alltoallv(send, [t._data.nbytes for t in input_tensor_list],
                                 recv, recv_counts)

        def finish():
            at = 0
            for t, c in zip(output_tensor_list, recv_counts):
                _Stage(t).write_back(recv[at:at + c].view(t._data.dtype))
                at += c
        return [req], finish
    dtype = input_tensor_list[0].dtype.name if input_tensor_list else None
    return _run("all_to_all", group, async_op, {"dtype": dtype}, start)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    """``all_to_all`` on slices along dim 0 of one input and one output tensor.

    Without split sizes, dim 0 is split evenly among the ranks.
    """
    _check_tensor(output, "all_to_all_single", "output")
    _check_tensor(input, "all_to_all_single", "input")

    def start(grp):
        if output.dtype is not input.dtype or output.ndim == 0 or input.ndim == 0:
            raise ShapeError(f"all_to_all_single: output {_desc(output)} and input "
                             f"{_desc(input)} need one dtype and at least one dimension")
        sc = _splits(input, input_split_sizes, grp.size(), "input")
        rc = _splits(output, output_split_sizes, grp.size(), "output")
        out, inp = _Stage(output), _Stage(input)
        req = grp.comm.alltoallv(inp.buf, sc, out.buf, rc)
        return [req, _Keep(inp)], out.write_back
    return _run("all_to_all_single", group, async_op, {"dtype": input.dtype.name}, start)


def _splits(t, sizes, n: int, what: str) -> list[int]:
    """Byte counts of the dim-0 slices of ``t`` (even split when ``sizes`` is None)."""
    d0 = t.shape[0]
    row = t._data.nbytes // d0 if d0 else 0
    if sizes is None or len(sizes) == 0:
        if d0 % n:
            raise ShapeError(f"all_to_all_single: {what} {_desc(t)}: dim 0 ({d0}) must "
                             f"divide evenly among {n} ranks, or pass {what}_split_sizes")
        return [d0 // n * row] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or sum(sizes) != d0 or min(sizes) < 0:
        raise ShapeError(f"all_to_all_single: {what}_split_sizes={sizes} must be {n} "
                         f"non-negative sizes summing to dim 0 of {what} {_desc(t)}")
    return [s * row for s in sizes]
