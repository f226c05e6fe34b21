"""Argument checks shared by ``ember.linalg``: PyTorch's messages, naming the op and shapes."""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..tensor import Tensor

_NAMES = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
          "bool": "Bool", "float16": "Half", "bfloat16": "BFloat16"}


def tensor_arg(op: str, x, name: str = "A") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected {name} to be a Tensor, got {type(x).__name__}")
    return x


_REAL = ("float32", "float64")
_ANY = _REAL + ("complex64", "complex128")


def floating(op: str, x, name: str = "A", kinds=_ANY) -> Tensor:
    """``x`` if of a LAPACK type (float32/float64/complex64/complex128; ``kinds=_REAL`` for
    the functions Ember implements for real input only), else PyTorch's dtype error."""
    tensor_arg(op, x, name)
    if x.dtype.name not in kinds:
        got = _NAMES.get(x.dtype.name, x.dtype.name)
        raise DTypeError(f"{op}: Expected a floating point or complex tensor as input. Got "
                         f"{got} (Ember's {op} takes "
                         f"{'float32 and float64' if kinds is _REAL else 'float32, float64, complex64 and complex128'})")
    return x


def matrices(op: str, x, name: str = "A", kinds=_ANY) -> Tensor:
    floating(op, x, name, kinds)
    if x.ndim < 2:
        raise ShapeError(f"{op}: The input tensor {name} must have at least 2 dimensions, "
                         f"got shape {tuple(x.shape)}")
    return x


def square(op: str, x, name: str = "A", kinds=_ANY) -> Tensor:
    matrices(op, x, name, kinds)
    m, n = x.shape[-2:]
    if m != n:
        raise ShapeError(f"{op}: {name} must be batches of square matrices, but they are "
                         f"{m} by {n} matrices")
    return x


def same_dtype(op: str, a: Tensor, b: Tensor, names=("A", "B")) -> None:
    if a.dtype is not b.dtype:
        raise DTypeError(f"{op}: Expected {names[0]} and {names[1]} to have the same dtype, but "
                         f"found {names[0]} of type {a.dtype.name} and {names[1]} of type "
                         f"{b.dtype.name} instead")


def rows_match(op: str, A: Tensor, B: Tensor, left: bool = True) -> None:
    k = A.shape[-1] if left else A.shape[-2]
    got = B.shape[-2] if left else B.shape[-1]
    if k != got:
        side = "A.size(-1) == B.size(-2)" if left else "B.size(-1) == A.size(-2)"
        raise ShapeError(f"{op}: Incompatible shapes of A and B for the equation "
                         f"{'AX = B' if left else 'XA = B'} ({tuple(A.shape)} and "
                         f"{tuple(B.shape)}): need {side}")


def batch_shape(op: str, *xs) -> tuple:
    from ..ops.dispatch import broadcast_shapes
    return broadcast_shapes(*(tuple(x.shape[:-2]) for x in xs), op=f"{op} (batch dims)")


def outable(fn):
    """Give ``fn`` PyTorch's ``out=``: the result (or each result of a tuple) is copied into
    the given tensor(s) of the same shape, which are returned (not differentiable)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, out=None, **kwargs):
        r = fn(*args, **kwargs)
        if out is None:
            return r
        from ..ops.inplace import copy_into_out
        if isinstance(r, tuple):
            if not isinstance(out, (tuple, list)) or len(out) != len(r):
                raise TypeError(f"{fn.__name__}: out= must be a tuple of {len(r)} tensors, got "
                                f"{type(out).__name__}")
            done = [copy_into_out(o, x.to(o.dtype)) for o, x in zip(out, r)]
            return type(r)(*done) if hasattr(r, "_fields") else tuple(done)
        return copy_into_out(out, r.to(out.dtype) if r.dtype is not out.dtype else r)
    return wrapper
