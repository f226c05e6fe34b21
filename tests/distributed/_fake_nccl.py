"""A stand-in for ``cupy.cuda.nccl`` on the ``EMBER_FAKE_CUDA`` device (tests only).

Same names and call signatures as CuPy's module (``NcclCommunicator(ndev, uid, rank)``,
``allReduce(sendbuf, recvbuf, count, datatype, op, stream)``, ``groupStart``...). The
"device pointers" are host addresses of the stand-in's NumPy arrays: each call views them
with NumPy and emulates NCCL, over ``mpi4py``'s ``COMM_WORLD`` when the communicator has
more than one rank (pickled NumPy arrays, so every dtype, bfloat16 included, travels).
Every call is appended to :data:`calls` so tests can check what reached "NCCL".
"""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np

(NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_UINT32, NCCL_INT64, NCCL_UINT64, NCCL_FLOAT16,
 NCCL_FLOAT32, NCCL_FLOAT64, NCCL_BFLOAT16) = range(10)
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = range(5)
_NP = {NCCL_INT8: np.int8, NCCL_UINT8: np.uint8, NCCL_INT32: np.int32,
       NCCL_UINT32: np.uint32, NCCL_INT64: np.int64, NCCL_UINT64: np.uint64,
       NCCL_FLOAT16: np.float16, NCCL_FLOAT32: np.float32, NCCL_FLOAT64: np.float64,
       NCCL_BFLOAT16: ml_dtypes.bfloat16}
_REDUCE = {NCCL_SUM: np.sum, NCCL_PROD: np.prod, NCCL_MAX: np.max, NCCL_MIN: np.min}

available = True
calls: list = []          # (name, details) of every call, in order
_pending: list = []       # sends/recvs queued between groupStart and groupEnd
_depth = [0]
_TAG = 7717


class NcclError(RuntimeError):
    """The fake's NCCL error."""


def get_unique_id():
    calls.append(("get_unique_id", {}))
    return tuple(int(v) for v in np.random.default_rng().integers(-128, 128, 128))


def groupStart():
    calls.append(("groupStart", {}))
    _depth[0] += 1


def groupEnd():
    calls.append(("groupEnd", {}))
    _depth[0] -= 1
    if _depth[0] == 0:
        work, _pending[:] = list(_pending), []
        _run_p2p(work)


def _view(ptr: int, count: int, datatype: int) -> np.ndarray:
    dt = np.dtype(_NP[datatype])
    if count == 0:
        return np.empty(0, dt)
    raw = (ctypes.c_char * (count * dt.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dt, count)


def _reduce(parts, op, dtype):
    stack = np.stack(parts)
    if np.dtype(dtype).kind == "f" or dtype == ml_dtypes.bfloat16:
        return _REDUCE[op](stack.astype(np.float64), axis=0).astype(dtype)
    return _REDUCE[op](stack, axis=0).astype(dtype)


def _run_p2p(work) -> None:
    """Emulate a group of sends/recvs: ``(kind, comm, array, peer)``."""
    reqs, local = [], []
    for kind, comm, arr, peer in work:
        if kind == "send":
            if peer == comm.rank or comm.world is None:
                local.append(arr.copy())
            else:
                reqs.append(comm.world.isend(arr.copy(), dest=peer, tag=_TAG))
    for kind, comm, arr, peer in work:
        if kind == "recv":
            if peer == comm.rank or comm.world is None:
                arr[...] = local.pop(0)
            else:
                arr[...] = comm.world.recv(source=peer, tag=_TAG)
    for r in reqs:
        r.wait()


class NcclCommunicator:
    """One rank's fake communicator; more than one rank needs ``mpiexec`` (COMM_WORLD)."""

    def __init__(self, ndev: int, commId: tuple, rank: int):
        assert len(commId) == 128
        calls.append(("NcclCommunicator", {"ndev": ndev, "rank": rank}))
        self.world = None
        if ndev > 1:
            from mpi4py import MPI
            assert MPI.COMM_WORLD.Get_size() == ndev, "the fake NCCL spans COMM_WORLD only"
            self.world = MPI.COMM_WORLD
        self.rank, self.ndev = rank, ndev
        self.async_error = None
        self.alive = True

    def _log(self, name, **kw):
        if not self.alive:
            raise NcclError(f"{name}: the communicator was destroyed or aborted")
        calls.append((name, kw))

    def _all(self, arr):
        return [arr.copy()] if self.world is None else self.world.allgather(arr.copy())

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        self._log("allReduce", count=count, datatype=datatype, op=op, stream=stream)
        parts = self._all(_view(sendbuf, count, datatype))
        _view(recvbuf, count, datatype)[:] = _reduce(parts, op, _NP[datatype])

    def reduce(self, sendbuf, recvbuf, count, datatype, op, root, stream):
        self._log("reduce", count=count, datatype=datatype, op=op, root=root, stream=stream)
        parts = self._all(_view(sendbuf, count, datatype))
        if self.rank == root:
            _view(recvbuf, count, datatype)[:] = _reduce(parts, op, _NP[datatype])

    def broadcast(self, sendbuff, recvbuff, count, datatype, root, stream):
        self._log("broadcast", count=count, datatype=datatype, root=root, stream=stream)
        mine = _view(sendbuff, count, datatype).copy() if self.rank == root else None
        data = mine if self.world is None else self.world.bcast(mine, root=root)
        _view(recvbuff, count, datatype)[:] = data

    def allGather(self, sendbuf, recvbuf, count, datatype, stream):
        self._log("allGather", count=count, datatype=datatype, stream=stream)
        parts = self._all(_view(sendbuf, count, datatype))
        _view(recvbuf, count * self.ndev, datatype)[:] = np.concatenate(parts)

    def reduceScatter(self, sendbuf, recvbuf, recvcount, datatype, op, stream):
        self._log("reduceScatter", count=recvcount, datatype=datatype, op=op, stream=stream)
        parts = self._all(_view(sendbuf, recvcount * self.ndev, datatype))
        red = _reduce(parts, op, _NP[datatype])
        _view(recvbuf, recvcount, datatype)[:] = red[self.rank * recvcount:
                                                     (self.rank + 1) * recvcount]

    def send(self, sendbuf, count, datatype, peer, stream):
        self._log("send", count=count, datatype=datatype, peer=peer, stream=stream)
        item = ("send", self, _view(sendbuf, count, datatype), peer)
        _pending.append(item) if _depth[0] else _run_p2p([item])

    def recv(self, recvbuf, count, datatype, peer, stream):
        self._log("recv", count=count, datatype=datatype, peer=peer, stream=stream)
        item = ("recv", self, _view(recvbuf, count, datatype), peer)
        _pending.append(item) if _depth[0] else _run_p2p([item])

    def check_async_error(self):
        if self.async_error is not None:
            raise NcclError(self.async_error)

    def rank_id(self):
        return self.rank

    def size(self):
        return self.ndev

    def abort(self):
        calls.append(("abort", {}))
        self.alive = False

    def destroy(self):
        calls.append(("destroy", {}))
        self.alive = False
