"""Batch assembly: :func:`default_collate` and :func:`default_convert` (PyTorch's rules).

Also the worker transport: Ember tensors refuse pickling, so results cross process
boundaries as NumPy arrays (:func:`pack`) and are rebuilt as tensors in the main
process (:func:`unpack`).

Example:
    >>> b = default_collate([(ember.tensor([1., 2.]), 0), (ember.tensor([3., 4.]), 1)])
    >>> b[0].shape, b[1].tolist()
    (ember.Size([2, 2]), [0, 1])
"""
from __future__ import annotations

import collections.abc as abc

import numpy as np

from .. import dtypes as _dt
from ..ops.factories import from_numpy, tensor
from ..ops.join import stack
from ..tensor import Tensor

__all__ = ["default_collate", "default_convert"]


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _numeric_array(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind in "biuf" or \
        (isinstance(x, np.ndarray) and x.dtype == _dt.bfloat16.np)


def _same_mapping(like, out: dict):
    """``out`` as ``type(like)`` when that type can be built from a dict."""
    if type(like) is dict:
        return out
    try:
        return type(like)(out)
    except TypeError:
        return out


def default_convert(data):
    """NumPy arrays/scalars → tensors, recursively through dicts and sequences (no stacking).

    Example:
        >>> default_convert({"x": np.zeros(2)})["x"].dtype
        ember.float64
    """
    if isinstance(data, Tensor):
        return data
    if _numeric_array(data):
        return from_numpy(np.require(data, requirements="C")) if isinstance(data, np.ndarray) \
            else tensor(data)
    if isinstance(data, abc.Mapping):
        return _same_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, abc.Sequence) and not isinstance(data, (str, bytes)):
        return [default_convert(d) for d in data]
    return data


def default_collate(batch):
    """Merge a list of samples into a batch, like ``torch.utils.data.default_collate``.

    Tensors and NumPy arrays are stacked along a new dim 0; Python floats become a
    float64 tensor, ints an int64 tensor, bools a bool tensor; strings stay a list;
    dicts, namedtuples and sequences are collated field by field (tuples give lists).

    Example:
        >>> default_collate([{"a": 1.0}, {"a": 2.0}])["a"].dtype
        ember.float64
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if not _numeric_array(elem):
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, "
                            f"numbers, dicts or lists; found numpy array of dtype {elem.dtype}")
        return from_numpy(np.ascontiguousarray(np.stack(batch)))
    if isinstance(elem, np.generic) and _numeric_array(elem):
        return from_numpy(np.array(batch))
    if isinstance(elem, bool):
        return tensor(batch, dtype=_dt.bool_)
    if isinstance(elem, float):
        return tensor(batch, dtype=_dt.float64)
    if isinstance(elem, int):
        return tensor(batch, dtype=_dt.int64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, abc.Mapping):
        return {k: default_collate([d[k] for d in batch]) for k in elem}
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, abc.Sequence):
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError("default_collate: each element in list of batch should be of "
                               f"equal size, got sizes {sorted({len(e) for e in batch})}")
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, "
                    f"dicts or lists; found {type(elem).__name__}")


# ---------------------------------------------------------------- worker transport
class _Packed:
    """A tensor in transit: host array + dtype name (+ requires_grad)."""

    __slots__ = ("array", "dtype", "requires_grad")

    def __init__(self, t: Tensor) -> None:
        self.array = np.array(t.detach().cpu().numpy(), order="C")
        self.dtype, self.requires_grad = t.dtype.name, bool(t.requires_grad)

    def __getstate__(self):
        return self.array, self.dtype, self.requires_grad

    def __setstate__(self, state) -> None:
        self.array, self.dtype, self.requires_grad = state


def _map(data, fn):
    if isinstance(data, dict):
        return _same_mapping(data, {k: _map(v, fn) for k, v in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(_map(d, fn) for d in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_map(d, fn) for d in data)
    return fn(data)


def pack(data):
    """Replace every tensor in a nested structure by a picklable :class:`_Packed`."""
    return _map(data, lambda x: _Packed(x) if isinstance(x, Tensor) else x)


def _unpack_one(x):
    if not isinstance(x, _Packed):
        return x
    t = from_numpy(x.array)
    if t.dtype.name != x.dtype:
        t = t.to(_dt.as_dtype(x.dtype))
    return t.requires_grad_(True) if x.requires_grad else t


def unpack(data):
    """Inverse of :func:`pack` (in the main process)."""
    return _map(data, _unpack_one)
