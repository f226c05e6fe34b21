"""``ember.profiler.profile``: PyTorch's ``torch.profiler.profile`` for Ember's CPU ops.

While a profile records, a :class:`~._events.Recorder` sits in ``state.profiler`` and sees
every primitive the dispatcher runs (forward and inside backward), every autograd node's
VJP (``MulBackward``...), every kernel of a compiled program (by its fused name) and every
:func:`record_function` range. ``schedule`` and ``on_trace_ready`` follow PyTorch: each
``prof.step()`` advances the step counter, the schedule says whether the step is recorded,
and the handler gets the profile each time an active window ends.
"""
from __future__ import annotations

import enum
import os
import time
from typing import Callable, Iterable

from ..autograd.grad_mode import state
from ..ops import dispatch as _dispatch
from . import _chrome
from ._events import Recorder, record_function
from ._table import EventList, key_averages


class ProfilerActivity(enum.Enum):
    """What to profile. Ember has CPU activity only (``CUDA`` is accepted and records
    nothing: ``ember.cuda.is_available()`` is False)."""
    CPU = 0
    CUDA = 1


def supported_activities() -> set:
    return {ProfilerActivity.CPU}


class ProfilerAction(enum.Enum):
    """What the schedule asks of a step (PyTorch's names)."""
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0,
             skip_first: int = 0, skip_first_wait: int = 0) -> Callable[[int], ProfilerAction]:
    """PyTorch's profiler schedule: after ``skip_first`` steps, cycles of ``wait`` idle
    steps, ``warmup`` steps and ``active`` recorded steps (the last one ``RECORD_AND_SAVE``),
    ``repeat`` times (0: until the profile ends). ``skip_first_wait=1`` skips the first
    cycle's wait.

    Example:
        >>> s = ember.profiler.schedule(wait=1, warmup=1, active=2)
        >>> [s(i).name for i in range(4)]
        ['NONE', 'WARMUP', 'RECORD', 'RECORD_AND_SAVE']
    """
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError(f"schedule: invalid arguments wait={wait}, warmup={warmup}, "
                         f"active={active}, repeat={repeat}, skip_first={skip_first}; "
                         "active must be positive and the others non-negative")
    cycle = wait + warmup + active

    def fn(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait:
            step += wait
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        k = step % cycle
        if k < wait:
            return ProfilerAction.NONE
        if k < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if k < cycle - 1 else ProfilerAction.RECORD_AND_SAVE
    return fn


def _always(step: int) -> ProfilerAction:
    return ProfilerAction.RECORD


def tensorboard_trace_handler(dir_name: str, worker_name: str | None = None,
                              use_gzip: bool = False) -> Callable:
    """An ``on_trace_ready`` handler writing ``<dir_name>/<worker>.<ms>.pt.trace.json[.gz]``
    (the file names TensorBoard's profiler plugin and Perfetto read)."""
    def handler(prof) -> None:
        import socket
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        name = f"{worker}.{time.time_ns() // 1_000_000}.pt.trace.json" + (".gz" if use_gzip
                                                                          else "")
        prof.export_chrome_trace(os.path.join(dir_name, name))
    return handler


class profile:
    """Profile the Ember ops run inside the block (context manager), like
    ``torch.profiler.profile``.

    Args:
        activities: ``[ProfilerActivity.CPU]`` (the default; CUDA records nothing).
        schedule: a callable ``step -> ProfilerAction`` (see :func:`schedule`); default:
            record everything.
        on_trace_ready: called with the profiler when an active window ends (and at exit
            when still recording).
        record_shapes: record each op's input shapes (``key_averages(group_by_input_shape=True)``,
            ``Input Dims`` in the trace).
        profile_memory: record the bytes each op allocates (minus frees) from Ember's
            allocator: the ``CPU Mem`` / ``Self CPU Mem`` columns.
        with_stack: record the user's source lines (``Call stack`` in the trace).
        enabled: ``False`` makes the block a no-op.

    Example:
        >>> with ember.profiler.profile() as prof:
        ...     loss = model(x).sum(); loss.backward()
        >>> print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
        >>> prof.export_chrome_trace("trace.json")
    """

    def __init__(self, *, activities: Iterable | None = None, schedule: Callable | None = None,
                 on_trace_ready: Callable | None = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False,
                 with_flops: bool = False, with_modules: bool = False,
                 experimental_config=None, execution_trace_observer=None,
                 acc_events: bool = False, enabled: bool = True):
        acts = set(activities) if activities is not None else {ProfilerActivity.CPU}
        bad = [a for a in acts if not isinstance(a, ProfilerActivity)]
        if bad:
            raise TypeError(f"profile: activities must be ProfilerActivity members, got {bad}")
        self.activities = acts
        self.schedule = schedule if schedule is not None else _always
        self.record_steps = schedule is not None
        self.on_trace_ready = on_trace_ready
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.enabled = enabled and ProfilerActivity.CPU in acts
        self.step_num = 0
        self.current_action = ProfilerAction.NONE
        self._rec: Recorder | None = None      # recording now
        self._done: Recorder | None = None     # the last finished window
        self._step_range: record_function | None = None
        self._prev = None

    # --------------------------------------------------------------- control
    def start(self) -> None:
        if not self.enabled:
            return
        self._prev = state.profiler
        self.step_num = 0
        self.current_action = self.schedule(0)
        if self.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self._start_window()

    def stop(self) -> None:
        if not self.enabled:
            return
        if self._rec is not None:
            self._stop_window()
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        state.profiler = self._prev

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def step(self) -> None:
        """Mark the end of a training step: advance the schedule."""
        if not self.enabled:
            return
        prev = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        recording = self.current_action in (ProfilerAction.RECORD,
                                            ProfilerAction.RECORD_AND_SAVE)
        if self._rec is not None and (prev is ProfilerAction.RECORD_AND_SAVE or not recording):
            self._stop_window()
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        elif self._rec is not None and self.record_steps:
            self._close_step()
            self._open_step()
        if recording and self._rec is None:
            self._start_window()

    def _start_window(self) -> None:
        self._rec = Recorder(self.record_shapes, self.profile_memory, self.with_stack)
        state.profiler = self._rec
        _dispatch._profiling += 1
        if self.record_steps:
            self._open_step()

    def _stop_window(self) -> None:
        if self.record_steps:
            self._close_step()
        rec = self._rec
        rec.end_ns = time.perf_counter_ns()
        self._done, self._rec = rec, None
        state.profiler = self._prev
        _dispatch._profiling -= 1

    def _open_step(self) -> None:
        self._step_range = record_function(f"ProfilerStep#{self.step_num}")
        self._step_range.__enter__()

    def _close_step(self) -> None:
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None

    # --------------------------------------------------------------- results
    def _window(self) -> Recorder:
        rec = self._rec if self._rec is not None else self._done
        if rec is None:
            raise RuntimeError("profile: nothing was recorded yet (the block has not run, "
                               "enabled=False, or the schedule has not reached an active step)")
        return rec

    def events(self) -> EventList:
        """Every recorded event (ops, backward nodes, kernels, ranges), in end order."""
        rec = self._window()
        return EventList(rec.events, self.profile_memory)

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_overload_name: bool = False) -> EventList:
        """Events grouped by name (and input shapes, and the innermost ``group_by_stack_n``
        source lines: ``profile(with_stack=True)``): ``.table(sort_by=..., row_limit=...)``.
        ``group_by_overload_name`` is accepted; Ember's primitives have one overload."""
        if group_by_input_shape and not self.record_shapes:
            raise RuntimeError("key_averages(group_by_input_shape=True) needs "
                               "profile(record_shapes=True)")
        if group_by_stack_n and not self.with_stack:
            raise RuntimeError("key_averages(group_by_stack_n=...) needs "
                               "profile(with_stack=True)")
        return key_averages(self._window().events, self.profile_memory, group_by_input_shape,
                            group_by_stack_n)

    def export_chrome_trace(self, path) -> str:
        """Write the Chrome/Perfetto trace JSON of the recorded window to ``path``."""
        rec = self._window()
        return _chrome.write(path, rec, rec.events)

    def __repr__(self) -> str:
        return f"<ember.profiler.profile step={self.step_num} action={self.current_action.name}>"
