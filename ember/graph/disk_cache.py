"""The persistent graph cache: optimised graphs on disk, so a new process skips the passes.

``ember.compile`` traces a signature's first call as always, then looks the *traced* graph
up here before running the pass pipeline: a hit is the optimised graph an earlier process
made from the same traced graph, its fused kernels loaded from the kernel cache (no
rendering, no compiler run); a miss runs the passes and stores the result.

**The key and why it is sound.** An entry is keyed by the SHA-256 of

* the traced graph's exact bytes (:func:`~.graph_pickle.graph_bytes`): every node's op
  (registry name), inputs, params, compute dtype and source line, every value's shape,
  dtype and device, the constants' contents, the inputs' names and the outputs;
* what the passes read besides the graph: the pipeline (pass names; a pipeline with a
  callable that is not a registered Ember pass is never cached), ``parallel``, the C
  compiler's identity (command, version, flags, target CPU), Python's, NumPy's and
  ml_dtypes' versions, which SciPy is installed, Ember's version and a fingerprint of
  Ember's own source files (path, size and modification time of every ``.py`` file of the
  package -- the rule CPython uses for its ``.pyc`` files -- so an edited pass is a
  miss), and every
  ``EMBER_*`` environment variable except the cache folders'.

The passes are deterministic functions of those, so equal keys give equal optimised
graphs, which the executor then plans and runs exactly as a fresh compile would: results
are bitwise those of a fresh compile. Where they come from at run time (parameters,
gradients, optimizer state), what is written back and the guards are the fresh trace's, as
without the cache. Graphs holding something with no portable name (a random draw's
generator, control flow, a callable param) are not stored (:class:`~.graph_pickle.
NotPortable`); nor are graphs compiled with a ``memory_budget``.

**Skipping the trace too** is :mod:`ember.graph.warm_start`'s job: beside the graph it
writes a record keyed by what the trace was a function of (the code, the signature, the
guards' portable description of the reachable state), so a new process can bind and run
the program without tracing. ``EMBER_GRAPH_CACHE=trace`` keeps this cache but not warm
starts: every signature's first call is its traced eager run, bitwise a fresh compile.

**What it does not see.** Monkeypatching Ember's functions at run time (the fingerprint is
of the files) -- tests do it, so the test suite runs with the cache off.

**Integrity.** The folder is ``$EMBER_GRAPH_CACHE_DIR``, else ``graphs`` inside
``$EMBER_KERNEL_CACHE`` when that is set, else ``graphs`` beside the default kernel folder
(``~/.cache/ember/graphs``); ``EMBER_GRAPH_CACHE=0`` turns the cache off. It is opened and
checked like the kernel cache (:mod:`ember.codegen.cache_fs`: every level of the path,
owner and mode; a folder that fails is not used, with one warning); an entry
(``<key>.graph``: format, SHA-256 of the payload, payload) is read through a checked,
``O_NOFOLLOW`` descriptor, written under a temporary name and renamed into place (mode
0600), and one that fails its checksum or does not load is rebuilt and rewritten, never
trusted. The payload is unpickled with an allow-list of the names it may hold (Ember's
graph and kernel IR classes, NumPy arrays); its fused kernels are loaded from the kernel
cache, which verifies each shared object again. At most ``EMBER_GRAPH_CACHE_MAX_BYTES``
(default 256 MiB) is kept: past it the least recently loaded entries go. ``ember cache
info`` and ``ember cache clear`` include it.
"""
from __future__ import annotations

import hashlib
import os
import sys
import warnings

from ..codegen import cache_fs as fs
from ..codegen.cache import KernelCacheWarning
from . import graph_pickle as gp

__all__ = ["enabled", "configured_dir", "lookup", "store", "lookup_bytes", "store_bytes",
           "key_for", "stats", "max_bytes", "info", "clear"]

MAGIC = b"ember-graph\n"
DEFAULT_MAX_BYTES = 256 << 20
#: hits, misses, stores, entries rebuilt (corrupt), graphs not portable, evictions (tests)
stats = {"hits": 0, "misses": 0, "stored": 0, "rebuilt": 0, "not_portable": 0, "evicted": 0}
_env_memo: dict = {}
_warned: set = set()


def enabled() -> bool:
    """Whether the graph cache is on (``EMBER_GRAPH_CACHE=0`` turns it off)."""
    return os.environ.get("EMBER_GRAPH_CACHE", "1").strip().lower() not in (
        "0", "false", "no", "off")


def configured_dir() -> tuple:
    """``(folder, levels Ember owns)`` of the graph cache (nothing is created)."""
    d = os.environ.get("EMBER_GRAPH_CACHE_DIR")
    if d:
        return os.path.abspath(d), 1
    k = os.environ.get("EMBER_KERNEL_CACHE")
    if k:
        return os.path.join(os.path.abspath(k), "graphs"), 1
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.path.join(base, "ember", "graphs")), 2


def max_bytes() -> int:
    """The bound: ``$EMBER_GRAPH_CACHE_MAX_BYTES`` (K/M/G suffixes) or 256 MiB.

    Raises:
        ValueError: the variable is not a positive byte count.
    """
    raw = os.environ.get("EMBER_GRAPH_CACHE_MAX_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1].upper(), 1)
    digits = raw[:-1] if scale > 1 else raw
    if not digits.isdigit() or int(digits) <= 0:
        raise ValueError(f"EMBER_GRAPH_CACHE_MAX_BYTES={raw!r}: expected a positive number "
                         f"of bytes, optionally with a K, M or G suffix (e.g. 268435456, 256M)")
    return int(digits) * scale


# ------------------------------------------------------------------ the key
def _ember_fingerprint() -> str:
    """Path, size and mtime of every ``.py`` file of the Ember package, hashed (once)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = dirpath[len(root) + 1:]       # NOTE: os.path.relpath per file cost ~10 ms
        for f in sorted(files):
            if f.endswith(".py"):
                st = os.stat(os.path.join(dirpath, f))
                h.update(f"{os.path.join(rel, f)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def environment() -> str:
    """Everything besides the graph that the passes' output depends on (see the doc)."""
    from .. import __version__
    from ..codegen.toolchain import find_compiler
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("EMBER_") and
                       not k.startswith(("EMBER_KERNEL_CACHE", "EMBER_GRAPH_CACHE"))))
    memo = _env_memo.get(env)
    if memo is None:
        import ml_dtypes
        import numpy as np
        cc = find_compiler()
        memo = "\0".join([f"format {gp.FORMAT}", __version__, _ember_fingerprint(),
                          sys.version, np.__version__, ml_dtypes.__version__, _scipy(),
                          cc.identity if cc is not None else "no compiler", repr(env)])
        _env_memo[env] = memo
    return memo


def _scipy() -> str:
    """Which SciPy is installed (constant folding may run its special functions), without
    importing it: its ``version.py``'s path, size and mtime (rewritten by an upgrade)."""
    import importlib.util
    spec = importlib.util.find_spec("scipy")
    if spec is None or not spec.submodule_search_locations:
        return "no scipy"
    f = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        st = os.stat(f)
    except OSError:
        return "scipy without version.py"
    return f"{f}\0{st.st_size}\0{st.st_mtime_ns}"


def key_for(raw_graph, passes, parallel: bool) -> str | None:
    """The cache key of ``raw_graph`` under pipeline ``passes``; None if not cacheable."""
    from .passes import PASSES
    names = []
    for p in passes:
        if isinstance(p, str) and p in PASSES and \
                getattr(PASSES[p], "__module__", "").startswith("ember."):
            names.append(p)
        else:
            return None                       # a user's pass: its code is not in the key
    try:
        data = gp.graph_bytes(raw_graph)
    except gp.NotPortable:
        stats["not_portable"] += 1
        return None
    h = hashlib.sha256(environment().encode())
    h.update(f"\0{names!r}\0{bool(parallel)}\0".encode())
    h.update(data)
    return h.hexdigest()[:32]


# ------------------------------------------------------------------ the folder
def _warn(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, KernelCacheWarning, stacklevel=3)


def _open(create: bool) -> int | None:
    """The checked folder's descriptor, or None (missing, or refused: warned once)."""
    path, own = configured_dir()
    try:
        return fs.open_dir(path, create=create, own_levels=own)
    except FileNotFoundError:
        return None
    except OSError as e:
        why = e if isinstance(e, fs.UnsafeCacheError) else f"graph cache: {path}: {e}"
        _warn(f"{why}; not using the graph cache")
        return None


def _name(key: str) -> str:
    return f"{key}.graph"


def lookup(key: str) -> dict | None:
    """The payload stored under ``key`` if present, trusted, intact and loadable."""
    data = lookup_bytes(key)
    if data is None:
        stats["misses"] += 1
        return None
    try:
        payload = gp.loads(data)
    except Exception:  # noqa: BLE001 - any failure to load is a miss (rebuilt, rewritten)
        stats["rebuilt"] += 1
        stats["misses"] += 1
        return None
    stats["hits"] += 1
    return payload


def lookup_bytes(key: str) -> bytes | None:
    """The verified payload bytes stored under ``key`` (None: missing, untrusted or corrupt:
    see :func:`_read`); of :data:`stats`, only a corrupt entry is counted (``rebuilt``)."""
    fd = _open(create=False)
    if fd is None:
        return None
    try:
        return _read(fd, key)
    finally:
        os.close(fd)


def _read(fd: int, key: str) -> bytes | None:
    """The verified payload bytes of entry ``key`` (None: missing, untrusted or corrupt)."""
    path = configured_dir()[0]
    try:
        f = fs.open_file(fd, _name(key), os.path.join(path, _name(key)))
        if f is None:
            return None
        try:
            os.utime(f)                 # NOTE: the LRU order is the entry's access time
        except OSError:
            pass
        data = fs.read_all(f)
    except fs.UnsafeCacheError as e:
        _warn(f"{e}; ignoring it (the graph is optimised again)")
        return None
    except OSError:
        return None
    head = len(MAGIC) + 65
    if len(data) < head or not data.startswith(MAGIC) or \
            hashlib.sha256(data[head:]).hexdigest().encode() != data[len(MAGIC):head - 1]:
        stats["rebuilt"] += 1
        return None
    return data[head:]


def store(key: str, payload: dict) -> bool:
    """Write ``payload`` under ``key`` (atomically, mode 0600); whether it was stored."""
    try:
        data = gp.dumps(payload)
    except gp.NotPortable:
        stats["not_portable"] += 1
        return False
    if not store_bytes(key, data):
        return False
    stats["stored"] += 1
    return True


def store_bytes(key: str, data: bytes) -> bool:
    """Write ``data`` under ``key``: checksummed, atomically, mode 0600 (evicting past the
    bound); whether it was written (not counted in :data:`stats`)."""
    fd = _open(create=True)
    if fd is None:
        return False
    try:
        fs.atomic_write(fd, _name(key), MAGIC + hashlib.sha256(data).hexdigest().encode() +
                        b"\n" + data)
        _evict(fd, keep=_name(key))
    except OSError:
        return False                 # NOTE: a full disk costs the cache, not the compile
    finally:
        os.close(fd)
    return True


def _entries(fd: int) -> dict:
    """``{name: (bytes, last access)}`` of the folder's entries."""
    out = {}
    with os.scandir(fd) as it:
        for e in it:
            if e.name.endswith(".graph") and not e.name.startswith("."):
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                out[e.name] = (st.st_size, st.st_atime)
    return out


def _evict(fd: int, keep: str | None = None, bound: int | None = None) -> int:
    """Remove least recently used entries past the bound (down to 90 %); bytes kept."""
    bound = max_bytes() if bound is None else bound
    entries = _entries(fd)
    total = sum(s for s, _ in entries.values())
    if total > bound:
        for name, (size, _) in sorted(entries.items(), key=lambda kv: kv[1][1]):
            if total <= bound * 0.9:
                break
            if name != keep:
                fs.unlink(fd, name)
                stats["evicted"] += 1
                total -= size
    _, temps = fs.scan(fd)
    fs.remove_stale(fd, temps)
    return total


def info() -> dict:
    """``{"path", "check", "entries", "bytes", "bound"}`` of the graph cache (like
    :func:`ember.codegen.cache_cli.info`)."""
    path, own = configured_dir()
    out = {"path": path, "check": "ok", "entries": 0, "bytes": 0, "bound": max_bytes(),
           "enabled": enabled()}
    try:
        fd = fs.open_dir(path, create=False, own_levels=own)
    except FileNotFoundError:
        out["check"] = "missing"
        return out
    except fs.UnsafeCacheError as e:
        out["check"] = f"refused: {e}"
        return out
    try:
        entries = _entries(fd)
    finally:
        os.close(fd)
    out["entries"] = len(entries)
    out["bytes"] = sum(s for s, _ in entries.values())
    return out


def clear() -> tuple:
    """Remove every entry; ``(entries removed, bytes freed)``.

    Raises:
        UnsafeCacheError: the folder fails the ownership/mode checks.
    """
    path, own = configured_dir()
    try:
        fd = fs.open_dir(path, create=False, own_levels=own)
    except FileNotFoundError:
        return 0, 0
    try:
        entries = _entries(fd)
        for name in entries:
            fs.unlink(fd, name)
        _, temps = fs.scan(fd)
        fs.remove_stale(fd, temps)
    finally:
        os.close(fd)
    return len(entries), sum(s for s, _ in entries.values())
