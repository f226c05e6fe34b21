"""``ember.linalg``: vector, matrix and general norms, condition numbers, rank."""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..ops.reduce_stats import norm as _vnorm
from . import _checks as C
from ._decomp import eigvalsh, svdvals
from ._solve import inv

__all__ = ["vector_norm", "matrix_norm", "norm", "cond", "matrix_rank"]

_INF = math.inf


@C.outable
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """``sum(|x|^ord)^(1/ord)`` over ``dim`` (all dims if None), ``ord`` any float,
    ``inf``/``-inf`` (max/min of ``|x|``) or 0 (count of nonzeros) (``torch.linalg.vector_norm``).
    The gradient at 0 is 0 (PyTorch's subgradient)."""
    C.floating("linalg.vector_norm", x if dtype is None else x.to(dtype), "x")
    if isinstance(ord, str):
        raise ValueError(f"linalg.vector_norm: ord must be a number, got {ord!r} (use "
                         f"linalg.matrix_norm for 'fro' and 'nuc')")
    if isinstance(dim, int):
        dim = (dim,)
    return _vnorm(x, p=float(ord), dim=dim, keepdim=keepdim, dtype=dtype)


def _to_end(A, dim):
    d0, d1 = (d % A.ndim for d in dim)
    if d0 == d1:
        raise ValueError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, "
                         f"{dim[1]})")
    return A.movedim((d0, d1), (-2, -1)), (d0, d1)


def _keep(r, dims, keepdim):
    if keepdim:
        for d in sorted(dims):
            r = r.unsqueeze(d)
    return r


@C.outable
def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """Matrix norm over the two dims ``dim`` (``torch.linalg.matrix_norm``): 'fro', 'nuc'
    (sum of singular values), 2 / -2 (largest / smallest singular value), 1 / -1 (max / min
    absolute column sum), inf / -inf (max / min absolute row sum)."""
    op = "linalg.matrix_norm"
    A = A.to(dtype) if dtype is not None else A
    C.matrices(op, A)
    if len(dim) != 2:
        raise ValueError(f"{op}: dim must be a 2-tuple. Got {tuple(dim)}")
    if ord == "fro":
        return _vnorm(A, 2.0, tuple(dim), keepdim)
    M, dims = _to_end(A, dim)
    if ord == "nuc" or ord in (2, -2):
        S = svdvals(M)
        if ord == 2 and S.shape[-1] == 0:      # PyTorch: the 2-norm of an empty matrix is 0
            return _keep(S.sum(-1), dims, keepdim)
        r = S.sum(-1) if ord == "nuc" else (S.amax(-1) if ord == 2 else S.amin(-1))
        return _keep(r, dims, keepdim)
    if ord in (1, -1, _INF, -_INF):
        sum_dim, ext_dim = (-2, -1) if ord in (1, -1) else (-1, -2)
        s = M.abs().sum(sum_dim, keepdim=True)
        r = s.amax(ext_dim, keepdim=True) if ord > 0 else s.amin(ext_dim, keepdim=True)
        return _keep(r.squeeze(-1).squeeze(-1), dims, keepdim)
    raise ValueError(f"{op}: Order {ord} not supported. Valid orders: 'fro', 'nuc', inf, "
                     f"-inf, 1, -1, 2, -2")


@C.outable
def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """Vector or matrix norm (``torch.linalg.norm``): ``dim`` of one dim or ``ord=None`` with
    ``dim=None`` (the flattened 2-norm) is a vector norm; two dims, or a 2-D input with
    ``ord`` given, a matrix norm."""
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None:
        if len(dim) == 1:
            return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
        if len(dim) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
        raise ValueError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. "
                         f"Got {list(dim)}")
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if A.ndim == 1:
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    if A.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    raise ValueError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D "
                     f"or 2D. Got {A.ndim}D.")


@C.outable
def cond(A, p=None, *, out=None):
    """Condition number ``norm(A, p) * norm(inv(A), p)``; for p in (None, 2, -2) the ratio of
    extreme singular values (``torch.linalg.cond``)."""
    C.matrices("linalg.cond", A)
    if p is None or p in (2, -2):
        S = svdvals(A)
        if S.shape[-1] == 0:                   # PyTorch: an empty matrix has cond 0
            return S.sum(-1)
        hi, lo = S.amax(-1), S.amin(-1)
        return hi / lo if p != -2 else lo / hi
    C.square("linalg.cond", A)
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


@C.outable
def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, tol=None, out=None):
    """Number of singular values (|eigenvalues| with ``hermitian``) above
    ``max(atol, rtol * largest)``; ``rtol`` defaults to ``eps * max(m, n)`` unless ``atol``
    > 0 is given (``torch.linalg.matrix_rank``; ``tol`` is the legacy ``atol``)."""
    C.matrices("linalg.matrix_rank", A)
    if tol is not None:
        atol = tol
    atol = float(atol) if atol is not None else 0.0
    if rtol is None:
        rtol = np.finfo(A.dtype.np).eps * max(A.shape[-2:]) if atol <= 0 else 0.0
    A = A.detach()
    S = eigvalsh(A).abs() if hermitian else svdvals(A)
    if S.shape[-1] == 0:
        return (S.sum(-1) * 0).to(_dt.int64)
    cut = (S.amax(-1, keepdim=True) * float(rtol)).clamp(min=atol)
    return (S > cut).sum(-1).to(_dt.int64)
