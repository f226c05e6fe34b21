"""The ``cuda`` device: CuPy arrays on an NVIDIA GPU, or NumPy arrays in a stand-in.

:class:`CUDABackend` is one class over a small *runtime* object that holds what differs
between a real GPU and the CPU stand-in:

* :class:`CuPyRuntime` (``xp = cupy``): device memory from CuPy's memory pool, streams and
  events from ``cupy.cuda``, host<->device copies, NVRTC kernels via ``cupy.RawModule``;
* :class:`FakeRuntime` (``EMBER_FAKE_CUDA=1``; ``xp = numpy``): arrays are NumPy arrays
  kept in their own memory space (a transfer always copies; their bytes are counted by
  this backend's allocator, not the CPU's), events time with the host clock, and a
  simulated caching pool keeps freed bytes *reserved* until ``empty_cache`` like CuPy's.
  ``EMBER_FAKE_CUDA_STRICT=1``: ``xp`` is :mod:`.cuda_strict`'s CuPy-shaped module (arrays
  that refuse implicit NumPy conversion and host operands) and no host kernels run, so
  the stand-in takes a GPU's code paths (the tests' ``fake_cuda`` fixture).

bfloat16: the stand-in's NumPy arrays are ``ml_dtypes``' bfloat16; a GPU's are CuPy >= 14's
native ones (:mod:`.cuda_bf16`: probed when the backend is made, an ``astype`` round trip
on the first bfloat16 array; older CuPy refuses bfloat16 with a TypeError naming why).

Everything else (allocator statistics, the current device and stream, the OOM report,
transfers) is the same code on both, so CI tests the real backend's paths on the stand-in.
Importing this module never imports CuPy; :func:`make_backend` decides which runtime (if
any) is available.
"""
from __future__ import annotations

import os
import time
import weakref

import numpy as np

from ..dtypes import bfloat16 as _bfloat16
from . import cuda_bf16
from .base import Backend, device
from .cpu import CountingAllocator

_BF16 = np.dtype(_bfloat16.np)

__all__ = ["CUDABackend", "CachingAllocator", "CuPyRuntime", "FakeRuntime", "make_backend",
           "fake_requested"]


class CachingAllocator(CountingAllocator):
    """The counting allocator plus a caching pool's *reserved* bytes.

    ``current``/``peak`` count live tensor storages exactly as on the CPU (so
    ``memory_allocated`` equals PyTorch's meaning); ``reserved`` is what the pool holds
    (live plus cached free blocks), ``empty_cache`` returns the cached blocks.
    """

    __slots__ = ("pool", "peak_reserved", "num_ooms", "num_alloc_retries", "graph_pools")

    def __init__(self, pool):
        super().__init__()
        self.pool = pool
        # NOTE: CUDA graphs' private pools (ember.device.cuda_graph.GraphPool): reserved too
        self.graph_pools = weakref.WeakSet()
        self.peak_reserved = 0
        self.num_ooms = 0
        self.num_alloc_retries = 0

    def track(self, nbytes: int) -> None:
        try:
            super().track(nbytes)
        except MemoryError:
            self.num_ooms += 1
            raise

    def reserved(self) -> int:
        r = max(self.pool.total_bytes() + sum(g.total_bytes() for g in self.graph_pools),
                self.current)
        if r > self.peak_reserved:
            self.peak_reserved = r
        return r

    def stats(self) -> dict:
        s = super().stats()
        s.update(reserved_bytes=self.reserved(), peak_reserved_bytes=self.peak_reserved,
                 num_ooms=self.num_ooms, num_alloc_retries=self.num_alloc_retries)
        return s

    def reset_peak(self) -> None:
        self.reserved()               # NOTE: the pool notes the old peak first
        super().reset_peak()
        if hasattr(self.pool, "peak_reset"):
            self.pool.peak_reset(self.peak)
        self.peak_reserved = self.reserved()

    def empty_cache(self) -> None:
        self.pool.free_all_blocks()


class _HostPool:
    """The stand-in's pool: like a caching allocator, freed bytes stay reserved (up to the
    peak of live bytes since the last ``free_all_blocks``) until the cache is emptied."""

    def __init__(self):
        self.alloc = None
        self._held = 0
        self._mark = 0     # the allocator's peak when the cache was last emptied

    def total_bytes(self) -> int:
        a = self.alloc
        if a is None:
            return 0
        if a.peak > self._mark:   # NOTE: a new high since the cache was emptied
            self._held = max(self._held, a.peak)
        self._held = max(self._held, a.current)
        return self._held

    def used_bytes(self) -> int:
        return self.alloc.current if self.alloc is not None else 0

    def free_all_blocks(self) -> None:
        if self.alloc is not None:
            self._held, self._mark = self.alloc.current, self.alloc.peak

    def peak_reset(self, peak: int) -> None:
        self._mark = min(self._mark, peak)


class FakeRuntime:
    """The CPU stand-in for a GPU runtime (``EMBER_FAKE_CUDA=N``: N devices, default 1)."""

    name = "Ember fake CUDA device (CPU stand-in, EMBER_FAKE_CUDA)"
    is_fake = True
    bf16 = (True, "")          # NOTE: NumPy holds ml_dtypes' bfloat16 arrays

    def __init__(self, count: int = 1, strict: bool = False):
        # NOTE: strict (EMBER_FAKE_CUDA_STRICT=1): arrays that refuse what CuPy's refuse
        # (implicit NumPy conversion, host operands, .ctypes): .cuda_strict
        self.strict = strict
        if strict:
            from . import cuda_strict
            self.xp = cuda_strict.xp
            self.name += " [strict]"
        else:
            self.xp = np
        self.count = count
        self.pool = _HostPool()

    def device_count(self) -> int:
        return self.count

    def to_device(self, host, np_dtype=None):
        # NOTE: always a copy: device memory is never the host array it came from
        if self.strict:
            return self.xp.array(host, dtype=np_dtype, copy=True)
        return np.array(host, dtype=np_dtype, copy=True)

    def to_host(self, arr):
        if self.strict and not isinstance(arr, np.ndarray):
            return self.xp.asnumpy(arr)         # NOTE: a copy already (ndarray.get)
        return np.array(arr, copy=True)

    def upload_into(self, dst, host) -> None:
        if self.strict:
            dst[...] = self.xp.asarray(host)
        else:
            dst[...] = host

    def stream_key(self):
        return 0

    def synchronize(self, index: int) -> None:
        return None

    def pin(self, arr):
        return np.array(arr, copy=True)   # NOTE: host memory is host memory here

    def from_dlpack(self, ext):
        raise RuntimeError("from_dlpack: a CUDA DLPack capsule needs a real GPU; the "
                           "EMBER_FAKE_CUDA stand-in holds host memory")

    def new_stream(self, index: int, priority: int = 0):
        return _HostQueue()

    def new_event(self, enable_timing: bool, blocking: bool):
        return _HostQueue()

    def record(self, raw_event, raw_stream) -> float:
        return time.perf_counter()

    def elapsed_ms(self, start, end) -> float:
        return (end._time - start._time) * 1e3

    def use_stream(self, raw_stream):
        return _NullContext()

    def properties(self, index: int) -> dict:
        return {"name": self.name, "major": 9, "minor": 0, "total_memory": 80 << 30,
                "multi_processor_count": 132}

    def mem_info(self, index: int) -> tuple:
        total = self.properties(index)["total_memory"]
        return total - self.pool.total_bytes(), total

    def set_device(self, index: int) -> None:
        return None


class CuPyRuntime:
    """The real runtime: CuPy (imported here, only when a backend is made)."""

    is_fake = False

    def __init__(self):
        import cupy
        self.cupy = cupy
        self.xp = cupy
        self.pool = cupy.get_default_memory_pool()
        self.name = "CuPy " + cupy.__version__
        self.allocator = None        # the backend's CachingAllocator (set by CUDABackend)
        # NOTE: (ok, why): CuPy >= 14 with ml_dtypes holds bfloat16 arrays. No kernel is
        # compiled here: the astype round trip runs on the first bfloat16 allocation
        self.bf16 = cuda_bf16.probe(cupy)
        cupy.cuda.set_allocator(retrying_malloc(
            self.pool.malloc, self.pool.free_all_blocks, cupy.cuda.memory.OutOfMemoryError,
            lambda: self.allocator))

    def device_count(self) -> int:
        return self.cupy.cuda.runtime.getDeviceCount()

    def to_device(self, host, np_dtype=None):
        return self.cupy.asarray(host, dtype=np_dtype)

    def to_host(self, arr):
        return self.cupy.asnumpy(arr)

    def upload_into(self, dst, host) -> None:
        # NOTE: cupy.asarray stages a host array through pinned memory and copies it
        # asynchronously (a pageable cudaMemcpy would wait for the stream); then one
        # device-to-device copy on the current stream, ordered after earlier readers of dst
        tmp = self.cupy.asarray(host)
        dst.data.copy_from_device_async(tmp.data, host.nbytes,
                                        self.cupy.cuda.get_current_stream())

    def stream_key(self):
        return (self.cupy.cuda.runtime.getDevice(), self.cupy.cuda.get_current_stream().ptr)

    def synchronize(self, index: int) -> None:
        with self.cupy.cuda.Device(index):
            self.cupy.cuda.runtime.deviceSynchronize()

    def from_dlpack(self, ext):
        try:
            return self.cupy.from_dlpack(ext)     # NOTE: zero-copy, on the exporter's device
        except NotImplementedError as e:          # CuPy < 14 / no ml_dtypes: a bfloat16 one
            if "bfloat16" not in str(e):
                raise
            raise TypeError("from_dlpack: " + cuda_bf16.unsupported_message(
                self.bf16[1] or str(e))) from None

    def bf16_roundtrip(self):
        return cuda_bf16.roundtrip(self.cupy, _BF16)

    def compile_errors(self) -> tuple:
        """What CuPy raises when a kernel's text fails to compile (a bfloat16 loop that
        CuPy's templates lack, e.g. in ``cupyx``)."""
        err = getattr(getattr(self.cupy.cuda, "compiler", None), "CompileException", None)
        return (err,) if isinstance(err, type) else ()

    def pin(self, arr):
        import cupyx
        out = cupyx.empty_pinned(arr.shape, arr.dtype)
        out[...] = arr
        return out

    def new_stream(self, index: int, priority: int = 0):
        with self.cupy.cuda.Device(index):
            return self.cupy.cuda.Stream(non_blocking=True, priority=priority)

    def new_event(self, enable_timing: bool, blocking: bool):
        return self.cupy.cuda.Event(block=blocking, disable_timing=not enable_timing)

    def record(self, raw_event, raw_stream) -> None:
        raw_event.record(raw_stream)

    def elapsed_ms(self, start, end) -> float:
        return float(self.cupy.cuda.get_elapsed_time(start._raw, end._raw))

    def use_stream(self, raw_stream):
        return raw_stream if raw_stream is not None else \
            self.cupy.cuda.Stream.null

    def properties(self, index: int) -> dict:
        p = self.cupy.cuda.runtime.getDeviceProperties(index)
        name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
        return {"name": name, "major": p["major"], "minor": p["minor"],
                "total_memory": p["totalGlobalMem"],
                "multi_processor_count": p["multiProcessorCount"]}

    def mem_info(self, index: int) -> tuple:
        with self.cupy.cuda.Device(index):
            return tuple(self.cupy.cuda.runtime.memGetInfo())

    def set_device(self, index: int) -> None:
        self.cupy.cuda.Device(index).use()


def retrying_malloc(malloc, free_cached, oom_type, allocator):
    """A device ``malloc`` that, out of memory, frees the pool's cached blocks and retries
    once (PyTorch's caching allocator does the same), then raises ``MemoryError`` with
    Ember's OOM report (largest live tensors and where they were made)."""
    def alloc(nbytes):
        try:
            return malloc(nbytes)
        except oom_type:
            free_cached()
            a = allocator()
            if a is not None:
                a.num_alloc_retries += 1
            try:
                return malloc(nbytes)
            except oom_type as e:
                if a is not None:
                    a.num_ooms += 1
                raise MemoryError(_oom_message(nbytes, a, e)) from None
    return alloc


def _oom_message(nbytes: int, alloc, err) -> str:
    try:
        from ..memory import oom_report   # NOTE: above the device layer: only when failing
        cur = alloc.current if alloc is not None else 0
        held = alloc.pool.total_bytes() if alloc is not None else 0   # what the pool could get
        return f"cuda: {err}\n" + oom_report(nbytes, held, cur, "cuda")
    except Exception:   # noqa: BLE001 - never hide the error behind a report bug
        return f"cuda: {err}"


class _HostQueue:
    """The stand-in's stream or event: work is synchronous, so it is always done."""

    done = True

    def synchronize(self) -> None:
        return None

    def wait_event(self, event) -> None:
        return None


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class CUDABackend(Backend):
    """The ``cuda`` device type over a runtime (CuPy, or the CPU stand-in)."""

    type = "cuda"

    def __init__(self, runtime):
        self.runtime = runtime
        self.xp = runtime.xp
        self.device = device("cuda", 0)
        self.allocator = CachingAllocator(runtime.pool)
        if hasattr(runtime, "allocator"):
            runtime.allocator = self.allocator
        if isinstance(runtime.pool, _HostPool):
            runtime.pool.alloc = self.allocator
        # NOTE: no "host_memory": a cuda tensor's data is not NumPy's (numpy() raises,
        # as in PyTorch), on the stand-in too, so CI sees the same errors as a GPU.
        caps = {"dlpack", "streams", "cuda"}
        # NOTE: the stand-in's arrays are NumPy's, so generated C kernels (compiled graphs'
        # fusion, pooling...) run on them; a GPU's compiled graphs skip those passes
        # (the strict stand-in's arrays are not NumPy's: no host kernels, as on a GPU)
        fake = set() if not runtime.is_fake else {"fake"} if runtime.strict else \
            {"fake", "host_kernels"}
        # NOTE: bfloat16: the stand-in's NumPy arrays, or CuPy >= 14 with ml_dtypes
        # (cuda_bf16.probe); confirmed by an astype round trip on first use (_bf16)
        ok, self.bf16_why = runtime.bf16
        self._bf16_ready = runtime.is_fake
        bf16 = {"bfloat16"} if ok else set()
        # NOTE: a GPU runs the fusion pass's groups as generated CUDA kernels instead
        # (graph/passes/fuse_cuda.py); the stand-in keeps the C ones
        gpu = set() if runtime.is_fake else {"cuda_kernels"}
        self.capabilities = frozenset(caps | fake | gpu | bf16)
        self.current_index = 0
        self.streams: list = []         # the `ember.cuda.stream(...)` stack

    @property
    def is_fake(self) -> bool:
        return self.runtime.is_fake

    def device_count(self) -> int:
        return self.runtime.device_count()

    def check_index(self, index, what: str = "cuda") -> int:
        """``index`` (None: the current device) as an int, or a RuntimeError naming the range."""
        i = self.current_index if index is None else int(index)
        n = self.device_count()
        if not 0 <= i < n:
            raise RuntimeError(f"{what}: invalid device ordinal cuda:{i}; this machine has "
                               f"{n} CUDA device(s) (valid: cuda:0 to cuda:{n - 1})")
        return i

    def empty(self, shape, np_dtype):
        if np_dtype is _BF16:
            self._bf16()
        return self.xp.empty(shape, np_dtype)

    def asarray(self, data, np_dtype=None):
        if np_dtype is _BF16 or getattr(data, "dtype", None) is _BF16:
            self._bf16()
        return self.runtime.to_device(data, np_dtype)

    def _bf16(self) -> None:
        """Refuse bfloat16 arrays (a TypeError naming why and what is needed) unless the
        backend has them; on a GPU the first one runs :func:`cuda_bf16.roundtrip` once."""
        if "bfloat16" not in self.capabilities:
            raise TypeError(cuda_bf16.unsupported_message(
                self.bf16_why or f"{self.runtime.name} has no bfloat16 capability"))
        if self._bf16_ready:
            return
        ok, why = self.runtime.bf16_roundtrip()
        if not ok:
            self.capabilities = self.capabilities - {"bfloat16"}
            self.bf16_why = f"{self.runtime.name}: {why}"
            self._bf16()
        self._bf16_ready = True

    def to_host(self, arr):
        return self.runtime.to_host(arr)

    def upload_into(self, dst, host) -> None:
        """Copy NumPy ``host`` into device array ``dst`` (same size and dtype), in order on
        the current stream, without waiting for the device (a compiled graph's CPU values
        read by its kernels: :mod:`ember.graph.executor`)."""
        self.runtime.upload_into(dst, host)

    def stream_key(self):
        """What identifies the current device and stream (work on one key runs in order)."""
        return self.runtime.stream_key()

    def synchronize(self, stream=None) -> None:
        self.runtime.synchronize(self.current_index)


_fallback_warned: set = set()


def host_fallback(name: str, cpu_kernel):
    """A cuda kernel for op ``name`` that runs its CPU kernel on host copies of the arrays
    (a copy each way; a warning once per op names the cost). Scalars pass through."""
    def kernel(xp, *arrays, **params):
        from .base import _backends
        be = _backends["cuda"]
        if name not in _fallback_warned and not be.is_fake:
            _fallback_warned.add(name)
            import warnings
            warnings.warn(f"{name}: no CUDA kernel yet; it runs on the CPU with a copy of "
                          f"its inputs each way", RuntimeWarning, stacklevel=2)
        host = [be.to_host(a) if isinstance(a, be.xp.ndarray) else a for a in arrays]
        res = cpu_kernel(np, *host, **params)
        if isinstance(res, tuple):
            return tuple(be.asarray(r) for r in res)
        return be.asarray(np.asarray(res))
    kernel.__name__ = f"{name}_host_fallback"
    return kernel


def fake_requested() -> int:
    """Devices the stand-in should offer (``EMBER_FAKE_CUDA``; 0 = off)."""
    v = os.environ.get("EMBER_FAKE_CUDA", "").strip()
    if v in ("", "0"):
        return 0
    try:
        return max(1, int(v))
    except ValueError:
        return 1


def make_backend():
    """The cuda backend this process can have, or ``(None, why)``.

    ``EMBER_FAKE_CUDA=N`` gives the stand-in; else CuPy with at least one GPU.
    """
    n = fake_requested()
    if n:
        strict = os.environ.get("EMBER_FAKE_CUDA_STRICT", "").strip() not in ("", "0")
        return CUDABackend(FakeRuntime(n, strict)), ""
    try:
        import cupy
    except ImportError:
        return None, "CuPy is not installed (pip install 'ember[cuda]')"
    except Exception as e:   # noqa: BLE001 - a broken CUDA install must not break `import ember`
        return None, f"CuPy failed to import ({type(e).__name__}: {e})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy found no CUDA GPU"
    except Exception as e:   # noqa: BLE001 - e.g. no driver: cudaErrorNoDevice
        return None, f"CuPy found no usable CUDA GPU ({type(e).__name__}: {e})"
    return CUDABackend(CuPyRuntime()), ""
