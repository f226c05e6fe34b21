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

Only compiled DDP's all-reduces are watched: eager DDP's gradient hooks already call
``Test`` between gradients, and there the thread measured slower (waking every 0.1 ms it
took the GIL from the Python-bound autograd engine and a core from the other rank:
W1 113 vs 157 steps/s at 2 ranks x 1 thread). ``EMBER_DIST_PROGRESS=0`` turns it off.
"""
from __future__ import annotations

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
    return os.environ.get("EMBER_DIST_PROGRESS", "1") != "0" and comm.thread_safe()


def watch(comm) -> None:
    """Count one more in-flight collective on ``comm`` (starts the thread the first time)."""
    global _thread
    with _lock:
        entry = _active.setdefault(id(comm), [comm, 0])
        entry[1] += 1
        if _thread is None:
            _thread = threading.Thread(target=_loop, name="ember-dist-progress", daemon=True)
            _thread.start()
        _lock.notify()


def unwatch(comm) -> None:
    """One in-flight collective of ``comm`` completed."""
    with _lock:
        entry = _active.get(id(comm))
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _active[id(comm)]


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
