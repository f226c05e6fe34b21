"""``ember cache info`` and ``ember cache clear``: look at or empty the kernel cache and
the graph cache beside it (:mod:`ember.graph.disk_cache`).

Both act on the configured folder (``$EMBER_KERNEL_CACHE``, else
``$XDG_CACHE_HOME/ember/kernels``, else ``~/.cache/ember/kernels``), never create it, and
run the same ownership/mode checks as loading does (:mod:`.cache_fs`): ``clear`` refuses a
folder that fails them, since its files are not Ember's to delete.
"""
from __future__ import annotations

import os

from . import cache
from . import cache_fs as fs


def info() -> dict:
    """What is in the kernel cache.

    Returns:
        ``{"path", "check", "entries", "bytes", "bound", "stale"}``: ``check`` is ``"ok"``,
        ``"missing"`` (not created yet) or why the folder is refused; ``stale`` counts
        temporary files of killed builds.

    Example:
        >>> info()["check"]
        'ok'
    """
    path, own = cache.configured_dir()
    out = {"path": path, "check": "ok", "entries": 0, "bytes": 0, "bound": cache.max_bytes(),
           "stale": 0}
    try:
        fd = fs.open_dir(path, create=False, own_levels=own)
    except FileNotFoundError:
        out["check"] = "missing"
        return out
    except fs.UnsafeCacheError as e:
        out["check"] = f"refused: {e}"
        return out
    try:
        entries, temps = fs.scan(fd)
    finally:
        os.close(fd)
    out["entries"] = len(entries)
    out["bytes"] = sum(size for size, _ in entries.values())
    out["stale"] = sum(fs.is_stale(name, age) for name, age, _ in temps)
    return out


def clear() -> tuple:
    """Remove every entry and stale temporary file; ``(entries removed, bytes freed)``.

    Temporary files of builds still running (their process alive) are left alone.

    Raises:
        UnsafeCacheError: the folder fails the ownership/mode checks.
    """
    path, own = cache.configured_dir()
    try:
        fd = fs.open_dir(path, create=False, own_levels=own)
    except FileNotFoundError:
        return 0, 0
    try:
        entries, temps = fs.scan(fd)
        for key in entries:
            fs.remove_entry(fd, key)
        fs.remove_stale(fd, temps)
    finally:
        os.close(fd)
    cache.forget_loaded()
    return len(entries), sum(size for size, _ in entries.values())


def _mib(n: int) -> str:
    return f"{n} bytes ({n / (1 << 20):.1f} MiB)"


def add_parser(sub) -> None:
    """Add ``cache {info,clear}`` to the ``ember`` command's subparsers."""
    p = sub.add_parser("cache", help="show or empty the compiled-kernel cache")
    p.add_argument("action", choices=["info", "clear"])


def main(args) -> int:
    """Run ``ember cache <action>`` (the kernel cache, then the graph cache); the exit
    status."""
    from ..graph import disk_cache
    if args.action == "clear":
        status = 0
        for what, clear_fn, where in (("kernel", clear, cache.configured_dir),
                                      ("graph", disk_cache.clear, disk_cache.configured_dir)):
            try:
                n, nbytes = clear_fn()
            except fs.UnsafeCacheError as e:
                print(f"ember cache clear: {e}; refusing to delete files there")
                status = 1
                continue
            print(f"removed {n} {what} entries, {_mib(nbytes)}, from {where()[0]}")
        return status
    r = info()
    print(f"path:       {r['path']}")
    print(f"check:      {r['check']}")
    print(f"entries:    {r['entries']}")
    print(f"bytes:      {_mib(r['bytes'])}")
    print(f"bound:      {_mib(r['bound'])} (EMBER_KERNEL_CACHE_MAX_BYTES)")
    print(f"stale tmp:  {r['stale']}")
    g = disk_cache.info()
    print(f"graphs:     {g['path']} ({'on' if g['enabled'] else 'off: EMBER_GRAPH_CACHE=0'})")
    print(f"  check:    {g['check']}")
    print(f"  entries:  {g['entries']}, {_mib(g['bytes'])} of {_mib(g['bound'])} "
          f"(EMBER_GRAPH_CACHE_MAX_BYTES)")
    ok = ("ok", "missing")
    return 0 if r["check"] in ok and g["check"] in ok else 1
