"""What the profiler records: one :class:`FunctionEvent` per op, backward node, compiled
kernel or ``record_function`` range, and the :class:`Recorder` the hooks report to.

How the hooks reach it (all through ``state.profiler``, ``None`` when no profiler records,
so a program that never profiles pays one attribute check per primitive and nothing else):

* the dispatcher hands each primitive to :meth:`Recorder.op` (category ``cpu_op``),
* the autograd engine runs each node's VJP through :meth:`Recorder.call` under the node's
  ``grad_fn`` name (``MulBackward``: Ember's node names, which are PyTorch's without the
  trailing overload digit), so the ops the VJP runs nest under it,
* a compiled program (``ember/graph/executor.py``) runs each graph node through
  :meth:`Recorder.call` under its op's name: the fused kernels appear by their fused names
  (a program run level by level on threads, ``Program(parallel=True)``, is not broken down),
* :class:`record_function` opens a user range (category ``user_annotation``).

Self time is accounted while recording: every event adds its duration (and allocated bytes)
to the range that was open when it started, so ``self = total - children`` exactly.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time

from ..autograd.grad_mode import state
from ..ops.dispatch import apply as _apply

_now = time.perf_counter_ns
_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FunctionEvent:
    """One recorded interval (times in ns internally; PyTorch's µs properties below)."""

    __slots__ = ("name", "cat", "start_ns", "end_ns", "input_shapes", "mem", "child_ns",
                 "child_mem", "stack", "parent", "tid", "id")

    def __init__(self, name, cat, start_ns, parent, tid):
        self.name = name
        self.cat = cat
        self.start_ns = start_ns
        self.end_ns = start_ns
        self.input_shapes = None
        self.mem = 0
        self.child_ns = 0
        self.child_mem = 0
        self.stack = None
        self.parent = parent
        self.tid = tid
        self.id = 0

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time_total(self) -> float:
        """Total (inclusive) time in µs."""
        return (self.end_ns - self.start_ns) / 1e3

    @property
    def self_cpu_time_total(self) -> float:
        """Time in µs not spent in nested events."""
        return (self.end_ns - self.start_ns - self.child_ns) / 1e3

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total

    @property
    def count(self) -> int:
        return 1

    @property
    def cpu_memory_usage(self) -> int:
        """Bytes allocated minus bytes freed while the event ran (children included)."""
        return self.mem

    @property
    def self_cpu_memory_usage(self) -> int:
        return self.mem - self.child_mem

    def __repr__(self) -> str:
        return (f"<FunctionEvent id={self.id} name={self.name} cpu_time_total="
                f"{self.cpu_time_total:.3f}us input_shapes={self.input_shapes}>")


def _shapes(inputs) -> list:
    return [list(x.shape) if hasattr(x, "_data") else [] for x in inputs]


def _stack() -> list:
    """The user's frames (outside Ember), innermost first: ``file(line): function``."""
    out = []
    f = sys._getframe(2)
    while f is not None and len(out) < 5:
        path = f.f_code.co_filename
        if not os.path.abspath(path).startswith(_EMBER_DIR):
            out.append(f"{path}({f.f_lineno}): {f.f_code.co_name}")
        f = f.f_back
    return out


class Recorder:
    """Collects the events of one profiling window (installed as ``state.profiler``)."""

    def __init__(self, record_shapes=False, profile_memory=False, with_stack=False):
        from ..device.base import _backends
        self.events: list[FunctionEvent] = []
        self.open: list[FunctionEvent] = []     # ranges open now, innermost last
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.alloc = _backends["cpu"].allocator if profile_memory else None
        self.tid = threading.get_native_id()
        self.pid = os.getpid()
        self.start_ns = _now()
        self.end_ns = None

    # ----------------------------------------------------------------- hooks
    def op(self, op, inputs, params):
        """The dispatcher's hook: run primitive ``op`` unprofiled, record it as a leaf."""
        ev = self._begin(op.name, "cpu_op")
        if self.record_shapes:
            ev.input_shapes = _shapes(inputs)
        st = state
        st.profiler = None
        try:
            return _apply(op, inputs, params)
        finally:
            st.profiler = self
            self._end(ev, push=False)

    def call(self, name, cat, fn, *args):
        """Run ``fn(*args)`` as a range named ``name`` (ops it dispatches nest under it)."""
        ev = self._begin(name, cat)
        self.open.append(ev)
        try:
            return fn(*args)
        finally:
            self._end(ev)

    # ---------------------------------------------------------------- ranges
    def _begin(self, name, cat) -> FunctionEvent:
        ev = FunctionEvent(name, cat, 0, self.open[-1] if self.open else None, self.tid)
        if self.with_stack:
            ev.stack = _stack()
        if self.alloc is not None:
            ev.mem = self.alloc.current
        ev.start_ns = _now()
        return ev

    def _end(self, ev, push=True) -> None:
        ev.end_ns = t1 = _now()
        if push:
            # NOTE: a range left open by an exception inside it is closed with it
            while self.open and self.open.pop() is not ev:
                pass
        if self.alloc is not None:
            ev.mem = self.alloc.current - ev.mem
        p = ev.parent
        if p is not None:
            p.child_ns += t1 - ev.start_ns
            p.child_mem += ev.mem
        ev.id = len(self.events)
        self.events.append(ev)


class record_function(contextlib.ContextDecorator):
    """A named range in the profile: the ops run inside nest under it (context manager or
    decorator), like ``torch.profiler.record_function``. Costs one attribute check when no
    profiler records.

    Args:
        name: the range's name in the table and the trace.
        args: optional string shown in the trace's ``args`` (PyTorch's argument).

    Example:
        >>> with ember.profiler.profile() as prof:
        ...     with ember.profiler.record_function("forward"):
        ...         y = model(x)
    """

    def __init__(self, name: str, args: str | None = None):
        self.name = name
        self.args = args
        self._open: list = []

    def __enter__(self):
        rec = state.profiler
        ev = None
        if rec is not None:
            ev = rec._begin(self.name, "user_annotation")
            rec.open.append(ev)
        self._open.append((rec, ev))
        return self

    def __exit__(self, *exc):
        rec, ev = self._open.pop()
        if rec is not None:
            rec._end(ev)
        return False

    def __call__(self, fn):
        # NOTE: ContextDecorator reuses this instance per call; _open keeps recursion right
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return inner
