"""``ember.linalg``: LDLᵀ (``ldl_factor``/``ldl_solve``), LAPACK's compact QR (``geqrf``,
``orgqr``, ``ormqr``) and the randomized low-rank SVD/PCA (``svd_lowrank``,
``pca_lowrank``). PyTorch has no derivative for ``ldl_*`` and ``geqrf`` either."""
from __future__ import annotations

from ..ops.batching import per_example
from .. import dtypes as _dt
from ..ops.dispatch import apply as _apply
from ..ops.factories import zeros
from ..ops.join import cat
from ..ops.linalg_ldl import geqrf_p, ldl_factor_p, ldl_solve_p
from ..ops._lapack import LinAlgError, batch_prefix, first_failure
from ..random import randn
from . import _checks as C
from . import _types as T
from ._decomp import qr, svd
from ._funcs import householder_product
from ..ops.dispatch import autocast_entry

__all__ = ["ldl_factor", "ldl_factor_ex", "ldl_solve", "geqrf", "orgqr", "ormqr",
           "svd_lowrank", "pca_lowrank"]


def _ldl(op, A, hermitian):
    C.square(op, A)
    P = _apply(ldl_factor_p, (A,), {"hermitian": bool(hermitian)})
    n = A.shape[-1]
    LD = P.narrow(-2, 0, n)
    ints = P.narrow(-2, n, 2).real if P.dtype.is_complex else P.narrow(-2, n, 2)
    piv = ints.select(-2, 0).to(_dt.int32)
    info = ints.select(-2, 1).select(-1, 0).to(_dt.int32) if n else \
        zeros(tuple(A.shape[:-2]), dtype=_dt.int32)
    return LD, piv, info


@per_example
@C.outable
def ldl_factor_ex(A, *, hermitian=False, check_errors=False, out=None):
    """``(LD, pivots, info)``: the Bunch-Kaufman LDLᵀ factorization of a symmetric matrix
    (LAPACK ``sytrf``, lower triangle; ``hetrf``, LDLᴴ, for complex input with
    ``hermitian=True``), ``info`` > 0 where D is exactly singular
    (``torch.linalg.ldl_factor_ex``)."""
    LD, piv, info = _ldl("linalg.ldl_factor_ex", A, hermitian)
    if check_errors:
        _raise_ldl(A, info)
    return T.ldl_factor_ex(LD, piv, info)


def _raise_ldl(A, info):
    bad = first_failure(info.cpu().numpy())
    if bad is not None:
        i, k = bad
        raise LinAlgError(f"linalg.ldl_factor: {batch_prefix(tuple(A.shape[:-2]), i)}The "
                          f"factorization could not be completed because D[{k - 1}, {k - 1}] "
                          f"is exactly zero: the input is singular.")


@per_example
@C.outable
def ldl_factor(A, *, hermitian=False, out=None):
    """``(LD, pivots)`` of :func:`ldl_factor_ex`, raising :class:`LinAlgError` for a singular
    D (``torch.linalg.ldl_factor``; PyTorch 2.x fails there with an internal assert)."""
    LD, piv, info = _ldl("linalg.ldl_factor", A, hermitian)
    _raise_ldl(A, info)
    return T.ldl_factor(LD, piv)


@C.outable
def ldl_solve(LD, pivots, B, *, hermitian=False, out=None):
    """Solve ``A X = B`` from :func:`ldl_factor`'s output (``torch.linalg.ldl_solve``)."""
    op = "linalg.ldl_solve"
    C.square(op, LD, "LD")
    C.matrices(op, B, "B")
    C.rows_match(op, LD, B)
    return _apply(ldl_solve_p, (LD, pivots, B), {"hermitian": bool(hermitian)})


@autocast_entry("geqrf")
@C.outable
def geqrf(input, *, out=None):
    """``(a, tau)``: QR in LAPACK's compact form — R on and above the diagonal, the
    Householder vectors below it, their scales in ``tau`` (``torch.geqrf``)."""
    C.matrices("geqrf", input)
    m, n = input.shape[-2:]
    P = _apply(geqrf_p, (input,), {})
    return T.geqrf(P.narrow(-2, 0, m), P.select(-2, m).narrow(-1, 0, min(m, n)))


@autocast_entry("orgqr")
@C.outable
def orgqr(input, tau, *, out=None):
    """The explicit Q of :func:`geqrf`'s output (``torch.orgqr`` = ``householder_product``)."""
    return householder_product(input, tau)


@autocast_entry("ormqr")
@C.outable
def ormqr(input, tau, other, left=True, transpose=False, *, out=None):
    """``Q @ other`` (``left``) or ``other @ Q``, with ``Qᴴ`` if ``transpose``, for the Q of
    :func:`geqrf`'s ``(input, tau)`` (``torch.ormqr``), as a composite through the full
    m×m Q."""
    m, k = input.shape[-2], tau.shape[-1]
    V = input.narrow(-1, 0, k)
    if m > k:
        V = cat([V, zeros(tuple(V.shape[:-1]) + (m - k,), dtype=V.dtype)], -1)
    Q = householder_product(V, tau)
    Q = Q.mH if transpose else Q
    return Q @ other if left else other @ Q


def _approximate_basis(A, q, niter, M):
    R = randn(A.shape[-1], q, dtype=A.dtype.to_real() if A.dtype.is_complex else A.dtype)
    R = R.to(A.dtype)
    X = A @ R if M is None else A @ R - M @ R
    Q = qr(X).Q
    for _ in range(niter):
        X = A.mH @ Q if M is None else A.mH @ Q - M.mH @ Q
        Q = qr(X).Q
        X = A @ Q if M is None else A @ Q - M @ Q
        Q = qr(X).Q
    return Q


def svd_lowrank(A, q=6, niter=2, M=None):
    """``(U, S, V)`` of a rank-``q`` approximation of ``A - M`` by the randomized range
    finder (Halko et al. 2009, Algorithm 5.1; ``torch.svd_lowrank``). Draws from Ember's
    generator (``ember.manual_seed``), so the values differ from PyTorch's draws."""
    C.matrices("svd_lowrank", A)
    m, n = A.shape[-2:]
    q = min(6 if q is None else q, m, n)
    if m < n or n > q:
        Mt = None if M is None else M.mH
        Q = _approximate_basis(A.mH, q, niter, Mt)
        Bt = A @ Q if M is None else A @ Q - M @ Q
        U, S, Vh = svd(Bt, full_matrices=False)
        return U, S, Q @ Vh.mH
    Q = _approximate_basis(A, q, niter, M)
    B = Q.mH @ A if M is None else Q.mH @ (A - M)
    U, S, Vh = svd(B, full_matrices=False)
    return Q @ U, S, Vh.mH


def pca_lowrank(A, q=None, center=True, niter=2):
    """``(U, S, V)`` of the randomized low-rank SVD of ``A`` centred over its rows
    (``torch.pca_lowrank``; ``q`` defaults to ``min(6, m, n)``)."""
    C.matrices("pca_lowrank", A)
    m, n = A.shape[-2:]
    q = min(6, m, n) if q is None else q
    if center:
        A = A - A.mean(-2, keepdim=True)
    return svd_lowrank(A, q, niter)
