"""Ember dtypes and PyTorch's type-promotion rules.

A :class:`DType` is a small immutable descriptor wrapping the NumPy dtype that
backs it (bfloat16 comes from ``ml_dtypes``). Promotion follows PyTorch:
categories are ordered bool < integer < floating < complex; when operands of different
categories meet, the higher category wins (a complex operand meeting a wider floating one
widens to the complex dtype of that float: float64 + complex64 -> complex128); dimensioned tensors outrank
zero-dim tensors, which outrank Python scalars, unless the weaker operand has a
higher category (then a zero-dim tensor contributes its dtype and a Python
scalar the default dtype of its category).

Example:
    >>> import ember as em
    >>> (em.ones(3, dtype=em.int32) + 2.5).dtype
    ember.float32
"""
from __future__ import annotations

import builtins as _b

import ml_dtypes
import numpy as np

__all__ = [
    "DType", "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32",
    "int64", "uint8", "bool", "half", "float", "double", "long", "int", "short",
    "complex64", "complex128", "cfloat", "cdouble",
    "promote_types", "result_type", "get_default_dtype", "set_default_dtype",
    "as_dtype", "finfo", "iinfo",
]

BOOL, INT, FLOAT, COMPLEX = 0, 1, 2, 3


class DType:
    """A tensor element type (``ember.float32``...)."""

    __slots__ = ("name", "np", "itemsize", "category", "is_floating_point", "is_signed",
                 "is_complex", "is_inexact", "_rank")

    def __init__(self, name: str, np_dtype, category: int, rank: int):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.category = category
        self.is_floating_point = category == FLOAT
        self.is_signed = category >= FLOAT or (category == INT and self.np.kind == "i")
        self.is_complex = category == COMPLEX
        # NOTE: floating or complex: the dtypes autograd differentiates (PyTorch's
        # is_floating_point() is False for complex, so it cannot be the test).
        self.is_inexact = category >= FLOAT
        self._rank = rank

    def to_real(self) -> "DType":
        """The real dtype of this complex dtype's parts (``complex64`` -> ``float32``);
        other dtypes return themselves."""
        return _complex_to_real.get(self, self)

    def to_complex(self) -> "DType":
        """The complex dtype whose parts have this floating dtype (``float64`` ->
        ``complex128``; float16/bfloat16 -> ``complex64``, Ember has no ``chalf``)."""
        if self.category == COMPLEX:
            return self
        if self.category != FLOAT:
            raise TypeError(f"to_complex: {self} is not a floating dtype")
        return complex128 if self is float64 else complex64

    def __repr__(self) -> str:
        return f"ember.{self.name}"

    def __reduce__(self):
        return (as_dtype, (self.name,))


bool_ = DType("bool", np.bool_, BOOL, 0)
uint8 = DType("uint8", np.uint8, INT, 1)
int8 = DType("int8", np.int8, INT, 1)
int16 = DType("int16", np.int16, INT, 2)
int32 = DType("int32", np.int32, INT, 3)
int64 = DType("int64", np.int64, INT, 4)
float16 = DType("float16", np.float16, FLOAT, 1)
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, FLOAT, 1)
float32 = DType("float32", np.float32, FLOAT, 2)
float64 = DType("float64", np.float64, FLOAT, 3)
complex64 = DType("complex64", np.complex64, COMPLEX, 2)
complex128 = DType("complex128", np.complex128, COMPLEX, 3)
_complex_to_real = {complex64: float32, complex128: float64}

globals()["bool"] = bool_
half, float, double = float16, float32, float64  # noqa: A001 - PyTorch aliases
long, int, short = int64, int32, int16  # noqa: A001
cfloat, cdouble = complex64, complex128

ALL = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64,
       complex64, complex128)
COMPLEX_TYPES = (complex64, complex128)
FLOATING = (float16, bfloat16, float32, float64)
INTEGRAL = (uint8, int8, int16, int32, int64)

_by_name = {d.name: d for d in ALL}
_by_name.update(half=float16, float=float32, double=float64, long=int64, int=int32,
                short=int16, cfloat=complex64, cdouble=complex128)
_by_np = {d.np: d for d in ALL}

_default_float = float32


def get_default_dtype() -> DType:
    """The dtype of floating tensors created from Python floats (float32 unless changed)."""
    return _default_float


def set_default_dtype(d: DType) -> None:
    """Set the default floating dtype (float32 or float64, like ``torch.set_default_dtype``)."""
    global _default_float
    d = as_dtype(d)
    if d not in (float32, float64, float16, bfloat16):
        raise TypeError(f"set_default_dtype: only floating dtypes are allowed, got {d}")
    _default_float = d


def as_dtype(d) -> DType:
    """Convert an Ember dtype, NumPy dtype, Python type or name to an Ember :class:`DType`."""
    if d.__class__ is DType:
        return d
    if d is None:
        return _default_float
    if isinstance(d, str):
        try:
            return _by_name[d.replace("ember.", "").replace("torch.", "")]
        except KeyError:
            raise TypeError(f"unknown dtype {d!r}; valid: {sorted(_by_name)}") from None
    if d is builtins_bool:
        return bool_
    if d is builtins_int:
        return int64
    if d is builtins_float:
        return _default_float
    if d is builtins_complex:
        return _default_for(COMPLEX)
    try:
        return _by_np[np.dtype(d)]
    except (KeyError, TypeError):
        raise TypeError(f"dtype {d!r} is not supported by Ember; valid: "
                        f"{[x.name for x in ALL]}") from None


builtins_bool, builtins_int, builtins_float = _b.bool, _b.int, _b.float
builtins_complex = _b.complex


def _promote_same_category(a: DType, b: DType) -> DType:
    if a.category == COMPLEX:
        return a if a._rank >= b._rank else b
    if a.category == FLOAT:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a._rank >= b._rank else b
    if a.category == INT:
        return _by_np[np.promote_types(a.np, b.np)]
    return bool_


_promo_cache: dict = {}


def promote_types(a: DType, b: DType) -> DType:
    """The smallest dtype both ``a`` and ``b`` can be converted to (``torch.promote_types``)."""
    key = (a, b)
    r = _promo_cache.get(key)
    if r is None:
        if a is b:
            r = a
        elif a.category != b.category:
            r = a if a.category > b.category else b
            if r.category == COMPLEX:   # float64 + complex64 -> complex128
                lo = b if r is a else a
                if lo.category == FLOAT and lo._rank > r._rank:
                    r = lo.to_complex()
        else:
            r = _promote_same_category(a, b)
        _promo_cache[key] = r
    return r


def scalar_category(x) -> int:
    if x.__class__ is builtins_bool or isinstance(x, np.bool_):
        return BOOL
    if isinstance(x, (builtins_int, np.integer)):
        return INT
    if isinstance(x, (builtins_complex, np.complexfloating)):
        return COMPLEX
    return FLOAT


def _default_for(category: int) -> DType:
    if category == COMPLEX:
        return complex128 if _default_float is float64 else complex64
    return (bool_, int64, _default_float)[category]


def _combine(higher: DType, lower: DType) -> DType:
    """PyTorch's ``combine_categories``: ``higher`` (the stronger operand class) wins
    unless ``lower`` has a higher category; a complex ``lower`` meeting a floating
    ``higher`` keeps the float's precision (float64 tensor + complex scalar -> complex128).
    """
    if lower.category <= higher.category:
        return higher
    if lower.category == COMPLEX and higher.category == FLOAT:
        return higher.to_complex()
    return lower


def result_type(*operands) -> DType:
    """The dtype an elementwise op over ``operands`` computes in (PyTorch's rules).

    Operands are tensors (anything with ``.dtype`` and ``.ndim``), Ember dtypes
    or Python scalars.
    """
    dim = zero = None
    scat = -1
    for x in operands:
        d = getattr(x, "dtype", None)
        if d is not None and d.__class__ is DType:
            if x.ndim:
                dim = d if dim is None else promote_types(dim, d)
            else:
                zero = d if zero is None else promote_types(zero, d)
        elif x.__class__ is DType:
            dim = x if dim is None else promote_types(dim, x)
        else:
            scat = max(scat, scalar_category(x))
    r = dim
    if zero is not None:
        r = zero if r is None else _combine(r, zero)
    if scat >= 0 and (r is None or scat > r.category):
        r = _default_for(scat) if r is None else _combine(r, _default_for(scat))
    if r is None:
        raise TypeError("result_type needs at least one operand")
    return r


class finfo:
    """Machine limits for floating dtypes (``torch.finfo``)."""

    def __init__(self, d=None):
        d = as_dtype(d).to_real()   # NOTE: finfo(complex64) describes its float32 parts
        if not d.is_floating_point:
            raise TypeError(f"finfo: {d} is not a floating dtype; use iinfo")
        fi = ml_dtypes.finfo(d.np) if d is bfloat16 else np.finfo(d.np)
        self.dtype = d
        self.bits = d.itemsize * 8
        self.eps = _b.float(fi.eps)
        self.max = _b.float(fi.max)
        self.min = _b.float(fi.min)
        self.tiny = self.smallest_normal = _b.float(fi.tiny)
        self.resolution = _b.float(fi.resolution)


class iinfo:
    """Machine limits for integer dtypes (``torch.iinfo``)."""

    def __init__(self, d):
        d = as_dtype(d)
        if d.category != INT:
            raise TypeError(f"iinfo: {d} is not an integer dtype")
        ii = np.iinfo(d.np)
        self.dtype, self.bits, self.max, self.min = d, d.itemsize * 8, _b.int(ii.max), _b.int(ii.min)
