"""torch.distributed's collectives on Ember tensors, in place.

Each collective stages its tensors into contiguous host arrays (the tensor's own
memory when it is contiguous and the backend handles its dtype; otherwise a copy —
float16/bfloat16 are reduced as float32, then rounded once), starts the backend's
nonblocking operation and returns a :class:`Work` (``async_op=True``) or waits for it.
Results are written back, and the tensors' version counters bumped, when the work
completes. Collectives are not differentiable: like writes through ``t.data`` they
bypass autograd. ``src``/``dst`` are global ranks.
"""
from __future__ import annotations

import time

import numpy as np

from ..errors import DeviceError, DTypeError, ShapeError
from . import debug, health
from .backend import ReduceOp, Work
from .groups import resolve, timeout_error

_FLOAT = {"float16", "bfloat16", "float32", "float64"}


# ---------------------------------------------------------------------- staging
def xp_of(t):
    """The array module of ``t``'s device (NumPy; CuPy for a GPU's tensors)."""
    from ..device import get_backend
    return get_backend(t._device).xp


class _Stage:
    """A contiguous array standing for a tensor during a collective."""

    def __init__(self, t, dtype=None):
        self.t = t
        arr = t._data
        self.copied = not arr.flags.c_contiguous or (dtype is not None and dtype != arr.dtype)
        self.buf = xp_of(t).array(arr, dtype=dtype, order="C") if self.copied else arr

    def write_back(self, values=None) -> None:
        src = self.buf if values is None else values
        if self.copied or values is not None:
            self.t._data[...] = src.reshape(self.t._data.shape)
        self.t._storage.version += 1


def _check_tensor(t, op: str, what: str = "tensor"):
    from ..tensor import Tensor
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {what} must be an ember Tensor, got {type(t).__name__}")
    if t._device.type != "cpu" and t._device.type != _device_type():
        raise DeviceError(f"{op}: the MPI backend handles CPU tensors, got {what} on "
                          f"{t._device}; move it with .cpu(), or start the job with "
                          f"init_process_group(backend='nccl') for CUDA tensors")
    return t


def _device_type() -> str:
    """The device type the default group's backend moves ("cuda" for NCCL)."""
    from .groups import group
    w = group.WORLD
    return "cpu" if w is None or w.comm is None else w.comm.device_type


def _check_like(ts, ref, op: str, what: str) -> None:
    for i, t in enumerate(ts):
        _check_tensor(t, op, f"{what}[{i}]")
        if tuple(t.shape) != tuple(ref.shape) or t.dtype is not ref.dtype:
            raise ShapeError(f"{op}: {what}[{i}] is {_desc(t)} but must match the tensor "
                             f"{_desc(ref)}")


def _desc(t) -> str:
    return f"Tensor(shape={tuple(t.shape)}, dtype={t.dtype.name})"


def _reduce_dtype(t, op, comm, name: str):
    """The dtype to reduce ``t`` in (None: its own), checking ``op`` fits the dtype."""
    kind = t.dtype.name
    if op is ReduceOp.AVG and kind not in _FLOAT:
        raise DTypeError(f"{name}: ReduceOp.AVG needs a floating dtype, got {kind}; use "
                         f"ReduceOp.SUM and divide")
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and kind in _FLOAT:
        raise DTypeError(f"{name}: {op!r} needs an integer or bool dtype, got {kind}")
    return None if comm.reduces(t._data.dtype) else np.dtype(np.float32)


def _check_op(op, name: str) -> None:
    if not isinstance(op, ReduceOp):
        raise TypeError(f"{name}: op must be a dist.ReduceOp, got {op!r}; valid: "
                        f"{[repr(o) for o in ReduceOp]}")


def _wire_op(op):
    return ReduceOp.SUM if op is ReduceOp.AVG else op


# ---------------------------------------------------------------------- driver
def _run(name, group, async_op, sig, start):
    """Resolve the group, check (debug mode), start ``start(grp)`` and wait or return Work.

    ``start`` returns ``(requests, finish)`` or ``(requests, finish, result)``.
    """
    grp = resolve(group, name)
    if grp.comm is None:     # NOTE: PyTorch: a rank outside the group does nothing
        return None
    grp.seq += 1
    call = {"op": name, "seq": grp.seq, **sig, "where": debug.caller_site()}
    if grp.debug:
        debug.check_consistent(grp, call)
    requests, finish, *result = start(grp)
    t0 = time.monotonic()
    work = Work(requests, timeout=grp.timeout, finish=finish,
                result=result[0] if result else None,
                on_timeout=lambda elapsed: timeout_error(grp, call, elapsed),
                poll=lambda: health.serve(call, t0))
    if async_op:
        return work
    work.wait()
    return None


def _sig(t, **extra):
    return {"shape": list(t.shape), "dtype": t.dtype.name, **extra}


# ---------------------------------------------------------------------- collectives
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` over the group, in place on every rank.

    Args:
        tensor: the input and output (any shape; non-contiguous views work).
        op: a :class:`ReduceOp`; ``AVG`` divides the sum by the group size.
        group: the process group (default: the world).
        async_op: return a :class:`Work` instead of waiting.

    Example:
        >>> t = ember.tensor([float(dist.get_rank())])
        >>> dist.all_reduce(t)                  # every rank: sum of 0..N-1
    """
    _check_tensor(tensor, "all_reduce")
    _check_op(op, "all_reduce")

    def start(grp):
        st = _Stage(tensor, _reduce_dtype(tensor, op, grp.comm, "all_reduce"))
        req = grp.comm.allreduce(st.buf, _wire_op(op))
        return [req], lambda: _finish_reduce(st, op, grp.size())
    return _run("all_reduce", group, async_op, _sig(tensor, reduce=op.name), start)


def _finish_reduce(st, op, size) -> None:
    if op is ReduceOp.AVG:
        st.buf /= size
    st.write_back()


def broadcast(tensor, src, group=None, async_op=False):
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank of the group."""
    _check_tensor(tensor, "broadcast")

    def start(grp):
        st = _Stage(tensor)
        return [grp.comm.broadcast(st.buf, grp.group_rank(src, "src", "broadcast"))], \
            st.write_back
    return _run("broadcast", group, async_op, _sig(tensor, src=src), start)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` over the group into rank ``dst``'s ``tensor`` (others unchanged)."""
    _check_tensor(tensor, "reduce")
    _check_op(op, "reduce")

    def start(grp):
        root = grp.group_rank(dst, "dst", "reduce")
        st = _Stage(tensor, _reduce_dtype(tensor, op, grp.comm, "reduce"))
        req = grp.comm.reduce(st.buf, _wire_op(op), root)
        mine = grp.comm.rank == root
        return [req], (lambda: _finish_reduce(st, op, grp.size())) if mine else None
    return _run("reduce", group, async_op, _sig(tensor, dst=dst, reduce=op.name), start)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Fill ``tensor_list[r]`` with rank ``r``'s ``tensor`` on every rank.

    Example:
        >>> out = [ember.zeros(2) for _ in range(dist.get_world_size())]
        >>> dist.all_gather(out, ember.full((2,), float(dist.get_rank())))
    """
    _check_tensor(tensor, "all_gather")

    def start(grp):
        _check_count(tensor_list, grp.size(), "all_gather", "tensor_list")
        _check_like(tensor_list, tensor, "all_gather", "tensor_list")
        send = _Stage(tensor).buf
        recv = xp_of(tensor).empty((grp.size(),) + tuple(tensor.shape), send.dtype)

        def finish():
            for r, t in enumerate(tensor_list):
                _Stage(t).write_back(recv[r])
        return [grp.comm.allgather(send, recv)], finish
    return _run("all_gather", group, async_op, _sig(tensor), start)


def _check_count(ts, size: int, op: str, what: str) -> None:
    if not isinstance(ts, (list, tuple)) or len(ts) != size:
        n = len(ts) if isinstance(ts, (list, tuple)) else type(ts).__name__
        raise ValueError(f"{op}: {what} must be a list of {size} tensors (the group size), "
                         f"got {n}")


def _check_blocks(big, small, size: int, op: str, names) -> None:
    """``big`` is ``size`` copies of ``small`` concatenated or stacked along dim 0."""
    if big.dtype is not small.dtype:
        raise DTypeError(f"{op}: {names[0]} {_desc(big)} and {names[1]} {_desc(small)} "
                         f"must have the same dtype")
    s = tuple(small.shape)
    ok = [(size,) + s] + ([(size * s[0],) + s[1:]] if s else [])
    if tuple(big.shape) not in ok:
        raise ShapeError(f"{op}: {names[0]} is {_desc(big)} but with {names[1]} "
                         f"{_desc(small)} and {size} ranks it must have shape "
                         f"{' or '.join(map(str, ok))}")


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Concatenate (or stack) every rank's ``input_tensor`` along dim 0 into ``output_tensor``.

    ``output_tensor`` has shape ``(world * d0, ...)`` or ``(world, d0, ...)``.
    """
    _check_tensor(output_tensor, "all_gather_into_tensor", "output_tensor")
    _check_tensor(input_tensor, "all_gather_into_tensor", "input_tensor")

    def start(grp):
        _check_blocks(output_tensor, input_tensor, grp.size(), "all_gather_into_tensor",
                      ("output_tensor", "input_tensor"))
        out, inp = _Stage(output_tensor), _Stage(input_tensor)
        return [grp.comm.allgather(inp.buf, out.buf)], out.write_back
    return _run("all_gather_into_tensor", group, async_op, _sig(input_tensor), start)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``input`` (``world`` blocks along dim 0) and give rank ``r`` block ``r``.

    ``input`` has shape ``(world * d0, ...)`` or ``(world, d0, ...)`` for an ``output``
    of shape ``(d0, ...)``.
    """
    _check_tensor(output, "reduce_scatter_tensor", "output")
    _check_tensor(input, "reduce_scatter_tensor", "input")
    _check_op(op, "reduce_scatter_tensor")

    def start(grp):
        _check_blocks(input, output, grp.size(), "reduce_scatter_tensor", ("input", "output"))
        wire = _reduce_dtype(input, op, grp.comm, "reduce_scatter_tensor")
        out, inp = _Stage(output, wire), _Stage(input, wire)
        req = grp.comm.reduce_scatter(inp.buf, out.buf, _wire_op(op))
        return [req, _Keep(inp)], lambda: _finish_reduce(out, op, grp.size())
    return _run("reduce_scatter_tensor", group, async_op, _sig(input, reduce=op.name), start)


class _Keep:
    """A completed pseudo-request that keeps a staging buffer alive with the work."""

    def __init__(self, obj):
        self.obj = obj

    def test(self) -> bool:
        return True


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce the lists ``input_list`` element-wise; rank ``r`` gets entry ``r`` in ``output``."""
    from ..tensor import _wrap
    _check_tensor(output, "reduce_scatter", "output")
    grp = resolve(group, "reduce_scatter")
    if grp.comm is None:
        return None
    _check_count(input_list, grp.size(), "reduce_scatter", "input_list")
    _check_like(input_list, output, "reduce_scatter", "input_list")
    stacked = _wrap(xp_of(output).stack([t._data for t in input_list]), output.dtype,
                    output.device)
    return reduce_scatter_tensor(output, stacked, op, group, async_op)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    """Rank ``dst`` gets every rank's ``tensor`` in ``gather_list`` (None on other ranks)."""
    _check_tensor(tensor, "gather")

    def start(grp):
        root = grp.group_rank(dst, "dst", "gather")
        send = _Stage(tensor).buf
        if grp.comm.rank != root:
            if gather_list:
                raise ValueError(f"gather: gather_list must be None on rank "
                                 f"{grp.ranks[grp.comm.rank]}, which is not dst={dst}")
            return [grp.comm.gather(send, None, root)], None
        _check_count(gather_list, grp.size(), "gather", "gather_list")
        _check_like(gather_list, tensor, "gather", "gather_list")
        recv = xp_of(tensor).empty((grp.size(),) + tuple(tensor.shape), send.dtype)
        return [grp.comm.gather(send, recv, root)], lambda: [
            _Stage(t).write_back(recv[r]) for r, t in enumerate(gather_list)]
    return _run("gather", group, async_op, _sig(tensor, dst=dst), start)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    """Rank ``r`` gets ``scatter_list[r]`` of rank ``src`` into ``tensor``."""
    _check_tensor(tensor, "scatter")

    def start(grp):
        root = grp.group_rank(src, "src", "scatter")
        out = _Stage(tensor)
        send = None
        if grp.comm.rank == root:
            _check_count(scatter_list, grp.size(), "scatter", "scatter_list")
            _check_like(scatter_list, tensor, "scatter", "scatter_list")
            send = xp_of(tensor).stack([t._data for t in scatter_list])
        elif scatter_list:
            raise ValueError(f"scatter: scatter_list must be None on rank "
                             f"{grp.ranks[grp.comm.rank]}, which is not src={src}")
        return [grp.comm.scatter(send, out.buf, root)], out.write_back
    return _run("scatter", group, async_op, _sig(tensor, src=src), start)


def barrier(group=None, async_op=False, device_ids=None):
    """Wait until every rank of the group has called ``barrier``."""
    return _run("barrier", group, async_op, {}, lambda grp: ([grp.comm.barrier()], None))
