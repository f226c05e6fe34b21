"""CUDA graphs on CuPy: a stretch of device work captured once, replayed with one launch.

A compiled training step on a GPU is hundreds of kernel launches, each a few
microseconds of Python and driver time; replaying them as one CUDA graph leaves the host
a single ``cudaGraphLaunch`` a step (PyTorch's ``torch.compile(mode="reduce-overhead")``
and ``torch.cuda.CUDAGraph``). A graph bakes in every address its kernels read and
write, so:

* :class:`GraphPool`: a captured program's side stream (capture is illegal on the legacy
  default stream) and its *private* CuPy memory pool. Everything allocated while it is
  in use comes from that pool and nothing else ever allocates from it, so memory a
  graph's kernels use is never handed to another tensor, even after the arrays that
  held it at capture time are gone (PyTorch's graph-private pools).
* :func:`capture`: begins capture on the pool's stream (``relaxed`` error mode by default,
  as CuPy's: the private pool may ``cudaMalloc`` while capturing, which the ``global`` and
  ``thread_local`` modes refuse; a CuPy device-to-host read synchronizes the stream, which
  fails a capture in every mode), and while it runs
  - keeps alive what the graph's launches read (:func:`keeping`: generated kernels'
    argument tuples, cuBLAS plans) — a cached 0-d operand evicted later must not free
    memory the graph still reads;
  - makes host-to-device uploads capture-safe: ``cupy.asarray``/``cupy.array`` of host
    data copy from a page-locked buffer owned by the capture (a graph's memcpy node
    re-reads its source at every replay: CuPy's own staging buffer is reused), and a
    failed capture performs those uploads for real, so caches filled during it hold
    their values.

Nothing here runs on the CPU stand-in (``EMBER_FAKE_CUDA``): its compiled programs replay
their recorded steps instead (:mod:`ember.graph.cuda_graphs`).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

__all__ = ["GraphPool", "capture", "keeping", "MODES", "is_capturing"]

#: ``capture_error_mode`` names (PyTorch's) -> ``cudaStreamCaptureMode`` values.
MODES = {"global": 0, "thread_local": 1, "relaxed": 2}

_local = threading.local()
_lock = threading.Lock()


def keeping():
    """The running capture's keep-alive list on this thread, else None."""
    return getattr(_local, "keep", None)


def is_capturing() -> bool:
    """Whether this thread is inside :func:`capture`."""
    return getattr(_local, "keep", None) is not None


class GraphPool:
    """A side stream and a private memory pool (one per captured program; several
    ``ember.cuda.CUDAGraph`` captures may share one: ``graph_pool_handle``)."""

    def __init__(self, cupy, stream=None):
        self.cupy = cupy
        self.stream = stream if stream is not None else cupy.cuda.Stream(non_blocking=True)
        self.pool = cupy.cuda.MemoryPool()
        self.malloc = _capture_safe_malloc(self.pool.malloc)

    @contextlib.contextmanager
    def use(self):
        """Queue the block's work on this pool's stream (after the current stream's work,
        and before the current stream's later work), allocating from its pool."""
        cp = self.cupy
        cur = cp.cuda.get_current_stream()
        self.stream.wait_event(cur.record())
        try:
            with self.stream, cp.cuda.using_allocator(self.malloc):
                yield self.stream
        finally:
            cur.wait_event(self.stream.record())

    def total_bytes(self) -> int:
        return self.pool.total_bytes()


class Captured:
    """What :func:`capture` yields: ``graph`` (a ``cupy.cuda.Graph``) once it succeeded,
    ``keep`` (what the graph reads), ``error`` if it failed."""

    __slots__ = ("graph", "keep", "uploads", "error")

    def __init__(self):
        self.graph, self.keep, self.uploads, self.error = None, [], [], None

    def launch(self, stream) -> None:
        self.graph.launch(stream)


@contextlib.contextmanager
def capture(gp: GraphPool, mode: str = "relaxed", stream=None):
    """Capture the block's work on ``stream`` (default: ``gp``'s; allocations must come
    from ``gp``'s pool: inside ``gp.use()`` or ``using_allocator(gp.malloc)``); yields a
    :class:`Captured`. An exception inside the block (or a capture the driver
    invalidated) ends the capture, performs the block's uploads for real and re-raises."""
    if mode not in MODES:
        raise ValueError(f"capture_error_mode must be one of {sorted(MODES)}, got {mode!r}")
    cp = gp.cupy
    if not _lock.acquire(blocking=False):
        raise RuntimeError("CUDA graph capture: another capture is underway (one at a time)")
    got = Captured()
    stream = gp.stream if stream is None else stream
    old = (cp.asarray, cp.array)
    cp.asarray, cp.array = _safe_upload(cp, old[0], got), _safe_upload(cp, old[1], got)
    _local.keep = got.keep
    try:
        stream.begin_capture(mode=MODES[mode])
        try:
            yield got
        except BaseException:
            _end_quietly(stream)
            _uploads_now(got)
            raise
        try:
            got.graph = stream.end_capture()
        except BaseException:           # NOTE: e.g. the driver invalidated the capture
            _uploads_now(got)
            raise
    except BaseException as e:
        got.error = e
        raise
    finally:
        _local.keep = None
        cp.asarray, cp.array = old
        _lock.release()


def _capture_safe_malloc(malloc):
    """``malloc`` that may ``cudaMalloc`` inside a ``global``/``thread_local`` capture: the
    thread's capture mode is exchanged for ``relaxed`` around it (the driver's
    ``cuThreadExchangeStreamCaptureMode``, as PyTorch's caching allocator does)."""
    def alloc(nbytes):
        return _relaxed(malloc, nbytes) if is_capturing() else malloc(nbytes)
    return alloc


_EXCHANGE: list = []


def _driver_exchange():
    """``cuThreadExchangeStreamCaptureMode`` from the CUDA driver, or None."""
    if not _EXCHANGE:
        fn = None
        try:
            import ctypes
            fn = ctypes.CDLL("libcuda.so.1").cuThreadExchangeStreamCaptureMode
            fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _EXCHANGE.append(fn)
    return _EXCHANGE[0]


def _end_quietly(stream) -> None:
    try:
        stream.end_capture()
    except Exception:   # noqa: BLE001 - the capture is being abandoned; its error is moot
        pass


def _safe_upload(cp, orig, got: Captured):
    """``cupy.asarray``/``cupy.array`` during a capture: device arrays as CuPy does; host
    data copied from a page-locked buffer the capture keeps (see the module doc)."""
    def upload(obj, dtype=None, *args, **kwargs):
        if isinstance(obj, cp.ndarray) or args or kwargs.get("blocking") is not None:
            return orig(obj, dtype, *args, **kwargs)
        host = np.asarray(obj, dtype=dtype)
        if host.dtype.hasobject:
            return orig(obj, dtype, *args, **kwargs)
        import cupyx
        pinned = _relaxed(cupyx.empty_pinned, host.shape, host.dtype)
        pinned[...] = host
        dev = cp.empty(host.shape, host.dtype)
        dev.set(pinned, stream=cp.cuda.get_current_stream())
        got.keep.append(pinned)
        got.uploads.append((dev, pinned))
        return dev
    return upload


def _relaxed(fn, *args):
    """``fn(*args)`` with this thread's capture mode relaxed (a page-locked allocation)."""
    swap = _driver_exchange()
    if swap is None:
        return fn(*args)
    import ctypes
    mode = ctypes.c_int(MODES["relaxed"])
    swap(ctypes.byref(mode))
    try:
        return fn(*args)
    finally:
        swap(ctypes.byref(mode))


def _uploads_now(got: Captured) -> None:
    """The uploads of an abandoned capture, for real (their arrays may sit in caches)."""
    for dev, pinned in got.uploads:
        try:
            dev.set(pinned)
        except Exception:   # noqa: BLE001 - best effort: the capture's own error matters
            pass
