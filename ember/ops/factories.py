"""Tensor factories: tensor, as_tensor, from_numpy, zeros/ones/full/empty, ranges, eye, *_like.

Random factories (rand, randn, randint...) live in :mod:`ember.random`.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import dtypes as _dt
from ..device import device as _device, get_backend
from ..device.base import default_device
from ..autograd.grad_mode import state as _grad_state
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor, _wrap, from_array
from ._util import as_shape, check_new_size, size_args
from .layout import CHANNELS_LAST, empty_strided_array, format_strides, like_strides

__all__ = ['tensor', 'as_tensor', 'from_numpy', 'from_dlpack', 'zeros', 'ones', 'empty', 'full',
           'zeros_like', 'ones_like', 'empty_like', 'full_like', 'arange', 'linspace',
           'logspace', 'eye']

_PY_SCALARS = (bool, int, float)


def _scalar_dtype(x) -> _dt.DType:
    """dtype one element of ``data`` contributes (Python scalars: their category's default)."""
    if isinstance(x, (Tensor, np.ndarray, np.generic)):
        return x.dtype if isinstance(x, Tensor) else _dt.as_dtype(x.dtype)
    if isinstance(x, bool):
        return _dt.bool_
    if isinstance(x, numbers.Integral):
        return _dt.int64
    if isinstance(x, numbers.Real):
        return _dt.get_default_dtype()
    if isinstance(x, numbers.Complex):
        return _dt.as_dtype(complex)
    raise TypeError(f"tensor(): can't infer a dtype for an element of type {type(x).__name__}; "
                    f"valid elements are bool, int, float, complex, tensors and NumPy arrays/scalars")


def _infer_dtype(data) -> _dt.DType:
    """PyTorch's inference: promote_types over all elements (Python float -> default float,
    int -> int64, bool -> bool; tensors and NumPy values contribute their own dtype)."""
    if not isinstance(data, (list, tuple)):
        return _scalar_dtype(data)
    kinds = set(map(type, data))
    if kinds and kinds <= {float, int, bool}:  # fast path for flat lists of Python numbers
        return _dt.get_default_dtype() if float in kinds else (
            _dt.int64 if int in kinds else _dt.bool_)
    r = None
    for d in data:
        e = _infer_dtype(d)
        r = e if r is None else _dt.promote_types(r, e)
    return _dt.get_default_dtype() if r is None else r


def _nested_arrays(data):
    """Replace tensors inside (nested) lists by host NumPy arrays."""
    if isinstance(data, Tensor):
        if hasattr(data, "_phys"):          # a batched value inside ember.func.vmap
            raise RuntimeError("vmap: ember.tensor() copies values on the host, which a "
                               "batched tensor can't give: use ember.stack / torch-style "
                               "tensor ops instead")
        return get_backend(data._device).to_host(data._data)
    if isinstance(data, (list, tuple)) and any(isinstance(d, (Tensor, list, tuple)) for d in data):
        return [_nested_arrays(d) for d in data]
    return data


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor copying ``data`` (nested lists, scalars, NumPy arrays, tensors).

    dtype inference follows PyTorch: Python floats give the default dtype (float32),
    ints int64, bools bool; NumPy arrays/scalars and tensors keep their dtype.

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).dtype
        ember.int64
    """
    dtype = _infer_dtype(data) if dtype is None else _dt.as_dtype(dtype)
    data = _nested_arrays(data)
    dev = _device(device or default_device())
    try:
        arr = np.array(data, dtype=dtype.np)
    except (ValueError, TypeError, OverflowError) as e:
        ragged = _ragged(data)
        if ragged:
            raise RaggedSequenceError(f"tensor(): {ragged}") from None
        raise TypeError(f"tensor(): could not convert {type(data).__name__} to a tensor of "
                        f"{dtype}: {e}") from None
    return _finish(arr, dtype, dev, requires_grad)


class RaggedSequenceError(ShapeError, TypeError):
    """Nested sequences of unequal lengths (a ValueError like PyTorch's; a TypeError too,
    for code written against Ember's earlier conversion error)."""


def _is_seq(x) -> bool:
    return isinstance(x, (list, tuple)) or isinstance(x, np.ndarray) and x.ndim > 0


def _ragged(data) -> str | None:
    """Where nested ``data`` stops being rectangular, in PyTorch's words (None if it is)."""
    shape, d = [], data
    while _is_seq(d):                  # NOTE: like PyTorch, the first elements set the shape
        shape.append(len(d))
        if not len(d):
            break
        d = d[0]

    def walk(x, dim, path):
        where = f" at index {''.join(f'[{i}]' for i in path)}" if path else ""
        if dim == len(shape):
            if _is_seq(x):
                return (f"expected a number at dim {dim}{where}, got a sequence of length "
                        f"{len(x)} (nested lists must be rectangular, shape {shape} so far)")
            return None
        if not _is_seq(x):
            return (f"expected sequence of length {shape[dim]} at dim {dim}{where} (got a "
                    f"scalar of type {type(x).__name__})")
        if len(x) != shape[dim]:
            return f"expected sequence of length {shape[dim]} at dim {dim} (got {len(x)}){where}"
        for i, e in enumerate(x):
            msg = walk(e, dim + 1, path + [i])
            if msg:
                return msg
        return None
    return walk(data, 0, []) if shape else None


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Like :func:`tensor` but shares memory with a tensor or NumPy array when it can."""
    if isinstance(data, Tensor):
        t = data
        if dtype is not None:
            t = t.to(dtype)
        if device is not None:
            t = t.to(device)
        return t
    if isinstance(data, np.ndarray) and _device(device or default_device()).type == "cpu":
        t = from_numpy(data)
        return t if dtype is None else t.to(dtype)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing memory with the NumPy array ``a``."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray, got {type(a).__name__}")
    return from_array(a, _device("cpu"))


def from_dlpack(ext) -> Tensor:
    """A tensor sharing memory with any DLPack-exporting object."""
    if isinstance(ext, Tensor):
        return ext
    dev = getattr(ext, "__dlpack_device__", None)
    if dev is not None and dev()[0] in (2, 3, 13):   # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
        be = get_backend("cuda")                     # (raises naming what is missing)
        return from_array(be.runtime.from_dlpack(ext), _device("cuda", int(dev()[1])))
    try:
        arr = np.from_dlpack(ext)
    except (RuntimeError, BufferError, TypeError) as e:
        raise DTypeError(f"from_dlpack: can't import {type(ext).__name__} through DLPack: {e} "
                         f"(NumPy's DLPack has no bfloat16; convert to float32 first, and "
                         f"detach tensors that require grad)") from None
    return from_array(arr, _device("cpu"))


def _make(fill, shape, dtype, device, requires_grad, op, strides=None):
    """A new tensor filled with ``fill`` (None: uninitialised), row-major or with dense
    ``strides`` (in elements)."""
    dtype = _dt.as_dtype(dtype)
    shape = check_new_size(as_shape(shape, op), dtype, op)
    dev = _device(device or default_device())
    be = get_backend(dev)
    try:
        if strides is None or dev.type == "meta":      # NOTE: meta keeps no layout
            arr = be.empty(shape, dtype.np)
        else:
            arr = empty_strided_array(be, shape, strides, dtype.np)
    except MemoryError as e:         # NOTE: NumPy's names the shape and size, not the op
        raise MemoryError(f"{op}: {e}") from None
    if fill is not None and dev.type != "meta":
        arr.fill(fill)
    t = _wrap(arr, dtype, dev)
    if requires_grad:
        t.requires_grad_(True)
    if _grad_state.modes:
        _traced_constant(t)
    return t


def zeros(*args, size=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor of zeros (``torch.zeros``)."""
    return _make(0, size_args(args, size, "zeros"), dtype, device, requires_grad,
                 "zeros")


def ones(*args, size=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor of ones (``torch.ones``)."""
    return _make(1, size_args(args, size, "ones"), dtype, device, requires_grad,
                 "ones")


def empty(*args, size=None, dtype=None, device=None, requires_grad=False,
          memory_format=None) -> Tensor:
    """An uninitialised tensor (``torch.empty``), laid out in ``memory_format``."""
    shape = as_shape(size_args(args, size, "empty"), "empty")
    name = getattr(memory_format, "name", None)
    strides = format_strides(shape, name, "empty") if name in CHANNELS_LAST else None
    return _make(None, shape, dtype, device, requires_grad, "empty", strides)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor filled with ``fill_value``; dtype inferred from it like PyTorch."""
    if dtype is None:
        dtype = _dt.result_type(fill_value)
    return _make(fill_value, (size,) if isinstance(size, int) else size, dtype, device,
                 requires_grad, "full")


def _like(x, dtype, device):
    return (x._dtype if dtype is None else _dt.as_dtype(dtype)), (device or x._device)


def _made_like(fill, input, dtype, device, requires_grad, memory_format, op):
    dt, dev = _like(input, dtype, device)
    return _make(fill, input.shape, dt, dev, requires_grad, op,
                 like_strides(input, memory_format, op))


# NOTE: the *_like factories' layout: ``memory_format`` (default ``preserve_format``) as in
# PyTorch — a dense input's strides are kept (ember/ops/layout.py, ``like_strides``).
def zeros_like(input, *, dtype=None, device=None, requires_grad=False,
               memory_format=None) -> Tensor:
    """Zeros with ``input``'s shape, dtype, device and (``preserve_format``) layout."""
    return _made_like(0, input, dtype, device, requires_grad, memory_format, "zeros_like")


def ones_like(input, *, dtype=None, device=None, requires_grad=False,
              memory_format=None) -> Tensor:
    """Ones with ``input``'s shape, dtype, device and (``preserve_format``) layout."""
    return _made_like(1, input, dtype, device, requires_grad, memory_format, "ones_like")


def empty_like(input, *, dtype=None, device=None, requires_grad=False,
               memory_format=None) -> Tensor:
    """An uninitialised tensor with ``input``'s shape, dtype, device and layout."""
    return _made_like(None, input, dtype, device, requires_grad, memory_format, "empty_like")


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False,
              memory_format=None) -> Tensor:
    """``fill_value`` everywhere, with ``input``'s shape, dtype, device and layout."""
    return _made_like(fill_value, input, dtype, device, requires_grad, memory_format,
                      "full_like")


def _finish(arr, dtype, dev, requires_grad) -> Tensor:
    """Wrap a host array as a tensor on ``dev`` (a device or its name), copying if not CPU."""
    dev = _device(dev or default_device())
    if dev.type != "cpu":
        arr = get_backend(dev).asarray(arr)
    t = _wrap(arr, dtype, dev)
    if requires_grad:
        t.requires_grad_(True)
    if _grad_state.modes:
        _traced_constant(t)
    return t


def _num(x, op: str, what: str):
    if isinstance(x, Tensor):
        if x.numel() != 1:
            raise ValueError(f"{op}: {what} must be a number or a one-element tensor, got a "
                             f"tensor of shape {tuple(x.shape)}")
        return x.item()
    if not isinstance(x, (numbers.Real, np.generic)):
        raise TypeError(f"{op}: {what} must be a number, got {type(x).__name__}")
    return x.item() if isinstance(x, np.generic) else x


def arange(start=0, end=None, step=1, *, dtype=None, device=None,
           requires_grad=False) -> Tensor:
    """Values from ``start`` (inclusive) to ``end`` (exclusive) spaced by ``step``.

    int64 when all arguments are integers, else the default float dtype; the length
    is ``ceil((end - start) / step)`` like PyTorch.

    Example:
        >>> ember.arange(5)
        tensor([0, 1, 2, 3, 4])
        >>> ember.arange(0, 1, 0.25)
        tensor([0.0000, 0.2500, 0.5000, 0.7500])
    """
    if end is None:
        start, end = 0, start
    start, end, step = (_num(v, "arange", w) for v, w in
                        ((start, "start"), (end, "end"), (step, "step")))
    if dtype is None:
        ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
        dtype = _dt.int64 if ints else _dt.get_default_dtype()
    dtype = _dt.as_dtype(dtype)
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if not all(math.isfinite(v) for v in (start, end)):
        raise ValueError(f"arange: unsupported range {start} -> {end} (bounds must be finite)")
    if (end - start) * step < 0:
        raise ValueError(f"arange: upper bound and lower bound inconsistent with step sign "
                         f"(start={start}, end={end}, step={step})")
    n = math.ceil((end - start) / step) if not all(
        isinstance(v, numbers.Integral) for v in (start, end, step)) else -((start - end) // step)
    check_new_size((n,), dtype, "arange")
    if dtype.category != _dt.FLOAT and all(isinstance(v, numbers.Integral)
                                           for v in (start, end, step)):
        arr = (start + step * np.arange(n, dtype=np.int64)).astype(dtype.np)
    else:  # NOTE: PyTorch accumulates start + i * step in double, then rounds once
        arr = (start + step * np.arange(n, dtype=np.float64)).astype(dtype.np)
    return _finish(arr, dtype, _device(device or default_device()), requires_grad)


def linspace(start, end, steps: int, *, dtype=None, device=None,
             requires_grad=False) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive (default float dtype).

    Example:
        >>> ember.linspace(0, 1, 5)
        tensor([0.0000, 0.2500, 0.5000, 0.7500, 1.0000])
    """
    start, end = _num(start, "linspace", "start"), _num(end, "linspace", "end")
    steps = int(_num(steps, "linspace", "steps"))
    if steps < 0:
        raise ValueError(f"linspace: number of steps must be non-negative, got {steps}")
    dtype = _dt.as_dtype(dtype)
    check_new_size((steps,), dtype, "linspace")
    return _finish(_linspace_array(start, end, steps, dtype), dtype,
                   _device(device or default_device()), requires_grad)


def _linspace_array(start, end, steps, dtype):
    # NOTE: PyTorch's symmetric formula: the first half counts up from start, the second
    # half down from end, computed in the output float type (double for integer outputs).
    ct = dtype.np if dtype in (_dt.float32, _dt.float64) else np.dtype(
        np.float32 if dtype.is_floating_point else np.float64)
    if steps <= 1:
        return np.full((steps,), start, dtype=ct).astype(dtype.np)
    s, e = ct.type(start), ct.type(end)
    step = (e - s) / ct.type(steps - 1)
    i = np.arange(steps, dtype=ct)
    half = steps // 2
    out = np.where(np.arange(steps) < half, s + step * i, e - step * (ct.type(steps - 1) - i))
    return out.astype(dtype.np)


def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None, device=None,
             requires_grad=False) -> Tensor:
    """``base ** linspace(start, end, steps)``.

    Example:
        >>> ember.logspace(0, 2, 3)
        tensor([  1.,  10., 100.])
    """
    start, end = _num(start, "logspace", "start"), _num(end, "logspace", "end")
    steps = int(_num(steps, "logspace", "steps"))
    if steps < 0:
        raise ValueError(f"logspace: number of steps must be non-negative, got {steps}")
    dtype = _dt.as_dtype(dtype)
    check_new_size((steps,), dtype, "logspace")
    exps = _linspace_array(start, end, steps, _dt.float64)
    arr = np.power(np.float64(base), exps).astype(dtype.np)
    return _finish(arr, dtype, _device(device or default_device()), requires_grad)


def eye(n: int, m: int | None = None, *, dtype=None, device=None,
        requires_grad=False) -> Tensor:
    """A 2-D tensor with ones on the diagonal (``n`` rows, ``m`` columns, default ``n``).

    Example:
        >>> ember.eye(2)
        tensor([[1., 0.],
                [0., 1.]])
    """
    m = n if m is None else m
    for v, w in ((n, "n"), (m, "m")):
        if not isinstance(v, (numbers.Integral, np.integer)) or isinstance(v, bool) or v < 0:
            raise ValueError(f"eye: {w} must be a non-negative integer, got {v!r}")
    dtype = _dt.as_dtype(dtype)
    check_new_size((int(n), int(m)), dtype, "eye")
    return _finish(np.eye(int(n), int(m), dtype=dtype.np), dtype, device, requires_grad)


def _traced_constant(t: Tensor) -> None:
    """Under a tracer (ember.graph), a tensor made from Python data is a graph constant."""
    m = _grad_state.modes[-1]
    if hasattr(m, "constant"):
        m.constant(t)
