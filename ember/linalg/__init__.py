"""``ember.linalg``: PyTorch's ``torch.linalg`` on LAPACK through NumPy and SciPy.

Every function batches over leading dims and is differentiable by PyTorch's formulas (VJP
and JVP, checked with gradcheck in float64). The factorizations are registry primitives
(``ember/ops/linalg_lapack.py``, ``linalg_lapack2.py``); norms, products and the matrix
functions around them are composites. Failures raise :class:`LinAlgError` (a
``RuntimeError``) naming the batch element; the ``_ex`` variants return ``info`` instead.

Inputs are float32, float64, complex64 or complex128 (gradients of complex inputs in
PyTorch's conjugate-Wirtinger convention); ``eig``/``eigvals`` return complex tensors,
singular values and Hermitian eigenvalues are real.

Example:
    >>> A = ember.tensor([[4., 2.], [2., 3.]])
    >>> ember.linalg.cholesky(A)
    tensor([[2.0000, 0.0000],
            [1.0000, 1.4142]])
"""
from ..ops import linalg_eig as _linalg_eig  # noqa: F401 - registers the eig primitives
from ..ops import linalg_ldl as _linalg_ldl  # noqa: F401 - ldl_factor, ldl_solve, geqrf
from ..ops._lapack import LinAlgError
from ._decomp import (cholesky, cholesky_ex, eig, eigh, eigvals, eigvalsh, lu, lu_factor,
                      lu_factor_ex, lu_solve, qr, svd, svdvals)
from ._extra import ldl_factor, ldl_factor_ex, ldl_solve
from ._funcs import (cross, diagonal, householder_product, matrix_exp, matrix_power,
                     multi_dot, vander, vecdot)
from ._norms import cond, matrix_norm, matrix_rank, norm, vector_norm
from ._solve import (det, inv, inv_ex, lstsq, pinv, slogdet, solve, solve_ex,
                     solve_triangular, tensorinv, tensorsolve)
from . import _aliases  # noqa: F401 - binds the Tensor methods (A.det(), A.svd()...)


def matmul(input, other, *, out=None):
    """``torch.linalg.matmul`` (= :func:`ember.matmul`)."""
    from ..ops.linalg import matmul as _mm
    return _mm(input, other, out=out)


__all__ = ["LinAlgError", "cholesky", "cholesky_ex", "cond", "cross", "det", "diagonal",
           "eig", "eigvals", "eigh", "eigvalsh", "householder_product", "inv", "inv_ex",
           "ldl_factor", "ldl_factor_ex", "ldl_solve", "lstsq", "lu", "lu_factor",
           "lu_factor_ex", "lu_solve", "matmul", "matrix_exp", "matrix_norm", "matrix_power",
           "matrix_rank", "multi_dot", "norm", "pinv", "qr", "slogdet", "solve", "solve_ex",
           "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve", "vander",
           "vecdot", "vector_norm"]
