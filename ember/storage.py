"""Storage: the physical buffer a tensor views.

A storage owns one device array (its *root*: the array a kernel produced) and
reports its bytes to the device allocator for as long as it lives. Tensors are
logical views over it (shape, strides, offset) and share its version counter,
which in-place writes bump so autograd can detect stale saved values.
"""
from __future__ import annotations

import os
import sys

_EMBER_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def creation_site() -> str:
    """``file:line`` of the innermost caller outside Ember (where user code made a tensor)."""
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        inside = _INSIDE.get(fn)
        if inside is None:
            inside = _INSIDE[fn] = os.path.abspath(fn).startswith(_EMBER_DIR)
        if not inside:
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


_INSIDE: dict = {}   # file name -> whether it belongs to Ember


class Storage:
    # NOTE: ``site`` (where the storage was made) is only set while the allocator has a
    # limit (or records sites for debugging), so the unlimited path stays as fast as before.
    __slots__ = ("data", "device", "_nbytes", "version", "_alloc", "site", "__weakref__")

    def __init__(self, data, dev, allocator):
        self.data = data
        self.device = dev
        self._nbytes = n = data.nbytes
        self.version = 0
        if allocator.limit is None:   # NOTE: CountingAllocator.track inlined: hot path
            cur = allocator.current = allocator.current + n
            allocator.num_allocs += 1
            if cur > allocator.peak:
                allocator.peak = cur
        else:
            self._alloc = None        # NOTE: __del__ must not untrack what track refused
            self.site = creation_site()
            allocator.track(n)
        self._alloc = allocator

    def __del__(self):
        alloc = self._alloc
        if alloc is not None:   # NOTE: CountingAllocator.untrack inlined: hot path
            alloc.current -= self._nbytes
            alloc.num_frees += 1

    def data_ptr(self) -> int:
        return self.data.__array_interface__["data"][0] if hasattr(
            self.data, "__array_interface__") else int(self.data.data.ptr)

    def nbytes(self) -> int:
        """Bytes of the buffer (``UntypedStorage.nbytes()``)."""
        return self._nbytes

    def size(self) -> int:
        """Bytes of the buffer: an untyped storage counts bytes, as PyTorch's does."""
        return self._nbytes

    def __len__(self) -> int:
        return self._nbytes

    def element_size(self) -> int:
        """1: the elements of an untyped storage are bytes."""
        return 1

    def __repr__(self) -> str:
        return f"<ember.Storage {self._nbytes} bytes on {self.device}>"


#: ``torch.UntypedStorage``'s name for Ember's one storage class (``Tensor.untyped_storage()``)
UntypedStorage = Storage
