"""``ember.cuda``'s memory statistics over the cuda backend's caching allocator.

``memory_allocated`` counts live tensor storages (as ``ember.memory_stats("cuda")`` and
PyTorch do); ``memory_reserved`` is what the caching pool holds (CuPy's memory pool on a
GPU, a simulated pool on the stand-in); ``empty_cache`` returns the cached free blocks.
Without a device every figure is 0 and the resets are no-ops, as in PyTorch.
"""
from __future__ import annotations

from ._state import backend_or_none

#: ``torch.cuda.OutOfMemoryError``: Ember's allocator limit raises ``MemoryError`` with the
#: OOM report (``ember.set_memory_limit(n, device="cuda")``), so this is that class.
OutOfMemoryError = MemoryError


def _alloc(device):
    be = backend_or_none()
    if be is None:
        return None
    if device is not None:
        from . import _index
        i = _index(device)
        if i is not None and i >= 0:
            be.check_index(i, "memory statistics")
    return be.allocator


def memory_allocated(device=None) -> int:
    """Bytes of live tensors on the device."""
    a = _alloc(device)
    return 0 if a is None else a.current


def max_memory_allocated(device=None) -> int:
    """The peak of :func:`memory_allocated` since the last reset."""
    a = _alloc(device)
    return 0 if a is None else a.peak


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds (live and cached)."""
    a = _alloc(device)
    return 0 if a is None else a.reserved()


def max_memory_reserved(device=None) -> int:
    """The peak of :func:`memory_reserved` since the last reset."""
    a = _alloc(device)
    if a is None:
        return 0
    a.reserved()
    return a.peak_reserved


def reset_peak_memory_stats(device=None) -> None:
    """Reset the peaks to the current figures."""
    a = _alloc(device)
    if a is not None:
        a.reset_peak()


reset_max_memory_allocated = reset_peak_memory_stats


def empty_cache() -> None:
    """Return the cached free blocks to the device (live tensors are untouched)."""
    a = _alloc(None)
    if a is not None:
        a.empty_cache()


def memory_stats(device=None) -> dict:
    """PyTorch's flat statistics (``"allocated_bytes.all.current"``...); {} without a device."""
    a = _alloc(device)
    if a is None:
        return {}
    s = a.stats()
    return {"allocated_bytes.all.current": s["current_bytes"],
            "allocated_bytes.all.peak": s["peak_bytes"],
            "allocation.all.allocated": s["num_allocs"],
            "allocation.all.freed": s["num_frees"],
            "allocation.all.current": s["num_allocs"] - s["num_frees"],
            "reserved_bytes.all.current": s["reserved_bytes"],
            "reserved_bytes.all.peak": s["peak_reserved_bytes"],
            "num_ooms": s["num_ooms"], "num_alloc_retries": s["num_alloc_retries"]}


def _fmt(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A printable table of the device's memory statistics (``torch.cuda.memory_summary``)."""
    be = backend_or_none()
    if be is None:
        return "No CUDA device: no memory statistics.\n"
    s = memory_stats(device)
    idx = be.current_index if device is None else device
    rule = "|" + "=" * 62 + "|"
    rows = [("Allocated memory", _fmt(s["allocated_bytes.all.current"]),
             _fmt(s["allocated_bytes.all.peak"])),
            ("Reserved memory", _fmt(s["reserved_bytes.all.current"]),
             _fmt(s["reserved_bytes.all.peak"])),
            ("Live allocations", str(s["allocation.all.current"]), "-"),
            ("Allocations / frees", f"{s['allocation.all.allocated']} / "
             f"{s['allocation.all.freed']}", "-"),
            ("OOMs", str(s["num_ooms"]), "-")]
    lines = [rule, f"|{'Ember CUDA memory summary, device ID ' + str(idx):^62}|",
             f"|{be.runtime.name[:60]:^62}|", rule,
             f"| {'Metric':<28}| {'Current':>14} | {'Peak':>13} |", rule]
    lines += [f"| {name:<28}| {cur:>14} | {peak:>13} |" for name, cur, peak in rows]
    return "\n".join(lines + [rule]) + "\n"


def mem_get_info(device=None) -> tuple:
    """``(free, total)`` bytes of the device (``torch.cuda.mem_get_info``)."""
    from ._state import need
    be = need("mem_get_info")
    return be.runtime.mem_info(be.check_index(_index_of(device), "mem_get_info"))


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Cap the live tensor memory at ``fraction`` of the device's total
    (``torch.cuda.set_per_process_memory_fraction``): an allocation past it raises
    :data:`OutOfMemoryError` with the OOM report. Ember's cap is
    ``ember.set_memory_limit(int(fraction * total), "cuda")``: it counts live tensors, where
    PyTorch's counts the caching allocator's reserved blocks, and one cap serves the
    backend's devices (its allocator is shared)."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"set_per_process_memory_fraction: invalid type for fraction, "
                        f"expected a float in [0, 1], got {type(fraction).__name__}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"set_per_process_memory_fraction: invalid fraction value "
                         f"{fraction}; allowed range: 0 to 1")
    from ..memory import set_memory_limit
    from ._state import need
    be = need("set_per_process_memory_fraction")
    i = be.check_index(_index_of(device), "set_per_process_memory_fraction")
    set_memory_limit(int(fraction * be.runtime.mem_info(i)[1]), device=f"cuda:{i}")


def get_per_process_memory_fraction(device=None) -> float:
    """The fraction :func:`set_per_process_memory_fraction` set (1.0: no cap)."""
    from ._state import need
    be = need("get_per_process_memory_fraction")
    i = be.check_index(_index_of(device), "get_per_process_memory_fraction")
    limit = be.allocator.limit
    return 1.0 if limit is None else limit / be.runtime.mem_info(i)[1]


# NOTE: PyTorch's deprecated names of the reserved-memory figures
memory_cached = memory_reserved
max_memory_cached = max_memory_reserved
reset_max_memory_cached = reset_peak_memory_stats


def _index_of(device):
    from . import _index
    return _index(device)
