"""The CPU backend: NumPy arrays, BLAS via NumPy, an allocator that counts bytes."""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

from .base import Backend, device


#: A limit no allocation reaches: set while only recording creation sites (the checked path
#: of ``Storage`` records them; the unlimited fast path does not).
NO_LIMIT = 1 << 62


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
                "limit_bytes": None if self.limit == NO_LIMIT else self.limit}

    def reset_peak(self) -> None:
        self.peak = self.current


#: What :func:`tune_host_malloc` did, for ``ember.show_config()``.
HOST_MALLOC_POLICY = "not applied"


def tune_host_malloc() -> str:
    """Keep freed tensor memory in the process instead of unmapping it (glibc only).

    NumPy takes every large array from ``malloc``; glibc serves those with a fresh
    ``mmap`` and unmaps them on free, so each new activation or gradient page-faults
    all its pages again (on the VMs we measured, a 1.6 MB temporary cost 0.95 ms cold
    vs 0.06 ms warm). Raising glibc's mmap and trim thresholds makes freed blocks
    reusable, like the caching allocators of GPU frameworks. Skipped when the user
    sets any ``MALLOC_*`` tunable themselves or ``EMBER_HOST_MALLOC_CACHE=0``.
    """
    global HOST_MALLOC_POLICY
    if os.environ.get("EMBER_HOST_MALLOC_CACHE", "1") == "0":
        HOST_MALLOC_POLICY = "off (EMBER_HOST_MALLOC_CACHE=0)"
        return HOST_MALLOC_POLICY
    user = [k for k in os.environ if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"]
    if user:
        HOST_MALLOC_POLICY = f"left to the user's environment ({', '.join(sorted(user))})"
        return HOST_MALLOC_POLICY
    if not sys.platform.startswith("linux"):
        return HOST_MALLOC_POLICY
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return HOST_MALLOC_POLICY
    m_trim_threshold, m_mmap_threshold = -1, -3
    mmap_max, trim = 32 << 20, 512 << 20
    if mallopt(m_mmap_threshold, mmap_max) and mallopt(m_trim_threshold, trim):
        HOST_MALLOC_POLICY = (f"glibc caches freed blocks (mmap threshold {mmap_max >> 20} MiB, "
                              f"trim threshold {trim >> 20} MiB; EMBER_HOST_MALLOC_CACHE=0 "
                              f"turns this off)")
    return HOST_MALLOC_POLICY


class CPUBackend(Backend):
    type = "cpu"
    xp = np
    capabilities = frozenset({"host_memory", "host_kernels", "dlpack", "blas"})

    def __init__(self):
        self.device = device("cpu")
        self.allocator = CountingAllocator()
        tune_host_malloc()

    def empty(self, shape, np_dtype):
        return np.empty(shape, np_dtype)

    def asarray(self, data, np_dtype=None):
        return np.asarray(data, dtype=np_dtype)

    def to_host(self, arr):
        return arr
