"""``ember.cpu``: ``torch.cpu``'s device module, answered for Ember's CPU backend.

CPU work runs synchronously on the calling thread, so streams and events are the trivial
objects PyTorch's are on the CPU (``torch.cpu.Stream`` is documented as a dummy too):
waiting and synchronising return at once, queries answer True.
"""
from __future__ import annotations

__all__ = ["is_available", "is_initialized", "device_count", "current_device", "set_device",
           "synchronize", "Stream", "Event", "StreamContext", "current_stream", "stream"]


def is_available() -> bool:
    """Always True: the CPU backend is always there."""
    return True


def is_initialized() -> bool:
    """Always True (nothing to initialise)."""
    return True


def device_count() -> int:
    """1: Ember presents the host as one ``cpu`` device."""
    return 1


def current_device() -> str:
    """``"cpu"``."""
    return "cpu"


def set_device(device) -> None:
    """A no-op, as in PyTorch: there is one CPU device."""


def synchronize(device=None) -> None:
    """A no-op: CPU ops have finished when they return."""


class Event:
    """A CPU event (trivial: work is synchronous)."""

    def __init__(self, enable_timing: bool = False):
        self.enable_timing = enable_timing

    def record(self, stream=None) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class Stream:
    """A CPU stream (trivial: work is synchronous)."""

    def __init__(self, priority: int = -1):
        self.priority = priority

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None) -> Event:
        return event if event is not None else Event()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


_DEFAULT = Stream()


def current_stream(device=None) -> Stream:
    """The (one) CPU stream."""
    return _DEFAULT


class StreamContext:
    """``with ember.cpu.stream(s):`` — selects nothing (one synchronous stream)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc) -> None:
        return None


def stream(stream) -> StreamContext:
    """A context manager around ``stream`` (see :class:`StreamContext`)."""
    return StreamContext(stream)


from . import amp  # noqa: E402,F401 - ember.cpu.amp (torch.cpu.amp)
