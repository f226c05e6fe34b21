"""The MPI backend: :class:`~ember.distributed.backend.Communicator` on mpi4py.

Every operation is MPI's nonblocking form (``Iallreduce``, ``Ibcast``...) so the
caller's :class:`~ember.distributed.backend.Work` can poll ``Test()`` against a
deadline instead of blocking forever in MPI. Data that is only moved travels as
``MPI.BYTE``; reductions use MPI's typed reductions (float16 and bfloat16 have no MPI
type, so ``reduces`` says no and the tensor layer reduces them as float32). Bool
arrays reduce with MPI's logical ops: ``SUM``/``MAX`` are OR, ``PRODUCT``/``MIN`` AND,
as in PyTorch.
"""
from __future__ import annotations

import numpy as np

from .backend import Communicator, DistributedUnavailable, ReduceOp, Request

INSTALL_HINT = ("ember.distributed needs mpi4py and an MPI library: pip install "
                "'ember[distributed]' (installs mpi4py and mpich)")


def load_mpi():
    """Import mpi4py's ``MPI`` (which initializes MPI), or raise a clear error."""
    try:
        from mpi4py import MPI
    except ImportError as e:   # NOTE: also a missing libmpi behind an installed mpi4py
        raise DistributedUnavailable(f"{INSTALL_HINT} ({e})") from None
    return MPI


_REDUCIBLE = {np.dtype(n) for n in ("bool", "uint8", "int8", "int16", "int32", "int64",
                                    "float32", "float64")}


def _bytes(arr):
    """A flat uint8 view of a contiguous array (works for any dtype, 0-d included)."""
    return arr.reshape(-1).view(np.uint8)


class _MPIRequest(Request):
    __slots__ = ("req", "keep", "status", "comm", "done")

    def __init__(self, req, keep, status=None):
        self.req = req
        self.keep = keep         # NOTE: buffers must outlive the request
        self.status = status
        self.done = False

    def test(self) -> bool:
        if not self.done:
            self.done = (self.req.Test(self.status) if self.status is not None
                         else self.req.Test())
        return self.done

    @property
    def source(self):
        return None if self.status is None else self.status.Get_source()


class MPICommunicator(Communicator):
    """A :class:`Communicator` over an ``mpi4py`` communicator.

    Example:
        >>> comm = MPICommunicator(MPI.COMM_WORLD.Dup())
        >>> x = np.ones(4, np.float32)
        >>> comm.allreduce(x, ReduceOp.SUM).test()
    """

    name = "mpi"

    def __init__(self, comm):
        self.MPI = load_mpi()
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._tables()
        self._thread_multiple = self.MPI.Query_thread() >= self.MPI.THREAD_MULTIPLE
        self._progress_tag = int(comm.Get_attr(self.MPI.TAG_UB) or 32767)

    # ------------------------------------------------------------------ helpers
    def reduces(self, dtype) -> bool:
        return np.dtype(dtype) in _REDUCIBLE

    def _typed(self, arr):
        return [arr.reshape(-1), arr.size, self._types[arr.dtype]]

    def _op(self, op: ReduceOp, dtype):
        return (self._bool_ops if dtype == np.bool_ else self._ops)[op]

    def _tables(self) -> None:
        M = self.MPI
        self._types = {np.dtype(k): v for k, v in (
            ("bool", M.C_BOOL), ("uint8", M.UINT8_T), ("int8", M.INT8_T),
            ("int16", M.INT16_T), ("int32", M.INT32_T), ("int64", M.INT64_T),
            ("float32", M.FLOAT), ("float64", M.DOUBLE))}
        self._bool_ops = {ReduceOp.SUM: M.LOR, ReduceOp.MAX: M.LOR, ReduceOp.BOR: M.LOR,
                          ReduceOp.PRODUCT: M.LAND, ReduceOp.MIN: M.LAND,
                          ReduceOp.BAND: M.LAND, ReduceOp.BXOR: M.LXOR}
        self._ops = {ReduceOp.SUM: M.SUM, ReduceOp.PRODUCT: M.PROD, ReduceOp.MIN: M.MIN,
                     ReduceOp.MAX: M.MAX, ReduceOp.BAND: M.BAND, ReduceOp.BOR: M.BOR,
                     ReduceOp.BXOR: M.BXOR}

    # ------------------------------------------------------------------ collectives
    def allreduce(self, buf, op):
        req = self.comm.Iallreduce(self.MPI.IN_PLACE, self._typed(buf), self._op(op, buf.dtype))
        return _MPIRequest(req, buf)

    def broadcast(self, buf, root):
        return _MPIRequest(self.comm.Ibcast([_bytes(buf), self.MPI.BYTE], root=root), buf)

    def allgather(self, send, recv):
        B = self.MPI.BYTE
        req = self.comm.Iallgather([_bytes(send), B], [_bytes(recv), B])
        return _MPIRequest(req, (send, recv))

    def reduce_scatter(self, send, recv, op):
        (sb, _, st), (rb, _, rt) = self._typed(send), self._typed(recv)
        req = self.comm.Ireduce_scatter_block([sb, st], [rb, rt], self._op(op, send.dtype))
        return _MPIRequest(req, (send, recv))

    def reduce(self, buf, op, root):
        mop = self._op(op, buf.dtype)
        if self.rank == root:
            req = self.comm.Ireduce(self.MPI.IN_PLACE, self._typed(buf), mop, root=root)
        else:
            req = self.comm.Ireduce(self._typed(buf), None, mop, root=root)
        return _MPIRequest(req, buf)

    def gather(self, send, recv, root):
        B = self.MPI.BYTE
        rb = [_bytes(recv), B] if self.rank == root else None
        return _MPIRequest(self.comm.Igather([_bytes(send), B], rb, root=root), (send, recv))

    def scatter(self, send, recv, root):
        B = self.MPI.BYTE
        sb = [_bytes(send), B] if self.rank == root else None
        return _MPIRequest(self.comm.Iscatter(sb, [_bytes(recv), B], root=root), (send, recv))

    def alltoallv(self, send, send_counts, recv, recv_counts):
        B = self.MPI.BYTE
        sc, rc = list(map(int, send_counts)), list(map(int, recv_counts))
        sd, rd = _displacements(sc), _displacements(rc)
        req = self.comm.Ialltoallv([_bytes(send), (sc, sd), B], [_bytes(recv), (rc, rd), B])
        return _MPIRequest(req, (send, recv))

    def send(self, buf, dst, tag):
        return _MPIRequest(self.comm.Isend([_bytes(buf), self.MPI.BYTE], dest=dst, tag=tag),
                           buf)

    def recv(self, buf, src, tag):
        M = self.MPI
        source = M.ANY_SOURCE if src is None else src
        req = self.comm.Irecv([_bytes(buf), M.BYTE], source=source, tag=tag)
        return _MPIRequest(req, buf, M.Status())

    def poll(self, buf, tag):
        M = self.MPI
        status = M.Status()
        if not self.comm.Iprobe(source=M.ANY_SOURCE, tag=tag, status=status):
            return None
        src = status.Get_source()
        self.comm.Recv([_bytes(buf), M.BYTE], source=src, tag=tag)
        return src

    def barrier(self):
        return _MPIRequest(self.comm.Ibarrier(), None)

    # ------------------------------------------------------------------ management
    def split(self, ranks):
        color = 0 if self.rank in ranks else self.MPI.UNDEFINED
        key = ranks.index(self.rank) if self.rank in ranks else 0
        comm = self.comm.Split(color, key)
        return None if comm == self.MPI.COMM_NULL else MPICommunicator(comm)

    def dup(self):
        return MPICommunicator(self.comm.Dup())

    def abort(self, code=1):
        self.MPI.COMM_WORLD.Abort(code)

    def progress(self):
        # NOTE: an Iprobe on a tag no message carries: MPICH runs its progress engine
        if self.MPI.Is_finalized() or self.comm == self.MPI.COMM_NULL:
            raise RuntimeError("MPI progress: the communicator is gone")
        self.comm.Iprobe(source=self.MPI.ANY_SOURCE, tag=self._progress_tag)

    def thread_safe(self):
        return self._thread_multiple

    def free(self):
        if self.comm != self.MPI.COMM_NULL and not self.MPI.Is_finalized():
            self.comm.Free()


def _displacements(counts):
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out
