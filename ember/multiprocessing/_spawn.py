"""``spawn``/``start_processes`` and ``ProcessContext`` (torch.multiprocessing.spawn's API).

Each child runs ``fn(i, *args)``; an exception in a child is written (its traceback) to a
file the parent reads, and ``ProcessContext.join`` re-raises it in the parent as
:class:`ProcessRaisedException` naming the process index, after terminating the others.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import traceback


class ProcessException(Exception):
    """A child process of :func:`spawn` failed."""

    def __init__(self, msg: str, error_index: int, pid: int):
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A child raised; the message holds the child's traceback."""


class ProcessExitedException(ProcessException):
    """A child exited with a nonzero code (or a signal) without raising in Python."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int,
                 signal_name: str | None = None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code,
                            self.signal_name)


def _wrap(fn, i: int, args: tuple, error_file: str) -> None:
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:
        with open(error_file, "w") as f:
            f.write(traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    """The processes :func:`spawn` started (``spawn(..., join=False)`` returns it)."""

    def __init__(self, processes, error_files):
        self.processes = processes
        self.error_files = error_files
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self) -> list[int]:
        """The children's process ids."""
        return [int(p.pid) for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the children; True once all exited cleanly.

        Raises:
            ProcessRaisedException: a child raised (its traceback in the message).
            ProcessExitedException: a child exited nonzero without a Python exception.
        """
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(self.sentinels.keys(), timeout=timeout)
        failed = None
        for s in ready:
            i = self.sentinels.pop(s)
            p = self.processes[i]
            p.join()
            if p.exitcode != 0 and failed is None:
                failed = i
        if failed is None:
            return not self.sentinels
        self._terminate_rest()
        self._raise(failed)

    def _terminate_rest(self) -> None:
        for p in self.processes:
            if p.is_alive():
                p.terminate()
            p.join()

    def _raise(self, i: int):
        p = self.processes[i]
        path = self.error_files[i]
        if not os.path.exists(path):
            code = p.exitcode
            if code < 0:
                name = signal.Signals(-code).name
                raise ProcessExitedException(f"process {i} terminated with signal {name}",
                                             i, p.pid, code, name)
            raise ProcessExitedException(f"process {i} terminated with exit code {code}",
                                         i, p.pid, code)
        with open(path) as f:
            trace = f.read()
        os.unlink(path)
        raise ProcessRaisedException(
            f"\n\n-- Process {i} terminated with the following error:\n{trace}", i, p.pid)


def start_processes(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False,
                    start_method: str = "spawn"):
    """Start ``nprocs`` processes running ``fn(i, *args)`` with ``start_method``.

    Returns:
        None once all joined (``join=True``), else the :class:`ProcessContext`.
    """
    from ._reduce import init_reductions
    init_reductions()                    # NOTE: Tensor subclasses defined since import
    ctx = multiprocessing.get_context(start_method)
    processes, error_files = [], []
    for i in range(nprocs):
        fd, path = tempfile.mkstemp(prefix="ember-spawn-", suffix=".err")
        os.close(fd)
        os.unlink(path)                  # NOTE: the child creates it only on error
        p = ctx.Process(target=_wrap, args=(fn, i, tuple(args), path), daemon=daemon)
        p.start()
        processes.append(p)
        error_files.append(path)
    context = ProcessContext(processes, error_files)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False,
          start_method: str = "spawn"):
    """Run ``fn(i, *args)`` in ``nprocs`` new processes (``torch.multiprocessing.spawn``).

    Tensors in ``args`` are passed through shared memory: a child's in-place writes are
    seen by the parent.

    Example:
        >>> def work(i, t):
        ...     t[i] = i + 1
        >>> t = ember.zeros(2).share_memory_()
        >>> ember.multiprocessing.spawn(work, args=(t,), nprocs=2)   # doctest: +SKIP
        >>> t
        tensor([1., 2.])

    Raises:
        ProcessRaisedException: a child raised; names its index, holds its traceback.
    """
    return start_processes(fn, args, nprocs, join, daemon, start_method)
