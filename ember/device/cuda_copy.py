"""Copies between the host and the ``cuda`` device: pinned memory, ``non_blocking``
transfers and the bookkeeping that keeps their buffers alive until the GPU is done.

* ``x.to("cuda", non_blocking=True)`` from a *pinned* CPU tensor queues the copy on the
  current stream (``ember.cuda.current_stream()``, so ``with ember.cuda.stream(side):``
  puts it on a side stream) and returns at once, as in PyTorch; from pageable memory the
  copy is synchronous (the driver would stage it anyway).
* ``x.to("cpu", non_blocking=True)`` from the device returns a pinned CPU tensor whose
  data is valid once the stream has reached the copy (``synchronize`` / an event).
* While such a copy is queued, its source is *in flight*: the arrays are held with an
  event recorded after the copy and released once the event has completed, so a pinned
  buffer cannot return to CuPy's pinned pool (and be handed to the next batch) nor a
  device block to the memory pool before the copy has read it — what PyTorch's caching
  host allocator does with one event per pinned block.
* ``t.record_stream(s)`` (a CUDA tensor used on another stream ``s``) delays the reuse
  of its memory the same way: when the tensor's storage dies, an event is recorded on
  ``s`` and the array is held until it completes.

On the ``EMBER_FAKE_CUDA`` stand-in (capability ``"fake"``) copies are synchronous NumPy
copies and events complete at once, but the same bookkeeping runs (pinned flags, events,
in-flight holds), so CI checks it; ``tests/cuda/test_gpu_pinned.py`` checks the
asynchronous paths on a GPU.
"""
from __future__ import annotations

import weakref

import numpy as np

__all__ = ["InFlight", "in_flight", "is_pinned_storage", "mark_pinned", "record_stream",
           "to_device", "to_host"]

_pinned = weakref.WeakSet()                   # storages in page-locked host memory
_in_flight: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # backend -> InFlight


def mark_pinned(storage) -> None:
    """Record that ``storage`` is page-locked host memory (``Tensor.pin_memory``)."""
    _pinned.add(storage)


def is_pinned_storage(storage) -> bool:
    """Whether ``storage`` (and so every view of it) is page-locked host memory."""
    return storage in _pinned


class InFlight:
    """Arrays that queued device work still reads or writes, each held with the event
    recorded after that work until the event has completed."""

    def __init__(self):
        self._items: list = []

    def hold(self, event, *arrays) -> None:
        """Keep ``arrays`` alive until ``event`` completes."""
        self.prune()
        self._items.append((event, arrays))

    def prune(self) -> None:
        """Release the arrays whose work has completed."""
        self._items = [it for it in self._items if not it[0].done]

    def holds(self, arr) -> bool:
        """Whether ``arr`` is held (its work has not completed yet)."""
        self.prune()
        return any(a is arr for _, arrays in self._items for a in arrays)

    def __len__(self) -> int:
        self.prune()
        return len(self._items)


def in_flight(be) -> InFlight:
    """The in-flight holds of the cuda backend ``be``."""
    f = _in_flight.get(be)
    if f is None:
        f = _in_flight[be] = InFlight()
    return f


def _current(be):
    """The raw stream work is queued on now (None: the default stream)."""
    return be.streams[-1]._raw if be.streams else None


def _hold_after(be, raw_stream, *arrays) -> None:
    """Record an event on ``raw_stream`` now and hold ``arrays`` until it completes."""
    rt = be.runtime
    event = rt.new_event(False, False)
    rt.record(event, raw_stream if raw_stream is not None else rt.use_stream(None))
    in_flight(be).hold(event, *arrays)


def to_device(be, host, non_blocking: bool, pinned: bool):
    """A device array holding a copy of the host array ``host``.

    Asynchronous on the current stream when ``non_blocking`` and ``host`` is pinned;
    ``host`` is then held until the copy has completed.
    """
    if not (non_blocking and pinned):
        return be.asarray(host)
    out = be.empty(host.shape, host.dtype)     # NOTE: refuses what the device can't hold
    s = _current(be)
    src = np.ascontiguousarray(host)      # NOTE: a strided view: a (pageable) copy
    if be.has("fake"):
        be.runtime.upload_into(out, src)
    else:
        out.set(src, stream=be.runtime.use_stream(s))
    _hold_after(be, s, host, src)
    return out


def to_host(be, arr):
    """A pinned host array the device array ``arr`` is copied into on the current stream
    (valid once the stream reaches the copy); ``arr`` is held until then."""
    s = _current(be)
    if be.has("fake"):
        out = be.runtime.to_host(arr)
    else:
        import cupyx
        out = cupyx.empty_pinned(arr.shape, arr.dtype)
        raw = be.runtime.use_stream(s)
        try:      # NOTE: CuPy >= 13 blocks in get() unless told not to
            arr.get(stream=raw, out=out, blocking=False)
        except TypeError:
            arr.get(stream=raw, out=out)
    _hold_after(be, s, arr)
    return out


def record_stream(be, storage, raw_stream) -> None:
    """When ``storage`` dies, hold its array until the work queued on ``raw_stream`` by
    then has completed (``Tensor.record_stream``)."""
    weakref.finalize(storage, _hold_after, be, raw_stream, storage.data)
