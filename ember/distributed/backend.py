"""The communicator interface every backend implements, and the ``Work`` handle.

A :class:`Communicator` moves raw arrays (NumPy on the host; a CUDA backend would take
CuPy arrays) between the ranks of one group. Every method is *nonblocking*: it starts
the transfer and returns a :class:`Request`; :class:`Work` polls requests with a
deadline so that no wait can hang. The tensor-level API (``collectives.py``) stages
tensors into such arrays (contiguous copies, float32 for dtypes the backend cannot
reduce) and writes results back when the work completes, so DDP and the collectives
never see which backend runs underneath. The NCCL backend (``nccl.py``) subclasses
:class:`Communicator` with ``device_type = "cuda"`` and the dtypes it reduces.
"""
from __future__ import annotations

import abc
import datetime
import enum
import os
import time

from ..errors import EmberError


class DistributedError(EmberError, RuntimeError):
    """A collective failed: timeout, a peer that died, or ranks that disagree."""


class DistributedUnavailable(EmberError, ImportError, RuntimeError):
    """The communication library (mpi4py + an MPI) is not installed."""


class Backend(str):
    """A backend's name, as ``torch.distributed.Backend``: ``Backend("NCCL") == "nccl"``.

    ``backend_list`` holds the backends Ember implements (``init_process_group`` refuses
    the others, naming these).

    Example:
        >>> dist.init_process_group(backend=dist.Backend.NCCL)   # doctest: +SKIP
    """

    UNDEFINED = "undefined"
    GLOO = "gloo"
    NCCL = "nccl"
    MPI = "mpi"
    backend_list = ["mpi", "nccl"]

    def __new__(cls, name: str):
        if not isinstance(name, str):
            raise TypeError(f"Backend name must be a string, but got: {name!r}")
        return str.__new__(cls, name.lower())


class ReduceOp(enum.Enum):
    """Reductions for ``all_reduce``, ``reduce`` and ``reduce_scatter_tensor``.

    ``AVG`` is ``SUM`` divided by the group size (floating dtypes only). ``BAND``,
    ``BOR`` and ``BXOR`` are bitwise (integer and bool dtypes only).
    """

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"

    def __repr__(self) -> str:
        return f"ReduceOp.{self.name}"


class Request(abc.ABC):
    """One started transfer. ``test()`` returns True once it has completed."""

    @abc.abstractmethod
    def test(self) -> bool:
        """Progress the transfer; True when done."""

    #: The sender's rank in the communicator, for a completed receive from any source.
    source: int | None = None


class Communicator(abc.ABC):
    """Nonblocking collectives on contiguous arrays among ``size`` ranks.

    Buffers are contiguous arrays the caller keeps alive until the request completes.
    ``root``, ``dst`` and ``src`` are ranks *in this communicator*. Reductions take a
    :class:`ReduceOp` other than ``AVG`` and an array whose dtype is in
    :meth:`reduces`; everything else moves bytes and works for any dtype.
    """

    name: str = "?"
    device_type: str = "cpu"
    rank: int
    size: int

    @abc.abstractmethod
    def reduces(self, dtype) -> bool:
        """Whether reductions run natively on arrays of this NumPy dtype."""

    @abc.abstractmethod
    def allreduce(self, buf, op: ReduceOp) -> Request:
        """Reduce ``buf`` over all ranks, in place on every rank."""

    @abc.abstractmethod
    def broadcast(self, buf, root: int) -> Request:
        """Copy ``root``'s ``buf`` into every rank's ``buf``."""

    @abc.abstractmethod
    def allgather(self, send, recv) -> Request:
        """``recv`` (``size * send.nbytes`` bytes) gets every rank's ``send`` in rank order."""

    @abc.abstractmethod
    def reduce_scatter(self, send, recv, op: ReduceOp) -> Request:
        """Reduce ``send`` (``size`` equal blocks); rank ``r`` gets block ``r`` in ``recv``."""

    @abc.abstractmethod
    def reduce(self, buf, op: ReduceOp, root: int) -> Request:
        """Reduce ``buf`` over all ranks into ``root``'s ``buf`` (others are unchanged)."""

    @abc.abstractmethod
    def gather(self, send, recv, root: int) -> Request:
        """``root``'s ``recv`` gets every rank's ``send`` in rank order (None elsewhere)."""

    @abc.abstractmethod
    def scatter(self, send, recv, root: int) -> Request:
        """Rank ``r``'s ``recv`` gets block ``r`` of ``root``'s ``send`` (None elsewhere)."""

    @abc.abstractmethod
    def alltoallv(self, send, send_counts, recv, recv_counts) -> Request:
        """Rank ``r`` sends ``send_counts[j]`` bytes to rank ``j`` (byte counts, in order)."""

    @abc.abstractmethod
    def send(self, buf, dst: int, tag: int) -> Request:
        """Send ``buf`` to ``dst``."""

    @abc.abstractmethod
    def recv(self, buf, src: int | None, tag: int) -> Request:
        """Receive into ``buf`` from ``src`` (None: any rank; see ``Request.source``)."""

    @abc.abstractmethod
    def poll(self, buf, tag: int) -> int | None:
        """Receive a waiting message with ``tag`` from any rank into ``buf``, if there is
        one (returns its sender), without blocking; None when there is none."""

    @abc.abstractmethod
    def barrier(self) -> Request:
        """Complete once every rank has entered the barrier."""

    @abc.abstractmethod
    def split(self, ranks: list[int]) -> "Communicator | None":
        """A communicator of ``ranks`` (in that order); collective, None on non-members."""

    @abc.abstractmethod
    def dup(self) -> "Communicator":
        """A communicator of the same ranks whose messages never match this one's."""

    @abc.abstractmethod
    def abort(self, code: int = 1) -> None:
        """End every process of the job (used when a rank cannot go on)."""

    def control(self) -> "Communicator":
        """The communicator of the group's control messages (debug checks, health probes
        on host buffers): a duplicate of this one; NCCL's is its MPI host communicator."""
        return self.dup()

    def on_timeout(self, what: str) -> str:
        """Called when ``what`` timed out, before the error is raised; returns a note for
        the message (NCCL aborts its communicator here so no GPU kernel spins forever)."""
        return ""

    def free(self) -> None:
        """Release the communicator (after ``destroy_process_group``)."""

    def progress(self) -> None:
        """Move in-flight transfers forward without completing any (see ``progress.py``)."""

    def thread_safe(self) -> bool:
        """Whether :meth:`progress` may run on another thread while this one communicates."""
        return False


def seconds(timeout) -> float:
    """Seconds in a ``timedelta`` or a number."""
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


_SPIN_S = 2e-3
_yield = getattr(os, "sched_yield", lambda: None)


class Work:
    """The handle an ``async_op=True`` collective returns (``torch.distributed.Work``).

    ``wait()`` blocks until the collective has completed on this rank (and its result
    is written into the tensors), raising :class:`DistributedError` after the timeout.

    Example:
        >>> work = dist.all_reduce(t, async_op=True)
        >>> ...                       # overlap compute with communication
        >>> work.wait()
        True
    """

    def __init__(self, requests, *, timeout: float, on_timeout=None, finish=None,
                 result=None, poll=None):
        self._requests = list(requests)
        self._timeout = timeout
        self._on_timeout = on_timeout   # () -> DistributedError, built only when needed
        self._finish = finish           # writes results back into the tensors
        self._result = result
        self._poll = poll               # called while waiting (answers peers' probes)
        self._done = False

    def is_completed(self) -> bool:
        """True once the collective has completed (and its result is written back)."""
        if not self._done and all(r.test() for r in self._requests):
            self._complete()
        return self._done

    def wait(self, timeout=None) -> bool:
        """Block until completed; ``timeout`` (seconds or timedelta) overrides the group's.

        Raises:
            DistributedError: the collective did not complete in time (a rank died, is
                stuck, or called a different collective); names the op and the ranks.
        """
        if self._done:
            return True
        limit = self._timeout if timeout is None else seconds(timeout)
        start = time.monotonic()
        spins = 0
        pending = list(self._requests)
        while pending:
            pending = [r for r in pending if not r.test()]
            if not pending:
                break
            spins += 1
            if spins & 63:
                # NOTE: MPI progresses a collective only inside Test(), on every rank, so a
                # sleeping rank delays all; spin (yielding the core now and then) ~2 ms...
                if not spins & 15:
                    _yield()
                continue
            elapsed = time.monotonic() - start
            if elapsed > limit:
                raise self._timeout_error(elapsed)
            if elapsed > _SPIN_S:   # ...then poll less often, up to every millisecond
                if self._poll is not None:
                    self._poll()
                time.sleep(min(1e-3, 0.05 * (elapsed - _SPIN_S) + 2e-5))
        self._complete()
        return True

    def result(self):
        """What the collective produced, e.g. the sender's rank for ``irecv``."""
        self.wait()
        return self._result() if callable(self._result) else self._result

    def _complete(self) -> None:
        self._done = True
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()

    def _timeout_error(self, elapsed: float) -> DistributedError:
        if self._on_timeout is not None:
            return self._on_timeout(elapsed)
        return DistributedError(f"collective timed out after {elapsed:.1f} s")


class CompletedWork(Work):
    """A ``Work`` that is already done (a collective on a single rank, or a non-member)."""

    def __init__(self, finish=None, result=None):
        super().__init__([], timeout=0.0, finish=finish, result=result)
        self._complete()
