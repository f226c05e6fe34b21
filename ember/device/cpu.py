"""The CPU backend: NumPy arrays, BLAS via NumPy, an allocator that counts bytes."""
from __future__ import annotations

import numpy as np

from .base import Backend, device


class CountingAllocator:
    """Counts live bytes, the peak and the number of allocations of one device.

    Storage objects call :meth:`track` when they adopt a buffer and
    :meth:`untrack` when they die, so the numbers are exact for tensor data.
    An optional limit makes allocations past it raise ``MemoryError``.
    """

    __slots__ = ("current", "peak", "num_allocs", "num_frees", "limit", "on_oom")

    def __init__(self):
        self.current = self.peak = self.num_allocs = self.num_frees = 0
        self.limit = None
        self.on_oom = None

    def track(self, nbytes: int) -> None:
        cur = self.current + nbytes
        if self.limit is not None and cur > self.limit:
            msg = (f"out of memory: allocating {nbytes} bytes would bring live tensor memory "
                   f"to {cur} bytes, over the limit of {self.limit} bytes")
            if self.on_oom is not None:
                msg = self.on_oom(msg, nbytes)
            raise MemoryError(msg)
        self.current = cur
        self.num_allocs += 1
        if cur > self.peak:
            self.peak = cur

    def untrack(self, nbytes: int) -> None:
        self.current -= nbytes
        self.num_frees += 1

    def stats(self) -> dict:
        return {"current_bytes": self.current, "peak_bytes": self.peak,
                "num_allocs": self.num_allocs, "num_frees": self.num_frees,
                "limit_bytes": self.limit}

    def reset_peak(self) -> None:
        self.peak = self.current


class CPUBackend(Backend):
    type = "cpu"
    xp = np
    capabilities = frozenset({"host_memory", "dlpack", "blas"})

    def __init__(self):
        self.device = device("cpu")
        self.allocator = CountingAllocator()

    def empty(self, shape, np_dtype):
        return np.empty(shape, np_dtype)

    def asarray(self, data, np_dtype=None):
        return np.asarray(data, dtype=np_dtype)

    def to_host(self, arr):
        return arr
