"""The Tensor: a logical view (shape, strides, offset, dtype, device) over a Storage.

This module holds only the data structure and its plain accessors. Operators
and most methods are attached by the op modules (``ember/ops/*``) when Ember is
imported, so adding an op never edits this file.
"""
from __future__ import annotations

import math

from . import dtypes as _dt
from .device import device as _device, get_backend
from .device import cuda_copy as _cuda_copy
from .device.base import _backends
from .device.meta import NO_ITEM as _NO_ITEM
from .storage import Storage

_np_to_dtype = {d.np: d for d in _dt.ALL}


class Size(tuple):
    """A tensor's shape; a tuple with PyTorch's ``numel()``."""

    __slots__ = ()

    def numel(self) -> int:
        return math.prod(self)

    def __repr__(self) -> str:
        return f"ember.Size({list(self)})"


#: Called as ``hook(tensor, what)`` when Python reads a tensor's values (``item``, ``bool``,
#: ``numpy``...). A tracer sets it: such a read is a graph break (see ember.graph.trace).
_DATA_HOOK = None


class Tensor:
    """An n-dimensional array with autograd support.

    Create tensors with factories (``ember.tensor``, ``ember.zeros``, ``ember.randn``...).

    Example:
        >>> x = ember.tensor([[1., 2.], [3., 4.]], requires_grad=True)
        >>> (x * x).sum().backward()
        >>> x.grad
        tensor([[2., 4.],
                [6., 8.]])
    """

    # NOTE: hot fields are slots; rarely-set ones are class-level defaults shadowed per
    # instance through __dict__ when set, so making a tensor assigns only the hot ones.
    __slots__ = ("_data", "_storage", "_dtype", "_device", "_requires_grad", "_grad_fn",
                 "_out_nr", "_base", "__dict__", "__weakref__")
    __array_priority__ = 1000  # NumPy defers to Tensor's reflected operators
    _grad = None
    _retains_grad = False
    _fw = None            # forward-AD tangents: {level: tangent}
    _hooks = None         # gradient hooks of a leaf
    _post_acc_hooks = None  # hooks run after a leaf's .grad is complete (DDP)
    _inference = False
    _view_version = None  # storage version at which a differentiable view's grad_fn was made

    @property
    def _pinned(self) -> bool:
        """Whether the storage is page-locked host memory (``pin_memory``; views too)."""
        return _cuda_copy.is_pinned_storage(self._storage)

    @_pinned.setter
    def _pinned(self, value: bool) -> None:
        if value:
            _cuda_copy.mark_pinned(self._storage)

    # ---------------------------------------------------------------- structure
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[_wrap_dim(dim, self._data.ndim, "size")]

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    ndimension = dim

    def numel(self) -> int:
        return self._data.size

    nelement = numel

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    @property
    def dtype(self) -> _dt.DType:
        return self._dtype

    @property
    def device(self) -> _device:
        return self._device

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self._device.type == "cpu"

    def is_floating_point(self) -> bool:
        return self._dtype.is_floating_point

    def element_size(self) -> int:
        return self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self._data.size * self._dtype.itemsize

    def stride(self, dim: int | None = None):
        """Strides in elements (PyTorch convention), not bytes."""
        if self._device.type == "meta":     # NOTE: a meta tensor keeps no strides
            st = contiguous_strides(self._data.shape)
        else:
            isz = self._dtype.itemsize
            st = tuple(s // isz for s in self._data.strides)
            if not any(st) and self._data.size == 0:
                # NOTE: NumPy gives a new empty array zero strides; PyTorch's are row-major
                st = contiguous_strides(self._data.shape)
        return st if dim is None else st[_wrap_dim(dim, self._data.ndim, "stride")]

    def storage_offset(self) -> int:
        """Offset, in elements, of element [0,...,0] from the start of the storage (0 on
        the ``meta`` device, whose tensors keep no layout)."""
        if self._device.type == "meta":
            return 0
        return (_ptr(self._data) - _storage_start(self._storage)) // self._dtype.itemsize

    def untyped_storage(self) -> Storage:
        return self._storage

    storage = untyped_storage

    def record_stream(self, stream) -> None:
        """Tell the allocator that ``stream`` (an ``ember.cuda.Stream``) uses this CUDA
        tensor, so its memory is not reused before the work queued on ``stream`` by the
        time the tensor is freed has completed (``torch.Tensor.record_stream``).

        Example:
            >>> with ember.cuda.stream(side):
            ...     x = batch.to("cuda", non_blocking=True)
            >>> ember.cuda.current_stream().wait_stream(side)
            >>> x.record_stream(ember.cuda.current_stream())
        """
        if self._device.type != "cuda":
            raise RuntimeError(f"record_stream: expected a CUDA tensor, got one on "
                               f"{self._device}")
        if getattr(stream, "device", None) is None or stream.device.type != "cuda":
            raise TypeError(f"record_stream: expected an ember.cuda.Stream, got "
                            f"{type(stream).__name__}")
        _cuda_copy.record_stream(_backends["cuda"], self._storage, stream._raw)

    def data_ptr(self) -> int:
        return _ptr(self._data) if self._device.type != "meta" else 0

    def is_contiguous(self, memory_format=None) -> bool:
        """Whether the strides are row-major (or, with ``memory_format=ember.channels_last``,
        NHWC order)."""
        if getattr(memory_format, "name", None) in ("channels_last", "channels_last_3d"):
            from .ops.convert import is_contiguous_as
            return is_contiguous_as(self, memory_format)
        return self._data.flags.c_contiguous or self._device.type == "meta"

    @property
    def is_meta(self) -> bool:
        """Whether this tensor lives on the ``meta`` device (a shape and dtype, no data)."""
        return self._device.type == "meta"

    @property
    def _version(self) -> int:
        return self._storage.version

    def _is_view(self) -> bool:
        return self._base is not None

    def is_inference(self) -> bool:
        """Whether this tensor was made under ``inference_mode`` (a method, as PyTorch's)."""
        return self._inference

    # ---------------------------------------------------------------- autograd state
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if self._grad_fn is not None:
            if not requires_grad:
                raise RuntimeError(
                    "you can only change requires_grad flags of leaf variables; to use a "
                    "non-leaf without gradient, use .detach()")
            return self
        if requires_grad and not self._dtype.is_inexact:
            raise RuntimeError(f"only tensors of floating point and complex dtype can require "
                               f"gradients, "
                               f"got {self._dtype}")
        self._requires_grad = bool(requires_grad)
        return self

    @property
    def grad_fn(self):
        return self._grad_fn

    @property
    def is_leaf(self) -> bool:
        return self._grad_fn is None

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad must be a Tensor or None, got "
                                f"{type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(f"assigned grad has shape {tuple(value.shape)} but the "
                                   f"tensor has shape {tuple(self.shape)}")
        self._grad = value

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    @property
    def data(self) -> "Tensor":
        """A detached alias of this tensor (``x.data``); prefer ``detach()``."""
        return _alias(self, keep_grad=False)

    @data.setter
    def data(self, other: "Tensor") -> None:
        if not isinstance(other, Tensor):
            raise TypeError("Tensor.data must be set to a Tensor")
        self._data, self._storage, self._dtype = other._data, other._storage, other._dtype
        self._device = other._device

    @property
    def _tangent(self):
        return None if self._fw is None else self._fw.get(max(self._fw))

    # ---------------------------------------------------------------- interop
    def numpy(self, *, force: bool = False):
        """The NumPy array sharing this tensor's memory (CPU tensors only)."""
        if _DATA_HOOK is not None:
            _DATA_HOOK(self, "numpy")
        if self._requires_grad and not force:
            raise RuntimeError("Can't call numpy() on a tensor that requires grad; use "
                               "tensor.detach().numpy() instead")
        if not get_backend(self._device).has("host_memory"):
            if not force:
                raise TypeError(f"can't convert {self._device} device type tensor to numpy. "
                                f"Use Tensor.cpu() to copy the tensor to host memory first.")
            return get_backend(self._device).to_host(self._data)
        return self._data

    def __array__(self, dtype=None, copy=None):
        if _DATA_HOOK is not None:
            _DATA_HOOK(self, "__array__")
        arr = get_backend(self._device).to_host(self._data)
        if dtype is not None:
            arr = arr.astype(dtype, copy=False)
        return arr

    def __dlpack__(self, *args, **kwargs):
        if self._requires_grad:
            raise RuntimeError("Can't export a tensor that requires grad through DLPack; "
                               "use tensor.detach()")
        try:
            return self._data.__dlpack__(*args, **kwargs)
        except (BufferError, TypeError, NotImplementedError) as e:
            # NOTE: NotImplementedError: what CuPy may raise for a dtype its DLPack export
            # lacks (bfloat16 without cupy/cupy#9670)
            from .errors import DTypeError
            raise DTypeError(f"__dlpack__: a {self._dtype.name} tensor cannot be exported "
                             f"through DLPack on {self._device} ({e})") from None

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if _DATA_HOOK is not None:
            _DATA_HOOK(self, "bool")
        if self._data.size != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self._data.size} elements is "
                               f"ambiguous")
        if self._device.type == "meta":
            raise RuntimeError(_NO_ITEM)
        return bool(self._data.reshape(-1)[0])

    def __index__(self) -> int:
        if _DATA_HOOK is not None:
            _DATA_HOOK(self, "__index__")
        if self._dtype.category != _dt.INT or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to "
                            "an index")
        if self._device.type == "meta":
            raise RuntimeError(_NO_ITEM)
        return int(self._data.reshape(-1)[0])

    def item(self):
        """The value of a one-element tensor as a Python number."""
        if _DATA_HOOK is not None:
            _DATA_HOOK(self, "item")
        if self._data.size != 1:
            raise RuntimeError(f"item(): a Tensor with {self._data.size} elements cannot be "
                               f"converted to a Python scalar")
        if self._device.type == "meta":
            raise RuntimeError(_NO_ITEM)
        return get_backend(self._device).to_host(self._data).reshape(-1)[0].item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def tolist(self):
        """The tensor as (nested) Python lists of Python numbers."""
        if _DATA_HOOK is not None:
            _DATA_HOOK(self, "tolist")
        arr = get_backend(self._device).to_host(self._data)
        if self._dtype is _dt.bfloat16:
            arr = arr.astype("float32")
        return arr.tolist()

    def __reduce_ex__(self, protocol):
        raise TypeError("Ember tensors are not picklable by design; use ember.save()")


def contiguous_strides(shape) -> tuple:
    """Row-major strides, in elements, of a tensor of ``shape``."""
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(st))



def _ptr(arr) -> int:
    ai = getattr(arr, "__array_interface__", None)
    return ai["data"][0] if ai is not None else int(arr.data.ptr)


def _storage_start(storage: Storage) -> int:
    """Lowest address of a storage's root buffer (roots may have negative strides)."""
    root = storage.data
    start = _ptr(root)
    for n, s in zip(root.shape, root.strides):
        if s < 0 and n > 0:
            start += (n - 1) * s
    return start


def _wrap_dim(dim: int, ndim: int, op: str = "op") -> int:
    """Normalise a possibly negative dim, with PyTorch's error on out-of-range."""
    n = ndim if ndim > 0 else 1
    if not -n <= dim < n:
        raise IndexError(f"{op}: dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {dim})")
    return dim + n if dim < 0 else dim


_new = object.__new__


def _wrap(arr, dtype, dev, storage=None, base=None) -> Tensor:
    """Make a tensor over ``arr``. With no ``storage``, ``arr`` becomes a new storage root."""
    t = _new(Tensor)
    t._data = arr
    t._dtype = dtype
    t._device = dev
    if storage is None:
        storage = Storage(arr, dev, _backends[dev.type].allocator)
    t._storage = storage
    t._base = base
    t._requires_grad = False
    t._grad_fn = None
    t._out_nr = 0
    return t


def _alias(x: Tensor, keep_grad: bool) -> Tensor:
    """A new Tensor object over the same data (detached unless ``keep_grad``)."""
    if x.__class__ is not Tensor and hasattr(x, "_batched_alias"):   # inside ember.func.vmap
        return x._batched_alias(keep_grad)
    t = _wrap(x._data, x._dtype, x._device, x._storage, x._base if x._base is not None else x)
    if keep_grad:
        t._requires_grad, t._grad_fn, t._out_nr = x._requires_grad, x._grad_fn, x._out_nr
    return t


def from_array(arr, dev=None) -> Tensor:
    """Wrap a device array as a tensor (new storage root), inferring the dtype."""
    try:
        dt = _np_to_dtype[arr.dtype]
    except KeyError:
        dt = _dt.as_dtype(arr.dtype)
    return _wrap(arr, dt, dev or _device("cpu"))


def _backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate the gradient of this tensor into the leaves' ``.grad``."""
    from .autograd.engine import backward
    backward([self], None if gradient is None else [gradient], retain_graph, create_graph,
             inputs)


def _register_hook(self, hook):
    from .autograd.engine import register_hook
    return register_hook(self, hook)


def _register_post_accumulate_grad_hook(self, hook):
    """Run ``hook(self)`` once a backward pass accumulated all of its gradient into
    ``self.grad`` (leaves only; ``torch.Tensor.register_post_accumulate_grad_hook``)."""
    from .autograd.engine import register_post_accumulate_grad_hook
    return register_post_accumulate_grad_hook(self, hook)


def _retain_grad(self):
    from .autograd.engine import retain_grad
    retain_grad(self)


Tensor.backward = _backward
Tensor.register_hook = _register_hook
Tensor.register_post_accumulate_grad_hook = _register_post_accumulate_grad_hook
Tensor.retain_grad = _retain_grad
