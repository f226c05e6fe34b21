"""Conversions: to(dtype/device), clone, contiguous, detach, and dtype shorthands."""
from __future__ import annotations

from .. import dtypes as _dt
from ..device import device as _device, get_backend
from ..tensor import Tensor, _alias, _wrap
from . import dispatch
from .arith import to_dtype
from .layout import CHANNELS_LAST
from .registry import defop

_apply = dispatch.apply

clone_p = defop(
    "clone", nin=1, dtype="same", save=None, elementwise=True, expr="{0}",
    kernel=lambda xp, x: xp.array(x, copy=True, order="K"),
    vjp=lambda g, out, x: (g,), jvp="linear")

contiguous_p = defop(
    "contiguous", nin=1, dtype="same", save=None, elementwise=True, expr="{0}",
    kernel=lambda xp, x: xp.array(x, copy=True, order="C"),
    vjp=lambda g, out, x: (g,), jvp="linear")


def _to_device_kernel(xp, x, device):
    raise NotImplementedError  # replaced per backend pair when a second backend exists


#: the channels-last formats: their rank and the dim order from outermost to innermost
_CHANNELS_LAST = CHANNELS_LAST


def _format(memory_format):
    """``"channels_last"``/``"channels_last_3d"``, or None for the row-major formats."""
    name = getattr(memory_format, "name", None)
    return name if name in _CHANNELS_LAST else None


def _check_rank(input, fmt: str) -> tuple:
    rank, order = _CHANNELS_LAST[fmt]
    if input.ndim != rank:
        raise RuntimeError(f"required rank {rank} tensor to use {fmt} format")
    return order


def is_contiguous_as(input, memory_format) -> bool:
    """Whether ``input``'s strides are those of a dense tensor in ``memory_format``
    (dims of size 1 may have any stride), as ``Tensor.is_contiguous(memory_format=)``."""
    fmt = _format(memory_format)
    if fmt is None:
        return input.is_contiguous()
    rank, order = _CHANNELS_LAST[fmt]
    if input.ndim != rank:
        return False
    shape, strides = input.shape, input.stride()
    expected = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != expected:
            return False
        expected *= shape[d]
    return True


def _to_format(input, fmt: str) -> Tensor:
    """A copy of ``input`` laid out in channels-last order (NHWC memory, NCHW shape)."""
    order = _check_rank(input, fmt)
    inverse = tuple(order.index(d) for d in range(len(order)))
    return _apply(contiguous_p, (input.permute(*order),), {}).permute(*inverse)


def clone(input, *, memory_format=None) -> Tensor:
    """A copy of ``input`` that is differentiable (``torch.clone``); the default
    ``preserve_format`` keeps its layout, ``contiguous_format``/``channels_last`` set one."""
    fmt = _format(memory_format)
    if fmt is not None:
        return _to_format(input, fmt)
    if getattr(memory_format, "name", None) == "contiguous_format":
        return _apply(contiguous_p, (input,), {})
    return _apply(clone_p, (input,), {})


def contiguous(input, memory_format=None) -> Tensor:
    """``input`` itself if contiguous in ``memory_format`` (row-major by default;
    ``ember.channels_last``: NHWC memory order), else a copy laid out so."""
    fmt = _format(memory_format)
    if fmt is not None:
        _check_rank(input, fmt)
        return input if is_contiguous_as(input, memory_format) else _to_format(input, fmt)
    if input._data.flags.c_contiguous:
        return input
    return _apply(contiguous_p, (input,), {})


def detach(input) -> Tensor:
    """A view sharing data that is cut from the autograd graph."""
    t = _alias(input, keep_grad=False)
    return t


def detach_(input) -> Tensor:
    if input._base is not None and input._base._requires_grad:
        raise RuntimeError("detach_(): can't detach a view of a tensor that requires grad "
                           "in place; use detach()")
    input._grad_fn = None
    input._requires_grad = False
    return input


def to(input, *args, dtype=None, device=None, non_blocking=False, copy=False,
       memory_format=None) -> Tensor:
    """Convert dtype and/or device: ``x.to(ember.float64)``, ``x.to("cpu")``, ``x.to(other)``;
    ``memory_format=ember.channels_last`` also lays a 4-D result out in NHWC order."""
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a._dtype, a._device
        elif isinstance(a, (_dt.DType,)) or a in (float, int, bool):
            dtype = a
        elif isinstance(a, (str, _device)):
            try:
                device = _device(a)
            except ValueError:
                dtype = a
        elif a is not None:
            raise TypeError(f"to(): unexpected argument {a!r}; pass a dtype, device or tensor")
    r = input
    if device is not None:
        dev = _device(device)
        if dev != r._device:
            r = _transfer(r, dev, non_blocking)
    if dtype is not None:
        r = to_dtype(r, dtype)
    if copy and r is input:
        r = clone(r)
    if memory_format is not None and getattr(memory_format, "name", None) != "preserve_format":
        r = contiguous(r, memory_format)
    return r


def _transfer(x: Tensor, dev, non_blocking: bool = False) -> Tensor:
    """A copy of ``x`` on ``dev``; differentiable (the gradient is copied back).
    ``non_blocking``: asynchronous where the device can (``device/cuda_copy.py``)."""
    dst = get_backend(dev)
    if dev.type == "cuda":
        dst.check_index(dev.index, f"to({dev})")
    for mode in dispatch.state.modes:       # NOTE: the tracer can't record a transfer yet
        hook = getattr(mode, "on_transfer", None)
        if hook is not None:
            hook(x, dev)
    if x._requires_grad or x._fw is not None:
        from ..autograd.function import Function  # NOTE: above the ops layer: lazy
        return _device_copy(Function).apply(x, dev, non_blocking)
    return _copy_to(x, dev, non_blocking)


def _copy_to(x: Tensor, dev, non_blocking: bool = False) -> Tensor:
    src, dst = get_backend(x._device), get_backend(dev)
    if dev.type == "meta":          # NOTE: the shape and dtype only: nothing leaves the source
        return _wrap(dst.empty(x._data.shape, x._data.dtype), x._dtype, dev)
    if dev.type == "cuda" and x._device.type == "cpu":
        from ..device.cuda_copy import to_device
        return _wrap(to_device(dst, x._data, non_blocking, x._pinned), x._dtype, dev)
    if non_blocking and x._device.type == "cuda" and dev.type == "cpu":
        from ..device.cuda_copy import to_host
        t = _wrap(to_host(src, x._data), x._dtype, dev)
        t._pinned = True      # NOTE: PyTorch's non_blocking device-to-host copy is pinned
        return t
    return _wrap(dst.asarray(src.to_host(x._data)), x._dtype, dev)


_DEVICE_COPY: list = []


def _device_copy(Function):
    """The autograd Function of a device transfer (made once, on first need)."""
    if not _DEVICE_COPY:
        class ToCopy(Function):   # NOTE: grad_fn prints as PyTorch's ToCopyBackward
            @staticmethod
            def forward(ctx, x, dev, non_blocking=False):
                ctx.src, ctx.dst = x._device, dev
                return _copy_to(x, dev, non_blocking)

            @staticmethod
            def backward(ctx, g):
                return to(g, ctx.src), None, None

            @staticmethod
            def jvp(ctx, t, _dev, _non_blocking=None):
                return to(t, ctx.dst)
        _DEVICE_COPY.append(ToCopy)
    return _DEVICE_COPY[0]


def type_as(input, other) -> Tensor:
    return to_dtype(input, other._dtype)


def _shorthand(dt):
    return lambda self, memory_format=None: to_dtype(self, dt)


Tensor.to = to
Tensor.clone = clone
Tensor.contiguous = contiguous
Tensor.detach = detach
Tensor.detach_ = detach_
Tensor.type_as = type_as
Tensor.float = _shorthand(_dt.float32)
Tensor.double = _shorthand(_dt.float64)
Tensor.half = _shorthand(_dt.float16)
Tensor.bfloat16 = _shorthand(_dt.bfloat16)
Tensor.int = _shorthand(_dt.int32)
Tensor.long = _shorthand(_dt.int64)
Tensor.short = _shorthand(_dt.int16)
Tensor.bool = _shorthand(_dt.bool_)
Tensor.byte = _shorthand(_dt.uint8)
Tensor.char = _shorthand(_dt.int8)
def _cpu(self, memory_format=None) -> Tensor:
    """A copy of this tensor in CPU memory (``self`` if it is there already)."""
    return to(self, "cpu")


def _cuda(self, device=None, non_blocking: bool = False, memory_format=None) -> Tensor:
    """A copy on CUDA device ``device`` (an index, ``"cuda:1"``...; None: the current one)."""
    if device is None or isinstance(device, int):
        if device is None:
            device = get_backend("cuda").current_index
        device = _device("cuda", device)
    dev = _device(device)
    if dev.type != "cuda":
        raise ValueError(f"Tensor.cuda(): expected a cuda device, got {dev}")
    return to(self, dev, non_blocking=non_blocking)


def pin(self, device=None) -> Tensor:
    """A copy of this CPU tensor in page-locked host memory (faster, asynchronous copies to
    a CUDA device); ``self`` if it is pinned already."""
    if self._device.type != "cpu":
        raise RuntimeError(f"pin_memory(): cannot pin '{self._device}' memory: only CPU "
                           f"tensors can be pinned")
    if self._pinned:
        return self
    from ..device.base import cuda_backend
    be, why = cuda_backend()
    if be is None:
        raise RuntimeError(f"pin_memory(): pinned memory needs a CUDA device ({why})")
    t = _wrap(be.runtime.pin(self._data), self._dtype, self._device)
    t._pinned = True
    return t


Tensor.cpu = _cpu
Tensor.cuda = _cuda
