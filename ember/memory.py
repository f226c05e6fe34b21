"""Memory statistics of a device's allocator (``ember.memory_stats``), limits, and the report
an out-of-memory error carries.

While a limit is set (or :func:`record_allocation_sites` is on) every storage remembers the
user source line that created it, so running out of memory names the largest live tensors
and where they came from, and suggests what to do: a ``memory_budget`` for
``ember.compile``, checkpointing, or a limit that fits.
"""
from __future__ import annotations

import gc

from .device import device as _device, get_backend
from .device.cpu import NO_LIMIT
from .storage import Storage, creation_site

__all__ = ["memory_stats", "reset_peak_memory_stats", "set_memory_limit",
           "record_allocation_sites", "live_tensors", "oom_report"]


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
    """Make allocations past ``nbytes`` of live tensor memory raise ``MemoryError`` (None: off).

    The error lists the largest live tensors with the source line that created each.

    Example:
        >>> ember.set_memory_limit(2 << 30)     # 2 GiB of tensors at most
    """
    alloc = get_backend(_device(device)).allocator
    if nbytes is not None and (isinstance(nbytes, bool) or int(nbytes) < 0):
        raise ValueError(f"set_memory_limit: expected a number of bytes >= 0 or None, got "
                         f"{nbytes!r}")
    alloc.limit = None if nbytes is None else int(nbytes)
    alloc.on_oom = _oom_hook(device)


def record_allocation_sites(enabled: bool = True, device="cpu") -> None:
    """Record where each tensor is created without setting a limit (a debugging aid).

    Recording makes allocations take the allocator's checked path (slower); a limit set
    with :func:`set_memory_limit` records sites too.
    """
    alloc = get_backend(_device(device)).allocator
    if enabled and alloc.limit is None:
        alloc.limit = NO_LIMIT
    elif not enabled and alloc.limit == NO_LIMIT:
        alloc.limit = None
    alloc.on_oom = _oom_hook(device)


def live_tensors(device="cpu") -> list:
    """``[(nbytes, shape, dtype, site), ...]`` of every live storage, largest first.

    ``site`` is ``file:line`` when the storage was created while sites were recorded,
    else None. Walks the garbage collector's objects: meant for reports, not hot loops.
    """
    alloc = get_backend(_device(device)).allocator
    out = []
    for o in gc.get_objects():
        if type(o) is Storage and o._alloc is alloc:   # NOTE: type(): no proxy __class__
            a = o.data
            out.append((o._nbytes, tuple(a.shape), str(a.dtype), getattr(o, "site", None)))
    out.sort(key=lambda r: -r[0])
    return out


def _fmt(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def oom_report(nbytes: int, limit: int, current: int, device="cpu", top: int = 10) -> str:
    """The text of an out-of-memory error: the largest live tensors and what to do."""
    rows = live_tensors(device)
    lines = [f"out of memory: allocating {nbytes} bytes ({_fmt(nbytes)}) at "
             f"{creation_site_outside()} would bring live tensor memory to {current + nbytes} "
             f"bytes, over the limit of {limit} bytes ({_fmt(limit)}).",
             f"Largest live tensors ({len(rows)} live, {_fmt(current)} in all):"]
    for n, shape, dt, site in rows[:top]:
        where = site or "created before sites were recorded"
        lines.append(f"  {n:>12} bytes ({_fmt(n):>9})  {dt:<8} {list(shape)}  {where}")
    if len(rows) > top:
        rest = sum(r[0] for r in rows[top:])
        lines.append(f"  ... {len(rows) - top} more tensors, {rest} bytes ({_fmt(rest)})")
    need = current + nbytes
    lines.append(
        f"To fit: cut activation memory with ember.checkpoint / ember.checkpoint_sequential "
        f"(sqrt(N) segments keep ~2*sqrt(N) layers' activations), or compile the step with a "
        f"budget: ember.compile(step, memory_budget={limit}); ember.estimate_memory(step, "
        f"*inputs) predicts the peak before running. Otherwise raise the limit to at least "
        f"{need} bytes ({_fmt(need)}) with ember.set_memory_limit({need}).")
    return "\n".join(lines)


def creation_site_outside() -> str:
    """The user line of the allocation that failed (skipping Ember's own frames)."""
    return creation_site()


def _on_oom(msg: str, nbytes: int, device="cpu") -> str:
    """The allocator's ``on_oom`` hook: replace its one-line message by the full report."""
    alloc = get_backend(_device(device)).allocator
    try:
        report = oom_report(nbytes, alloc.limit, alloc.current, device)
        return report if _device(device).type == "cpu" else f"{_device(device)}: {report}"
    except Exception:  # noqa: BLE001 - never hide the MemoryError itself behind a report bug
        return msg


def _oom_hook(device):
    """``on_oom`` for ``device``'s allocator (its own live tensors in the report)."""
    if _device(device).type == "cpu":
        return _on_oom
    return lambda msg, nbytes: _on_oom(msg, nbytes, device)
