"""OpInfos for ember.linalg on complex64/complex128: forward against NumPy/SciPy, and VJP/JVP
in complex128 (gradcheck perturbs real and imaginary parts: PyTorch's convention).

Inputs are shifted to be well conditioned; Hermitian positive-definite ones are
``X Xᴴ + n I``; eigen/singular vectors are checked through phase-invariant expressions
(``|Q|²``, ``U @ Vh``), as PyTorch's OpInfos do.
"""
import numpy as np
import scipy.linalg as sl

import ember as em
import ember.linalg as LA

from .core import OpInfo, Sample
from .linalg_lapack import _each

_CX = dict(dtypes=("complex64", "complex128"), grad_dtype="complex128",
           atol={"complex64": 1e-4, "complex128": 1e-10},
           rtol={"complex64": 1e-4, "complex128": 1e-7})


def _cgen(rng, shape, dtype, shift=0.0):
    a = rng.uniform(-1, 1, size=shape) + 1j * rng.uniform(-1, 1, size=shape)
    if shift:
        a = a + shift * np.eye(*shape[-2:])
    return a.astype(dtype)


def _h(a):
    """Conjugate transpose of the last two dims (NumPy or Ember)."""
    return a.mH if isinstance(a, em.Tensor) else np.conj(np.swapaxes(a, -1, -2))


def _hpd(a):
    n = a.shape[-1]
    eye = em.eye(n, dtype=a.dtype, device=a.device) if isinstance(a, em.Tensor) else \
        np.eye(n, dtype=a.dtype)
    return a @ _h(a) + n * eye


def _herm(a):
    return (a + _h(a)) / 2


def _samples(shapes, shift=3.0, big=(), pairs=None):
    def gen(rng, dtype):
        if pairs is not None:
            return [Sample((_cgen(rng, a, dtype, shift), _cgen(rng, b, dtype)), grad=g)
                    for a, b, g in pairs]
        return [Sample((_cgen(rng, s, dtype, shift),)) for s in shapes] + \
            [Sample((_cgen(rng, s, dtype, shift),), grad=False) for s in big]
    return gen


_SQ = _samples([(3, 3), (2, 3, 3)], big=[(4, 5, 5), (0, 3, 3)])
_RECT = _samples([(4, 3), (2, 3, 4)], shift=1.0, big=[(5, 6, 4)])
_PAIRS = _samples(None, pairs=[((3, 3), (3, 2), True), ((2, 3, 3), (2, 3, 1), True),
                               ((2, 1, 4, 4), (3, 4, 2), False)])


def _tri_fn(a, b):
    return LA.solve_triangular(a.tril(), b, upper=False)


def _tri_ref(a, b):
    return _each(lambda x, y: sl.solve_triangular(x, y, lower=True), a, b)


def _eigh_fn(a):
    w, q = LA.eigh(_herm(a))
    return w, (q * q.conj()).real


def _eigh_ref(a):
    w, q = np.linalg.eigh(_herm(a))
    return w, np.abs(q) ** 2


def _svd_fn(a):
    U, S, Vh = LA.svd(a, full_matrices=False)
    return S, U @ Vh


def _svd_ref(a):
    U, S, Vh = np.linalg.svd(a, full_matrices=False)
    return S, U @ Vh


def _eig_fn(a):
    L, V = LA.eig(a)
    return L, (V * V.conj()).real


def _eig_ref(a):
    L, V = np.linalg.eig(a)
    return L, np.abs(V) ** 2


OPINFOS = [
    OpInfo("linalg.inv[complex]", LA.inv, np.linalg.inv, _SQ, ("linalg_inv",), **_CX),
    OpInfo("linalg.solve[complex]", LA.solve, np.linalg.solve, _PAIRS, ("linalg_solve",),
           **_CX),
    OpInfo("linalg.solve_triangular[complex]", _tri_fn, _tri_ref, _PAIRS,
           ("linalg_solve_triangular",), **_CX),
    OpInfo("linalg.det[complex]", LA.det, np.linalg.det, _samples([(3, 3), (2, 3, 3)], 1.0),
           ("linalg_det",), **_CX),
    OpInfo("linalg.slogdet[complex]", lambda a: tuple(LA.slogdet(a)),
           lambda a: tuple(np.linalg.slogdet(a)), _SQ, ("linalg_slogdet",), **_CX),
    OpInfo("linalg.cholesky[complex]", lambda a: LA.cholesky(_hpd(a)),
           lambda a: np.linalg.cholesky(_hpd(a)), _SQ, ("linalg_cholesky",), **_CX),
    OpInfo("linalg.eigh[complex]", _eigh_fn, _eigh_ref,
           _samples([(3, 3), (2, 3, 3)], shift=0.0, big=[(4, 5, 5)]), ("linalg_eigh",),
           **_CX),
    OpInfo("linalg.svd[complex]", _svd_fn, _svd_ref, _RECT, ("linalg_svd",), **_CX),
    OpInfo("linalg.qr[complex]", lambda a: tuple(LA.qr(a)), lambda a: np.linalg.qr(a), _RECT,
           ("linalg_qr",), **_CX),
    OpInfo("linalg.lu_factor[complex]", lambda a: LA.lu_factor(a).LU,
           lambda a: _each(lambda x: sl.lu_factor(x)[0], a), _SQ, ("linalg_lu_factor",),
           **_CX),
    OpInfo("linalg.pinv[complex]", LA.pinv, np.linalg.pinv, _RECT, ("linalg_pinv",), **_CX),
    OpInfo("linalg.matrix_exp[complex]", lambda a: LA.matrix_exp(0.5 * a),
           lambda a: _each(lambda x: sl.expm(0.5 * x), a) if a.size else a, _SQ,
           ("linalg_matrix_exp",), **_CX),
    OpInfo("linalg.eig[complex]", _eig_fn, _eig_ref,
           _samples([(3, 3), (2, 3, 3)], shift=0.0, big=[(4, 5, 5)]), ("linalg_eig",), **_CX),
]
