"""The on-disk kernel cache: compiled once per (source, compiler, flags, CPU), verified on load.

Entries live in ``$EMBER_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/ember/kernels``, else
``~/.cache/ember/kernels``. An entry is ``<key>.so`` (the shared object), ``<key>.sha256``
(its checksum) and ``<key>.c`` (the source, for reading). Each file is written under a
temporary name and renamed into place, so a reader never sees half an entry. Before
loading, the ``.so`` is checked against its checksum: a truncated or corrupted entry is
rebuilt, never loaded (``dlopen`` of a damaged object can crash the process).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading

from .. import config
from .toolchain import Compiler, compile_shared

_lock = threading.Lock()
#: ``{path: CDLL}`` of objects loaded by this process.
_loaded: dict = {}
#: how many entries this process has compiled (tests read it).
stats = {"compiled": 0, "loaded": 0, "rebuilt": 0}


def cache_dir() -> str:
    """The kernel cache directory (created on first use)."""
    d = os.environ.get("EMBER_KERNEL_CACHE")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                 ".cache")
        d = os.path.join(base, "ember", "kernels")
    os.makedirs(d, exist_ok=True)
    return d


def cache_key(source: str, cc: Compiler) -> str:
    """Hash of the source and everything about the compiler that changes its output."""
    h = hashlib.sha256()
    h.update(source.encode())
    h.update(b"\0")
    h.update(cc.identity.encode())
    return h.hexdigest()[:32]


def _atomic_write(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _verified_bytes(so: str, check: str) -> bytes | None:
    """The ``.so``'s bytes if they match the recorded checksum, else None."""
    try:
        with open(check, encoding="ascii") as f:
            want = f.read().strip()
        with open(so, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data if want and hashlib.sha256(data).hexdigest() == want else None


def _dlopen(data: bytes, d: str) -> ctypes.CDLL:
    """Load verified bytes from a private copy (then unlinked).

    NOTE: a private name per load, because glibc's ``dlopen`` returns an already loaded
    object of the same path, and a mapped cache file that someone overwrites in place
    would take this process down with it.
    """
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".load-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(tmp)
    finally:
        _unlink(tmp)


def _build(source: str, cc: Compiler, so: str, check: str, key: str) -> None:
    d = os.path.dirname(so)
    _atomic_write(os.path.join(d, key + ".c"), source.encode())
    fd, tmp_src = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".c")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(source)
    fd, tmp_so = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".so")
    os.close(fd)
    try:
        compile_shared(cc, tmp_src, tmp_so)
        with open(tmp_so, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        os.replace(tmp_so, so)
        _atomic_write(check, (digest + "\n").encode())
    finally:
        _unlink(tmp_src)
        _unlink(tmp_so)
    stats["compiled"] += 1


def load(source: str, cc: Compiler) -> ctypes.CDLL:
    """The loaded shared object for ``source``: from the cache, else compiled into it."""
    key = cache_key(source, cc)
    d = cache_dir()
    so, check = os.path.join(d, key + ".so"), os.path.join(d, key + ".sha256")
    with _lock:
        lib = _loaded.get(so)
        if lib is not None:
            return lib
        data = _verified_bytes(so, check)
        if data is None:
            if os.path.exists(so):
                stats["rebuilt"] += 1
            if config.DEBUG >= 5:
                print(f"[ember.codegen] compiling {key}:\n{source}")
            _build(source, cc, so, check, key)
            data = _verified_bytes(so, check)
            if data is None:              # NOTE: a concurrent writer replaced it: retry once
                _build(source, cc, so, check, key)
                data = _verified_bytes(so, check)
            if data is None:
                raise OSError(f"codegen: cache entry {so} fails its checksum after a rebuild")
        lib = _dlopen(data, d)
        _loaded[so] = lib
        stats["loaded"] += 1
        return lib


def forget_loaded() -> None:
    """Drop this process's memo of loaded objects, so the next load re-verifies the disk."""
    with _lock:
        _loaded.clear()
