"""CUDA C text to a loaded GPU module, through a disk cache of cubins and PTX.

:func:`image` compiles a source with NVRTC (:mod:`.nvrtc`) once per (source, target,
NVRTC version, options) and keeps the result in the kernel cache folder as
``<key>.cubin`` (machine code for a real GPU, ``sm_90``) or ``<key>.ptx`` (a virtual
architecture, ``compute_90``), with ``<key>.sha256`` (its checksum) and ``<key>.c`` (the
source, for reading): the folder and file checks, atomic writes and eviction of
:mod:`.cache`/:mod:`.cache_fs` apply unchanged. :func:`images` compiles many sources on a
thread pool (NVRTC releases the GIL; a graph's kernels arrive as one source each, see
:mod:`ember.graph.passes.fuse_cuda`), ``$EMBER_NVRTC_THREADS`` threads at most (default:
the CPUs, up to 16).

:func:`load_module` turns a source into a ``cupy.cuda.function.Module``: its cubin for
the GPU's ``sm_XX`` (``cuModuleLoadData``, no JIT), else its PTX (the driver
JIT-compiles it, one thread), else — our NVRTC missing, or the driver
rejecting its output (an NVRTC newer than the driver) — ``cupy.RawModule(code=)``, which
compiles the same text with CuPy's NVRTC and its own cache (``~/.cupy/kernel_cache``).
:func:`load_modules` compiles the cubins of several sources in parallel first.

Tests replace :data:`module_loader` (a function ``(source, name) -> module``) with a fake
whose ``get_function(name)`` returns a Python callable ``fn(grid, block, args,
shared_mem=0)``: launch plans and argument packing are then checked without a GPU.

Example:
    >>> mod = load_module(src, "fused")          # doctest: +SKIP (needs a GPU)
    >>> mod.get_function("ember_fused")((grid,), (256,), args)
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
import time

from ..device import cuda_graph as _graph
from . import cache as _cache
from . import cache_fs as fs
from . import nvrtc as _nvrtc

__all__ = ["arch", "cubin", "image", "images", "load_module", "load_modules", "module_loader",
           "ptx", "sm", "stats"]

#: entries this process compiled, read from disk, found in memory; modules loaded from
#: a cubin / PTX / CuPy's own compile (``fallback``); NVRTC's CPU seconds (all threads).
stats = {"compiled": 0, "loaded": 0, "memo": 0, "cubin_modules": 0, "ptx_modules": 0,
         "fallback": 0, "nvrtc_s": 0.0}
_memo: dict = {}
_stats_lock = threading.Lock()


@functools.lru_cache(maxsize=8)
def arch(index: int = 0) -> str:
    """The NVRTC virtual architecture of GPU ``index`` (``compute_90`` on an H100)."""
    import cupy
    return f"compute_{cupy.cuda.Device(index).compute_capability}"   # NOTE: "90": a str


@functools.lru_cache(maxsize=8)
def sm(index: int = 0) -> str:
    """The real architecture of GPU ``index`` (``sm_90`` on an H100): its cubins' target."""
    return "sm_" + arch(index)[len("compute_"):]


def _key(source: str, target: str, options: tuple, kind: str = "ptx") -> str:
    h = hashlib.sha256(source.encode())
    # NOTE: PTX keys as before (entries written by earlier versions stay valid)
    h.update(f"\0{target}\0{_nvrtc.version()}\0{options}".encode())
    if kind != "ptx":
        h.update(f"\0{kind}".encode())
    return h.hexdigest()[:32]


def _read(fd: int, path: str, key: str, ext: str) -> bytes | None:
    """The entry's bytes if they may be trusted and match their checksum."""
    try:
        data = _cache._read_checked(fd, f"{key}.{ext}", path, touch=True)   # touch: LRU
        want = _cache._read_checked(fd, f"{key}.sha256", path) if data is not None else None
    except OSError:                          # NOTE: UnsafeCacheError too: rebuild
        return None
    if not want or hashlib.sha256(data).hexdigest() != want.decode("ascii", "replace").strip():
        return None
    return data


def _count(**inc) -> None:
    with _stats_lock:
        for k, v in inc.items():
            stats[k] += v


def image(source: str, name: str, target: str = "compute_90", options: tuple = (),
          kind: str = "ptx") -> bytes:
    """The compiled ``source``: from memory, else the disk cache, else NVRTC.

    Args:
        source: CUDA C text (``extern "C"`` kernels).
        name: the program's name (NVRTC's log, error messages).
        target: ``compute_XX`` for ``kind="ptx"``, ``sm_XX`` for ``kind="cubin"``.
        options: extra NVRTC options.
        kind: ``"ptx"`` (text, as bytes) or ``"cubin"`` (machine code).

    Raises:
        NVRTCUnavailable / NVRTCError: see :func:`ember.codegen.nvrtc.compile_ptx`.
    """
    mk = (source, target, options, kind)
    hit = _memo.get(mk)
    if hit is not None:
        _count(memo=1)
        return hit
    key = _key(source, target, options, kind)
    with _cache._lock:
        path, fd = _cache._open_store()
    try:
        data = _read(fd, path, key, kind)
        if data is not None:
            _count(loaded=1)
        else:
            t0 = time.thread_time()         # NOTE: CPU time: a busy machine inflates wall
            if kind == "ptx":
                data = _nvrtc.compile_ptx(source, name, target, options).encode()
            else:
                data = _nvrtc.compile_cubin(source, name, target, options)
            _count(compiled=1, nvrtc_s=time.thread_time() - t0)
            _store(fd, path, key, source, data, kind)
    finally:
        os.close(fd)
    _memo[mk] = data
    return data


def ptx(source: str, name: str, arch_: str = "compute_90", options: tuple = ()) -> str:
    """The PTX of ``source`` (see :func:`image`)."""
    return image(source, name, arch_, options, "ptx").decode()


def cubin(source: str, name: str, sm_: str = "sm_90", options: tuple = ()) -> bytes:
    """The cubin of ``source`` for real GPU ``sm_`` (see :func:`image`)."""
    return image(source, name, sm_, options, "cubin")


#: at most this many compiler threads by default (each NVRTC run holds ~100s of MB).
MAX_THREADS = 16


def threads() -> int:
    """Compiler threads for :func:`images`: ``$EMBER_NVRTC_THREADS``, else the CPUs this
    process may use, at most :data:`MAX_THREADS`.

    NOTE: NVRTC compiles independent programs concurrently; the bindings release the GIL
    in ``nvrtcCompileProgram`` (cuda-bindings since NVIDIA/cuda-python#624, CuPy's always).
    """
    raw = os.environ.get("EMBER_NVRTC_THREADS", "").strip()
    n = int(raw) if raw.isdigit() else min(len(os.sched_getaffinity(0)), MAX_THREADS)
    return max(n, 1)


def images(items, target: str, kind: str = "cubin", options: tuple = (),
           nthreads: int | None = None) -> list:
    """:func:`image` of each ``(source, name)`` of ``items``, in their order; the ones
    neither in memory nor on disk compile concurrently on up to ``nthreads`` threads
    (default :func:`threads`). The first failure raises after every thread finished."""
    items = list(items)
    todo = list({s: (s, n) for s, n in items if (s, target, options, kind) not in _memo}
                .values())
    nthreads = min(nthreads or threads(), len(todo))
    if nthreads > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(nthreads, thread_name_prefix="ember-nvrtc") as ex:
            futs = [ex.submit(image, s, n, target, options, kind) for s, n in todo]
        for f in futs:
            f.result()                          # NOTE: re-raises a thread's error
    return [image(s, n, target, options, kind) for s, n in items]


def _store(fd: int, path: str, key: str, source: str, data: bytes, ext: str) -> None:
    try:
        fs.atomic_write(fd, f"{key}.c", source.encode())
        fs.atomic_write(fd, f"{key}.{ext}", data)
        fs.atomic_write(fd, f"{key}.sha256", (hashlib.sha256(data).hexdigest() + "\n").encode())
    except OSError:                          # NOTE: a full disk costs the cache, not the kernel
        return
    with _cache._lock:
        _cache._note_added(fd, path, key, len(data) + len(source) + 65)


def _cupy_module(source: str, name: str):
    """``source`` loaded on the current GPU: its cubin (from memory, the disk cache or
    NVRTC), else its PTX, else CuPy's own compile."""
    import cupy
    dev = cupy.cuda.Device().id
    for kind, target, tail in (("cubin", sm(dev), b""), ("ptx", arch(dev), b"\0")):
        try:
            data = image(source, name, target, (), kind)
            mod = cupy.cuda.function.Module()
            mod.load(data + tail)
            _count(**{f"{kind}_modules": 1})
            return _Kept(mod)
        except Exception:   # noqa: BLE001 - NVRTC missing, code newer than the driver...
            continue
    # NOTE: CuPy compiles the same text (a kernel bug raises there, with CuPy's log)
    _count(fallback=1)
    opts = ("--std=c++17",) + tuple(f"-I{d}" for d in _nvrtc.include_dirs())
    return _Kept(cupy.RawModule(code=source, options=opts))


class _Kept:
    """A loaded module whose kernels, launched during a CUDA graph capture, keep their
    argument tuples alive with the capture (``ember.device.cuda_graph.keeping``): a graph
    reads those arrays at every replay, so none may go back to a pool (a cached 0-d
    operand evicted, a plan's table replaced) while it lives."""

    __slots__ = ("mod", "_fns")

    def __init__(self, mod):
        self.mod, self._fns = mod, {}

    def get_function(self, name: str):
        f = self._fns.get(name)
        if f is None:
            f = self._fns[name] = _KeptFunction(self.mod.get_function(name), name)
        return f

    def __getattr__(self, name):
        return getattr(self.mod, name)


class _KeptFunction:
    """A kernel of a :class:`_Kept` module; ``name``: its entry point (``bench/cuda_step.py``
    sums each kernel's bytes under it)."""

    __slots__ = ("fn", "name")

    def __init__(self, fn, name: str = ""):
        self.fn, self.name = fn, name

    def __call__(self, grid, block, args, *rest, **kw):
        keep = _graph.keeping()
        if keep is not None:
            keep.append(args)
        return self.fn(grid, block, args, *rest, **kw)

    def __getattr__(self, name):
        return getattr(self.fn, name)


#: ``(source, name) -> module with get_function(name)``; tests swap in a fake.
module_loader = _cupy_module


def load_module(source: str, name: str):
    """The loaded module of ``source`` (see :data:`module_loader`)."""
    return module_loader(source, name)


def load_modules(items) -> list:
    """:func:`load_module` of each ``(source, name)``; with the GPU's own loader, the
    cubins not yet compiled are compiled concurrently first (:func:`images`), then each
    is loaded on this thread (the driver calls need this thread's CUDA context)."""
    items = list(items)
    if module_loader is _cupy_module and len(items) > 1:
        _prefetch(items)
    return [module_loader(s, n) for s, n in items]


def _prefetch(items) -> None:
    try:
        import cupy
        dev = cupy.cuda.Device().id
        images(items, sm(dev), "cubin")
    except Exception:       # noqa: BLE001 - each load below retries and falls back alone
        pass
