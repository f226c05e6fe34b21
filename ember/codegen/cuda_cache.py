"""CUDA C text to a loaded GPU module, through a disk cache of PTX (like the C kernels').

:func:`ptx` compiles a source with NVRTC (:mod:`.nvrtc`) once per (source, architecture,
NVRTC version, options) and keeps the PTX in the kernel cache folder as ``<key>.ptx`` with
``<key>.sha256`` (its checksum) and ``<key>.c`` (the source, for reading): the folder and
file checks, atomic writes and eviction of :mod:`.cache`/:mod:`.cache_fs` apply unchanged.
:func:`load_module` turns the PTX into a ``cupy.cuda.function.Module`` (``cuModuleLoadData``:
the driver JIT-compiles PTX for the GPU). Where our NVRTC is missing, or the driver
rejects the PTX (an NVRTC newer than the driver), it falls back to ``cupy.RawModule(code=)``,
which compiles the same text with CuPy's NVRTC and its own cache (``~/.cupy/kernel_cache``).

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

from . import cache as _cache
from . import cache_fs as fs
from . import nvrtc as _nvrtc

__all__ = ["arch", "load_module", "module_loader", "ptx", "stats"]

#: how many PTX entries this process compiled, read from disk, found in memory.
stats = {"compiled": 0, "loaded": 0, "memo": 0}
_memo: dict = {}


@functools.lru_cache(maxsize=8)
def arch(index: int = 0) -> str:
    """The NVRTC virtual architecture of GPU ``index`` (``compute_90`` on an H100)."""
    import cupy
    return f"compute_{cupy.cuda.Device(index).compute_capability}"   # NOTE: "90": a str


def _key(source: str, arch_: str, options: tuple) -> str:
    h = hashlib.sha256(source.encode())
    h.update(f"\0{arch_}\0{_nvrtc.version()}\0{options}".encode())
    return h.hexdigest()[:32]


def _read(fd: int, path: str, key: str) -> bytes | None:
    """The entry's PTX bytes if they may be trusted and match their checksum."""
    try:
        data = _cache._read_checked(fd, f"{key}.ptx", path, touch=True)   # touch: LRU order
        want = _cache._read_checked(fd, f"{key}.sha256", path) if data is not None else None
    except OSError:                          # NOTE: UnsafeCacheError too: rebuild
        return None
    if not want or hashlib.sha256(data).hexdigest() != want.decode("ascii", "replace").strip():
        return None
    return data


def ptx(source: str, name: str, arch_: str = "compute_90", options: tuple = ()) -> str:
    """The PTX of ``source``: from memory, else the disk cache, else compiled by NVRTC.

    Args:
        source: CUDA C text (``extern "C"`` kernels).
        name: the program's name (NVRTC's log, error messages).
        arch_: the virtual architecture (:func:`arch` of the GPU in use).
        options: extra NVRTC options.

    Raises:
        NVRTCUnavailable / NVRTCError: see :func:`ember.codegen.nvrtc.compile_ptx`.
    """
    mk = (source, arch_, options)
    hit = _memo.get(mk)
    if hit is not None:
        stats["memo"] += 1
        return hit
    key = _key(source, arch_, options)
    with _cache._lock:
        path, fd = _cache._open_store()
    try:
        data = _read(fd, path, key)
        if data is not None:
            stats["loaded"] += 1
            text = data.decode()
        else:
            text = _nvrtc.compile_ptx(source, name, arch_, options)
            stats["compiled"] += 1
            _store(fd, path, key, source, text.encode())
    finally:
        os.close(fd)
    _memo[mk] = text
    return text


def _store(fd: int, path: str, key: str, source: str, data: bytes) -> None:
    try:
        fs.atomic_write(fd, f"{key}.c", source.encode())
        fs.atomic_write(fd, f"{key}.ptx", data)
        fs.atomic_write(fd, f"{key}.sha256", (hashlib.sha256(data).hexdigest() + "\n").encode())
    except OSError:                          # NOTE: a full disk costs the cache, not the kernel
        return
    with _cache._lock:
        _cache._note_added(fd, path, key, len(data) + len(source) + 65)


def _cupy_module(source: str, name: str):
    """``source`` loaded on the current GPU: our cached PTX, else CuPy's own compile."""
    import cupy
    try:
        text = ptx(source, name, arch(cupy.cuda.Device().id))
        mod = cupy.cuda.function.Module()
        mod.load(text.encode() + b"\0")
        return mod
    except Exception:   # noqa: BLE001 - NVRTC missing, PTX newer than the driver...
        # NOTE: CuPy compiles the same text (a kernel bug raises there, with CuPy's log)
        opts = ("--std=c++17",) + tuple(f"-I{d}" for d in _nvrtc.include_dirs())
        return cupy.RawModule(code=source, options=opts)


#: ``(source, name) -> module with get_function(name)``; tests swap in a fake.
module_loader = _cupy_module


def load_module(source: str, name: str):
    """The loaded module of ``source`` (see :data:`module_loader`)."""
    return module_loader(source, name)
