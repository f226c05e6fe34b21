"""Shared-memory storages: the buffers ``Tensor.share_memory_()`` and the multiprocessing
reducer move tensors into.

A shared storage's bytes live in an anonymous memory file (``memfd_create``; an unlinked
temporary file where that is missing) mapped ``MAP_SHARED``. The file descriptor stays
open beside the storage (closed when the storage dies), so the storage can be sent to a
process started with any start method — ``fork``, ``spawn`` or ``forkserver`` — by
passing the descriptor (PyTorch's ``file_descriptor`` sharing strategy).
"""
from __future__ import annotations

import mmap
import os
import tempfile
import weakref

import numpy as np

#: Storage -> (fd, nbytes) for every storage whose bytes live in a shared memory file.
_SHARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _memfile(nbytes: int) -> int:
    """A new anonymous file of ``nbytes`` bytes, as an open descriptor."""
    try:
        fd = os.memfd_create("ember-shm", os.MFD_CLOEXEC)
    except (AttributeError, OSError):         # NOTE: no memfd: an unlinked temporary file
        fd, path = tempfile.mkstemp(prefix="ember-shm-", dir="/dev/shm"
                                    if os.path.isdir("/dev/shm") else None)
        os.unlink(path)
    os.ftruncate(fd, nbytes)
    return fd


def map_fd(fd: int, nbytes: int, dtype, shape) -> np.ndarray:
    """A C-contiguous array of ``shape``/``dtype`` over the first bytes of file ``fd``."""
    buf = mmap.mmap(fd, max(nbytes, 1), flags=mmap.MAP_SHARED)
    count = int(np.prod(shape)) if len(shape) else 1
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


def register(storage, fd: int, nbytes: int) -> None:
    """Remember that ``storage`` lives in file ``fd`` (closed once the storage dies)."""
    _SHARED[storage] = (fd, nbytes)
    weakref.finalize(storage, os.close, fd)


def shared_fd(storage):
    """``(fd, nbytes)`` of a shared storage, or None."""
    return _SHARED.get(storage)


def new_shared_array(src: np.ndarray) -> tuple[np.ndarray, int, int]:
    """A shared copy of host array ``src``: ``(array, fd, nbytes)``."""
    nbytes = max(src.nbytes, 1)
    fd = _memfile(nbytes)
    arr = map_fd(fd, nbytes, src.dtype, src.shape)
    arr[...] = src
    return arr, fd, nbytes


def is_shared(t) -> bool:
    """Whether tensor ``t``'s storage lives in shared memory."""
    return t._storage in _SHARED
