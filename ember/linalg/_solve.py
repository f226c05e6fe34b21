"""``ember.linalg``: inverses, linear solves, determinants, least squares, pseudo-inverse."""
from __future__ import annotations

import math

import numpy as np

from ..ops.batching import per_example
from .. import dtypes as _dt
from ..ops import _lapack
from ..ops.dispatch import apply as _apply
from ..ops.factories import from_numpy, zeros
from ..ops.linalg_lapack import det_p, inv_p, slogdet_p, solve_p, solve_triangular_p
from ..ops.linalg_lapack2 import lstsq_p, lstsq_shapes, pinv_p
from ..ops.linalg_lapack import unpack
from . import _checks as C
from . import _types as T

__all__ = ["inv", "inv_ex", "solve", "solve_ex", "solve_triangular", "det", "slogdet",
           "lstsq", "pinv", "tensorinv", "tensorsolve"]


def _info(infos, shape, device) -> "object":
    """LAPACK's int32 ``info`` per matrix (None: all 0), on the input's ``device``."""
    if infos is None:
        return zeros(shape, dtype=_dt.int32, device=device)
    return from_numpy(np.ascontiguousarray(np.asarray(infos, dtype=np.int32)).reshape(
        shape)).to(device)


@C.outable
def inv(A, *, out=None):
    """Inverse of a square matrix (batched) (``torch.linalg.inv``).

    Raises:
        LinAlgError: a matrix is singular (naming the batch element and the zero pivot).
    """
    C.square("linalg.inv", A)
    return _apply(inv_p, (A,), {"check_errors": True})


@C.outable
def inv_ex(A, *, check_errors=False, out=None):
    """``(inverse, info)``: ``info`` is LAPACK's per matrix (0: success; i > 0: U[i, i] is
    zero) instead of an error (``torch.linalg.inv_ex``)."""
    C.square("linalg.inv_ex", A)
    X = _apply(inv_p, (A,), {"check_errors": check_errors})
    infos = None
    if X.numel() and not bool(X.isfinite().all()):
        infos = _lapack.singular_infos(A.detach().cpu().numpy())
    return T.inv_ex(X, _info(infos, tuple(A.shape[:-2]), A.device))


def _is_vector_rhs(A, B) -> bool:
    # PyTorch's rule (linalg_solve_is_vector_rhs)
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def _solve(op, A, B, left, check_errors):
    C.square(op, A)
    C.floating(op, B, "B")
    C.same_dtype(op, A, B)
    vector = _is_vector_rhs(A, B)
    if vector:
        if not left:
            raise ValueError(f"{op}: Vector broadcasting of the left hand side is not "
                             f"supported for left=False. In this case linalg.solve is "
                             f"equivalent to B / A.squeeze(-1)")
        B = B.unsqueeze(-1)
    C.rows_match(op, A, B, left)
    C.batch_shape(op, A, B)
    if left:
        X = _apply(solve_p, (A, B), {"check_errors": check_errors})
    else:
        X = _apply(solve_p, (A.mT, B.mT), {"check_errors": check_errors}).mT
    return X.squeeze(-1) if vector else X


@C.outable
def solve(A, B, *, left=True, out=None):
    """Solve ``A X = B`` (or ``X A = B`` with ``left=False``) for square ``A``; ``B`` may be
    a batch of vectors (PyTorch's rule) and batch dims broadcast (``torch.linalg.solve``).

    Example:
        >>> A = ember.tensor([[2., 0.], [0., 4.]])
        >>> ember.linalg.solve(A, ember.tensor([2., 2.]))
        tensor([1.0000, 0.5000])
    """
    return _solve("linalg.solve", A, B, left, True)


@C.outable
def solve_ex(A, B, *, left=True, check_errors=False, out=None):
    """``(result, info)`` of :func:`solve` without raising (``torch.linalg.solve_ex``)."""
    X = _solve("linalg.solve_ex", A, B, left, check_errors)
    batch = C.batch_shape("linalg.solve_ex", A, B if not _is_vector_rhs(A, B) else
                          B.unsqueeze(-1))
    infos = None
    if X.numel() and not bool(X.isfinite().all()):
        a = np.broadcast_to(A.detach().cpu().numpy(), batch + tuple(A.shape[-2:]))
        infos = _lapack.singular_infos(a)
    return T.solve_ex(X, _info(infos, batch, A.device))


@C.outable
def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    """Solve ``A X = B`` (``left``) or ``X A = B`` for triangular ``A``; only the ``upper``
    (or lower) triangle of ``A`` is read, and with ``unitriangular`` its diagonal is taken
    as ones (``torch.linalg.solve_triangular``). A singular ``A`` gives inf/nan, as PyTorch.
    """
    op = "linalg.solve_triangular"
    C.square(op, A)
    C.matrices(op, B, "B")
    C.same_dtype(op, A, B)
    C.rows_match(op, A, B, left)
    C.batch_shape(op, A, B)
    params = {"upper": bool(upper), "unitriangular": bool(unitriangular)}
    if left:
        return _apply(solve_triangular_p, (A, B), params)
    params["upper"] = not params["upper"]
    return _apply(solve_triangular_p, (A.mT, B.mT), params).mT


@C.outable
def det(A, *, out=None):
    """Determinant (batched) (``torch.linalg.det``); its gradient is the cofactor matrix,
    computed through the SVD where a matrix is singular (as PyTorch)."""
    C.square("linalg.det", A)
    return _apply(det_p, (A,), {})


@C.outable
def slogdet(A, *, out=None):
    """``(sign, logabsdet)`` with ``det = sign * exp(logabsdet)`` (``torch.linalg.slogdet``);
    a singular matrix gives ``(0, -inf)``."""
    C.square("linalg.slogdet", A)
    packed = _apply(slogdet_p, (A,), {})
    if A.dtype.is_complex:      # a complex sign is differentiable; log|det| is real
        return T.slogdet(packed.select(-1, 0), packed.select(-1, 1).real)
    return T.slogdet(packed.select(-1, 0).detach(), packed.select(-1, 1))


_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


@per_example
def lstsq(A, B, rcond=None, *, driver=None):
    """Least-squares solution of ``A X = B``: ``(solution, residuals, rank,
    singular_values)`` (``torch.linalg.lstsq``; CPU default driver ``'gelsy'``).

    ``residuals`` (squared, per column) are returned when m > n, the driver is not gelsy and
    every matrix has full rank; ``rank`` for gelsy/gelsd/gelss; ``singular_values`` for
    gelsd/gelss; otherwise those are empty, as PyTorch. ``driver='gels'`` (QR, full rank
    assumed) runs SciPy's gelsy, which gives the same solution for full-rank inputs.
    """
    op = "linalg.lstsq"
    driver = "gelsy" if driver is None else driver
    if driver not in _DRIVERS:
        raise ValueError(f"{op}: parameter `driver` should be one of {_DRIVERS}, got "
                         f"{driver!r}")
    C.matrices(op, A)
    C.floating(op, B, "B")
    C.same_dtype(op, A, B)
    vector = B.ndim == A.ndim - 1
    if vector:
        B = B.unsqueeze(-1)
    if A.shape[-2] != B.shape[-2]:
        raise ValueError(f"{op}: input.size(-2) should match other.size(-2), got A "
                         f"{tuple(A.shape)} and B {tuple(B.shape)}")
    C.batch_shape(op, A, B)
    packed = _apply(lstsq_p, (A, B), {"rcond": rcond, "driver": driver})
    (m, n), k = A.shape[-2:], B.shape[-1]
    X, rank, sv = unpack(packed, lstsq_shapes(m, n, k, driver))
    if A.dtype.is_complex:      # packed as complex: rank and singular values are real
        rank, sv = rank.real, sv.real
    rank = rank.squeeze(-1).detach().to(_dt.int64)
    real_dt = A.dtype.to_real() if A.dtype.is_complex else A.dtype
    full = m > n and driver != "gelsy" and (driver == "gels" or bool((rank == n).all()))
    residuals = ((A @ X - B).abs() ** 2).sum(-2) if full else zeros(0, dtype=real_dt)
    if driver == "gels":
        rank = zeros(0, dtype=_dt.int64)
    sv = sv.detach() if sv.shape[-1] else zeros(0, dtype=real_dt)
    if vector:
        X = X.squeeze(-1)
        residuals = residuals.squeeze(-1) if full else residuals
    return T.lstsq(X, residuals, rank, sv)


def _tol(x, name):
    if x is None:
        return None
    if hasattr(x, "numel"):
        if x.numel() != 1:
            raise ValueError(f"linalg.pinv: Ember takes a float or 0-d tensor for {name}, got "
                             f"shape {tuple(x.shape)}")
        x = x.item()
    return float(x)


@C.outable
def pinv(A, *, atol=None, rtol=None, hermitian=False, out=None):
    """Moore-Penrose pseudo-inverse via the SVD (eigh with ``hermitian``): singular values
    below ``max(atol, rtol * largest)`` are dropped; ``rtol`` defaults to
    ``eps * max(m, n)`` when neither is given (``torch.linalg.pinv``). Tolerances are floats
    (or 0-d tensors) here, not per-matrix tensors."""
    C.matrices("linalg.pinv", A)
    return _apply(pinv_p, (A,), {"atol": _tol(atol, "atol"), "rtol": _tol(rtol, "rtol"),
                                 "hermitian": bool(hermitian)})


@C.outable
def tensorinv(A, ind=2, *, out=None):
    """Inverse for ``tensordot``: ``A`` reshaped to a square matrix at ``ind``
    (``torch.linalg.tensorinv``)."""
    if ind <= 0:
        raise ValueError(f"linalg.tensorinv: Expected a strictly positive integer for 'ind', "
                         f"but got {ind}")
    rows, cols = tuple(A.shape[:ind]), tuple(A.shape[ind:])
    if math.prod(rows) != math.prod(cols):
        raise ValueError(f"linalg.tensorinv: Expected self to satisfy the requirement "
                         f"prod(self.shape[ind:]) == prod(self.shape[:ind]), but got "
                         f"{math.prod(cols)} != {math.prod(rows)}")
    return inv(A.reshape(math.prod(rows), math.prod(cols))).reshape(cols + rows)


@C.outable
def tensorsolve(A, B, dims=None, *, out=None):
    """``X`` with ``tensordot(A, X, X.ndim) == B`` (``torch.linalg.tensorsolve``)."""
    if dims is not None:
        nd = A.ndim
        dims = [d % nd for d in dims]
        A = A.permute([d for d in range(nd) if d not in dims] + dims)
    rest = tuple(A.shape[B.ndim:])
    n = math.prod(B.shape)
    if math.prod(rest) != n:
        raise ValueError(f"linalg.tensorsolve: Expected self to satisfy the requirement "
                         f"prod(self.shape[other.ndim:]) == prod(self.shape[:other.ndim]), "
                         f"but got {math.prod(rest)} != {n}")
    return solve(A.reshape(n, n), B.reshape(n)).reshape(rest)
