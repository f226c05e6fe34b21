"""Small helpers shared by op modules: dims, shapes, method binding, float16/bfloat16."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..errors import ShapeError
from ..tensor import Tensor, _wrap_dim

#: the most bytes one array can span (NumPy's index type, ``intp``, is signed 64-bit).
MAX_BYTES = 2 ** 63 - 1


def min_max(xp, a) -> tuple:
    """``(min, max)`` of non-empty array ``a`` of array module ``xp`` as Python numbers. A
    GPU's array is read back in one device-to-host copy (each ``int(a.min())`` is a copy and
    a stream sync: index checks paid two per op); a NumPy array takes its two reductions."""
    if a.__class__ is np.ndarray:
        return a.min().item(), a.max().item()
    lo, hi = xp.stack((a.min(), a.max())).tolist()
    return lo, hi


def wrap_dim(dim: int, ndim: int, op: str) -> int:
    return _wrap_dim(dim, ndim, op)


def wrap_dims(dim, ndim: int, op: str) -> tuple:
    """Normalise ``dim`` (None, int or sequence) to a sorted tuple of non-negative dims."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int) or hasattr(dim, "__index__") and not isinstance(dim, (tuple, list)):
        return (_wrap_dim(int(dim), ndim, op),)
    out = tuple(sorted(_wrap_dim(int(d), ndim, op) for d in dim))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: dim {tuple(dim)} appears multiple times in the list of dims")
    return out


def as_shape(args, op: str) -> tuple:
    """Accept ``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` shape spellings."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)) or (
            len(args) == 1 and hasattr(args[0], "__iter__") and not isinstance(args[0], Tensor)):
        args = tuple(args[0])
    try:
        shape = tuple(int(s) for s in args)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: shape must be a sequence of ints, got {args!r}") from None
    return shape


def size_args(args: tuple, size, op: str) -> tuple:
    """The shape given positionally (``f(2, 3)``, ``f((2, 3))``) or as ``size=`` (PyTorch's
    keyword), never both."""
    if size is None:
        return args
    if args:
        raise TypeError(f"{op}(): got the size both positionally {args} and as size={size}")
    return (size,)


def method(name: str | None = None):
    """Decorator: also expose ``fn`` as ``Tensor.<name>``."""
    def deco(fn):
        setattr(Tensor, name or fn.__name__, fn)
        return fn
    return deco


def bind(**methods) -> None:
    for k, v in methods.items():
        setattr(Tensor, k, v)


def check_new_size(shape: tuple, dtype, op: str) -> tuple:
    """``shape`` if a new tensor of it and ``dtype`` can exist, else a :class:`ShapeError`.

    Negative sizes, and sizes whose byte count overflows what any array can address,
    fail here with the op, shape and byte count (not deep inside NumPy).

    Example:
        >>> check_new_size((2, 3), ember.float32, "zeros")
        (2, 3)
    """
    for n in shape:
        if n < 0:
            raise ShapeError(f"{op}: trying to create a tensor with negative dimension {n}: "
                             f"{list(shape)}")
    numel = math.prod(shape)
    nbytes = numel * dtype.itemsize
    if nbytes > MAX_BYTES:
        raise ShapeError(f"{op}: the size is too large: a tensor of shape {list(shape)} and "
                         f"dtype {dtype.name} has {numel} elements of {dtype.itemsize} bytes = "
                         f"{nbytes} bytes, which overflows the {MAX_BYTES} bytes (2**63 - 1) "
                         f"any tensor can address")
    return shape


#: NumPy dtypes Ember computes in float32 inside (float16, bfloat16).
LOWP = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_F32 = np.dtype(np.float32)


def is_lowp(*arrays) -> bool:
    """Whether every array is a float16 (or every one a bfloat16) NumPy array."""
    d = arrays[0].dtype
    return d in LOWP and all(a.__class__ is np.ndarray and a.dtype == d for a in arrays)


def lowp_to_f32(a):
    """A float16/bfloat16 array as float32: exact, at memory speed (a C kernel) where a
    compiler exists and the layout allows, else ``astype``."""
    from ..codegen.convert_kernels import to_float32   # NOTE: codegen sits above ops
    return to_float32(a)


def lowp_pair_to_f32(x, y):
    """Two float16/bfloat16 arrays of one dtype (a GEMM's operands) as float32, converted
    in one kernel call; bit-identical to :func:`lowp_to_f32` on each."""
    from ..codegen.convert_kernels import to_float32_pair
    return to_float32_pair(x, y)


def f32_to_lowp(r, dtype, out=None):
    """float32 ``r`` rounded once (to nearest even) to ``dtype``, into ``out`` if given."""
    from ..codegen.convert_kernels import from_float32
    return from_float32(r, dtype, out=out)
