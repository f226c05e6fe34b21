"""``ember.linalg``: factorizations (Cholesky, QR, SVD, eigh, LU) and LU solves."""
from __future__ import annotations

import numpy as np

from ..ops.batching import per_example
from .. import dtypes as _dt
from ..autograd.grad_mode import state as _state
from ..ops import _lapack
from ..ops.dispatch import apply as _apply
from ..ops.factories import empty, from_numpy, zeros
from ..ops.linalg_lapack import cholesky_p
from ..ops.linalg_lapack2 import (eigh_p, eigh_parts, eigvalsh_p, lu_factor_p, lu_parts,
                                  lu_unpack_dense, qr_p, qr_parts, svd_p, svd_parts, svdvals_p)
from . import _checks as C
from . import _types as T
from ._solve import _info, solve_triangular

__all__ = ["cholesky", "cholesky_ex", "qr", "svd", "svdvals", "eigh", "eigvalsh", "eig", "eigvals",
           "lu_factor", "lu_factor_ex", "lu", "lu_solve"]


def _needs_grad(A) -> bool:
    """Whether an op on ``A`` would be differentiated (reverse or forward mode)."""
    if A.requires_grad and _state.grad_enabled:
        return True
    while A is not None:      # NOTE: inside vmap, an outer jvp's tangents sit on the physical
        if getattr(A, "_fw", None):
            return True
        A = getattr(A, "_phys", None)
    return False


# ------------------------------------------------------------------ Cholesky
def _cholesky(op, A, upper, check_errors):
    """The factor; ``upper`` reads A's upper triangle (as PyTorch): the lower factor of Aᴴ,
    conjugate-transposed."""
    C.square(op, A)
    L = _apply(cholesky_p, (A.mH if upper else A,), {"check_errors": check_errors})
    return L.mH if upper else L


@C.outable
def cholesky(A, *, upper=False, out=None):
    """Cholesky factor ``L`` (lower; ``upper=True``: ``U = L^H``) of a symmetric
    positive-definite matrix, reading its lower triangle (the upper one with ``upper=True``,
    as PyTorch) (``torch.linalg.cholesky``).

    Raises:
        LinAlgError: not positive-definite, naming the batch element and the leading minor.

    Example:
        >>> ember.linalg.cholesky(ember.tensor([[4., 2.], [2., 2.]]))
        tensor([[2., 0.],
                [1., 1.]])
    """
    return _cholesky("linalg.cholesky", A, upper, True)


@C.outable
def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    """``(L, info)``: ``info`` > 0 is the order of the first leading minor that is not
    positive-definite, instead of an error (``torch.linalg.cholesky_ex``)."""
    L = _cholesky("linalg.cholesky_ex", A, upper, check_errors)
    batch = tuple(A.shape[:-2])
    d = L.detach().diagonal(0, -2, -1)
    d = d.real if d.dtype.is_complex else d
    if d.numel() and not bool((d > 0).all()):
        a = (A.mH if upper else A).detach().cpu().numpy()
        info = _info(_lapack.potrf_each(a)[1], batch, A.device)
    else:
        info = zeros(batch, dtype=_dt.int32, device=A.device)
    return T.cholesky_ex(L, info)


# ------------------------------------------------------------------ QR
@C.outable
def qr(A, mode="reduced", *, out=None):
    """QR decomposition ``A = Q R`` with ``mode`` 'reduced' (Q m×k), 'complete' (Q m×m) or
    'r' (R only; Q is an empty tensor) (``torch.linalg.qr``)."""
    C.matrices("linalg.qr", A)
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr received unrecognized mode '{mode}' but expected one of "
                         f"'reduced' (default), 'r', or 'complete'")
    Q, R = qr_parts(_apply(qr_p, (A,), {"mode": mode}), tuple(A.shape), mode)
    if mode == "r":
        Q = empty(0, dtype=A.dtype)
    return T.qr(Q, R)


# ------------------------------------------------------------------ SVD
@C.outable
def svd(A, full_matrices=True, *, driver=None, out=None):
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, singular values descending
    (``torch.linalg.svd``). Gradients follow PyTorch's ``svd_backward``: with
    ``full_matrices=True`` the extra columns of U / rows of Vh get no gradient, and
    repeated singular values make gradients through U, Vh inf/nan (only ``S`` used: finite).
    ``driver`` is accepted for PyTorch compatibility (a CUDA option) and ignored."""
    C.matrices("linalg.svd", A)
    U, S, Vh = svd_parts(_apply(svd_p, (A,), {"full_matrices": bool(full_matrices)}),
                         tuple(A.shape), bool(full_matrices))
    return T.svd(U, S.real if S.dtype.is_complex else S, Vh)


@C.outable
def svdvals(A, *, driver=None, out=None):
    """Singular values, descending (``torch.linalg.svdvals``); differentiable (then through
    the full SVD, as PyTorch)."""
    C.matrices("linalg.svdvals", A)
    if _needs_grad(A):
        return svd(A, full_matrices=False).S
    return _apply(svdvals_p, (A,), {})


# ------------------------------------------------------------------ eigh
def _uplo(op, UPLO):
    if UPLO not in ("L", "U"):
        raise ValueError(f"{op}: Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return UPLO


@C.outable
def eigh(A, UPLO="L", *, out=None):
    """``(eigenvalues, eigenvectors)`` of a symmetric matrix, eigenvalues ascending, reading
    the ``UPLO`` triangle (``torch.linalg.eigh``). Gradients through the eigenvectors are
    inf/nan for repeated eigenvalues, as PyTorch documents."""
    C.square("linalg.eigh", A)
    w, Q = eigh_parts(_apply(eigh_p, (A,), {"UPLO": _uplo("linalg.eigh", UPLO)}))
    return T.eigh(w.real if w.dtype.is_complex else w, Q)


@C.outable
def eigvalsh(A, UPLO="L", *, out=None):
    """Eigenvalues of a symmetric matrix, ascending (``torch.linalg.eigvalsh``)."""
    C.square("linalg.eigvalsh", A)
    UPLO = _uplo("linalg.eigvalsh", UPLO)
    if _needs_grad(A):
        return eigh(A, UPLO).eigenvalues
    return _apply(eigvalsh_p, (A,), {"UPLO": UPLO})


# ------------------------------------------------------------------ eig
@C.outable
def eig(A, *, out=None):
    """``(eigenvalues, eigenvectors)`` of a square matrix, both complex (complex64 for
    float32/complex64 input, complex128 otherwise); unit-norm eigenvectors with LAPACK's
    phase (``torch.linalg.eig``). Differentiable (PyTorch's ``linalg_eig_backward``): a loss
    that depends on the eigenvectors' phase raises, as in PyTorch."""
    from ..ops.linalg_eig import eig_p, eig_parts
    C.square("linalg.eig", A, kinds=C._ANY)
    return T.eig(*eig_parts(_apply(eig_p, (A,), {})))


@C.outable
def eigvals(A, *, out=None):
    """Eigenvalues of a square matrix, complex (``torch.linalg.eigvals``)."""
    from ..ops.linalg_eig import eigvals_p
    C.square("linalg.eigvals", A, kinds=C._ANY)
    if _needs_grad(A):
        return eig(A).eigenvalues
    return _apply(eigvals_p, (A,), {})


# ------------------------------------------------------------------ LU
def _lu_factor(op, A, pivot, check_errors):
    C.matrices(op, A)
    if not pivot:
        raise NotImplementedError(f"{op}: LU without pivoting is not implemented on the CPU "
                                  f"(as PyTorch); use pivot=True")
    return lu_parts(_apply(lu_factor_p, (A,), {"check_errors": check_errors}))


@C.outable
def lu_factor(A, *, pivot=True, out=None):
    """``(LU, pivots)``: L (unit diagonal, below) and U packed in one matrix, 1-based int32
    row swaps (``torch.linalg.lu_factor``). Gradients: square matrices."""
    return T.lu_factor(*_lu_factor("linalg.lu_factor", A, pivot, True))


@C.outable
def lu_factor_ex(A, *, pivot=True, check_errors=False, out=None):
    """``(LU, pivots, info)`` without raising; ``info`` = i > 0 where U[i, i] is zero
    (``torch.linalg.lu_factor_ex``)."""
    LU, piv = _lu_factor("linalg.lu_factor_ex", A, pivot, check_errors)
    k = min(A.shape[-2:])
    d = LU.detach().diagonal(0, -2, -1).cpu().numpy()
    zero = d == 0
    first = np.where(zero.any(-1), zero.argmax(-1) + 1, 0) if k else np.zeros(d.shape[:-1])
    return T.lu_factor_ex(LU, piv, _info(first, tuple(A.shape[:-2]), A.device))


@per_example
@C.outable
def lu(A, *, pivot=True, out=None):
    """``(P, L, U)`` with ``A = P L U`` (``torch.linalg.lu``)."""
    LU, piv = _lu_factor("linalg.lu", A, pivot, False)
    return T.lu(*lu_unpack_dense(LU, piv))


def _permute_rows(B, piv):
    """P^T B for LAPACK pivots, as a product with the permutation matrix (BLAS: exact, any
    dtype, differentiable in B)."""
    P = from_numpy(_lapack.permutation_from_pivots(piv.cpu().numpy(), B.shape[-2],
                                                   B.dtype.np)).to(B.device)
    return P.mT @ B


@per_example
@C.outable
def lu_solve(LU, pivots, B, *, left=True, adjoint=False, out=None):
    """Solve ``A X = B`` from :func:`lu_factor`'s output (``torch.linalg.lu_solve``);
    ``adjoint`` solves with ``A^H``, ``left=False`` solves ``X A = B``. Differentiable in
    ``LU`` and ``B``."""
    op = "linalg.lu_solve"
    C.square(op, LU, "LU")
    C.matrices(op, B, "B")
    if not left:   # X A = B  <=>  A^H X^H = B^H
        return lu_solve(LU, pivots, B.mH, left=True, adjoint=not adjoint).mH
    C.rows_match(op, LU, B)
    if not adjoint:    # A = P L U: X = U^{-1} L^{-1} P^T B
        Y = solve_triangular(LU, _permute_rows(B, pivots), upper=False, unitriangular=True)
        return solve_triangular(LU, Y, upper=True)
    # A^H = U^H L^H P^T: X = P L^{-H} U^{-H} B
    Y = solve_triangular(LU.mH, B, upper=False)
    Y = solve_triangular(LU.mH, Y, upper=True, unitriangular=True)
    P = from_numpy(_lapack.permutation_from_pivots(pivots.cpu().numpy(), LU.shape[-1],
                                                   LU.dtype.np)).to(LU.device)
    return P @ Y
