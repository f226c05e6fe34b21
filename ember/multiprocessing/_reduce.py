"""The tensor reducer ``ember.multiprocessing`` registers with ``ForkingPickler``.

Only the multiprocessing pickler learns it: ``pickle.dumps(tensor)`` still refuses (Ember's
serialization is pickle-free on purpose). A tensor crosses a process boundary the way
PyTorch's does: its storage moves into shared memory (in place, on the sender), and the
receiver maps the same memory file, so both see each other's writes.
"""
from __future__ import annotations

from multiprocessing.reduction import DupFd, ForkingPickler

import numpy as np

from ..tensor import Tensor, _ptr, _wrap
from . import _shm

_NON_LEAF = ("Cowardly refusing to serialize non-leaf tensor which requires_grad, since "
             "autograd does not support crossing process boundaries. If you just want to "
             "transfer the data, call detach() on the tensor before serializing (e.g., "
             "putting it on the queue).")


def reduce_tensor(t: Tensor):
    """``(rebuild_tensor, args)`` sending ``t`` by its shared storage's descriptor."""
    if t.requires_grad and t.grad_fn is not None:
        raise RuntimeError(_NON_LEAF)
    if t.device.type != "cpu":
        raise RuntimeError(f"ember.multiprocessing: sharing a {t.device} tensor between "
                           f"processes is not supported; move it to the CPU first")
    if not _shm.is_shared(t):
        t.share_memory_()                # NOTE: PyTorch moves the sender's storage too
    fd, nbytes = _shm.shared_fd(t._storage)
    root, arr = t._storage.data, t._data
    meta = (root.dtype, root.shape, arr.dtype, arr.shape, arr.strides,
            _ptr(arr) - _ptr(root), t.dtype.name, t.requires_grad, type(t))
    return rebuild_tensor, (DupFd(fd), nbytes, meta)


def rebuild_tensor(dupfd, nbytes: int, meta) -> Tensor:
    """The receiving side of :func:`reduce_tensor`: a tensor viewing the sender's memory."""
    from .. import dtypes
    root_dtype, root_shape, dtype, shape, strides, offset, name, requires_grad, cls = meta
    fd = dupfd.detach()
    root = _shm.map_fd(fd, nbytes, root_dtype, root_shape)
    edt = getattr(dtypes, name)
    base = _wrap(root, edt, _cpu())
    arr = np.ndarray(shape, dtype=dtype, buffer=root.reshape(-1).view(np.uint8),
                     offset=offset, strides=strides) if root.size else root.reshape(shape)
    t = _wrap(arr, edt, base._device, base._storage)
    _shm.register(t._storage, fd, nbytes)
    t.__dict__["_shared"] = True
    if cls is not Tensor:
        t.__class__ = cls
    if requires_grad:
        t.requires_grad_(True)
    return t


def _cpu():
    from ..device import device
    return device("cpu")


def init_reductions() -> None:
    """Register :func:`reduce_tensor` for ``Tensor`` and its subclasses known now
    (``nn.Parameter``, ``nn.Buffer``): the pickler looks reducers up by exact type."""
    seen, todo = set(), [Tensor]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        ForkingPickler.register(cls, reduce_tensor)
        todo.extend(cls.__subclasses__())
