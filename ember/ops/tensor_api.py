"""PyTorch's tensor-object API: ``new_*`` factories, ``type()``, the legacy constructors
(``ember.Tensor(2, 3)``, ``ember.LongTensor([1, 2])``), predicates (``is_tensor``,
``is_complex``, ``numel``), ``isclose``/``allclose``, and the memory-placement calls
(``pin_memory``, ``share_memory_``) that a CPU-only build answers truthfully.

Example:
    >>> w = ember.zeros(2, 3, dtype=ember.float64)
    >>> w.new_ones(4).dtype, ember.Tensor(2, 3).shape, ember.LongTensor([1, 2]).dtype
    (ember.float64, ember.Size([2, 3]), ember.int64)
"""
from __future__ import annotations

import numbers

from .. import dtypes as _dt
from ..tensor import Size, Tensor
from . import factories as _f
from ._util import as_shape, size_args

__all__ = ["is_tensor", "is_storage", "numel", "is_floating_point", "is_complex", "is_nonzero",
           "isclose", "allclose", "is_same_size", "FloatTensor", "DoubleTensor", "HalfTensor",
           "BFloat16Tensor", "ByteTensor", "CharTensor", "ShortTensor", "IntTensor",
           "LongTensor", "BoolTensor"]


# ------------------------------------------------------------------ new_* factories
def _like(self: Tensor, dtype, device) -> dict:
    return {"dtype": self.dtype if dtype is None else dtype,
            "device": self.device if device is None else device}


def new_zeros(self, *args, size=None, dtype=None, device=None, requires_grad=False):
    """Zeros of ``size`` with ``self``'s dtype and device unless given (``Tensor.new_zeros``)."""
    size = as_shape(size_args(args, size, "new_zeros"), "new_zeros")
    return _f.zeros(size, **_like(self, dtype, device), requires_grad=requires_grad)


def new_ones(self, *args, size=None, dtype=None, device=None, requires_grad=False):
    """Ones of ``size`` with ``self``'s dtype and device unless given."""
    size = as_shape(size_args(args, size, "new_ones"), "new_ones")
    return _f.ones(size, **_like(self, dtype, device), requires_grad=requires_grad)


def new_empty(self, *args, size=None, dtype=None, device=None, requires_grad=False):
    """An uninitialised tensor of ``size`` with ``self``'s dtype and device unless given."""
    size = as_shape(size_args(args, size, "new_empty"), "new_empty")
    return _f.empty(size, **_like(self, dtype, device), requires_grad=requires_grad)


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """``size`` filled with ``fill_value``, with ``self``'s dtype and device unless given."""
    return _f.full(size, fill_value, **_like(self, dtype, device), requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A copy of ``data`` with ``self``'s dtype and device unless given (``Tensor.new_tensor``).

    Example:
        >>> ember.zeros(1, dtype=ember.float64).new_tensor([1, 2]).dtype
        ember.float64
    """
    if isinstance(data, Tensor):
        data = data.detach()
    return _f.tensor(data, **_like(self, dtype, device), requires_grad=requires_grad)


# ------------------------------------------------------------------ legacy tensor types
#: legacy type name -> dtype (``torch.FloatTensor`` is a float32 CPU tensor).
_LEGACY = {"FloatTensor": _dt.float32, "DoubleTensor": _dt.float64, "HalfTensor": _dt.float16,
           "BFloat16Tensor": _dt.bfloat16, "ByteTensor": _dt.uint8, "CharTensor": _dt.int8,
           "ShortTensor": _dt.int16, "IntTensor": _dt.int32, "LongTensor": _dt.int64,
           "BoolTensor": _dt.bool_}
_LEGACY_OF = {d.name: n for n, d in _LEGACY.items()}


def _legacy_new(dtype: _dt.DType, args: tuple, device, op: str) -> Tensor:
    """PyTorch's legacy constructor: ``T()`` empty, ``T(d0, d1, ...)`` uninitialised of that
    shape (also ``T(ember.Size)``), ``T(data)`` a copy of a sequence/array/tensor."""
    if not args:
        return _f.empty(0, dtype=dtype, device=device)
    if len(args) == 1 and not isinstance(args[0], (numbers.Integral, Size)):
        data = args[0]
        if isinstance(data, Tensor):
            if data.dtype is not dtype:
                raise TypeError(f"{op}(): expected a tensor of dtype {dtype.name}, got "
                                f"{data.dtype.name} (use .to({dtype.name}))")
            return data
        if isinstance(data, numbers.Number) or isinstance(data, (str, bytes)):
            raise TypeError(f"{op}(): data must be a sequence (got {type(data).__name__}); "
                            f"valid: sizes {op}(2, 3), data {op}([1, 2]) or ember.tensor(x) "
                            f"for a scalar")
        return _f.tensor(data, dtype=dtype, device=device)
    if any(isinstance(a, bool) or not isinstance(a, (numbers.Integral, Size)) for a in args):
        raise TypeError(f"{op}(): expected a sequence of data or integer sizes, got "
                        f"{tuple(type(a).__name__ for a in args)}")
    return _f.empty(as_shape(args, op), dtype=dtype, device=device)


def _tensor_new(cls, *args, device=None, dtype=None):
    """``ember.Tensor(...)``: the legacy constructor in the default dtype."""
    if cls is not Tensor:   # NOTE: subclasses (Parameter, Buffer) build themselves
        return object.__new__(cls)
    return _legacy_new(_dt.as_dtype(dtype) if dtype else _dt.get_default_dtype(), args, device,
                       "Tensor")


class _LegacyMeta(type):
    """``isinstance(t, ember.LongTensor)`` is true for int64 CPU tensors, as in PyTorch."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj.device.type == "cpu"


def _legacy_class(name: str, dtype: _dt.DType) -> type:
    def __new__(cls, *args, device=None):
        return _legacy_new(dtype, args, device, name)
    doc = (f"Legacy constructor of {dtype.name} tensors (``torch.{name}``): ``{name}(data)`` "
           f"copies data, ``{name}(d0, d1, ...)`` is uninitialised of that shape.")
    return _LegacyMeta(name, (), {"__new__": __new__, "dtype": dtype, "__doc__": doc,
                                  "__module__": "ember"})


FloatTensor = _legacy_class("FloatTensor", _dt.float32)
DoubleTensor = _legacy_class("DoubleTensor", _dt.float64)
HalfTensor = _legacy_class("HalfTensor", _dt.float16)
BFloat16Tensor = _legacy_class("BFloat16Tensor", _dt.bfloat16)
ByteTensor = _legacy_class("ByteTensor", _dt.uint8)
CharTensor = _legacy_class("CharTensor", _dt.int8)
ShortTensor = _legacy_class("ShortTensor", _dt.int16)
IntTensor = _legacy_class("IntTensor", _dt.int32)
LongTensor = _legacy_class("LongTensor", _dt.int64)
BoolTensor = _legacy_class("BoolTensor", _dt.bool_)


def type_(self, dtype=None, non_blocking: bool = False, **kw):
    """``t.type()``: the legacy type name (``'ember.FloatTensor'``); ``t.type(dtype)``: a cast.

    ``dtype`` may be a dtype, a legacy class (``ember.LongTensor``) or its name
    (``'torch.LongTensor'`` / ``'ember.LongTensor'``).
    """
    if dtype is None:
        return f"ember.{_LEGACY_OF[self.dtype.name]}"
    if isinstance(dtype, _LegacyMeta):
        dtype = dtype.dtype
    elif isinstance(dtype, str) and dtype.rsplit(".", 1)[-1] in _LEGACY:
        dtype = _LEGACY[dtype.rsplit(".", 1)[-1]]
    return self.to(_dt.as_dtype(dtype))


# ------------------------------------------------------------------ predicates
def is_tensor(obj) -> bool:
    """Whether ``obj`` is an Ember tensor (``torch.is_tensor``)."""
    return isinstance(obj, Tensor)


def is_storage(obj) -> bool:
    """Whether ``obj`` is a tensor storage (``torch.is_storage``)."""
    from ..storage import Storage
    return isinstance(obj, Storage)


def numel(input: Tensor) -> int:
    """The number of elements of ``input`` (``torch.numel``)."""
    return input.numel()


def is_floating_point(input: Tensor) -> bool:
    """Whether ``input``'s dtype is a floating point type."""
    return input.dtype.is_floating_point


def is_complex(input: Tensor) -> bool:
    """Whether ``input``'s dtype is complex: always False (Ember has no complex dtypes)."""
    return input.dtype.is_complex


def is_nonzero(input: Tensor) -> bool:
    """The truth of a one-element tensor (``torch.is_nonzero``)."""
    if input.numel() != 1:
        raise RuntimeError(f"is_nonzero(): Boolean value of Tensor with {input.numel()} "
                           f"elements is ambiguous; valid: exactly one element")
    return bool(input)


def is_same_size(input: Tensor, other: Tensor) -> bool:
    """Whether the two tensors have the same shape."""
    return tuple(input.shape) == tuple(other.shape)


def is_signed(self: Tensor) -> bool:
    """Whether the dtype is signed (floats and signed integers)."""
    return self.dtype.is_signed


# ------------------------------------------------------------------ closeness
def isclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """``|input - other| <= atol + rtol * |other|`` elementwise (``torch.isclose``).

    Equal values (infinities included) are close; NaNs only with ``equal_nan``.

    Example:
        >>> ember.isclose(ember.tensor([1.0, 2.0]), ember.tensor([1.0, 2.1]))
        tensor([ True, False])
    """
    if not isinstance(other, Tensor):
        other = _f.tensor(other, dtype=input.dtype, device=input.device)
    if input.dtype is not other.dtype:
        raise TypeError(f"isclose(): expected both tensors to have the same dtype, got "
                        f"{input.dtype.name} and {other.dtype.name}")
    if rtol < 0 or atol < 0:
        raise ValueError(f"isclose(): rtol and atol must be non-negative, got rtol={rtol}, "
                         f"atol={atol}")
    eq = input == other
    if input.dtype is _dt.bool_:
        return eq
    a, b = input.detach(), other.detach()
    if not a.dtype.is_floating_point:
        a, b = a.to(_dt.float64), b.to(_dt.float64)
    err = (a - b).abs()
    close = eq | (err.isfinite() & (err <= atol + rtol * b.abs()))   # NOTE: inf vs -inf
    if equal_nan:
        close = close | (a.isnan() & b.isnan())
    return close


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether every element of ``input`` is close to ``other`` (see :func:`isclose`)."""
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


# ------------------------------------------------------------------ memory placement
def pin_memory(self: Tensor, device=None) -> Tensor:
    """A copy in page-locked host memory when a CUDA device is present (``convert.pin``);
    ``self`` without one: there is no page-locked staging memory to use."""
    from ..device.base import cuda_backend
    if cuda_backend()[0] is None and self._device.type == "cpu":
        return self
    from .convert import pin
    return pin(self)


def is_pinned(self: Tensor, device=None) -> bool:
    """Whether this tensor is in page-locked host memory (:func:`pin_memory`)."""
    return self._pinned


Tensor.__new__ = _tensor_new
for _name in ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "isclose",
              "allclose", "is_complex", "is_nonzero", "is_same_size", "is_signed",
              "pin_memory", "is_pinned"):
    setattr(Tensor, _name, globals()[_name])
Tensor.type = type_
