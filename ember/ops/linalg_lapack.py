"""LAPACK primitives of ``ember.linalg`` (I): Cholesky, triangular solve, inverse, solve,
determinants. Kernels are in ``_lapack.py``; the public functions in ``ember/linalg``.

Every VJP and JVP is written in Ember ops (so second order works) with PyTorch's formulas
(``FunctionsManual.cpp``): e.g. Cholesky's ``gA = L^{-H} Φ(L^H gL) L^{-1}`` symmetrised, and
``det``'s gradient through the SVD when a matrix is singular (the cofactor matrix, which is
finite there, where ``det * A^{-H}`` is not).

A several-output factorization is one primitive with one *packed* output (``_lapack.pack``):
:func:`unpack` hands out views of it, autograd sums their gradients into the packed
gradient, and the VJP reads each part from there.
"""
from __future__ import annotations

import math

from .batching import per_example
from . import _lapack
from .dispatch import apply as _apply
from .join import cat, stack
from .registry import defop

__all__ = []


# ------------------------------------------------------------------ packing helpers
def unpack(t, shapes):
    """Views of the packed tensor ``t`` (*batch, total): one per trailing shape in ``shapes``."""
    batch = tuple(t.shape[:-1])
    out, off = [], 0
    for s in shapes:
        size = math.prod(s)
        out.append(t.narrow(-1, off, size).reshape(batch + tuple(s)))
        off += size
    return out


def pack(parts, batch):
    """The inverse of :func:`unpack` (for tangents and gradients), in Ember ops."""
    return cat([p.reshape(tuple(batch) + (-1,)) for p in parts], -1)


def _batch_shape(*shapes):
    out = ()
    for s in shapes:
        s = tuple(s[:-2])
        if len(s) > len(out):
            out, s = s, out
        off = len(out) - len(s)
        out = tuple(a if b == 1 else b for a, b in zip(out, (1,) * off + s))
    return out


# ------------------------------------------------------------------ triangular solve
def stri(A, B, upper, left=True, unitriangular=False):
    """``A X = B`` (``left``) or ``X A = B`` with A triangular, for the rules below."""
    if left:
        return _apply(solve_triangular_p, (A, B),
                      {"upper": upper, "unitriangular": unitriangular})
    return _apply(solve_triangular_p, (A.mT, B.mT),
                  {"upper": not upper, "unitriangular": unitriangular}).mT


def _tri_mask(X, upper, unitriangular):
    k = 1 if unitriangular else 0
    return X.triu(k) if upper else X.tril(-k)


def _stri_vjp(g, X, A, B, upper=False, unitriangular=False):
    gB = stri(A.mH, g, not upper, True, unitriangular)
    gA = _tri_mask(-(gB @ X.mH), upper, unitriangular)
    return gA, gB


def _stri_jvp(t, X, A, B, upper=False, unitriangular=False):
    dA, dB = t
    return stri(A, dB - _tri_mask(dA, upper, unitriangular) @ X, upper, True, unitriangular)


def _mat_shape(a, b, **_):
    return _batch_shape(a, b) + tuple(b[-2:])


solve_triangular_p = defop(
    "linalg_solve_triangular", nin=2, kernels={"cpu": _lapack.solve_triangular}, shape=_mat_shape,
    batch="elementwise",
    params={"upper": False, "unitriangular": False}, save="both",
    vjp=_stri_vjp, jvp=_stri_jvp,
    doc="A X = B, A triangular (left side only; X A = B by transposes in ember.linalg)")


# ------------------------------------------------------------------ Cholesky
def _phi(M):
    """``Φ(M) = ½(tril(M) + tril(M, -1)^H)`` (the diagonal halved, not doubled)."""
    T = M.tril()
    return 0.5 * (T + T.tril(-1).mH)


def cholesky_backward_composite(g, L):
    """PyTorch's ``cholesky_backward`` in Ember ops: ``L^{-H} Φ(L^H g) L^{-1}``.

    What ``linalg_cholesky_backward`` computes (and its rules differentiate); kept as the
    reference its tests compare with."""
    gA = stri(L.mH, _phi(L.tril().mH @ g), upper=True, left=True)
    return stri(L, gA, upper=False, left=False)


def _chol_bwd_vjp(h, f, g, L):
    # f = L^{-H} S L^{-1}, S = Φ(L^H g), L read through its lower triangle:
    # ḡ = L Φ*(L^{-1} h L^{-H}), L̄ = tril(g Φ*(…)^H - (f h^H + f^H h) L^{-H}).
    Lt = L.tril()
    hS = stri(Lt.mH, stri(Lt, h, upper=False), upper=True, left=False)
    hM = 0.5 * (hS.tril() + hS.mH.tril(-1))
    gL = g @ hM.mH - stri(Lt.mH, f @ h.mH + f.mH @ h, upper=True, left=False)
    return Lt @ hM, gL.tril()


def _chol_bwd_jvp(t, f, g, L):
    tg, tL = t
    Lt, tLt = L.tril(), tL.tril()
    S = _phi(tLt.mH @ g + Lt.mH @ tg)
    df = stri(Lt, stri(Lt.mH, S, upper=True), upper=False, left=False)
    return (df - stri(Lt.mH, tLt.mH @ f, upper=True)
            - stri(Lt, f @ tLt, upper=False, left=False))


cholesky_backward_p = defop(
    "linalg_cholesky_backward", nin=2, kernels={"cpu": _lapack.cholesky_backward}, shape=_mat_shape,
    batch="elementwise", save="both", vjp=_chol_bwd_vjp, jvp=_chol_bwd_jvp,
    doc="Cholesky's VJP L^{-H} Φ(L^H g) L^{-1} (g, L; L's lower triangle): BLAS trmm and "
        "LAPACK sygst in place of a GEMM and two triangular solves (issue 18: ≤ 3× forward)")


def _cholesky_vjp(g, L, A, check_errors=True):
    # PyTorch's cholesky_backward, one primitive (its rules are the composite's derivatives).
    return (_apply(cholesky_backward_p, (g, L), {}),)


def _cholesky_jvp(t, L, A, check_errors=True):
    # dL = L Φ(L^{-1} dA L^{-H}), Φ = lower triangle with the diagonal halved.
    X = stri(L.mH, stri(L, t[0], upper=False), upper=True, left=False)
    X = X.tril() - 0.5 * X.diagonal(0, -2, -1).diag_embed()
    return L @ X


cholesky_p = defop(
    "linalg_cholesky", nin=1, kernels={"cpu": _lapack.cholesky}, shape=lambda a, **_: tuple(a),
    batch="front",
    params={"check_errors": True}, dtype="same", save="output",
    vjp=_cholesky_vjp, jvp=_cholesky_jvp, doc="lower Cholesky factor")


# ------------------------------------------------------------------ inverse and solve
def _inv_vjp(g, X, A, check_errors=True):
    Xh = X.mH
    return (-(Xh @ g @ Xh),)


inv_p = defop(
    "linalg_inv", nin=1, kernels={"cpu": _lapack.inv, "cuda": _lapack.inv_device},
    shape=lambda a, **_: tuple(a), dtype="same",
    batch="front",
    params={"check_errors": True}, save="output",
    vjp=_inv_vjp, jvp=lambda t, X, A, **_: -(X @ t[0] @ X))


def _solve_vjp(g, X, A, B, check_errors=True):
    gB = _apply(solve_p, (A.mH, g), {})
    return -(gB @ X.mH), gB


def _solve_jvp(t, X, A, B, check_errors=True):
    return _apply(solve_p, (A, t[1] - t[0] @ X), {})


solve_p = defop(
    "linalg_solve", nin=2, kernels={"cpu": _lapack.solve}, shape=_mat_shape,
    batch="elementwise",
    params={"check_errors": True}, save="both", vjp=_solve_vjp, jvp=_solve_jvp,
    doc="A X = B for square A (matrix B; vectors and left=False in ember.linalg)")


# ------------------------------------------------------------------ determinants
def _prod_others(S):
    """``out[..., i] = prod_{j != i} S[..., j]`` without dividing (S may hold zeros)."""
    one = S.narrow(-1, 0, 1) * 0 + 1
    left = cat([one, S.narrow(-1, 0, S.shape[-1] - 1).cumprod(-1)], -1)
    Sf = S.flip(-1)
    right = cat([one, Sf.narrow(-1, 0, S.shape[-1] - 1).cumprod(-1)], -1).flip(-1)
    return left * right


@per_example
def det_cofactor(A, d):
    """The VJP of ``det`` for a unit cotangent: the conjugated cofactor matrix
    ``conj(det) * A^{-H}`` (PyTorch's conjugate-Wirtinger convention; for real A the
    cofactor itself), through the SVD (PyTorch's ``linalg_det_backward``) when a matrix is
    singular, where the cofactor stays finite."""
    if A.shape[-1] == 0:
        return A * 0
    if bool((d == 0).any()):
        from .linalg_lapack2 import svd_p, svd_parts
        U, S, Vh = svd_parts(_apply(svd_p, (A,), {"full_matrices": False}), A.shape, False)
        S = S.real if S.dtype.is_complex else S
        sign = (_apply(det_p, (U,), {}) * _apply(det_p, (Vh,), {})).conj()
        return (U * (sign.unsqueeze(-1) * _prod_others(S)).unsqueeze(-2)) @ Vh
    return d.conj().unsqueeze(-1).unsqueeze(-1) * _apply(inv_p, (A,), {}).mH


det_p = defop(
    "linalg_det", nin=1, kernel=_lapack.det, shape=lambda a: tuple(a[:-2]), dtype="same",
    batch="front",
    save="both",
    vjp=lambda g, d, A: (g.unsqueeze(-1).unsqueeze(-1) * det_cofactor(A, d),),
    jvp=lambda t, d, A: (det_cofactor(A, d).conj() * t[0]).sum((-2, -1)))


def _slogdet_vjp(g, out, A):
    # PyTorch's slogdet_backward: (g_abs - i Im(conj(g_sign) sign)) A^{-H}; the sign of a
    # real matrix is piecewise constant (no gradient).
    glog = g.select(-1, 1)
    if A.dtype.is_complex:
        glog = glog.real - 1j * (g.select(-1, 0).conj() * out.select(-1, 0)).imag
    return (glog.unsqueeze(-1).unsqueeze(-1) * _apply(inv_p, (A,), {}).mH,)


def _slogdet_jvp(t, out, A):
    tr = _apply(solve_p, (A, t[0]), {}).diagonal(0, -2, -1).sum(-1)
    if A.dtype.is_complex:   # d log|det| = Re tr(A^{-1} dA), d sign = i sign Im tr(...)
        return stack([1j * out.select(-1, 0) * tr.imag, tr.real + 0j], -1)
    return stack([tr * 0, tr], -1)


slogdet_p = defop(
    "linalg_slogdet", nin=1, kernel=_lapack.slogdet, shape=lambda a: tuple(a[:-2]) + (2,),
    batch="front",
    dtype="same", save="both", vjp=_slogdet_vjp, jvp=_slogdet_jvp,
    doc="packed (..., 2): sign, log|det|")
