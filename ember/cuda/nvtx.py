"""``ember.cuda.nvtx``: ``torch.cuda.nvtx``'s annotation ranges for NVIDIA's profilers.

On a GPU the ranges go to NVTX through CuPy (``cupy.cuda.nvtx``), so Nsight Systems shows
them around Ember's kernels; without a GPU, on the ``EMBER_FAKE_CUDA`` stand-in or where
CuPy lacks NVTX, the calls only keep the nesting depth they return (scripts written for a
GPU run unchanged). ``range_start``/``range_end`` ranges, which may overlap, are kept by
handle here and, having no CuPy binding, not sent to NVTX.

Example:
    >>> with ember.cuda.nvtx.range("forward"):
    ...     y = model(x)
"""
from __future__ import annotations

import contextlib
import itertools

__all__ = ["range_push", "range_pop", "range_start", "range_end", "mark", "range"]

_depth = [0]
_handles = itertools.count(1)
_open: dict = {}


def _nvtx():
    """CuPy's NVTX module on a real GPU backend with NVTX, else None."""
    from ._state import backend_or_none
    be = backend_or_none()
    if be is None or getattr(be, "is_fake", False):
        return None
    try:
        from cupy.cuda import nvtx
    except ImportError:
        return None
    return nvtx if getattr(nvtx, "available", False) else None


def range_push(msg: str) -> int:
    """Open a nested range named ``msg``; returns its zero-based depth."""
    nv = _nvtx()
    if nv is not None:
        nv.RangePush(str(msg))
    _depth[0] += 1
    return _depth[0] - 1


def range_pop() -> int:
    """Close the innermost range; returns the depth of the range closed (-1: none open)."""
    if _depth[0] == 0:
        return -1
    nv = _nvtx()
    if nv is not None:
        nv.RangePop()
    _depth[0] -= 1
    return _depth[0]


def range_start(msg: str) -> int:
    """Start a range that may overlap others; returns its handle for :func:`range_end`."""
    h = next(_handles)
    _open[h] = str(msg)
    return h


def range_end(range_id: int) -> None:
    """End the range :func:`range_start` returned ``range_id`` for."""
    if _open.pop(range_id, None) is None:
        raise ValueError(f"nvtx.range_end: no open range with id {range_id}")


def mark(msg: str) -> None:
    """An instantaneous event named ``msg``."""
    nv = _nvtx()
    if nv is not None:
        nv.Mark(str(msg))


@contextlib.contextmanager
def range(msg: str, *args, **kwargs):  # noqa: A001 - PyTorch's name
    """Context manager (and decorator) for a nested range; ``msg`` is formatted with
    ``*args, **kwargs`` as ``str.format`` does, as in PyTorch."""
    range_push(msg.format(*args, **kwargs) if args or kwargs else msg)
    try:
        yield
    finally:
        range_pop()
