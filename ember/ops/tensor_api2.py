"""More ``Tensor`` methods PyTorch programs call: complex casts (``cfloat``/``cdouble``),
``conj_physical_``, storage-level methods (``resize_``, ``resize_as_``, ``set_``,
``share_memory_``/``is_shared``), the deprecated out-of-place ``resize``/``resize_as``,
``as_subclass``, ``map2_`` and ``module_load``.

Storage-level methods rebind the tensor to a new buffer (Ember's ``Storage`` has a fixed
size); tensors that were views of the old buffer keep it, where PyTorch's views follow a
storage resized in place. Each bumps the version counter, so saved values notice.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import dtypes as _dt
from ..storage import Storage
from ..tensor import Tensor, _alias, _wrap

__all__: list[str] = []


def _rebind(self: Tensor, arr, storage=None) -> Tensor:
    """Point ``self`` at ``arr`` (a new storage root unless ``storage`` is given)."""
    t = _wrap(arr, self._dtype, self._device, storage)
    version = self._storage.version + 1       # NOTE: monotonic across the rebinding
    self._data, self._storage = t._data, t._storage
    self._base = None
    self._storage.version = max(self._storage.version, version)
    return self


def _sizes(args, op: str) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    if not all(isinstance(s, (int, np.integer)) and s >= 0 for s in args):
        raise ValueError(f"{op}: sizes must be non-negative ints, got {args}")
    return tuple(int(s) for s in args)


def resize_(self: Tensor, *sizes, memory_format=None) -> Tensor:
    """Resize in place to ``sizes`` (``Tensor.resize_``): the first ``min(old, new)``
    elements (in row-major order) are kept, new elements are uninitialised.

    Example:
        >>> t = ember.arange(6.)
        >>> t.resize_(2, 2)
        tensor([[0., 1.],
                [2., 3.]])
    """
    shape = _sizes(sizes, "resize_")
    if self._requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    if getattr(self, "_shared", False) and int(np.prod(shape)) != self._data.size:
        raise RuntimeError(f"Trying to resize storage that is not resizable (a tensor in "
                           f"shared memory), from {tuple(self.shape)} to {shape}")
    xp = self._data.__array_namespace__() if hasattr(self._data, "__array_namespace__") \
        else np
    new = xp.empty(shape, dtype=self._data.dtype)
    n = min(new.size, self._data.size)
    new.reshape(-1)[:n] = self._data.reshape(-1)[:n]
    return _rebind(self, new)


def resize_as_(self: Tensor, the_template: Tensor, memory_format=None) -> Tensor:
    """``self.resize_(the_template.shape)``."""
    return resize_(self, tuple(the_template.shape))


def resize(self: Tensor, *sizes) -> Tensor:
    """Deprecated out-of-place resize (PyTorch warns too): a reshape that must keep the
    number of elements, differentiable."""
    warnings.warn("non-inplace resize is deprecated", stacklevel=2)
    shape = _sizes(sizes, "resize")
    if int(np.prod(shape)) != self.numel():
        raise RuntimeError(f"requested resize to {'x'.join(map(str, shape))} "
                           f"({int(np.prod(shape))} elements in total), but the given tensor "
                           f"has a size of {'x'.join(map(str, self.shape))} "
                           f"({self.numel()} elements). autograd's resize can only change "
                           f"the shape of a given tensor, while preserving the number of "
                           f"elements.")
    return self.reshape(shape)


def resize_as(self: Tensor, tensor: Tensor) -> Tensor:
    """Deprecated out-of-place ``resize_as`` (see :func:`resize`)."""
    return resize(self, tuple(tensor.shape))


def set_(self: Tensor, source=None, storage_offset: int = 0, size=None, stride=None):
    """Make ``self`` view other memory (``Tensor.set_``): ``set_()`` empties it,
    ``set_(tensor)`` shares ``tensor``'s memory, shape and strides, and
    ``set_(storage, offset, size, stride)`` views a storage (offset/stride in elements).
    """
    from ..autograd.grad_mode import state
    if self._requires_grad and state.grad_enabled:
        raise RuntimeError("set_: a leaf Variable that requires grad is being used in an "
                           "in-place operation (wrap the call in ember.no_grad())")
    if source is None:
        return _rebind(self, np.empty((0,), dtype=self._data.dtype))
    if isinstance(source, Tensor):
        if source._dtype != self._dtype:
            raise RuntimeError(f"set_: expected a source of dtype {self._dtype}, got "
                               f"{source._dtype}")
        self._data, self._storage = source._data, source._storage
        self._base = None
        self._storage.version += 1
        return self
    if not isinstance(source, Storage):
        raise TypeError(f"set_: expected a Tensor or a storage, got {type(source).__name__}")
    flat = np.asarray(source.data).reshape(-1).view(self._data.dtype)
    size = tuple(size) if size is not None else (flat.size - storage_offset,)
    if stride is None:
        stride = tuple(int(np.prod(size[i + 1:])) for i in range(len(size)))
    isz = self._data.dtype.itemsize
    need = storage_offset + sum((s - 1) * st for s, st in zip(size, stride)) + 1
    if 0 not in size and need > flat.size:
        raise RuntimeError(f"set_: size {size}, stride {tuple(stride)} and offset "
                           f"{storage_offset} need {need} elements, the storage has {flat.size}")
    arr = np.lib.stride_tricks.as_strided(flat[storage_offset:], shape=size,
                                          strides=tuple(st * isz for st in stride))
    self._data, self._storage = arr, source
    self._base = None
    source.version += 1
    return self


def share_memory_(self: Tensor) -> Tensor:
    """Move the data into shared memory (an anonymous memory file mapped ``MAP_SHARED``), so
    other processes see each other's in-place writes, as Hogwild training needs: children
    forked afterwards, and processes it is sent to through ``ember.multiprocessing``
    (any start method; the file is passed by descriptor). A no-op when already shared.
    Views made before the call keep the old memory. Shared tensors cannot be resized.
    """
    if self._device.type != "cpu":
        return self                      # NOTE: PyTorch: a no-op for CUDA tensors
    from ..multiprocessing import _shm
    if _shm.is_shared(self):
        return self
    arr, fd, nbytes = _shm.new_shared_array(self._data)
    _rebind(self, arr)
    _shm.register(self._storage, fd, nbytes)
    self.__dict__["_shared"] = True
    return self


def is_shared(self: Tensor) -> bool:
    """Whether this tensor's storage lives in shared memory (:meth:`share_memory_`, or a
    tensor received through ``ember.multiprocessing``)."""
    from ..multiprocessing import _shm
    return _shm.is_shared(self)


def as_subclass(self: Tensor, cls: type) -> Tensor:
    """A ``cls`` instance sharing ``self``'s data and autograd history."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError(f"as_subclass: cls must be a subclass of ember.Tensor, got {cls!r}")
    t = _alias(self, keep_grad=True)
    t.__class__ = cls
    return t


def map2_(self: Tensor, x: Tensor, y: Tensor, callable) -> Tensor:
    """``self[i] = callable(self[i], x[i], y[i])`` elementwise in Python (CPU; PyTorch's
    legacy ``map2_``; ``x`` and ``y`` broadcast to ``self``)."""
    from ..autograd.grad_mode import no_grad
    a = self.numpy(force=True)
    bx = np.broadcast_to(x.numpy(force=True), a.shape)
    by = np.broadcast_to(y.numpy(force=True), a.shape)
    out = np.array([callable(u, v, w) for u, v, w in zip(a.reshape(-1).tolist(),
                                                           bx.reshape(-1).tolist(),
                                                           by.reshape(-1).tolist())],
                   dtype=a.dtype).reshape(a.shape)
    with no_grad():
        self.copy_(_wrap(out, self._dtype, self._device))
    return self


def module_load(self: Tensor, other: Tensor, assign: bool = False) -> Tensor:
    """How ``load_state_dict`` turns ``other`` into the value stored for ``self``: with
    ``assign`` ``other`` itself (detached), else ``other`` cast to ``self``'s dtype and
    device (PyTorch's default)."""
    if not isinstance(other, Tensor):
        raise TypeError(f"module_load: expected a Tensor, got {type(other).__name__}")
    if assign:
        return other.detach()
    return other.detach().to(device=self.device, dtype=self.dtype)


def conj_physical_(self: Tensor) -> Tensor:
    """In-place conjugate (a no-op on real tensors)."""
    if self._dtype.is_complex:
        from .complex import conj
        from .inplace import check_inplace, commit
        check_inplace(self, "conj_physical_")
        return commit(self, conj(self), "conj_physical_")
    return self


Tensor.cfloat = lambda self, memory_format=None: self.to(_dt.complex64)
Tensor.cdouble = lambda self, memory_format=None: self.to(_dt.complex128)
for _f in (resize_, resize_as_, resize, resize_as, set_, share_memory_, is_shared,
           as_subclass, map2_, module_load, conj_physical_):
    setattr(Tensor, _f.__name__, _f)
