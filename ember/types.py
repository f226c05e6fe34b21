"""``ember.types``: the type aliases PyTorch's annotations use (``torch.types``).

Example:
    >>> def scale(x: ember.Tensor, by: ember.types.Number) -> ember.Tensor: ...
"""
from __future__ import annotations

from typing import Sequence, Union

from .device import device as _device
from .dtypes import DType as _dtype
from .tensor import Tensor as _Tensor

__all__ = ["Number", "Device", "_dtype", "_size", "_int", "_float", "_bool", "_complex",
           "FileLike", "PySymType", "IntLikeType", "FloatLikeType", "TensorOrTensors"]

_int, _float, _bool, _complex = int, float, bool, complex
Number = Union[int, float, bool]
Device = Union[_device, str, int, None]
_size = Sequence[int]
IntLikeType = int
FloatLikeType = float
PySymType = Union[int, float, bool]
TensorOrTensors = Union[_Tensor, Sequence[_Tensor]]
FileLike = Union[str, "os.PathLike[str]", "typing.IO[bytes]"]
