"""ember.linalg on complex input against PyTorch (optional oracle): values and gradients
(conjugate-Wirtinger convention) of a real loss ``Re sum(w * out)`` with complex weights,
and PyTorch's phase-gauge errors."""
import numpy as np
import pytest

import ember as em
import ember.linalg as LA

torch = pytest.importorskip("torch")
TL = torch.linalg

RNG = np.random.default_rng(0)


def c(*s):
    return RNG.standard_normal(s) + 1j * RNG.standard_normal(s)


def _check(fe, ft, *arrays):
    es = [em.tensor(a).requires_grad_() for a in arrays]
    ts = [torch.tensor(a).requires_grad_() for a in arrays]
    oe, ot = fe(*es), ft(*ts)
    oe = oe if isinstance(oe, tuple) else (oe,)
    ot = ot if isinstance(ot, tuple) else (ot,)
    le = lt = 0
    for a, b in zip(oe, ot):
        b = b.resolve_conj()
        assert a.dtype.is_complex == b.is_complex(), (a.dtype, b.dtype)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-10)
        w = RNG.standard_normal(tuple(b.shape))
        if b.is_complex():
            w = w + 1j * RNG.standard_normal(tuple(b.shape))
            le, lt = le + (a * em.tensor(w)).real.sum(), lt + (b * torch.tensor(w)).real.sum()
        else:
            le, lt = le + (a * em.tensor(w)).sum(), lt + (b * torch.tensor(w)).sum()
    le.backward()
    lt.backward()
    for x, y in zip(es, ts):
        np.testing.assert_allclose(x.grad.numpy(), y.grad.resolve_conj().numpy(), atol=1e-9)


A = c(2, 3, 3) + 3 * np.eye(3)
B = c(2, 3, 2)
H = c(2, 3, 3)
H = H + np.conj(np.swapaxes(H, -1, -2))
P = H @ np.conj(np.swapaxes(H, -1, -2)) + np.eye(3)
L = np.linalg.cholesky(P)
M = c(2, 4, 3)

CASES = {
    "inv": (LA.inv, TL.inv, A),
    "solve": (LA.solve, TL.solve, A, B),
    "solve_left_false": (lambda a, b: LA.solve(a, b, left=False),
                         lambda a, b: TL.solve(a, b, left=False), A, np.swapaxes(B, -1, -2)),
    "solve_triangular": (lambda a, b: LA.solve_triangular(a, b, upper=False),
                         lambda a, b: TL.solve_triangular(a, b, upper=False), L, B),
    "cholesky": (lambda a: LA.cholesky(a + a.mH, upper=True),
                 lambda a: TL.cholesky(a + a.mH, upper=True), P),
    "det": (LA.det, TL.det, A),
    "slogdet": (lambda a: tuple(LA.slogdet(a)), lambda a: tuple(TL.slogdet(a)), A),
    "eigh": (lambda a: (LA.eigh(a + a.mH)[0], LA.eigh(a + a.mH)[1].abs()),
             lambda a: (TL.eigh(a + a.mH)[0], TL.eigh(a + a.mH)[1].abs()), H),
    "eigvalsh": (lambda a: LA.eigvalsh(a + a.mH), lambda a: TL.eigvalsh(a + a.mH), H),
    "svd": (lambda a: (lambda U, S, Vh: (S, U @ Vh))(*LA.svd(a, full_matrices=False)),
            lambda a: (lambda U, S, Vh: (S, U @ Vh))(*TL.svd(a, full_matrices=False)), M),
    "svdvals": (LA.svdvals, TL.svdvals, M),
    "qr": (lambda a: tuple(LA.qr(a)), lambda a: tuple(TL.qr(a)), M),
    "qr_wide": (lambda a: tuple(LA.qr(a)), lambda a: tuple(TL.qr(a)), c(2, 3, 4)),
    "pinv": (LA.pinv, TL.pinv, M),
    "matrix_exp": (LA.matrix_exp, TL.matrix_exp, c(2, 3, 3) * 0.5),
    "lu_factor": (lambda a: LA.lu_factor(a).LU, lambda a: TL.lu_factor(a).LU, A),
    "lu_solve": (lambda a, b: LA.lu_solve(*LA.lu_factor(a), b),
                 lambda a, b: TL.lu_solve(*TL.lu_factor(a), b), A, B),
    "lstsq": (lambda a, b: LA.lstsq(a, b).solution, lambda a, b: TL.lstsq(a, b).solution,
              c(2, 5, 3), c(2, 5, 2)),
    "matrix_norm_2": (lambda a: LA.matrix_norm(a, 2), lambda a: TL.matrix_norm(a, 2), M),
    "matrix_norm_nuc": (lambda a: LA.matrix_norm(a, "nuc"), lambda a: TL.matrix_norm(a, "nuc"),
                        M),
    "cond": (LA.cond, TL.cond, A),
    "matrix_power": (lambda a: LA.matrix_power(a, -2), lambda a: TL.matrix_power(a, -2), A),
    "cholesky_solve": (lambda b, a: em.cholesky_solve(b, LA.cholesky(a + a.mH)),
                       lambda b, a: torch.cholesky_solve(b, TL.cholesky(a + a.mH)), B, P),
}


@pytest.mark.parametrize("name", list(CASES))
def test_complex_values_and_gradients_match_pytorch(name):
    fe, ft, *arrays = CASES[name]
    _check(fe, ft, *arrays)


def test_real_valued_outputs_of_complex_input():
    assert LA.svdvals(em.tensor(M)).dtype == em.float64
    assert LA.eigvalsh(em.tensor(H)).dtype == em.float64
    assert LA.eigh(em.tensor(H)).eigenvalues.dtype == em.float64
    assert LA.slogdet(em.tensor(A)).logabsdet.dtype == em.float64
    assert LA.slogdet(em.tensor(A)).sign.dtype == em.complex128
    assert LA.lstsq(em.tensor(c(5, 3)), em.tensor(c(5, 2)), driver="gelsd").residuals.dtype \
        == em.float64


def test_phase_dependent_losses_raise_as_pytorch():
    a = em.tensor(M[0]).requires_grad_()
    U, S, Vh = LA.svd(a, full_matrices=False)
    with pytest.raises(RuntimeError, match="specified up to multiplication by e"):
        U.imag.sum().backward()
    h = em.tensor(H[0]).requires_grad_()
    with pytest.raises(RuntimeError, match="specified up to multiplication by e"):
        LA.eigh(h)[1].imag.sum().backward()


@pytest.mark.parametrize("hermitian", [False, True])
def test_complex_ldl(hermitian):
    X = c(2, 3, 3)
    S = H if hermitian else X + np.swapaxes(X, -1, -2)      # complex symmetric
    e = LA.ldl_factor(em.tensor(S), hermitian=hermitian)
    t = TL.ldl_factor(torch.tensor(S), hermitian=hermitian)
    np.testing.assert_allclose(e.LD.numpy(), t.LD.numpy(), atol=1e-12)
    assert e.pivots.tolist() == t.pivots.tolist()
    x = LA.ldl_solve(e.LD, e.pivots, em.tensor(B), hermitian=hermitian)
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(S, B), atol=1e-10)


def test_complex_geqrf_orgqr_ormqr_householder_product():
    G = c(2, 5, 3)
    (a, tau), (ta, ttau) = em.geqrf(em.tensor(G)), torch.geqrf(torch.tensor(G))
    np.testing.assert_allclose(a.numpy(), ta.numpy(), atol=1e-12)
    np.testing.assert_allclose(em.orgqr(a, tau).numpy(), torch.orgqr(ta, ttau).numpy(),
                               atol=1e-12)
    C = c(2, 5, 2)
    for transpose in (False, True):
        np.testing.assert_allclose(
            em.ormqr(a, tau, em.tensor(C), True, transpose).numpy(),
            torch.ormqr(ta, ttau, torch.tensor(C), True, transpose).numpy(), atol=1e-12)
    _check(LA.householder_product, TL.householder_product, G, c(2, 2))


def test_complex_ex_variants_and_logdet():
    Z = np.array([[1, 2], [2, 1]], dtype=complex)
    assert int(LA.cholesky_ex(em.tensor(Z)).info) == int(TL.cholesky_ex(torch.tensor(Z)).info)
    assert LA.inv_ex(em.tensor(np.zeros((2, 2), complex))).info.tolist() == 1
    _check(em.logdet, torch.logdet, A)
