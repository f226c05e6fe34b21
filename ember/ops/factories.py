"""Tensor factories: tensor, as_tensor, from_numpy, zeros/ones/full/empty and *_like."""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..device import device as _device, get_backend
from ..tensor import Tensor, _wrap, from_array
from ._util import as_shape

__all__ = ['tensor', 'as_tensor', 'from_numpy', 'from_dlpack', 'zeros', 'ones', 'empty', 'full', 'zeros_like', 'ones_like', 'empty_like', 'full_like']


def _infer_dtype(data) -> _dt.DType:
    """PyTorch's inference: bools -> bool, ints -> int64, floats -> default float."""
    arr = np.asarray(data)
    k = arr.dtype.kind
    if k == "b":
        return _dt.bool_
    if k in "iu":
        return _dt.int64 if arr.dtype != np.uint8 or not isinstance(data, np.ndarray) else _dt.uint8
    if k == "f":
        if isinstance(data, np.ndarray) or isinstance(data, np.generic):
            return _dt.as_dtype(arr.dtype)
        return _dt.get_default_dtype()
    if k == "V" or arr.dtype == _dt.bfloat16.np:
        return _dt.as_dtype(arr.dtype)
    raise TypeError(f"tensor(): can't convert data of NumPy dtype {arr.dtype} "
                    f"(from {type(data).__name__}) to a tensor")


def _nested_tensors(data):
    if isinstance(data, Tensor):
        return data.detach()._data
    if isinstance(data, (list, tuple)) and data and any(isinstance(d, (Tensor, list, tuple))
                                                        for d in data):
        return [_nested_tensors(d) for d in data]
    return data


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor copying ``data`` (nested lists, scalars, NumPy arrays, tensors).

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).dtype
        ember.int64
    """
    data = _nested_tensors(data)
    if dtype is None:
        if isinstance(data, np.ndarray):
            dtype = _dt.as_dtype(data.dtype)
        else:
            dtype = _infer_dtype(data)
    else:
        dtype = _dt.as_dtype(dtype)
    dev = _device(device or "cpu")
    try:
        arr = np.array(data, dtype=dtype.np)
    except (ValueError, TypeError) as e:
        raise TypeError(f"tensor(): could not convert {type(data).__name__} to a tensor of "
                        f"{dtype}: {e}") from None
    if dev.type != "cpu":
        arr = get_backend(dev).asarray(arr)
    t = _wrap(arr, dtype, dev)
    if requires_grad:
        t.requires_grad_(True)
    return t


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Like :func:`tensor` but shares memory with a tensor or NumPy array when it can."""
    if isinstance(data, Tensor):
        t = data
        if dtype is not None:
            t = t.to(dtype)
        if device is not None:
            t = t.to(device)
        return t
    if isinstance(data, np.ndarray) and (device is None or _device(device).type == "cpu"):
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
    return from_array(np.from_dlpack(ext), _device("cpu"))


def _make(fill, shape, dtype, device, requires_grad, op):
    shape = as_shape(shape, op)
    if any(s < 0 for s in shape):
        raise ValueError(f"{op}: negative dimension in shape {shape}")
    dtype = _dt.as_dtype(dtype)
    dev = _device(device or "cpu")
    be = get_backend(dev)
    arr = be.empty(shape, dtype.np)
    if fill is not None:
        arr.fill(fill)
    t = _wrap(arr, dtype, dev)
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor of zeros (``torch.zeros``)."""
    return _make(0, size, dtype, device, requires_grad, "zeros")


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor of ones (``torch.ones``)."""
    return _make(1, size, dtype, device, requires_grad, "ones")


def empty(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    """An uninitialised tensor (``torch.empty``)."""
    return _make(None, size, dtype, device, requires_grad, "empty")


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor filled with ``fill_value``; dtype inferred from it like PyTorch."""
    if dtype is None:
        dtype = _dt.result_type(fill_value)
    return _make(fill_value, (size,) if isinstance(size, int) else size, dtype, device,
                 requires_grad, "full")


def _like(x, dtype, device):
    return (x._dtype if dtype is None else _dt.as_dtype(dtype)), (device or x._device)


def zeros_like(input, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    dt, dev = _like(input, dtype, device)
    return _make(0, input.shape, dt, dev, requires_grad, "zeros_like")


def ones_like(input, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    dt, dev = _like(input, dtype, device)
    return _make(1, input.shape, dt, dev, requires_grad, "ones_like")


def empty_like(input, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    dt, dev = _like(input, dtype, device)
    return _make(None, input.shape, dt, dev, requires_grad, "empty_like")


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    dt, dev = _like(input, dtype, device)
    return _make(fill_value, input.shape, dt, dev, requires_grad, "full_like")
