"""Complex inputs through ember.linalg: VJP and JVP against central differences (Ember's
gradcheck, conjugate-Wirtinger convention), batched, in complex128."""
import numpy as np
import pytest

import ember as em
import ember.linalg as LA
from ember.autograd.gradcheck import gradcheck

RNG = np.random.default_rng(1)


def c(*s):
    return RNG.standard_normal(s) + 1j * RNG.standard_normal(s)


A, B, M, H = c(2, 3, 3) + 3 * np.eye(3), c(2, 3, 2), c(2, 4, 3), c(2, 3, 3)
EYE = em.eye(3, dtype=em.complex128)

CASES = {
    "inv": (LA.inv, [A]),
    "solve": (LA.solve, [A, B]),
    "solve_triangular": (lambda a, b: LA.solve_triangular(a.tril() + 3 * EYE, b, upper=False),
                         [A, B]),
    "det": (LA.det, [A]),
    "slogdet": (lambda a: tuple(LA.slogdet(a)), [A]),
    "cholesky": (lambda a: LA.cholesky(a @ a.mH + EYE), [A]),
    "eigh": (lambda a: (LA.eigh(a + a.mH)[0], LA.eigh(a + a.mH)[1].abs()), [H]),
    "svd": (lambda a: (lambda U, S, Vh: (S, U @ Vh))(*LA.svd(a, full_matrices=False)), [M]),
    "qr": (lambda a: tuple(LA.qr(a)), [M]),
    "pinv": (LA.pinv, [M]),
    "matrix_exp": (lambda a: LA.matrix_exp(0.3 * a), [A]),
    "lu_factor": (lambda a: LA.lu_factor(a).LU, [A]),
    "eig": (lambda a: (lambda L, V: (L, V.abs()))(*LA.eig(a)), [A]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_complex_vjp_and_jvp_match_central_differences(name):
    fn, arrays = CASES[name]
    xs = tuple(em.tensor(a).requires_grad_() for a in arrays)
    assert gradcheck(fn, xs, atol=1e-5, rtol=1e-3, check_forward_ad=True)
