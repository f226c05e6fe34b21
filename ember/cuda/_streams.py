"""CUDA streams and events (``torch.cuda.Stream``/``Event``/``stream()``).

On a GPU they wrap ``cupy.cuda.Stream``/``Event`` and ``stream(s)`` makes CuPy queue its
work on ``s``; on the stand-in work is synchronous, events time with the host clock, and
the same bookkeeping (current stream, recorded/timing checks) runs, so the errors match.
"""
from __future__ import annotations

from ..device.base import Event as _BaseEvent, Stream as _BaseStream, device as _device
from ._state import need

_defaults: dict = {}    # device index -> its default (null) stream


class Stream(_BaseStream):
    """An ordered queue of work on a CUDA device.

    Example:
        >>> s = ember.cuda.Stream()
        >>> with ember.cuda.stream(s):
        ...     y = x * 2          # queued on s
        >>> s.synchronize()
    """

    def __init__(self, device=None, priority: int = 0, _null: bool = False):
        be = need("Stream")
        from . import _index
        idx = be.check_index(_index(device), "Stream")
        self.device = _device("cuda", idx)
        self.priority = priority
        self._raw = None if _null else be.runtime.new_stream(idx, priority)

    def synchronize(self) -> None:
        """Wait until all work queued on this stream has finished."""
        if self._raw is not None:
            self._raw.synchronize()
        else:
            need("synchronize").runtime.synchronize(self.device.index)

    def query(self) -> bool:
        """Whether all work queued on this stream has finished."""
        return True if self._raw is None else bool(self._raw.done)

    def wait_event(self, event: "Event") -> None:
        """Make future work on this stream wait for ``event``."""
        if self._raw is not None and event._raw is not None:
            self._raw.wait_event(event._raw)

    def wait_stream(self, stream: "Stream") -> None:
        """Make future work on this stream wait for the work queued on ``stream`` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (a new one if None) on this stream; returns it."""
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self):
        self._ctx = StreamContext(self)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and self.device == other.device and (
            self._raw is other._raw)

    def __hash__(self) -> int:
        return hash((self.device, id(self._raw)))

    def __repr__(self) -> str:
        kind = "default" if self._raw is None else hex(id(self._raw))
        return f"<ember.cuda.Stream device={self.device} stream={kind}>"


class Event(_BaseEvent):
    """A marker in a stream, for waiting and timing (``torch.cuda.Event``).

    Example:
        >>> a, b = ember.cuda.Event(enable_timing=True), ember.cuda.Event(enable_timing=True)
        >>> a.record(); y = x @ x; b.record(); b.synchronize()
        >>> ms = a.elapsed_time(b)
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        super().__init__(enable_timing)
        self._be = need("Event")
        self._raw = self._be.runtime.new_event(enable_timing, blocking)
        self._recorded = False

    def record(self, stream: Stream | None = None) -> None:
        """Record this event on ``stream`` (default: the current stream)."""
        stream = stream or current_stream()
        t = self._be.runtime.record(self._raw, stream._raw)
        self._time = t
        self._recorded = True

    def query(self) -> bool:
        """Whether the work before this event has finished."""
        return True if self._raw is None else bool(self._raw.done)

    def synchronize(self) -> None:
        """Wait until the work before this event has finished."""
        if self._raw is not None:
            self._raw.synchronize()

    def wait(self, stream: Stream | None = None) -> None:
        """Make future work on ``stream`` (default: current) wait for this event."""
        (stream or current_stream()).wait_event(self)

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event and ``end_event`` (both recorded, both timed)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Event.elapsed_time: both events must be created with "
                               "argument 'enable_timing=True'")
        if not (self._recorded and end_event._recorded):
            raise RuntimeError("Event.elapsed_time: both events must be recorded before "
                               "calculating elapsed time")
        end_event.synchronize()
        return self._be.runtime.elapsed_ms(self, end_event)


def default_stream(device=None) -> Stream:
    """The default stream of ``device`` (default: the current device)."""
    be = need("default_stream")
    from . import _index
    idx = be.check_index(_index(device), "default_stream")
    s = _defaults.get((id(be), idx))
    if s is None:
        s = _defaults[(id(be), idx)] = Stream(idx, _null=True)
    return s


def current_stream(device=None) -> Stream:
    """The stream work is queued on: the innermost ``stream()`` context's, else the default."""
    be = need("current_stream")
    if be.streams:
        return be.streams[-1]
    return default_stream(device)


class StreamContext:
    """Queue work on ``stream`` inside the ``with`` block (``torch.cuda.StreamContext``);
    ``None`` leaves the current stream alone."""

    def __init__(self, stream: Stream | None):
        self.stream = stream
        self._ctx = None

    def __enter__(self):
        if self.stream is None:
            return None
        be = need("stream")
        be.streams.append(self.stream)
        self._ctx = be.runtime.use_stream(self.stream._raw)
        self._ctx.__enter__()
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        be = need("stream")
        self._ctx.__exit__(*exc)
        be.streams.pop()
        return False


def stream(stream: Stream | None) -> StreamContext:
    """``with ember.cuda.stream(s):`` queues the block's work on ``s``."""
    return StreamContext(stream)
