"""Owner- and mode-checked file access for the kernel cache (see :mod:`.cache` for the model).

Every operation works on a directory file descriptor opened by :func:`open_dir`, which
walks the path one component at a time with ``O_NOFOLLOW`` and checks each level as it is
opened (so a folder renamed or a symlink swapped after the check is never used):

* every ancestor and symlink on the way: owned by the current user or root; writable by
  group/others only with the sticky bit (``/tmp``), where nobody else may rename our entries;
* the cache folder itself (and, for the default location, the ``ember`` level above it):
  owned by the current user and not writable by group/others.

Files are opened relative to that descriptor with ``O_NOFOLLOW`` and checked on the open
descriptor (:func:`open_file`): a regular file owned by the current user, not writable by
group/others. Temporary names carry the writer's pid (``.tmp-<pid>-…``, ``.build-<pid>-…``,
``.load-<pid>-…``) so :func:`remove_stale` can tell a killed writer's leftovers from a live
one's work.
"""
from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import time

_DIR = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MAX_LINKS = 40
#: a temporary entry of a process that is gone is removed once it is this old (seconds) ...
STALE_DEAD_S = 30.0
#: ... and any temporary entry once it is this old (no build runs that long: the compiler
#: is killed after 60 s), which covers pids reused or from another pid namespace.
STALE_ANY_S = 600.0
TEMP_PREFIXES = (".tmp-", ".build-", ".load-")
_ENTRY = re.compile(r"[0-9a-f]{32}\.(so|sha256|c|ptx|cubin)")    # what scan counts and clear removes


class UnsafeCacheError(PermissionError):
    """A kernel-cache folder or file that other users could have written (or swapped)."""


def uid() -> int:
    """The user every cache folder and file must belong to (tests monkeypatch it)."""
    return os.geteuid() if hasattr(os, "geteuid") else -1


def _describe(st) -> str:
    return f"owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"


def check_stat(st, what: str, strict: bool) -> None:
    """Raise UnsafeCacheError unless ``st`` may be trusted.

    Args:
        st: an ``os.stat_result`` of the opened folder or file.
        what: its path, for the message.
        strict: True for what Ember owns (cache folders, entries): owned by the current
            user, not group/other-writable. False for ancestors: owned by the current user
            or root, group/other-writable only with the sticky bit.
    """
    me, mode = uid(), stat.S_IMODE(st.st_mode)
    if strict:
        if st.st_uid != me or mode & 0o022:
            raise UnsafeCacheError(
                f"kernel cache: {what} ({_describe(st)}) must be owned by uid {me} and not "
                f"writable by group/others (chmod go-w, or set EMBER_KERNEL_CACHE to a "
                f"private folder)")
        return
    if st.st_uid not in (me, 0) or (mode & 0o022 and not mode & stat.S_ISVTX):
        who = "root" if me == 0 else f"uid {me} or root"
        raise UnsafeCacheError(
            f"kernel cache: folder {what} on the cache's path ({_describe(st)}) must be owned "
            f"by {who} and not writable by group/others unless sticky")


def _open_component(fd: int, name: str, create: bool) -> int:
    try:
        return os.open(name, _DIR | _NOFOLLOW, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o700, dir_fd=fd)
    except FileExistsError:
        pass
    return os.open(name, _DIR | _NOFOLLOW, dir_fd=fd)


def open_dir(path: str, create: bool = True, own_levels: int = 1) -> int:
    """A descriptor of folder ``path`` after checking every level (see the module doc).

    Args:
        path: the folder.
        create: make missing levels (mode 0700) instead of raising FileNotFoundError.
        own_levels: how many levels at the end Ember owns (strict check): 1, or 2 for the
            default ``.../ember/kernels``.

    Raises:
        UnsafeCacheError: a level fails its check (the message names it).
    """
    pending = [p for p in os.path.abspath(path).split(os.sep) if p]
    fd = os.open(os.sep, _DIR)
    where, links = os.sep, 0
    try:
        check_stat(os.fstat(fd), where, strict=False)
        while pending:
            name = pending.pop(0)
            if name == ".":
                continue
            try:
                nfd = _open_component(fd, name, create)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target = _symlink_target(fd, name, os.path.join(where, name))
                links += 1
                if links > _MAX_LINKS:
                    raise UnsafeCacheError(f"kernel cache: too many symlinks in {path}") from e
                if target.startswith(os.sep):
                    os.close(fd)
                    fd, where = os.open(os.sep, _DIR), os.sep
                pending[:0] = [p for p in target.split(os.sep) if p]
                continue
            os.close(fd)
            fd, where = nfd, os.path.normpath(os.path.join(where, name))
            if pending:                        # NOTE: the last level gets the strict check
                check_stat(os.fstat(fd), where, strict=False)
        shown = os.path.abspath(path)
        _check_own_levels(fd, shown if shown == where else f"{shown} (-> {where})", own_levels)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _symlink_target(fd: int, name: str, shown: str) -> str:
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "kernel cache: not a folder", shown)
    if st.st_uid not in (uid(), 0):
        raise UnsafeCacheError(f"kernel cache: symlink {shown} on the cache's path "
                               f"({_describe(st)}) must be owned by uid {uid()} or root")
    return os.readlink(name, dir_fd=fd)


def _check_own_levels(fd: int, shown: str, own_levels: int) -> None:
    check_stat(os.fstat(fd), shown, strict=True)
    if own_levels >= 2:
        up = os.open("..", _DIR, dir_fd=fd)
        try:
            check_stat(os.fstat(up), f"the folder above {shown}", strict=True)
        finally:
            os.close(up)


def open_file(dfd: int, name: str, shown: str) -> int | None:
    """A read descriptor of entry ``name`` in folder ``dfd``, checked; None if missing.

    Raises:
        UnsafeCacheError: a symlink, not a regular file, or fails :func:`check_stat`.
    """
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeCacheError(f"kernel cache: {shown} is a symlink") from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeCacheError(f"kernel cache: {shown} is not a regular file")
        check_stat(st, shown, strict=True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_all(fd: int) -> bytes:
    """Every byte of the open file ``fd`` (then closes it)."""
    with os.fdopen(fd, "rb") as f:
        return f.read()


def temp_name(kind: str, suffix: str = "") -> str:
    """A fresh temporary name: ``.<kind>-<pid>-<random><suffix>``."""
    return f".{kind}-{os.getpid()}-{secrets.token_hex(6)}{suffix}"


def create_file(dfd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` into a new file ``name`` of folder ``dfd`` (never an existing one)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(name, flags, mode, dir_fd=dfd)
    try:
        os.fchmod(fd, mode)            # NOTE: the umask may have cleared bits, never added
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data)
    finally:
        os.close(fd)


def atomic_write(dfd: int, name: str, data: bytes) -> None:
    """Write ``name`` (mode 0600) under a temporary name, then rename it into place."""
    tmp = temp_name("tmp")
    create_file(dfd, tmp, data)
    try:
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        unlink(dfd, tmp)
        raise


def exists(dfd: int, name: str) -> bool:
    """Whether folder ``dfd`` has an entry ``name`` (a symlink counts; never followed)."""
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return False
    return True


def unlink(dfd: int, name: str) -> None:
    """Remove ``name`` from folder ``dfd`` if it is there."""
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def remove_tree(dfd: int, name: str) -> None:
    """Remove the folder ``name`` of folder ``dfd`` and everything in it (no symlinks followed).

    NOTE: by descriptors, since ``shutil.rmtree(dir_fd=)`` needs Python 3.11.
    """
    try:
        fd = os.open(name, _DIR | _NOFOLLOW, dir_fd=dfd)
    except OSError:
        unlink(dfd, name)
        return
    try:
        with os.scandir(fd) as it:
            for e in list(it):
                (remove_tree if e.is_dir(follow_symlinks=False) else unlink)(fd, e.name)
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=dfd)
    except OSError:
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def pid_of(name: str) -> int | None:
    """The writer's pid in a temporary name (``.tmp-<pid>-…``, ``ember-kernels-<pid>-…``)."""
    fields = name.split("-")[1:-1]
    return next((int(f) for f in fields if f.isdigit()), None)


def remove_stale_private(parent: str, prefix: str) -> None:
    """Remove this user's folders ``<prefix><pid>-…`` in ``parent`` whose process is gone
    (age alone never counts: a live process may keep its private cache for days)."""
    try:
        pfd = os.open(parent, _DIR)
    except OSError:
        return
    try:
        now = time.time()
        with os.scandir(pfd) as it:
            for e in it:
                if not e.name.startswith(prefix):
                    continue
                st = e.stat(follow_symlinks=False)
                if (stat.S_ISDIR(st.st_mode) and st.st_uid == uid()
                        and is_stale(e.name, now - st.st_mtime, float("inf"))):
                    remove_tree(pfd, e.name)
    except OSError:
        pass
    finally:
        os.close(pfd)


def is_stale(name: str, age: float, any_age: float = STALE_ANY_S) -> bool:
    """Whether temporary entry ``name`` (``age`` seconds old) was left by a killed writer:
    its process is gone (and it is older than :data:`STALE_DEAD_S`), or it is older than
    ``any_age``."""
    if age > any_age:
        return True
    pid = pid_of(name)
    if pid == os.getpid():
        return False
    return age > STALE_DEAD_S and (pid is None or not _pid_alive(pid))


def scan(dfd: int):
    """``(entries, temps)``: ``{key: (bytes, last access)}`` and ``[(name, age, is dir)]``
    (other files -- a user's notes -- are neither counted nor ever removed)."""
    entries, temps, now = {}, [], time.time()
    with os.scandir(dfd) as it:
        for e in it:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.name.startswith(TEMP_PREFIXES):
                temps.append((e.name, now - st.st_mtime, stat.S_ISDIR(st.st_mode)))
            elif _ENTRY.fullmatch(e.name):
                key, ext = e.name.rsplit(".", 1)
                size, atime = entries.get(key, (0, 0.0))
                used = st.st_atime if ext in ("so", "ptx", "cubin") else 0.0
                entries[key] = (size + st.st_size, max(atime, used))
    return entries, temps


def remove_stale(dfd: int, temps) -> int:
    """Remove the stale temporary entries among ``temps`` (from :func:`scan`); how many."""
    n = 0
    for name, age, is_dir in temps:
        if is_stale(name, age):
            (remove_tree if is_dir else unlink)(dfd, name)
            n += 1
    return n


def remove_entry(dfd: int, key: str) -> None:
    """Remove every file of entry ``key`` (checksum first: a half-removed entry is a miss)."""
    for ext in ("sha256", "so", "ptx", "cubin", "c"):
        unlink(dfd, f"{key}.{ext}")
