"""The NCCL backend: :class:`~ember.distributed.backend.Communicator` over CuPy's NCCL.

``init_process_group("nccl")`` runs the collectives of CUDA tensors on NCCL
(``cupy.cuda.nccl``, ``pip install cupy-cuda12x``). The job is still started by MPI
(``ember run`` / ``mpiexec``): each rank keeps the MPI communicator as its *host*
communicator, which does the rendezvous, carries rank 0's ``ncclUniqueId`` to the
others, runs the debug/health control messages and moves host (NumPy) buffers, e.g.
the object collectives' bytes. Device buffers go through NCCL.

Every NCCL call is enqueued on the current CUDA stream (``ember.cuda.current_stream``)
and followed by an event; the request is complete when the event is, so
:class:`~ember.distributed.backend.Work` polls it against the group's timeout like an
MPI request and never blocks inside NCCL. While waiting it also asks NCCL for
asynchronous errors (``ncclCommGetAsyncError``). A timeout or an NCCL error aborts the
communicator (``ncclCommAbort``, so the GPU kernels waiting for a dead peer stop) and
raises :class:`~ember.distributed.backend.DistributedError` naming the rank and the
collective; the group cannot be used again. Unlike PyTorch, whose synchronous NCCL
collectives return once queued (a watchdog thread enforces the timeout), a synchronous
collective here waits on the host until its event completes, so a timeout surfaces at
the call; ``async_op=True`` returns at once. NCCL has no bitwise reductions (``BAND``,
``BOR``, ``BXOR`` are refused, as PyTorch does) and no receive from any source
(``recv`` needs ``src``). ``gather``/``scatter``/``all_to_all`` are grouped
sends/receives (``ncclGroupStart``/``ncclGroupEnd``), as in PyTorch.

The NCCL module is found by :func:`load_nccl`; :func:`set_nccl_module` replaces it (the
tests inject a fake that records each call and emulates it with NumPy on the
``EMBER_FAKE_CUDA`` stand-in, whose "device" pointers are host addresses).
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

from .backend import (Communicator, DistributedError, DistributedUnavailable, ReduceOp,
                      Request, Work)

INSTALL_HINT = ("the NCCL backend needs CuPy with NCCL and an NVIDIA GPU: pip install "
                "cupy-cuda12x (NCCL comes with the nvidia-nccl-cu12 wheel); on a machine "
                "without a GPU use backend='mpi' with CPU tensors")

_injected: list = []    # a module standing in for cupy.cuda.nccl (set_nccl_module)

#: Ember dtype name -> the NCCL datatype constant's name.
_NCCL_TYPES = {"int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32",
               "uint32": "NCCL_UINT32", "int64": "NCCL_INT64", "uint64": "NCCL_UINT64",
               "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
               "float64": "NCCL_FLOAT64", "bfloat16": "NCCL_BFLOAT16"}
_NCCL_OPS = {ReduceOp.SUM: "NCCL_SUM", ReduceOp.PRODUCT: "NCCL_PROD",
             ReduceOp.MIN: "NCCL_MIN", ReduceOp.MAX: "NCCL_MAX"}


def set_nccl_module(module) -> None:
    """Use ``module`` instead of ``cupy.cuda.nccl`` (None: back to CuPy's)."""
    _injected.clear()
    if module is not None:
        _injected.append(module)


def load_nccl():
    """``cupy.cuda.nccl`` (or the module given to :func:`set_nccl_module`).

    Raises:
        DistributedUnavailable: CuPy or its NCCL bindings are missing.
    """
    if _injected:
        return _injected[0]
    try:
        from cupy.cuda import nccl
    except ImportError as e:
        raise DistributedUnavailable(f"init_process_group(backend='nccl'): {INSTALL_HINT} "
                                     f"({e})") from None
    if not getattr(nccl, "available", True):
        raise DistributedUnavailable(f"init_process_group(backend='nccl'): this CuPy was "
                                     f"built without NCCL; {INSTALL_HINT}")
    return nccl


def cuda_backend_or_error():
    """The ``cuda`` backend, or :class:`DistributedUnavailable` saying why there is none."""
    from ..device.base import cuda_backend
    be, why = cuda_backend()
    if be is None:
        raise DistributedUnavailable(f"init_process_group(backend='nccl'): no CUDA device "
                                     f"({why}); {INSTALL_HINT}")
    return be


def _ptr(arr) -> int:
    """The device address of a CuPy array, or the host address of a NumPy one (the
    stand-in's "device" memory)."""
    if isinstance(arr, np.ndarray):     # NOTE: .data of a bfloat16 NumPy array raises
        return arr.ctypes.data
    return arr.data.ptr


class _NCCLRequest(Request):
    """Done once the event recorded after the NCCL call has completed."""

    __slots__ = ("comm", "event", "keep", "what", "done", "source")

    def __init__(self, comm, event, keep, what: str, source=None):
        self.comm, self.event, self.keep, self.what = comm, event, keep, what
        self.done = False
        self.source = source

    def test(self) -> bool:
        if not self.done:
            self.comm.check_async(self.what)
            self.done = bool(self.event.done)
            if self.done:
                self.keep = None
        return self.done


class _Done(Request):
    """A request of a host transfer already complete (e.g. a zero-byte buffer)."""

    def test(self) -> bool:
        return True


def _uid_array(uid) -> np.ndarray:
    """NCCL's unique id as 129 int8s to broadcast: CuPy < 14 gives a tuple of 128 ints
    (signed chars), CuPy >= 14 the 128 bytes; the last int8 says which."""
    if isinstance(uid, (bytes, bytearray)):
        return np.concatenate([np.frombuffer(bytes(uid), np.uint8).view(np.int8),
                               np.ones(1, np.int8)])
    return np.concatenate([np.asarray(uid, np.int64).astype(np.int8), np.zeros(1, np.int8)])


def _uid_object(arr: np.ndarray):
    """The unique id in the form this CuPy's ``NcclCommunicator`` takes (see _uid_array)."""
    body = np.asarray(arr[:-1], np.int8)
    return body.view(np.uint8).tobytes() if arr[-1] else tuple(int(v) for v in body)


class NCCLCommunicator(Communicator):
    """A :class:`Communicator` whose device buffers move through one NCCL communicator.

    Args:
        host: the MPI communicator of the same ranks (rendezvous, control, host buffers).
        nccl: the NCCL module (``cupy.cuda.nccl`` or a stand-in).
        backend: the ``cuda`` backend (its current device and stream runtime).
        timeout: seconds to wait for rank 0's unique id while the communicator is made.

    Example:
        >>> comm = NCCLCommunicator(MPICommunicator(MPI.COMM_WORLD.Dup()), load_nccl(), be)
        >>> comm.allreduce(cupy.ones(4, cupy.float32), ReduceOp.SUM).test()
    """

    name = "nccl"
    device_type = "cuda"

    def __init__(self, host: Communicator, nccl, backend, timeout: float = 1800.0):
        self.host, self.nccl, self.be, self.timeout = host, nccl, backend, timeout
        self.rank, self.size = host.rank, host.size
        self.device_index = backend.current_index
        self.aborted = None        # why the communicator was aborted, once it was
        self._types = {k: getattr(nccl, v) for k, v in _NCCL_TYPES.items()
                       if hasattr(nccl, v)}
        self._ops = {k: getattr(nccl, v) for k, v in _NCCL_OPS.items()}
        self.nc = self._init_comm()

    def _init_comm(self):
        uid = np.zeros(129, np.int8)      # 128 id bytes + whether CuPy gave them as bytes
        if self.rank == 0:
            uid[:] = _uid_array(self.nccl.get_unique_id())

        def late(elapsed):
            return DistributedError(f"[rank {self.rank}] init_process_group(backend='nccl'): "
                                    f"waited {elapsed:.1f} s for rank 0's NCCL unique id; "
                                    f"rank 0 died or is stuck")
        Work([self.host.broadcast(uid, 0)], timeout=self.timeout, on_timeout=late).wait()
        self.be.runtime.set_device(self.device_index)
        # NOTE: ncclCommInitRank blocks in C until every rank has joined, with no handle
        # to abort yet: past the timeout a watchdog ends this rank (as sentinel.py does
        # for MPI_Init), so the job fails instead of hanging
        guard = threading.Timer(self.timeout, _init_timed_out, (self.rank, self.timeout))
        guard.daemon = True
        guard.start()
        try:
            return self.nccl.NcclCommunicator(self.size, _uid_object(uid), self.rank)
        except Exception as e:    # noqa: BLE001 - NcclError or a CUDA error: say where
            raise DistributedError(f"[rank {self.rank}] init_process_group(backend='nccl'): "
                                   f"ncclCommInitRank failed on cuda:{self.device_index} "
                                   f"({type(e).__name__}: {e})") from None
        finally:
            guard.cancel()

    # ------------------------------------------------------------------ helpers
    def reduces(self, dtype) -> bool:
        name = np.dtype(dtype).name
        return name != "bool" and name in self._types

    def _is_host(self, arr) -> bool:
        # NOTE: on the stand-in device arrays are NumPy's too: everything goes to NCCL there
        return not isinstance(arr, self.be.xp.ndarray)

    def _dtype(self, arr):
        return self._types[np.dtype(arr.dtype).name]

    def _rop(self, op: ReduceOp, what: str):
        try:
            return self._ops[op]
        except KeyError:
            raise ValueError(f"{what}: {op!r} is not supported by the NCCL backend (NCCL has "
                             f"no bitwise reductions); valid: ReduceOp.SUM, AVG, PRODUCT, "
                             f"MIN, MAX") from None

    def _check_alive(self, what: str) -> None:
        if self.aborted is not None:
            raise DistributedError(f"[rank {self.rank}] {what}: the NCCL communicator was "
                                   f"aborted ({self.aborted}); this process group cannot be "
                                   f"used again: destroy_process_group() and start a new job")

    def check_async(self, what: str) -> None:
        """Raise (aborting the communicator) if NCCL reports an asynchronous error."""
        self._check_alive(what)
        try:
            self.nc.check_async_error()
        except Exception as e:    # noqa: BLE001 - NcclError: name rank and collective
            self._abort(f"NCCL error in {what}: {e}")
            raise DistributedError(f"[rank {self.rank}] {what} failed on the NCCL backend "
                                   f"({type(e).__name__}: {e}); the communicator was "
                                   f"aborted (ncclCommAbort)") from None

    def _enqueue(self, what: str, keep, launch, source=None) -> Request:
        """Run ``launch(stream)`` (NCCL calls) and return a request on an event after it."""
        self._check_alive(what)
        for arr in keep if isinstance(keep, tuple) else (keep,):
            dev = getattr(getattr(arr, "device", None), "id", self.device_index)
            if arr is not None and dev != self.device_index:
                raise ValueError(f"{what}: rank {self.rank}'s NCCL communicator is on "
                                 f"cuda:{self.device_index} but a tensor is on cuda:{dev}; "
                                 f"valid: tensors on cuda:{self.device_index} (set "
                                 f"ember.cuda.set_device before init_process_group)")
        from ..cuda._streams import current_stream
        stream = current_stream()
        try:
            launch(0 if stream._raw is None else int(getattr(stream._raw, "ptr", 0)))
        except (ValueError, TypeError):
            raise
        except Exception as e:    # noqa: BLE001 - NcclError at launch
            self._abort(f"NCCL error in {what}: {e}")
            raise DistributedError(f"[rank {self.rank}] {what}: NCCL refused the call "
                                   f"({type(e).__name__}: {e}); the communicator was "
                                   f"aborted") from None
        event = self.be.runtime.new_event(False, False)
        self.be.runtime.record(event, stream._raw)
        return _NCCLRequest(self, event, keep, what, source)

    def _group(self, launch):
        """``launch`` wrapped in ``ncclGroupStart``/``ncclGroupEnd``."""
        def run(s):
            self.nccl.groupStart()
            try:
                launch(s)
            finally:
                self.nccl.groupEnd()
        return run

    # ------------------------------------------------------------------ collectives
    def allreduce(self, buf, op):
        if self._is_host(buf):
            return self.host.allreduce(buf, op)
        dt, rop, p = self._dtype(buf), self._rop(op, "all_reduce"), _ptr(buf)
        return self._enqueue("all_reduce", buf, lambda s: self.nc.allReduce(
            p, p, buf.size, dt, rop, s))

    def broadcast(self, buf, root):
        if self._is_host(buf):
            return self.host.broadcast(buf, root)
        p, u8 = _ptr(buf), self.nccl.NCCL_UINT8
        return self._enqueue("broadcast", buf, lambda s: self.nc.broadcast(
            p, p, buf.nbytes, u8, root, s))

    def allgather(self, send, recv):
        if self._is_host(send):
            return self.host.allgather(send, recv)
        ps, pr, u8 = _ptr(send), _ptr(recv), self.nccl.NCCL_UINT8
        return self._enqueue("all_gather", (send, recv), lambda s: self.nc.allGather(
            ps, pr, send.nbytes, u8, s))

    def reduce_scatter(self, send, recv, op):
        if self._is_host(send):
            return self.host.reduce_scatter(send, recv, op)
        dt, rop = self._dtype(send), self._rop(op, "reduce_scatter")
        ps, pr = _ptr(send), _ptr(recv)
        return self._enqueue("reduce_scatter", (send, recv), lambda s: self.nc.reduceScatter(
            ps, pr, recv.size, dt, rop, s))

    def reduce(self, buf, op, root):
        if self._is_host(buf):
            return self.host.reduce(buf, op, root)
        dt, rop, p = self._dtype(buf), self._rop(op, "reduce"), _ptr(buf)
        return self._enqueue("reduce", buf, lambda s: self.nc.reduce(
            p, p, buf.size, dt, rop, root, s))

    def gather(self, send, recv, root):
        if self._is_host(send):
            return self.host.gather(send, recv, root)
        n = send.nbytes
        rb = None if recv is None else recv.reshape(-1).view(np.uint8)
        return self._p2p_group("gather", (send, recv),
                               [(send, 0, n, root)] if n else [],
                               [(rb, r * n, n, r) for r in range(self.size)]
                               if self.rank == root and n else [])

    def scatter(self, send, recv, root):
        if self._is_host(recv):
            return self.host.scatter(send, recv, root)
        n = recv.nbytes
        sb = None if send is None else send.reshape(-1).view(np.uint8)
        sends = [(sb, r * n, n, r) for r in range(self.size)] if self.rank == root and n \
            else []
        return self._p2p_group("scatter", (send, recv), sends, [(recv, 0, n, root)] if n else [])

    def alltoallv(self, send, send_counts, recv, recv_counts):
        if self._is_host(send):
            return self.host.alltoallv(send, send_counts, recv, recv_counts)
        sends = _blocks(send, send_counts)
        recvs = _blocks(recv, recv_counts)
        return self._p2p_group("all_to_all", (send, recv), sends, recvs)

    def _p2p_group(self, what, keep, sends, recvs) -> Request:
        """One NCCL group of sends and receives: ``(array, byte offset, nbytes, peer)``."""
        u8 = self.nccl.NCCL_UINT8

        def launch(s):
            for arr, off, n, peer in sends:
                self.nc.send(_ptr(arr) + off, n, u8, peer, s)
            for arr, off, n, peer in recvs:
                self.nc.recv(_ptr(arr) + off, n, u8, peer, s)
        return self._enqueue(what, keep, self._group(launch))

    def send(self, buf, dst, tag):
        if self._is_host(buf):
            return self.host.send(buf, dst, tag)
        p, u8 = _ptr(buf), self.nccl.NCCL_UINT8
        return self._enqueue("send", buf, lambda s: self.nc.send(p, buf.nbytes, u8, dst, s))

    def recv(self, buf, src, tag):
        if self._is_host(buf):
            return self.host.recv(buf, src, tag)
        if src is None:
            raise ValueError(f"recv: the NCCL backend cannot receive from any source (rank "
                             f"{self.rank}); pass src= the sending rank")
        p, u8 = _ptr(buf), self.nccl.NCCL_UINT8
        return self._enqueue("recv", buf, lambda s: self.nc.recv(p, buf.nbytes, u8, src, s),
                             source=src)

    def poll(self, buf, tag):
        return self.host.poll(buf, tag)

    def barrier(self):
        # NOTE: PyTorch's NCCL barrier is a one-element all-reduce on the device, too
        one = self.be.xp.ones(1, np.float32)
        p, f32, s_ = _ptr(one), self._types["float32"], self._ops[ReduceOp.SUM]
        return self._enqueue("barrier", one, lambda s: self.nc.allReduce(
            p, p, 1, f32, s_, s))

    # ------------------------------------------------------------------ management
    def control(self) -> Communicator:
        return self.host.dup()

    def split(self, ranks):
        host = self.host.split(ranks)
        return None if host is None else NCCLCommunicator(host, self.nccl, self.be,
                                                          self.timeout)

    def dup(self):
        return NCCLCommunicator(self.host.dup(), self.nccl, self.be, self.timeout)

    def _abort(self, why: str) -> None:
        if self.aborted is None:
            self.aborted = why
            try:
                self.nc.abort()
            except Exception:   # noqa: BLE001 - already broken: the error says why
                pass

    def on_timeout(self, what: str) -> str:
        self._abort(f"{what} timed out")
        return ("the NCCL communicator was aborted (ncclCommAbort); this process group "
                "cannot be used again")

    def abort(self, code=1):
        self._abort("the job is aborting")
        self.host.abort(code)

    def free(self):
        if self.aborted is None:
            self.aborted = "destroyed"
            self.nc.destroy()
        self.host.free()


def _init_timed_out(rank: int, limit: float) -> None:
    sys.stderr.write(f"[rank {rank}] init_process_group(backend='nccl'): ncclCommInitRank "
                     f"waited {limit:.1f} s for the other ranks; at least one never joined "
                     f"(it died, or runs on another job's unique id). Ending this rank.\n")
    sys.stderr.flush()
    os._exit(1)


def _blocks(arr, counts):
    """``(array, byte offset, nbytes, peer)`` for each non-empty block of ``arr``."""
    out, at = [], 0
    for peer, c in enumerate(map(int, counts)):
        if c:
            out.append((arr, at, c, peer))
        at += c
    return out
