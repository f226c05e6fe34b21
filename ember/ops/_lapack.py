"""Raw LAPACK kernels of ``ember.linalg``: NumPy arrays in, NumPy arrays out.

NumPy's ``linalg`` batches natively (one C loop over the leading dims) and is used wherever
it has the routine; SciPy's LAPACK/BLAS wrappers (imported on first use, so ``import ember``
stays fast) cover the rest one matrix at a time (``getrf``, ``trsm``, ``gels*``, ``expm``).
Failures raise :class:`LinAlgError` with PyTorch's message, naming the batch element (its
flat index over the batch dims) and LAPACK's ``info``; NumPy's own errors name neither, so
the failing element is found again with the per-matrix LAPACK routine (the error path only).

Several-output factorizations (``eigh``, ``svd``, ``qr``, ``lu_factor``, ``slogdet``,
``lstsq``) return one *packed* array (:func:`pack`): a registry primitive has one output,
and the public functions hand out views of it (``ember/ops/linalg_lapack.py``).
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from ..errors import EmberError


class LinAlgError(EmberError, RuntimeError):
    """A matrix the factorization cannot handle: singular, not positive-definite, or an
    algorithm that did not converge (``torch.linalg.LinAlgError``, a ``RuntimeError``)."""


def _scipy_linalg():
    import scipy.linalg  # noqa: PLC0415 - lazy: SciPy is imported on first use only
    return scipy.linalg


def batch_prefix(batch_shape, i) -> str:
    """PyTorch's ``'(Batch element 3): '`` prefix, empty for a single matrix."""
    return f"(Batch element {i}): " if batch_shape else ""


def first_failure(infos):
    """(flat index, info) of the first nonzero ``info``, or None."""
    flat = np.asarray(infos).reshape(-1)
    bad = np.flatnonzero(flat)
    return (int(bad[0]), int(flat[bad[0]])) if bad.size else None


def _each(a):
    """(batch shape, the matrices as a (B, m, n) array)."""
    return a.shape[:-2], a.reshape((math.prod(a.shape[:-2]),) + a.shape[-2:])


# ------------------------------------------------------------------ packing
def pack(arrays, batch_shape):
    """One contiguous (*batch, total) array holding each array's trailing block, flattened."""
    flat = [np.ascontiguousarray(x).reshape(batch_shape + (math.prod(x.shape[len(batch_shape):]),))
            for x in arrays]
    return np.concatenate(flat, axis=-1) if len(flat) > 1 else flat[0]


def packed_size(shapes) -> int:
    return sum(math.prod(s) for s in shapes)


# ------------------------------------------------------------------ Cholesky
def potrf_each(a):
    """Per-matrix Cholesky (lower) without raising: (L, info per matrix)."""
    potrf = _scipy_linalg().lapack.get_lapack_funcs("potrf", (a,))
    batch, mats = _each(a)
    out = np.zeros_like(mats)
    infos = np.zeros(len(mats), dtype=np.int32)
    for i, m in enumerate(mats):
        c, info = potrf(m, lower=1, clean=1)
        out[i], infos[i] = c, max(int(info), 0)
    return out.reshape(a.shape), infos.reshape(batch)


def cholesky_error(op, batch_shape, idx, info) -> LinAlgError:
    return LinAlgError(f"{op}: {batch_prefix(batch_shape, idx)}The factorization could not be "
                       f"completed because the input is not positive-definite (the leading "
                       f"minor of order {info} is not positive-definite).")


def cholesky(xp, a, check_errors=True):
    try:
        return np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        L, infos = potrf_each(a)
        bad = first_failure(infos)
        if check_errors and bad is not None:
            raise cholesky_error("linalg.cholesky", a.shape[:-2], *bad) from None
        return L


def cholesky_backward(xp, g, L):
    """Cholesky's VJP ``L^{-H} Φ(L^H g) L^{-1}``, ``Φ(M) = ½(tril(M) + tril(M, -1)^H)``,
    reading only the lower triangle of ``L``. Above order 96, BLAS/LAPACK per matrix and
    no GEMM (up to it, :func:`_chol_bwd_small`).

    Real: ``trmm`` for ``L^H g`` (n³ flops) and one LAPACK ``sygst`` for the two-sided solve
    (n³, where two ``trsm`` cost 2n³ at the same speed): with ``J`` the reversal permutation,
    ``L^{-H} S L^{-1} = J C^{-1} (J S J) C^{-H} J`` for the lower factor ``C = J L^H J``,
    and every ``J`` is a reversed copy of a buffer. Complex (whose ``Φ`` keeps an imaginary
    diagonal, so ``S`` is not Hermitian as ``hegst`` needs): ``trmm`` and two ``trsm``.
    """
    batch = np.broadcast_shapes(g.shape[:-2], L.shape[:-2])
    n = L.shape[-1]
    dtype = np.result_type(g, L)
    if n == 0 or math.prod(batch) == 0:
        return np.zeros(batch + (n, n), dtype=dtype)
    nb = math.prod(batch)
    gs = np.broadcast_to(g, batch + (n, n)).reshape(nb, n, n).astype(dtype, copy=False)
    Ls = np.broadcast_to(L, batch + (n, n)).reshape(nb, n, n).astype(dtype, copy=False)
    blas, lapack = _scipy_linalg().blas, _scipy_linalg().lapack
    trmm = blas.get_blas_funcs("trmm", (gs,))
    if n <= SMALL_CHOL_BWD:
        out = _chol_bwd_small(lapack.get_lapack_funcs("trtri", (gs,)), gs, Ls)
    elif dtype.kind == "c":
        out = _chol_bwd_complex(blas.get_blas_funcs("trsm", (gs,)), trmm, gs, Ls)
    else:
        out = _chol_bwd_real(lapack.get_lapack_funcs("sygst", (gs,)), trmm, gs, Ls)
    return out.reshape(batch + (n, n))


#: at most this order, the batched-GEMM form (per-matrix LAPACK calls cost their Python
#: overhead and small ``sygst``/``trsm`` run unblocked): 256×64² measured 27 ms with
#: ``sygst``, ~15 ms this way, single-threaded.
SMALL_CHOL_BWD = 96


def _chol_bwd_small(trtri, gs, Ls):
    """``L^{-H} S L^{-1}`` as two batched GEMMs with ``L^{-1}`` from ``trtri`` per matrix."""
    # NOTE: three batch-sized buffers, each reused: a fresh 8 MB array costs 1-3 ms of page
    # faults here, against a 256×64² forward of ~4.5 ms. trtri inverts Lᵀ (Fortran view)
    # in place; the products take conjugate-transposed views (no copy for real dtypes).
    n = Ls.shape[-1]
    tri = np.tri(n, dtype=Ls.real.dtype)
    Li = np.multiply(Ls, tri)                               # tril(L), then L^{-1} in place
    T = np.matmul(_mh(Li), gs)
    for i in range(len(Li)):
        x, _info = trtri(Li[i].T, lower=0, overwrite_c=1)
        if not np.shares_memory(x, Li):
            Li[i] = x.T
    tri *= 0.5
    T *= tri                                                # T = ½ tril(Lᴴ g)
    S = np.add(T, _mh(T), out=np.empty_like(T))             # T + Tᴴ, then T's own diagonal
    d = np.arange(n)
    S[..., d, d] = T[..., d, d]
    np.matmul(_mh(Li), S, out=T)
    return np.matmul(T, Li, out=S)


def _mh(x):
    x = np.swapaxes(x, -1, -2)
    return x.conj() if x.dtype.kind == "c" else x


def _chol_bwd_real(sygst, trmm, gs, Ls):
    # NOTE: a C-ordered X is the Fortran-ordered Xᵀ (X.T, no copy) and reversing a buffer
    # is J·J of the matrix it holds. W[i] (C-ordered) holds J(½Mᵀ)J's Fortran buffer, whose
    # lower triangle is J S J's; sygst overwrites it with J X J (X = the result, symmetric),
    # so W[i] reversed is X with its lower triangle valid.
    nb, n, _ = Ls.shape
    W = np.empty_like(gs)
    C = np.empty((n, n), dtype=gs.dtype, order="F")
    for i in range(nb):
        Mt = trmm(1.0, Ls[i].T, gs[i].T, side=1, lower=0, trans_a=1)   # gᵀL = Mᵀ
        np.multiply(Mt.T[::-1, ::-1], 0.5, out=W[i])
        C.T[...] = Ls[i][::-1, ::-1]                                     # J Lᵀ J, lower
        x, _info = sygst(W[i].T, C, itype=1, lower=1, overwrite_a=1)
        if not np.shares_memory(x, W):
            W[i] = x.T
    out = np.ascontiguousarray(W[:, ::-1, ::-1])
    _fill_upper(out)
    return out


def _chol_bwd_complex(trsm, trmm, gs, Ls):
    out = np.empty_like(gs)
    for i in range(len(Ls)):
        Lf = Ls[i].T                                                    # Lᵀ, upper
        M = trmm(1.0, Lf, gs[i].T, side=1, lower=0, trans_a=2).T        # (gᵀ conj L)ᵀ = Lᴴg
        S = np.tril(M) * 0.5
        S = np.ascontiguousarray(S + np.tril(S, -1).conj().T)
        X = trsm(1.0, Lf, S.T, side=0, lower=0, trans_a=0, overwrite_b=1)   # L^{-T} Sᵀ
        out[i] = trsm(1.0, Lf, X, side=1, lower=0, trans_a=2, overwrite_b=1).T  # ·conj(L)^{-1}
    return out


def _fill_upper(out, bs=64):
    """Set the upper triangle of each C-ordered (..., n, n) matrix to its lower one's
    transpose, by blocks of ``bs`` columns (a masked ``tril + trilᵀ`` is 3 full passes)."""
    n = out.shape[-1]
    for j0 in range(0, n, bs):
        j1 = min(j0 + bs, n)
        out[..., j0:j1, j1:] = np.swapaxes(out[..., j1:, j0:j1], -1, -2)
        d = out[..., j0:j1, j0:j1]
        r, c = np.triu_indices(j1 - j0, 1)
        d[..., r, c] = d[..., c, r]


# ------------------------------------------------------------------ LU and what uses it
def getrf_each(a):
    """Per-matrix LU with partial pivoting: (LU, 1-based int32 pivots, info per matrix)."""
    getrf = _scipy_linalg().lapack.get_lapack_funcs("getrf", (a,))
    batch, mats = _each(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    lus = np.empty_like(mats)
    pivs = np.empty((len(mats), k), dtype=np.int32)
    infos = np.zeros(len(mats), dtype=np.int32)
    for i, x in enumerate(mats if k else ()):
        lu, piv, info = getrf(x)
        lus[i], pivs[i], infos[i] = lu, piv[:k] + 1, max(int(info), 0)
    return lus.reshape(a.shape), pivs.reshape(batch + (k,)), infos.reshape(batch)


def singular_infos(a):
    """LAPACK ``getrf``'s info per matrix (0, or the 1-based index of a zero pivot)."""
    return getrf_each(a)[2]


def inv(xp, a, check_errors=True):
    try:
        return np.linalg.inv(a)
    except np.linalg.LinAlgError:
        bad = first_failure(singular_infos(a))
        if check_errors and bad is not None:
            i, info = bad
            raise LinAlgError(f"linalg.inv: {batch_prefix(a.shape[:-2], i)}The diagonal "
                              f"element {info} is zero, the inversion could not be completed "
                              f"because the input matrix is singular.") from None
        with np.errstate(all="ignore"):
            return _solve_each(a, np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype),
                                                  a.shape))


def inv_device(xp, a, check_errors=True):
    """:func:`inv` on a GPU: CuPy's (cuSOLVER). CuPy returns inf/nan for a singular
    matrix instead of raising, so a non-finite result is computed again on the host (one
    copy each way): LAPACK's error, or the ``_ex`` paths' values."""
    if xp is np:        # NOTE: the plain stand-in's arrays are NumPy's
        return inv(np, a, check_errors)
    try:
        r = xp.linalg.inv(a)
        if bool(xp.isfinite(r).all()):
            return r
    except np.linalg.LinAlgError:
        pass
    return xp.asarray(inv(np, xp.asnumpy(a), check_errors))


def _solve_each(a, b):
    """Solve matrix by matrix, leaving inf/nan where one is singular (the ``_ex`` paths)."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:]).reshape((-1,) + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:]).reshape((-1,) + b.shape[-2:])
    out = np.empty(b.shape, dtype=np.result_type(a, b))
    for i in range(len(a)):
        try:
            out[i] = np.linalg.solve(a[i], b[i])
        except np.linalg.LinAlgError:
            out[i] = np.nan
    return out.reshape(batch + out.shape[-2:])


def solve(xp, a, b, check_errors=True):
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        infos = singular_infos(np.broadcast_to(a, np.broadcast_shapes(a.shape[:-2],
                                               b.shape[:-2]) + a.shape[-2:]))
        bad = first_failure(infos)
        if check_errors and bad is not None:
            raise LinAlgError(f"linalg.solve: {batch_prefix(infos.shape, bad[0])}The solver "
                              f"failed because the input matrix is singular.") from None
        with np.errstate(all="ignore"):
            return _solve_each(a, b)


def lu_factor(xp, a, check_errors=True):
    """Packed (*batch, m + 1, n): LU on top, the 1-based pivots in the last row's first
    ``min(m, n)`` entries (as floats: exact below 2**24)."""
    lu, piv, infos = getrf_each(a)
    bad = first_failure(infos)
    if check_errors and bad is not None:
        i, info = bad
        raise LinAlgError(f"linalg.lu_factor: {batch_prefix(a.shape[:-2], i)}U[{info},{info}] "
                          f"is zero and using it on lu_solve would result in a division by "
                          f"zero. If you still want to perform the factorization, consider "
                          f"calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)")
    m, n = a.shape[-2:]
    out = np.zeros(a.shape[:-2] + (m + 1, n), dtype=a.dtype)
    out[..., :m, :] = lu
    out[..., m, :piv.shape[-1]] = piv
    return out


def permutation_from_pivots(piv, m, dtype):
    """P (*batch, m, m) with A = P L U, from LAPACK's 1-based row swaps."""
    batch = piv.shape[:-1]
    flat = piv.reshape(math.prod(batch), piv.shape[-1]).astype(np.int64) - 1
    perms = np.tile(np.arange(m), (len(flat), 1))
    for b, swaps in enumerate(flat):
        p = perms[b]
        for i, j in enumerate(swaps):
            p[i], p[j] = p[j], p[i]
    out = np.zeros((len(flat), m, m), dtype=dtype)
    # row i of P^T A is row perm[i] of A, so P[perm[i], i] = 1
    out[np.arange(len(flat))[:, None], perms, np.arange(m)[None, :]] = 1
    return out.reshape(batch + (m, m))


# ------------------------------------------------------------------ triangular solve
def _trtrs_one(sl, trtrs, a, b, upper, unitriangular):
    """One triangular solve; the result is Fortran-ordered (LAPACK's own layout)."""
    # NOTE: trtrs wants a Fortran-ordered A: a C-ordered A is passed as its transpose (a
    # Fortran view, no copy) with trans=1 and the triangle flipped; an A that is already a
    # transposed view (Aᴴ in the VJPs) goes as is. Copies of a 512² operand cost ~0.5 ms
    # against ~5 ms for the solve.
    if a.flags.f_contiguous:
        at, lower, trans = a, int(not upper), 0
    else:
        at, lower, trans = a.T, int(upper), 1
    x, info = trtrs(at, b, lower=lower, trans=trans, unitdiag=int(unitriangular))
    if info > 0:   # singular: BLAS trsm gives inf/nan instead of an error, as PyTorch
        trsm = sl.blas.get_blas_funcs("trsm", (a, b))
        with np.errstate(all="ignore"):
            x = trsm(1.0, at, b, side=0, lower=lower, trans_a=trans,
                     diag=int(unitriangular))
    return x


def solve_triangular(xp, a, b, upper=False, unitriangular=False):
    """``A X = B`` with A triangular: LAPACK ``trtrs`` per matrix (measured at 64²
    single-threaded: 26 µs, against ~1 ms for SciPy's BLAS ``trsm`` and ~90 µs per matrix
    for NumPy's batched LU solve of the triangle)."""
    sl = _scipy_linalg()
    trtrs = sl.lapack.get_lapack_funcs("trtrs", (a, b))
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    dtype = np.result_type(a, b)
    if math.prod(batch + b.shape[-2:]) == 0 or a.shape[-1] == 0:
        return np.zeros(batch + b.shape[-2:], dtype=dtype)
    nb = math.prod(batch)
    am = np.broadcast_to(a, batch + a.shape[-2:]).reshape((nb,) + a.shape[-2:])
    bm = np.broadcast_to(b, batch + b.shape[-2:]).reshape((nb,) + b.shape[-2:])
    if nb == 1:   # no copy into a C-ordered result
        x = _trtrs_one(sl, trtrs, am[0], bm[0], upper, unitriangular)
        return np.asarray(x, dtype=dtype)[(None,) * len(batch)]
    out = np.empty(batch + b.shape[-2:], dtype=dtype)
    om = out.reshape((nb,) + b.shape[-2:])
    for i in range(nb):
        om[i] = _trtrs_one(sl, trtrs, am[i], bm[i], upper, unitriangular)
    return out


# ------------------------------------------------------------------ spectral
def _converge_error(op, what, a, info=1) -> LinAlgError:
    return LinAlgError(f"{op}: The algorithm failed to converge because the input matrix is "
                       f"ill-conditioned or has too many repeated {what} (error code: {info}).")


@contextlib.contextmanager
def _converging(op, what, a):
    """Turns NumPy's LinAlgError inside into :func:`_converge_error`'s (op, what, input)."""
    try:
        yield
    except np.linalg.LinAlgError:
        raise _converge_error(op, what, a) from None


def eigh(xp, a, UPLO="L"):
    """Packed (*batch, n + 1, n): the eigenvalues (ascending) in row 0, the eigenvectors
    (columns) below."""
    with _converging("linalg.eigh", "eigenvalues", a):
        w, q = np.linalg.eigh(a, UPLO=UPLO)
    return np.concatenate([w[..., None, :], q], axis=-2)


def eigvalsh(xp, a, UPLO="L"):
    with _converging("linalg.eigvalsh", "eigenvalues", a):
        return np.linalg.eigvalsh(a, UPLO=UPLO)


def svd_shapes(m, n, full_matrices):
    k = min(m, n)
    return ((m, m) if full_matrices else (m, k)), (k,), ((n, n) if full_matrices else (k, n))


def svd(xp, a, full_matrices=True):
    """Packed (*batch, |U| + |S| + |Vh|): U, S, Vh flattened one after the other."""
    with _converging("linalg.svd", "singular values", a):
        u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return pack((u, s, vh), a.shape[:-2])


def svdvals(xp, a):
    with _converging("linalg.svdvals", "singular values", a):
        return np.linalg.svd(a, compute_uv=False)


def qr_shapes(m, n, mode):
    k = min(m, n)
    if mode == "complete":
        return (m, m), (m, n)
    if mode == "r":
        return (0,), (k, n)
    return (m, k), (k, n)


def qr(xp, a, mode="reduced"):
    """Packed (*batch, |Q| + |R|) (mode='r': R only)."""
    if mode == "r":
        r = np.linalg.qr(a, mode="r")
        return pack((r,), a.shape[:-2])
    q, r = np.linalg.qr(a, mode=mode)
    return pack((q, r), a.shape[:-2])


def slogdet(xp, a):
    """Packed (*batch, 2): sign, log|det|."""
    sign, logabs = np.linalg.slogdet(a)
    return np.stack([sign, logabs], axis=-1)


def det(xp, a):
    return np.linalg.det(a)


# ------------------------------------------------------------------ least squares, pinv, expm
def lstsq(xp, a, b, rcond=None, driver="gelsy"):
    """Packed (*batch, n*k + 1 + q): solution, rank (as a float) and, for gelsd/gelss, the
    q = min(m, n) singular values."""
    sl = _scipy_linalg()
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    (m, n), k = a.shape[-2:], b.shape[-1]
    q = min(m, n) if driver in ("gelsd", "gelss") else 0
    nb = math.prod(batch)
    am = np.broadcast_to(a, batch + (m, n)).reshape(nb, m, n)
    bm = np.broadcast_to(b, batch + (m, k)).reshape(nb, m, k)
    out = np.zeros((len(am), n * k + 1 + q), dtype=np.result_type(a, b))
    if rcond is None:
        rcond = np.finfo(out.dtype).eps * max(m, n)
    lapack_driver = "gelsy" if driver == "gels" else driver
    for i in range(len(am)):
        if m == 0 or n == 0:
            continue
        x, _, rank, sv = sl.lstsq(am[i], bm[i], cond=rcond, lapack_driver=lapack_driver,
                                  check_finite=False)
        out[i, :n * k] = np.asarray(x).reshape(-1)
        out[i, n * k] = rank
        if q:
            out[i, n * k + 1:] = sv
    return out.reshape(batch + (out.shape[-1],))


def pinv(xp, a, atol=None, rtol=None, hermitian=False):
    """Pseudo-inverse with PyTorch's cutoff: values <= max(atol, rtol * largest) are dropped;
    rtol defaults to eps * max(m, n) when atol is not given, else to 0."""
    m, n = a.shape[-2:]
    if rtol is None:
        rtol = np.finfo(a.dtype).eps * max(m, n) if not atol else 0.0
    atol = atol or 0.0
    if hermitian:
        w, q = np.linalg.eigh(a)
        big = np.abs(w).max(-1, keepdims=True) if w.shape[-1] else np.zeros(w.shape)
        keep = np.abs(w) > np.maximum(atol, rtol * big)
        winv = np.where(keep, 1 / np.where(keep, w, 1), 0)
        return (q * winv[..., None, :]) @ np.conj(np.swapaxes(q, -1, -2))
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    big = s[..., :1] if s.shape[-1] else np.zeros(s.shape)
    keep = s > np.maximum(atol, rtol * big)
    sinv = np.where(keep, 1 / np.where(keep, s, 1), 0)
    return (np.conj(np.swapaxes(vh, -1, -2)) * sinv[..., None, :]) @ np.conj(
        np.swapaxes(u, -1, -2))


def matrix_exp(xp, a):
    if a.size == 0:
        return a.copy()
    return np.asarray(_scipy_linalg().expm(a), dtype=a.dtype)
