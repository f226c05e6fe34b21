"""Sharing the machine: fewer BLAS threads while other processes keep the CPUs busy.

Why. OpenBLAS's threaded GEMM synchronises its threads by spinning: the caller waits for
its workers in a ``sched_yield`` loop, and in the level-3 drivers the threads wait for each
other's packed panels the same way; no setting makes those waits passive
(``OPENBLAS_THREAD_TIMEOUT``, :mod:`ember._blas_env`, only bounds the idle workers' spin).
Alone, that costs nothing. With another busy process on the machine, a BLAS thread the
scheduler has parked behind it stalls the others, which spin meanwhile: on 2 cores with a
``while True: pass`` beside it, one (32, 128) x (128, 512) GEMM took 1.5-6 ms on 2 threads
against 0.34 ms on 1 (0.2 and 0.11 ms without it) — and a recurrent network runs hundreds
of those per step.

What. A daemon thread (``ember-contention``) wakes every :data:`INTERVAL` seconds — it
sleeps in between, it never polls — and reads the machine's busy CPU time (``/proc/stat``)
and this process's (``os.times``). The difference is the CPUs the *other* processes used
over the interval. While they leave fewer CPUs than the threads asked for
(``ember.set_num_threads``, default: the CPUs), BLAS runs on what is left (at least one);
once they are gone it gets the asked count back. :func:`target` holds the rule, with
hysteresis. ``ember.get_num_threads()`` keeps reporting what was asked, like PyTorch's.
Ember's own kernel pool already waits passively (``ember/codegen/pool.py``) and is left alone.

Reproducibility. OpenBLAS's results can depend on its thread count in the last bits (a
(128, 784) x (784, 512) float32 product does), so while this adapts, a long run's numbers
can differ between a quiet and a busy machine. ``EMBER_ADAPTIVE_THREADS=0`` in the
environment, or ``ember.use_deterministic_algorithms(True)``, keeps the asked count fixed.
"""
from __future__ import annotations

import os
import sys
import threading

#: seconds between two looks at the machine's load
INTERVAL = 0.25
#: others' CPUs must leave this much of a CPU free for a thread to keep it (and, once it
#: was taken away, :data:`_UP` to get it back: the gap is the hysteresis)
_DOWN, _UP = 0.5, 0.3
#: seconds an explicit ``set_num_threads(n)`` is honoured as is before the policy adapts
HOLD = 1.0

_state: dict = {"thread": None, "asked": None, "used": None, "others": 0.0, "hold_until": 0.0}
_lock = threading.Lock()


def enabled() -> bool:
    """Whether the adaptive policy may run in this process (see the module docstring)."""
    if os.environ.get("EMBER_ADAPTIVE_THREADS", "1").strip().lower() in ("0", "false", "off"):
        return False
    return os.path.exists("/proc/stat") and (os.cpu_count() or 1) > 1


def target(ncpu: int, others: float, asked: int, current: int) -> int:
    """Threads to use on ``ncpu`` CPUs when other processes keep ``others`` CPUs busy.

    A thread is kept while the others leave it at least ``1 - _DOWN`` of a CPU; a thread
    taken away comes back only once they leave ``1 - _UP`` (no flapping at the boundary).

    Example:
        >>> target(2, 1.0, 2, 2), target(2, 0.1, 2, 1), target(2, 0.4, 2, 1)
        (1, 2, 1)
    """
    margin = _DOWN if current >= asked else _UP
    return max(1, min(asked, int(ncpu - others + margin)))


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot, from ``/proc/stat``."""
    with open("/proc/stat", "rb") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    idle = v[3] + v[4]     # idle + iowait
    total = sum(v)
    return total - idle, total


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


class _Sampler:
    """Consecutive readings → CPUs busy with other processes over each interval."""

    def __init__(self, ncpu: int):
        self.ncpu = ncpu
        self.last = None

    def others(self, now: float) -> float | None:
        busy, total = _machine_ticks()
        own = _own_seconds()
        last, self.last = self.last, (busy, total, own, now)
        if last is None or total <= last[1] or now <= last[3]:
            return None
        machine = (busy - last[0]) / (total - last[1]) * self.ncpu
        return max(0.0, machine - (own - last[2]) / (now - last[3]))


def _asked() -> int:
    if _state["asked"] is None:
        from .codegen.runtime import num_threads
        _state["asked"] = num_threads()
    return _state["asked"]


def _set_blas(n: int) -> None:
    """Point every loaded BLAS at ``n`` threads (the library list is re-read: SciPy's
    OpenBLAS may have loaded since)."""
    from ._threads import _find_blas
    libs = _find_blas()
    for setter, _ in libs.values():
        setter(n)
    _state["used"], _state["libs"] = n, set(libs)
    _state["nmods"] = len(sys.modules)


def _new_libraries() -> None:
    """A BLAS loaded since the last look (SciPy's OpenBLAS, on its first import) gets the
    thread count in use. Looked for only when modules were imported since (cheap)."""
    if len(sys.modules) == _state.get("nmods"):
        return
    from ._threads import _find_blas
    _state["nmods"] = len(sys.modules)
    libs = _find_blas()
    new = set(libs) - _state.get("libs", set())
    if new and _state["used"] is not None:
        for path in new:
            libs[path][0](_state["used"])
    _state["libs"] = set(libs)


def set_asked(n: int) -> None:
    """``ember.set_num_threads(n)`` was called: BLAS gets ``n`` threads now (the policy
    adapts again after :data:`HOLD` seconds) and at most ``n`` from then on."""
    import time
    with _lock:
        _state["asked"] = n
        _state["hold_until"] = time.monotonic() + HOLD
        _set_blas(n)


def _deterministic() -> bool:
    from ._torch_globals import are_deterministic_algorithms_enabled
    return are_deterministic_algorithms_enabled()


def tick(sampler: _Sampler, now: float) -> int | None:
    """One look at the machine: apply and return the thread count (None: no reading yet)."""
    others = sampler.others(now)
    if others is None:
        return None
    _state["others"] = others
    with _lock:
        asked = _asked()
        used = _state["used"] or asked
        if now < _state["hold_until"]:
            return used
        n = asked if _deterministic() else target(sampler.ncpu, others, asked, used)
        if n != used:
            _set_blas(n)
        else:
            _new_libraries()
    return n


def _run(stop: threading.Event) -> None:
    import time
    sampler = _Sampler(os.cpu_count() or 1)
    while not stop.wait(INTERVAL):
        try:
            tick(sampler, time.monotonic())
        except Exception:  # noqa: BLE001 - a monitoring thread must never take the process down
            return


def running() -> bool:
    t = _state["thread"]
    return t is not None and t[0].is_alive()


def start() -> bool:
    """Start the policy's thread (once per process; False when :func:`enabled` says no)."""
    if running() or not enabled():
        return running()
    stop = threading.Event()
    th = threading.Thread(target=_run, args=(stop,), name="ember-contention", daemon=True)
    th.start()
    _state["thread"] = (th, stop)
    return True


def stop() -> None:
    """Stop the thread and give BLAS the asked thread count back."""
    t = _state["thread"]
    if t is not None:
        t[1].set()
        t[0].join()
        _state["thread"] = None
    if _state["used"] is not None and _state["used"] != _asked():
        with _lock:
            _set_blas(_asked())


def status() -> str:
    """One line for ``ember.show_config()``."""
    if not running():
        return "off" + ("" if enabled() else " (EMBER_ADAPTIVE_THREADS=0 or one CPU)")
    used = _state["used"] or _asked()
    return (f"on: BLAS uses {used} of {_asked()} threads (other processes busy on "
            f"~{_state['others']:.1f} CPUs)")


def _after_fork_in_child() -> None:
    _state["thread"] = None      # NOTE: the parent's thread does not exist in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
