"""The non-symmetric eigendecomposition primitive of ``ember.linalg.eig`` (complex outputs).

``linalg_eig`` returns one packed complex array (*batch, n + 1, n): the eigenvalues in row
0, the unit-norm eigenvectors (columns, LAPACK ``geev``'s phase) below. Its VJP and JVP are
PyTorch's ``linalg_eig_backward`` / ``linalg_eig_jvp``: gradients are conjugate Wirtinger
derivatives; a real input gets the real part of its gradient; a loss that depends on the
eigenvectors' arbitrary phase raises PyTorch's error; repeated eigenvalues make the
eigenvector terms inf/nan, as PyTorch documents.
"""
from __future__ import annotations

import numpy as np

from .batching import per_example
from .complex import real
from .dispatch import apply as _apply
from .join import cat
from .linalg_lapack import solve_p
from .linalg_lapack2 import _offdiag_div, _used
from .registry import defop

__all__ = []


def _eig_kernel(xp, a):
    from . import _lapack
    ct = np.complex128 if a.dtype in (np.float64, np.complex128) else np.complex64
    try:
        w, v = np.linalg.eig(a)
    except np.linalg.LinAlgError:
        raise _lapack.LinAlgError("linalg.eig: The algorithm failed to converge because the "
                                  "input matrix is ill-conditioned or has too many repeated "
                                  "eigenvalues (error code: 1).") from None
    return np.concatenate([w[..., None, :].astype(ct), v.astype(ct)], axis=-2)


def _eigvals_kernel(xp, a):
    ct = np.complex128 if a.dtype in (np.float64, np.complex128) else np.complex64
    return np.linalg.eigvals(a).astype(ct)


def _complex_out(x, **_):
    return None, x._dtype.to_complex()


def eig_parts(P):
    n = P.shape[-1]
    return P.select(-2, 0), P.narrow(-2, 1, n)


@per_example
def _check_gauge(VhgV):
    im = VhgV.diagonal(0, -2, -1).imag
    if im.numel() and not bool((im.abs() <= 1e-2).all()):
        raise RuntimeError("linalg_eig_backward: The eigenvectors in the complex case are "
                           "specified up to multiplication by e^{i phi}. The specified loss "
                           "function depends on this quantity, so it is ill-defined.")


def _eig_vjp(g, P, A):
    L, V = eig_parts(P)
    gL, gV = eig_parts(g)
    Vh = V.mH
    inner = gL.diag_embed()
    if _used(gV):
        VhgV = Vh @ gV
        _check_gauge(VhgV)
        VhgV = VhgV - Vh @ (V * real(VhgV.diagonal(0, -2, -1)).unsqueeze(-2))
        E = (L.unsqueeze(-2) - L.unsqueeze(-1)).conj()
        inner = inner + _offdiag_div(VhgV, E)
    gA = _apply(solve_p, (Vh, inner @ Vh), {})
    return (gA if A.dtype.is_complex else real(gA),)


def _eig_jvp(t, P, A):
    L, V = eig_parts(P)
    dA = t[0].to(V.dtype)
    dP = _apply(solve_p, (V, dA @ V), {})
    dV = V @ _offdiag_div(dP, L.unsqueeze(-2) - L.unsqueeze(-1))
    dV = dV - V * real((V.mH @ dV).diagonal(0, -2, -1)).unsqueeze(-2)
    return cat([dP.diagonal(0, -2, -1).unsqueeze(-2), dV], -2)


eig_p = defop(
    "linalg_eig", nin=1, kernel=_eig_kernel, dtype=_complex_out, save="both",
    batch="front",
    shape=lambda a: tuple(a[:-2]) + (a[-1] + 1, a[-1]), vjp=_eig_vjp, jvp=_eig_jvp,
    doc="packed complex (..., n+1, n): eigenvalues row, eigenvectors")

eigvals_p = defop(
    "linalg_eigvals", nin=1, kernel=_eigvals_kernel, dtype=_complex_out, save=None,
    batch="front",
    shape=lambda a: tuple(a[:-1]), differentiable=False,
    doc="eigenvalues only (no gradient: ember.linalg.eigvals goes through eig then)")
