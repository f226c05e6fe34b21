"""A background thread that drives in-flight nonblocking collectives forward.

MPI moves a nonblocking collective's data only inside MPI calls. A rank busy computing
(a compiled graph's kernels) makes none, so an ``Iallreduce`` started early would sit
still until its ``wait()`` and nothing would overlap. While at least one *watched*
collective is in flight (``watch(comm)`` ... ``unwatch(comm)``), this thread calls
the communicator's :meth:`~ember.distributed.backend.Communicator.progress` (MPI: an
``Iprobe`` that never matches, which runs MPICH's progress engine) every
:data:`INTERVAL_S` seconds, sleeping in between (it must not take a core from the
one-thread ranks it serves); it parks on a condition when nothing is in flight. It never
touches a request itself (MPI forbids completing one request from two threads), so the
owner's ``Test``/``wait`` stay the only completion path. MPI must run with
``MPI_THREAD_MULTIPLE`` (mpi4py's default); with a lower thread level the pump stays off
and progress happens in ``Test`` calls only (DDP's gradient hooks poll).

Opt-in (``EMBER_DIST_PROGRESS=1``), for compiled DDP's all-reduces only. By default
progress comes from ``Test`` calls on the computing thread instead: eager DDP's gradient
hooks and compiled DDP's ``all_reduce_poll`` nodes (``ember.nn.parallel._traced``).
Measured on 2 ranks x 1 thread (bench/distributed.py, 2 shared cores): those Tests alone
hide 93% of W3's compiled all-reduce time, the thread adds nothing to that and costs
throughput (it wakes every :data:`INTERVAL_S`, takes the GIL from the Python-bound
executor and a core from the other rank: W3 compiled 22.3 vs 21.5 steps/s; with the
thread on for eager DDP too, W1 fell from 157 to 113 steps/s).
"""
from __future__ import annotations

import atexit
import os
import threading
import time

#: seconds between two progress calls while collectives are in flight
INTERVAL_S = 5e-4

_lock = threading.Condition()
_active: dict = {}          # id(comm) -> [comm, count of in-flight works]
_thread = None


def enabled(comm) -> bool:
    """Whether in-flight collectives of ``comm`` are driven by the progress thread."""
    return os.environ.get("EMBER_DIST_PROGRESS", "0") == "1" and comm.thread_safe()


def watch(comm) -> None:
    """Count one more in-flight collective on ``comm`` (starts the thread the first time)."""
    global _thread
    with _lock:
        entry = _active.setdefault(id(comm), [comm, 0])
        entry[1] += 1
        if _thread is None:
            _thread = threading.Thread(target=_loop, name="ember-dist-progress", daemon=True)
            _thread.start()
            # NOTE: registered after mpi4py's MPI_Finalize handler, so it runs before it:
            # a collective left in flight by an exception must not be pumped past Finalize
            atexit.register(stop)
        _lock.notify()


def unwatch(comm) -> None:
    """One in-flight collective of ``comm`` completed."""
    with _lock:
        entry = _active.get(id(comm))
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _active[id(comm)]


def stop() -> None:
    """Forget every watched collective (the thread parks); at exit, before MPI finalizes."""
    with _lock:
        _active.clear()


def in_flight() -> int:
    """How many watched collectives are in flight (all communicators)."""
    with _lock:
        return sum(e[1] for e in _active.values())


def _loop() -> None:
    while True:
        with _lock:
            while not _active:
                _lock.wait()
            comms = [e[0] for e in _active.values()]
        for comm in comms:
            try:
                comm.progress()
            except Exception:   # NOTE: a freed communicator; its owner reports errors
                with _lock:
                    _active.pop(id(comm), None)
        time.sleep(INTERVAL_S)
