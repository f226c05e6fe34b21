"""The on-disk kernel cache: compiled once per (source, compiler, flags, CPU), verified on load.

Entries live in ``$EMBER_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/ember/kernels``, else
``~/.cache/ember/kernels``. An entry is ``<key>.so`` (the shared object), ``<key>.sha256``
(its checksum) and ``<key>.c`` (the source, for reading), each mode 0600, written under a
temporary name and renamed into place, so a reader never sees half an entry. A truncated or
corrupted entry fails its checksum and is rebuilt, never loaded (``dlopen`` of a damaged
object can crash the process).

Threat model. Loading a cached ``.so`` runs its code (constructors first) inside Ember,
eager mode included, and the checksum lives in the same folder: it catches corruption, not
tampering. So the cache is trusted only as far as nobody but the current user (and root)
could have written it. :mod:`.cache_fs` checks, on the opened descriptors, every level of
the cache's path (symlinks included: ancestors owned by the user or root, writable by
others only when sticky; the cache folder and the ``ember`` level above the default one
owned by the user, not group/other-writable) and every file before it is read (owned by
the user, not group/other-writable, no symlink). A folder that fails is not used: Ember
warns once, naming it and why, and caches in a private per-process folder instead
(removed at exit); a file that fails is ignored (warned) and rebuilt. Loading has no
check-then-load race: the checked file's bytes are hashed, then copied into a new file
Ember creates (``O_EXCL``) in the checked folder and loaded through
``/proc/self/fd/<folder fd>/<name>``, a path no rename can redirect. Not covered: root,
or the user's own account, writing the cache (they could change Ember itself).

Size. The cache holds at most ``EMBER_KERNEL_CACHE_MAX_BYTES`` (default 512 MiB; K/M/G
suffixes allowed): past it, the entries used least recently (each load touches the
``.so``'s access time) are removed down to 90 % of the bound. Temporary files of builds
that were killed (``.tmp-<pid>-*``, ``.build-<pid>-*``, ``.load-<pid>-*``) are removed at
the first build in a process (or ``cache_dir()``; a process that only loads never walks the
folder) and at each eviction, once their process is gone (or after ten minutes).
``ember cache info`` and ``ember cache clear`` report and empty it (and the graph cache).

Concurrency: one lock per entry (key), so independent kernels (a graph's fused kernels, the
hand-written attention and convolution libraries) compile at the same time on different
threads, while a second thread asking for an entry being built waits for it and loads the
same object. Across processes nothing is locked: two builders of one entry each compile in
a private folder and rename into place; the last rename wins with identical bytes.

Hot path: a library this process has loaded is found by one dict lookup on the source
string, with no hashing of the source and no file-system call.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import itertools
import os
import shutil
import tempfile
import threading
import warnings

from .. import config
from . import cache_fs as fs
from .cache_fs import UnsafeCacheError
from .toolchain import Compiler, compile_shared

__all__ = ["UnsafeCacheError", "KernelCacheWarning", "cache_dir", "configured_dir",
           "cache_key", "load", "forget_loaded", "max_bytes", "stats"]

DEFAULT_MAX_BYTES = 512 << 20
#: guards this module's shared state (folders, usage, the loaded objects, eviction); held
#: briefly, never across a compiler run.
_lock = threading.RLock()
#: ``{key: Lock}``: one build or load of an entry at a time; other entries compile
#: concurrently (each build runs in its own folder and lands by an atomic rename).
_key_locks: dict = {}
#: ``{(folder, key): CDLL}`` of objects loaded by this process.
_loaded: dict = {}
#: ``{(source, environment): (compiler, CDLL)}``: the hot path (no hashing, no stat).
_memo: dict = {}
#: how many entries this process has compiled, loaded, rebuilt, evicted, refused (tests).
stats = {"compiled": 0, "loaded": 0, "rebuilt": 0, "evicted": 0, "refused": 0}
_usage: dict = {}        # folder -> bytes this process believes it holds (None: scan again)
_warned: set = set()
_private: dict = {}      # {"path": per-process fallback folder, "pid": its creator}


class KernelCacheWarning(UserWarning):
    """The kernel cache (or one of its files) was not trusted and was not used."""


def _env() -> tuple:
    return (os.environ.get("EMBER_KERNEL_CACHE"), os.environ.get("XDG_CACHE_HOME"),
            os.environ.get("HOME"))


def configured_dir() -> tuple:
    """``(folder, levels Ember owns)`` the environment asks for (nothing is created)."""
    d = os.environ.get("EMBER_KERNEL_CACHE")
    if d:
        return os.path.abspath(d), 1
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.path.join(base, "ember", "kernels")), 2


def max_bytes() -> int:
    """The cache's size bound: ``$EMBER_KERNEL_CACHE_MAX_BYTES`` or 512 MiB.

    Raises:
        ValueError: the variable is not a positive byte count (``123``, ``64M``, ``2G``).
    """
    raw = os.environ.get("EMBER_KERNEL_CACHE_MAX_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1].upper(), 1)
    digits = raw[:-1] if scale > 1 else raw
    if not digits.isdigit() or int(digits) <= 0:
        raise ValueError(f"EMBER_KERNEL_CACHE_MAX_BYTES={raw!r}: expected a positive number "
                         f"of bytes, optionally with a K, M or G suffix (e.g. 536870912, 512M)")
    return int(digits) * scale


def _warn(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, KernelCacheWarning, stacklevel=2)


def _private_dir() -> str:
    """This process's fallback cache folder (0700, in the temp folder, removed at exit)."""
    if _private.get("pid") != os.getpid():
        fs.remove_stale_private(tempfile.gettempdir(), "ember-kernels-")
        _private["path"] = tempfile.mkdtemp(prefix=f"ember-kernels-{os.getpid()}-")
        _private["pid"] = os.getpid()
    return _private["path"]


@atexit.register
def _remove_private() -> None:
    if _private.get("pid") == os.getpid():
        shutil.rmtree(_private["path"], ignore_errors=True)


def _open_store(scan: bool = True) -> tuple:
    """``(folder, fd)`` of the cache to use: the configured one if it passes every check,
    else (after one warning naming it) this process's private folder. ``scan``: count the
    folder's bytes and remove stale temporaries now if this process has not yet (loads
    skip it: a process that only loads never walks a large cache; its first build does)."""
    path, own = configured_dir()
    try:
        fd = fs.open_dir(path, create=True, own_levels=own)
    except OSError as e:                       # NOTE: UnsafeCacheError is one
        stats["refused"] += isinstance(e, UnsafeCacheError)
        why = e if isinstance(e, UnsafeCacheError) else f"kernel cache: {path}: {e}"
        path = _private_dir()
        _warn(f"{why}; not using it: kernels are cached in {path} for this process only")
        fd = fs.open_dir(path, create=True)
    if scan and _usage.get(path) is None:     # NOTE: once per folder and process
        _usage[path] = _scan_and_clean(fd)
    return path, fd


def cache_dir() -> str:
    """The kernel cache folder this process uses (created 0700 on first use).

    The configured folder (see the module doc), or this process's private fallback when
    the configured one fails the ownership/mode checks.
    """
    with _lock:
        path, fd = _open_store()
        os.close(fd)
        return path


def cache_key(source: str, cc: Compiler) -> str:
    """Hash of the source and everything about the compiler that changes its output."""
    h = hashlib.sha256()
    h.update(source.encode())
    h.update(b"\0")
    h.update(cc.identity.encode())
    return h.hexdigest()[:32]


def _read_checked(fd: int, name: str, path: str, touch: bool = False) -> bytes | None:
    f = fs.open_file(fd, name, os.path.join(path, name))
    if f is None:
        return None
    if touch:
        try:
            os.utime(f)                  # NOTE: the LRU order is the .so's access time
        except OSError:
            pass
    return fs.read_all(f)


def _read_entry(fd: int, path: str, key: str) -> bytes | None:
    """The entry's ``.so`` bytes if it exists, may be trusted and matches its checksum."""
    try:
        data = _read_checked(fd, f"{key}.so", path, touch=True)
        want = _read_checked(fd, f"{key}.sha256", path) if data is not None else None
    except UnsafeCacheError as e:
        stats["refused"] += 1
        _warn(f"{e}; ignoring it (rebuilding the kernel)")
        return None
    except OSError:
        return None
    if not want or hashlib.sha256(data).hexdigest() != want.decode("ascii", "replace").strip():
        return None
    return data


def _verified_bytes(so: str, check: str) -> bytes | None:
    """The bytes of the cache file ``so`` if they may be trusted and match ``check``."""
    assert os.path.dirname(so) == os.path.dirname(check)
    d = os.path.dirname(so)
    fd = fs.open_dir(d, create=False)
    try:
        return _read_entry(fd, d, os.path.basename(so)[:-3])
    finally:
        os.close(fd)


def _build(source: str, cc: Compiler, fd: int, path: str, key: str) -> bytes:
    """Compile ``source`` in a private build folder; store the entry; return the ``.so``."""
    work = fs.temp_name("build")
    os.mkdir(work, 0o700, dir_fd=fd)
    try:
        wfd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | fs._NOFOLLOW, dir_fd=fd)
        try:
            fs.create_file(wfd, "k.c", source.encode())
            compile_shared(cc, os.path.join(path, work, "k.c"), os.path.join(path, work, "k.so"))
            data = fs.read_all(os.open("k.so", os.O_RDONLY | fs._NOFOLLOW, dir_fd=wfd))
        finally:
            os.close(wfd)
    finally:
        fs.remove_tree(fd, work)
    with _lock:
        stats["compiled"] += 1
    try:
        fs.atomic_write(fd, f"{key}.c", source.encode())
        fs.atomic_write(fd, f"{key}.so", data)
        fs.atomic_write(fd, f"{key}.sha256", (hashlib.sha256(data).hexdigest() + "\n").encode())
    except OSError as e:                    # NOTE: a full disk costs the cache, not the kernel
        if config.DEBUG >= 1:
            print(f"[ember.codegen] could not store kernel {key} in {path}: {e}")
        return data
    with _lock:
        _note_added(fd, path, key, len(data) + len(source.encode()) + 65)
    return data


_seq = itertools.count(1)


def _dlopen(data: bytes, fd: int, path: str) -> ctypes.CDLL:
    """Load verified bytes from a private copy in the checked folder (then unlinked).

    NOTE: a new name per load, because glibc's ``dlopen`` returns an already loaded
    object of the same path; loaded through the folder's descriptor, so no rename of the
    folder between the check and ``dlopen`` can hand it another file.
    """
    name = fs.temp_name("load", f"-{next(_seq)}.so")
    fs.create_file(fd, name, data, 0o700)
    try:
        proc = f"/proc/self/fd/{fd}"
        return ctypes.CDLL(os.path.join(proc if os.path.isdir(proc) else path, name))
    finally:
        fs.unlink(fd, name)


def load(source: str, cc: Compiler) -> ctypes.CDLL:
    """The loaded shared object for ``source``: from the cache, else compiled into it.

    Example:
        >>> lib = load("int ember_one(void) { return 1; }", find_compiler())
        >>> lib.ember_one()
        1
    """
    memo = (source, _env())
    hit = _memo.get(memo)
    if hit is not None and (hit[0] is cc or hit[0] == cc):
        return hit[1]
    key = cache_key(source, cc)
    with _lock:
        klock = _key_locks.setdefault(key, threading.Lock())
    with klock:
        hit = _memo.get(memo)                  # built by the thread we waited for
        if hit is not None and (hit[0] is cc or hit[0] == cc):
            return hit[1]
        lib = _load_locked(source, cc, key)
        _memo[memo] = (cc, lib)
        return lib


def _load_locked(source: str, cc: Compiler, key: str) -> ctypes.CDLL:
    """Load entry ``key`` (building it if need be); the caller holds the entry's lock."""
    with _lock:
        path, fd = _open_store(scan=False)
    try:
        lib = _loaded.get((path, key))
        if lib is not None:
            return lib
        data = _read_entry(fd, path, key)
        if data is None:
            if fs.exists(fd, f"{key}.so"):
                stats["rebuilt"] += 1
            if config.DEBUG >= 5:
                print(f"[ember.codegen] compiling {key}:\n{source}")
            data = _build(source, cc, fd, path, key)
        lib = _dlopen(data, fd, path)
        with _lock:
            _loaded[(path, key)] = lib
            stats["loaded"] += 1
        return lib
    finally:
        os.close(fd)


#: what a compiler-probe record (``<key>.c``, see ``toolchain._works_cached``) holds
PROBE_MARK = b"/* ember: this compiler built the probe with these flags */\n"


def probe_known(key: str) -> bool:
    """Whether the cache records that compiler probe ``key`` succeeded."""
    try:
        with _lock:
            path, fd = _open_store(scan=False)
        try:
            f = fs.open_file(fd, f"{key}.c", os.path.join(path, f"{key}.c"))
            return f is not None and fs.read_all(f) == PROBE_MARK
        finally:
            os.close(fd)
    except OSError:                 # NOTE: UnsafeCacheError is one: probe again
        return False


def probe_record(key: str) -> None:
    """Record that compiler probe ``key`` succeeded (best effort)."""
    try:
        with _lock:
            path, fd = _open_store(scan=False)
        try:
            fs.atomic_write(fd, f"{key}.c", PROBE_MARK)
        finally:
            os.close(fd)
    except OSError:
        pass


def prefetch(sources, name: str = "compile") -> None:
    """Build or load ``sources`` (strings, or functions of the compiler returning one), in
    order, into the cache and this process's memo on a background thread, once per process
    and ``name`` (each name its own thread: two batches compile concurrently): a later
    :func:`load` of one of them waits for that build (its entry's lock) or finds it done.
    Only the cache is warmed; no module state is touched. Best effort: failures are left
    for the real load to report."""
    if _prefetched.get(name) == os.getpid():
        return
    _prefetched[name] = os.getpid()

    def work():
        from .toolchain import find_compiler
        cc = find_compiler()
        for src in sources if cc is not None else ():
            try:
                load(src if isinstance(src, str) else src(cc), cc)
            except Exception:  # noqa: BLE001 - the real load reports it
                pass
    threading.Thread(target=work, name=f"ember-kernel-prefetch-{name}", daemon=True).start()


_prefetched: dict = {}


def _after_fork_in_child() -> None:
    """A forked child starts with fresh locks (a parent's thread may have held one)."""
    global _lock
    _lock = threading.RLock()
    _key_locks.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def forget_loaded() -> None:
    """Drop this process's memo of loaded objects, so the next load re-verifies the disk."""
    with _lock:
        _loaded.clear()
        _memo.clear()
        _usage.clear()


# ------------------------------------------------------------------ size bound, cleanup
def _scan_and_clean(fd: int) -> int:
    """Remove stale temporaries; the bytes the folder's entries hold."""
    entries, temps = fs.scan(fd)
    fs.remove_stale(fd, temps)
    return sum(size for size, _ in entries.values())


def _note_added(fd: int, path: str, key: str, nbytes: int) -> None:
    used = _usage.get(path)
    # NOTE: the first build of this process counts the folder (the new entry included)
    used = _scan_and_clean(fd) if used is None else used + nbytes
    _usage[path] = used
    if used > max_bytes():
        _usage[path] = evict(fd, keep=key)


def evict(fd: int, keep: str | None = None, bound: int | None = None) -> int:
    """Remove least recently used entries until the folder holds <= 90 % of ``bound``.

    Args:
        fd: the cache folder's descriptor (from :func:`cache_fs.open_dir`).
        keep: an entry never removed (the one just built).
        bound: bytes (default :func:`max_bytes`).

    Returns:
        The bytes the remaining entries hold.
    """
    bound = max_bytes() if bound is None else bound
    entries, temps = fs.scan(fd)
    fs.remove_stale(fd, temps)
    total = sum(size for size, _ in entries.values())
    if total <= bound:
        return total
    for key, (size, _) in sorted(entries.items(), key=lambda kv: kv[1][1]):
        if total <= bound * 0.9:
            break
        if key != keep:
            fs.remove_entry(fd, key)
            stats["evicted"] += 1
            total -= size
    return total
