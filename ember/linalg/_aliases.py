"""The top-level ``torch`` names of linear algebra (``ember.det``, ``ember.svd``...) and their
``Tensor`` methods, with PyTorch's legacy signatures, as thin layers over ``ember.linalg``."""
from __future__ import annotations

from ..ops.factories import zeros
from ._checks import outable
from ..ops.select import where
from ..ops.linalg_lapack2 import lu_unpack_dense
from ..tensor import Tensor
from . import _decomp, _funcs, _solve
from ._extra import geqrf, orgqr, ormqr, pca_lowrank, svd_lowrank
from . import _types as T
from ..ops.dispatch import autocast_entry

__all__ = ["det", "logdet", "slogdet", "inverse", "svd", "qr", "cholesky", "cholesky_solve",
           "cholesky_inverse", "pinverse", "matrix_exp", "matrix_power", "lu", "lu_solve",
           "lu_unpack", "triangular_solve", "geqrf", "orgqr", "ormqr", "svd_lowrank",
           "pca_lowrank"]

det = _solve.det
matrix_exp = _funcs.matrix_exp
matrix_power = _funcs.matrix_power


@autocast_entry("inverse")
@outable
def inverse(input, *, out=None):
    """``torch.inverse`` (= :func:`ember.linalg.inv`)."""
    return _solve.inv(input)


@outable
def slogdet(input, *, out=None):
    """``torch.slogdet``: ``(sign, logabsdet)``."""
    return T.slogdet_toplevel(*_solve.slogdet(input))


def logdet(input):
    """``log(det(A))``: nan for a negative determinant, -inf for a singular matrix; complex
    for complex input (``torch.logdet``)."""
    sign, logabs = _solve.slogdet(input)
    if input.dtype.is_complex:      # log det = log|det| + i arg(det)
        return logabs + 1j * sign.angle()
    return where(sign < 0, float("nan"), logabs)


@autocast_entry("svd")
@outable
def svd(input, some=True, compute_uv=True, *, out=None):
    """``torch.svd``: ``(U, S, V)`` — V, not Vh; ``some=False`` gives full U, V; with
    ``compute_uv=False`` U and V are zero-filled, as PyTorch."""
    if not compute_uv:
        S = _decomp.svdvals(input)
        m, n = input.shape[-2:]
        batch = tuple(input.shape[:-2])
        return T.svd_toplevel(zeros(batch + (m, m if not some else min(m, n)),
                                    dtype=input.dtype), S,
                              zeros(batch + (n, n if not some else min(m, n)),
                                    dtype=input.dtype))
    U, S, Vh = _decomp.svd(input, full_matrices=not some)
    return T.svd_toplevel(U, S, Vh.mH)


@autocast_entry("qr")
@outable
def qr(input, some=True, *, out=None):
    """``torch.qr``: reduced (``some``) or complete QR."""
    return T.qr_toplevel(*_decomp.qr(input, "reduced" if some else "complete"))


@autocast_entry("cholesky")
@outable
def cholesky(input, upper=False, *, out=None):
    """``torch.cholesky`` (deprecated in PyTorch for :func:`ember.linalg.cholesky`)."""
    return _decomp.cholesky(input, upper=upper)


@autocast_entry("cholesky_solve")
@outable
def cholesky_solve(B, L, upper=False, *, out=None):
    """Solve ``A X = B`` given the Cholesky factor of ``A`` (``torch.cholesky_solve``: ``L``
    lower, or upper with ``upper=True``); differentiable in ``B`` and ``L``."""
    if upper:
        Y = _solve.solve_triangular(L.mH, B, upper=False)
        return _solve.solve_triangular(L, Y, upper=True)
    Y = _solve.solve_triangular(L, B, upper=False)
    return _solve.solve_triangular(L.mH, Y, upper=True)


@autocast_entry("cholesky_inverse")
@outable
def cholesky_inverse(L, upper=False, *, out=None):
    """``A^{-1}`` from the Cholesky factor of ``A`` (``torch.cholesky_inverse``)."""
    from ..ops.factories import eye
    n = L.shape[-1]
    return cholesky_solve(eye(n, dtype=L.dtype) + L * 0, L, upper)


@autocast_entry("pinverse")
def pinverse(input, rcond=1e-15):
    """``torch.pinverse``: :func:`ember.linalg.pinv` with ``rtol=rcond``."""
    return _solve.pinv(input, rtol=rcond)


@outable
def lu(A, pivot=True, get_infos=False, out=None):
    """``torch.lu`` (= :func:`ember.linalg.lu_factor_ex`): ``(LU, pivots[, infos])``."""
    LU, piv, info = _decomp.lu_factor_ex(A, pivot=pivot)
    return (LU, piv, info) if get_infos else (LU, piv)


@autocast_entry("lu_solve")
@outable
def lu_solve(b, LU_data, LU_pivots, *, out=None):
    """``torch.lu_solve(b, LU_data, LU_pivots)``."""
    return _decomp.lu_solve(LU_data, LU_pivots, b)


@outable
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True, *, out=None):
    """``(P, L, U)`` from :func:`ember.linalg.lu_factor`'s output (``torch.lu_unpack``)."""
    P, L, U = lu_unpack_dense(LU_data, LU_pivots)
    if not unpack_pivots:
        P = zeros(0, dtype=LU_data.dtype)
    if not unpack_data:
        L = U = zeros(0, dtype=LU_data.dtype)
    return T.lu_unpack(P, L, U)


@autocast_entry("triangular_solve")
@outable
def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False, *, out=None):
    """``torch.triangular_solve``: ``(solution, cloned_coefficient)`` of ``A X = b`` (or
    ``A^T X = b``)."""
    M = A.mT if transpose else A
    X = _solve.solve_triangular(M, b, upper=upper != transpose, unitriangular=unitriangular)
    return T.triangular_solve(X, A.clone())


def _bind_methods() -> None:
    for name in ("det", "logdet", "slogdet", "inverse", "svd", "qr", "cholesky",
                 "cholesky_solve", "cholesky_inverse", "pinverse", "matrix_exp",
                 "matrix_power", "lu", "lu_solve", "triangular_solve", "geqrf", "orgqr",
                 "ormqr"):
        setattr(Tensor, name, globals()[name])


_bind_methods()
