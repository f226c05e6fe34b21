"""Memory statistics of a device's allocator (``ember.memory_stats``)."""
from __future__ import annotations

from .device import device as _device, get_backend


def memory_stats(device="cpu") -> dict:
    """``{"current_bytes", "peak_bytes", "num_allocs", "num_frees", "limit_bytes"}``.

    Example:
        >>> ember.memory_stats()["current_bytes"]
    """
    return get_backend(_device(device)).allocator.stats()


def reset_peak_memory_stats(device="cpu") -> None:
    """Reset the peak to the current number of live bytes."""
    get_backend(_device(device)).allocator.reset_peak()


def set_memory_limit(nbytes, device="cpu") -> None:
    """Make allocations past ``nbytes`` of live tensor memory raise ``MemoryError`` (None: off)."""
    get_backend(_device(device)).allocator.limit = None if nbytes is None else int(nbytes)
