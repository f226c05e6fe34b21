"""ember.linalg against PyTorch (optional oracle): values and gradients on batched inputs,
including the cases PyTorch documents specially (singular det, repeated eigenvalues, lstsq's
return fields)."""
import numpy as np
import pytest

import ember as em
import ember.linalg as LA

torch = pytest.importorskip("torch")
TL = torch.linalg


def _rng(seed=0):
    return np.random.default_rng(seed)


def _both(a):
    """(ember leaf, torch leaf) of the same float64 values, both requiring grad."""
    return em.tensor(a).requires_grad_(), torch.tensor(a).requires_grad_()


def _spd_np(rng, shape):
    x = rng.standard_normal(shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def _close(e, t, rtol=1e-7, atol=1e-9):
    np.testing.assert_allclose(np.asarray(e.detach().numpy()), t.detach().numpy(),
                               rtol=rtol, atol=atol)


def _check(fe, ft, *arrays, rtol=1e-7, atol=1e-9, seed=1):
    """Same outputs and the same gradient of sum(w * out) for random weights w."""
    es, ts = zip(*[_both(a) for a in arrays])
    oe, ot = fe(*es), ft(*ts)
    oe = oe if isinstance(oe, tuple) else (oe,)
    ot = ot if isinstance(ot, tuple) else (ot,)
    rng = _rng(seed)
    le, lt = 0, 0
    for a, b in zip(oe, ot):
        _close(a, b, rtol, atol)
        w = rng.standard_normal(tuple(b.shape))
        le = le + (a * em.tensor(w)).sum()
        lt = lt + (b * torch.tensor(w)).sum()
    le.backward()
    lt.backward()
    for a, b in zip(es, ts):
        _close(a.grad, b.grad, rtol=1e-6, atol=1e-8)


def test_cholesky_solve_triangular_slogdet():
    rng = _rng()
    A = _spd_np(rng, (3, 4, 4))
    B = rng.standard_normal((3, 4, 2))
    _check(lambda a: LA.cholesky(a + a.mT), lambda a: TL.cholesky(a + a.mT), A)
    _check(lambda a: LA.cholesky(a + a.mT, upper=True),
           lambda a: TL.cholesky(a + a.mT, upper=True), A)
    L = np.linalg.cholesky(A)
    for kw in ({"upper": False}, {"upper": True, "left": False},
               {"upper": False, "unitriangular": True}):
        M = L if not kw["upper"] else np.swapaxes(L, -1, -2)
        rhs = B if kw.get("left", True) else np.swapaxes(B, -1, -2)
        _check(lambda a, b: LA.solve_triangular(a, b, **kw),
               lambda a, b: TL.solve_triangular(a, b, **kw), M, rhs)
    _check(lambda a: tuple(LA.slogdet(a)), lambda a: tuple(TL.slogdet(a)), A)
    _check(lambda b, a: em.cholesky_solve(b, LA.cholesky(a + a.mT)),
           lambda b, a: torch.cholesky_solve(b, TL.cholesky(a + a.mT)), B, A)


def test_inv_solve_det_lu():
    rng = _rng(2)
    A = rng.standard_normal((2, 3, 3)) + 2 * np.eye(3)
    B = rng.standard_normal((2, 3, 2))
    _check(LA.inv, TL.inv, A)
    _check(LA.solve, TL.solve, A, B)
    _check(lambda a, b: LA.solve(a, b, left=False), lambda a, b: TL.solve(a, b, left=False),
           A, np.swapaxes(B, -1, -2))
    _check(LA.det, TL.det, A)
    _check(lambda a: LA.lu_factor(a).LU, lambda a: TL.lu_factor(a).LU, A)
    _check(lambda a, b: LA.lu_solve(*LA.lu_factor(a), b),
           lambda a, b: TL.lu_solve(*TL.lu_factor(a), b), A, B)
    _check(lambda a, b: LA.lu_solve(*LA.lu_factor(a), b, adjoint=True),
           lambda a, b: TL.lu_solve(*TL.lu_factor(a), b, adjoint=True), A, B)
    _check(lambda a: tuple(LA.lu(a)), lambda a: tuple(TL.lu(a)), A)
    e, t = LA.lu_factor(em.tensor(A)), TL.lu_factor(torch.tensor(A))
    assert e.pivots.tolist() == t.pivots.tolist()


def test_det_gradient_of_singular_matrices_is_the_cofactor():
    # NOTE: compared with central differences, not PyTorch: for an exactly singular input
    # (LU's det == 0) PyTorch 2.x returns a zero gradient, where the cofactor is not zero.
    rng = _rng(3)
    A = rng.standard_normal((3, 4, 4))
    A[0, :, 3] = A[0, :, 0] + A[0, :, 1]     # rank 3: cofactor nonzero
    A[1, :, 2:] = A[1, :, :1]                 # rank 2: cofactor zero
    A[2] = np.diag([1., 2., 0., 3.])          # exactly zero det
    e = em.tensor(A).requires_grad_()
    LA.det(e).sum().backward()
    eps, G = 1e-6, np.zeros_like(A)
    for idx in np.ndindex(*A.shape):
        d = np.zeros_like(A)
        d[idx] = eps
        G[idx] = (np.linalg.det(A + d) - np.linalg.det(A - d)).sum() / (2 * eps)
    np.testing.assert_allclose(e.grad.numpy(), G, atol=1e-7)
    assert np.abs(G[0]).max() > 0.1 and np.abs(G[2]).max() > 1


def test_eigh_eigvalsh_and_repeated_eigenvalues():
    rng = _rng(4)
    X = rng.standard_normal((2, 4, 4))
    _check(lambda a: (LA.eigh(a + a.mT)[0], LA.eigh(a + a.mT)[1].abs()),
           lambda a: (TL.eigh(a + a.mT)[0], TL.eigh(a + a.mT)[1].abs()), X)
    _check(lambda a: LA.eigvalsh(a, UPLO="U"), lambda a: TL.eigvalsh(a, UPLO="U"), X)
    # repeated eigenvalues: gradients of the eigenvalues alone stay finite (as PyTorch)
    D = np.diag([1., 1., 2.])
    e, t = _both(D)
    LA.eigh(e).eigenvalues.pow(2).sum().backward()
    TL.eigh(t).eigenvalues.pow(2).sum().backward()
    assert np.isfinite(e.grad.numpy()).all()
    _close(e.grad, t.grad)


def test_svd_svdvals_qr():
    rng = _rng(5)
    for shape in ((3, 3), (2, 4, 3), (3, 2, 5)):
        A = rng.standard_normal(shape)

        def gauge(fn):
            def f(a):
                U, S, Vh = fn(a, full_matrices=False)
                return S, U @ Vh, U.abs(), Vh.abs()
            return f
        _check(gauge(LA.svd), gauge(TL.svd), A)
        _check(LA.svdvals, TL.svdvals, A)
        _check(lambda a: tuple(LA.qr(a)), lambda a: tuple(TL.qr(a)), A)
    A = rng.standard_normal((2, 4, 3))
    _check(lambda a: LA.svd(a, full_matrices=True).S, lambda a: TL.svd(a).S, A)


def test_lstsq_fields_and_gradients():
    rng = _rng(6)
    A = rng.standard_normal((2, 5, 3))
    B = rng.standard_normal((2, 5, 2))
    for driver in ("gels", "gelsy", "gelsd", "gelss"):
        e = LA.lstsq(em.tensor(A), em.tensor(B), driver=driver)
        t = TL.lstsq(torch.tensor(A), torch.tensor(B), driver=driver)
        for a, b in zip(e, t):
            assert tuple(a.shape) == tuple(b.shape), driver
            _close(a, b)
        assert e.rank.dtype == em.int64
    _check(lambda a, b: LA.lstsq(a, b).solution, lambda a, b: TL.lstsq(a, b).solution, A, B)
    _check(lambda a, b: LA.lstsq(a, b, driver="gelsd").residuals,
           lambda a, b: TL.lstsq(a, b, driver="gelsd").residuals, A, B)


def test_pinv_matrix_exp_matrix_power():
    rng = _rng(7)
    for shape in ((3, 3), (2, 4, 2), (2, 5)):
        _check(LA.pinv, TL.pinv, rng.standard_normal(shape))
    S = _spd_np(rng, (3, 3))
    _check(lambda a: LA.pinv(a, hermitian=True), lambda a: TL.pinv(a, hermitian=True), S)
    _check(LA.matrix_exp, TL.matrix_exp, rng.standard_normal((2, 3, 3)))
    for n in (-3, 0, 1, 4):
        _check(lambda a: LA.matrix_power(a, n), lambda a: TL.matrix_power(a, n),
               rng.standard_normal((2, 3, 3)) + 2 * np.eye(3))


@pytest.mark.parametrize("ord", ["fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf])
def test_matrix_norm(ord):
    A = _rng(8).standard_normal((2, 3, 4))
    _check(lambda a: LA.matrix_norm(a, ord), lambda a: TL.matrix_norm(a, ord), A)
    _check(lambda a: LA.matrix_norm(a, ord, dim=(0, 2), keepdim=True),
           lambda a: TL.matrix_norm(a, ord, dim=(0, 2), keepdim=True), A)


@pytest.mark.parametrize("ord", [2, 1, 0, 3.5, np.inf, -np.inf])
def test_vector_norm_and_norm(ord):
    x = _rng(9).standard_normal((3, 4))
    e, t = LA.vector_norm(em.tensor(x), ord, dim=1), TL.vector_norm(torch.tensor(x), ord, dim=1)
    _close(e, t)
    _close(LA.norm(em.tensor(x), ord), TL.norm(torch.tensor(x), ord if ord != 0 else "fro"))\
        if ord not in (0, 3.5) else None
    _close(LA.norm(em.tensor(x)), TL.norm(torch.tensor(x)))
    _close(LA.norm(em.tensor(x), dim=(0, 1)), TL.norm(torch.tensor(x), dim=(0, 1)))


def test_vector_norm_gradient_at_zero_is_zero():
    x = em.zeros(3, dtype=em.float64, requires_grad=True)
    LA.vector_norm(x).backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]


def test_cond_rank_multi_dot_cross_vecdot():
    rng = _rng(10)
    A = rng.standard_normal((2, 3, 3)) + np.eye(3)
    for p in (None, 2, -2, "fro", "nuc", 1, np.inf):
        _close(LA.cond(em.tensor(A), p), TL.cond(torch.tensor(A), p), rtol=1e-6)
    R = rng.standard_normal((4, 5, 2)) @ rng.standard_normal((4, 2, 6))
    assert LA.matrix_rank(em.tensor(R)).tolist() == TL.matrix_rank(torch.tensor(R)).tolist()
    assert LA.matrix_rank(em.tensor(R), atol=1e9).tolist() == [0, 0, 0, 0]
    ms = [rng.standard_normal(s) for s in ((3,), (3, 4), (4, 5), (5,))]
    _check(lambda *t: LA.multi_dot(t), lambda *t: TL.multi_dot(t), *ms)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    _check(LA.cross, TL.cross, a, b)
    _check(LA.vecdot, TL.vecdot, a, b)
    _close(LA.vander(em.tensor(a[0]), N=4), TL.vander(torch.tensor(a[0]), N=4))
    _close(LA.tensorinv(em.tensor(A[0]), ind=1), TL.tensorinv(torch.tensor(A[0]), ind=1))
    T4 = rng.standard_normal((2, 3, 6)) + 3 * np.eye(6).reshape(2, 3, 6)
    _close(LA.tensorinv(em.tensor(T4), ind=2), TL.tensorinv(torch.tensor(T4), ind=2))
    Bt = rng.standard_normal((2, 3))
    _close(LA.tensorsolve(em.tensor(T4), em.tensor(Bt)),
           TL.tensorsolve(torch.tensor(T4), torch.tensor(Bt)))


def test_householder_product():
    rng = _rng(11)
    A = rng.standard_normal((2, 5, 3))
    tau = rng.uniform(0.5, 1.5, (2, 2))
    _check(LA.householder_product, TL.householder_product, A, tau)


def test_top_level_aliases():
    rng = _rng(12)
    A = rng.standard_normal((2, 3, 3)) + 2 * np.eye(3)
    ea, ta = em.tensor(A), torch.tensor(A)
    _close(em.det(ea), torch.det(ta))
    _close(ea.det(), ta.det())
    _close(em.inverse(ea), torch.inverse(ta))
    _close(em.logdet(ea), torch.logdet(ta))
    _close(ea.slogdet().logabsdet, ta.slogdet().logabsdet)
    U, S, V = em.svd(ea)
    _close(U @ S.diag_embed() @ V.mT, ea)
    _close(em.svd(ea, compute_uv=False).S, torch.svd(ta, compute_uv=False).S)
    _close(em.pinverse(ea), torch.pinverse(ta))
    _close(ea.matrix_power(3), ta.matrix_power(3))
    _close(em.matrix_exp(ea), torch.matrix_exp(ta))
    L = np.linalg.cholesky(A @ np.swapaxes(A, -1, -2))
    _close(em.cholesky_inverse(em.tensor(L)), torch.cholesky_inverse(torch.tensor(L)))
    b = rng.standard_normal((2, 3, 2))
    _close(em.triangular_solve(em.tensor(b), em.tensor(L), upper=False).solution,
           torch.triangular_solve(torch.tensor(b), torch.tensor(L), upper=False).solution)
    LU, piv = em.lu(ea)
    _close(em.lu_solve(em.tensor(b), LU, piv), torch.linalg.solve(ta, torch.tensor(b)))
    P, Lo, Up = em.lu_unpack(LU, piv)
    _close(P @ Lo @ Up, ea)
    assert type(em.linalg.slogdet(ea)).__name__ == "linalg_slogdet"
    assert em.linalg.eigh(ea + ea.mT)._fields == ("eigenvalues", "eigenvectors")


def test_eig_eigvals_complex_values_and_gradients():
    rng = _rng(13)
    A = rng.standard_normal((2, 4, 4))
    W = rng.standard_normal((2, 4, 4))

    def f(mod, LAmod):
        def fn(a):
            L, V = LAmod.eig(a)
            return L.real, L.imag ** 2, (V.abs() ** 2) * mod.tensor(W)
        return fn
    _check(f(em, LA), f(torch, TL), A)
    e, t = LA.eigvals(em.tensor(A)), TL.eigvals(torch.tensor(A))
    assert e.dtype == em.complex128
    np.testing.assert_allclose(e.numpy(), t.numpy(), atol=1e-12)
    assert LA.eig(em.tensor(A.astype(np.float32))).eigenvalues.dtype == em.complex64
    # complex input
    Z = A + 1j * rng.standard_normal((2, 4, 4))
    np.testing.assert_allclose(LA.eigvals(em.tensor(Z)).numpy(), TL.eigvals(torch.tensor(Z)),
                               atol=1e-12)


def test_eig_phase_dependent_loss_raises_as_pytorch():
    A = em.tensor(_rng(14).standard_normal((3, 3))).requires_grad_()
    L, V = LA.eig(A)
    with pytest.raises(RuntimeError, match="specified up to multiplication by e"):
        V.imag.sum().backward()


def test_ldl_geqrf_ormqr_lowrank():
    rng = _rng(15)
    A = rng.standard_normal((2, 4, 4))
    A = A + np.swapaxes(A, -1, -2)
    e, t = LA.ldl_factor(em.tensor(A)), TL.ldl_factor(torch.tensor(A))
    _close(e.LD, t.LD)
    assert e.pivots.tolist() == t.pivots.tolist()
    B = rng.standard_normal((2, 4, 3))
    _close(LA.ldl_solve(e.LD, e.pivots, em.tensor(B)),
           TL.ldl_solve(t.LD, t.pivots, torch.tensor(B)))
    assert LA.ldl_factor_ex(em.zeros(3, 3, dtype=em.float64)).info.tolist() == 1
    with pytest.raises(LA.LinAlgError, match="D\\[0, 0\\] is exactly zero"):
        LA.ldl_factor(em.zeros(3, 3, dtype=em.float64))
    G = rng.standard_normal((2, 5, 3))
    (a, tau), (ta, ttau) = em.geqrf(em.tensor(G)), torch.geqrf(torch.tensor(G))
    _close(a, ta)
    _close(tau, ttau)
    _close(em.orgqr(a, tau), torch.orgqr(ta, ttau))
    Cm = rng.standard_normal((2, 5, 2))
    for left, tr in ((True, False), (True, True)):
        _close(em.ormqr(a, tau, em.tensor(Cm), left, tr),
               torch.ormqr(ta, ttau, torch.tensor(Cm), left, tr))
    _close(em.ormqr(a, tau, em.tensor(np.swapaxes(Cm, -1, -2)), False, False),
           torch.ormqr(ta, ttau, torch.tensor(np.swapaxes(Cm, -1, -2)), False, False))
    low = rng.standard_normal((30, 3)) @ rng.standard_normal((3, 20))
    em.manual_seed(0)
    U, S, V = em.svd_lowrank(em.tensor(low), q=4)
    _close((U * S.unsqueeze(-2)) @ V.mT, em.tensor(low), atol=1e-10)
    _close(S[:3], torch.linalg.svdvals(torch.tensor(low))[:3])
    U, S, V = em.pca_lowrank(em.tensor(low), q=3)
    c = low - low.mean(0)
    _close(S, torch.linalg.svdvals(torch.tensor(c))[:3])


def test_repeated_values_with_vectors_used_give_nan_as_pytorch():
    for fn_e, fn_t, A in (
            (lambda a: LA.eigh(a)[1].abs().sum(), lambda a: TL.eigh(a)[1].abs().sum(),
             np.diag([1., 1., 2.])),
            (lambda a: LA.svd(a)[0].abs().sum(), lambda a: TL.svd(a)[0].abs().sum(),
             np.diag([3., 3., 1.]))):
        e, t = _both(A)
        fn_e(e).backward()
        fn_t(t).backward()
        assert np.isnan(t.grad.numpy()).any()
        np.testing.assert_array_equal(np.isnan(e.grad.numpy()), np.isnan(t.grad.numpy()))


def test_cholesky_reads_the_triangle_pytorch_reads():
    A = np.array([[4., 1.], [-100., 5.]])     # PD in the upper triangle only
    _check(lambda a: LA.cholesky(a, upper=True), lambda a: TL.cholesky(a, upper=True), A)
    with pytest.raises(LA.LinAlgError):
        LA.cholesky(em.tensor(A))
    assert int(LA.cholesky_ex(em.tensor(A), upper=True).info) == 0
    assert int(LA.cholesky_ex(em.tensor(A)).info) == 2


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)])
def test_empty_matrices_match_pytorch(shape):
    a = np.random.default_rng(16).random(shape)
    pairs = [(LA.det, TL.det), (LA.inv, TL.inv), (lambda x: LA.lu_factor(x).LU,
                                                  lambda x: TL.lu_factor(x).LU),
             (lambda x: LA.matrix_norm(x, 2), lambda x: TL.matrix_norm(x, 2)),
             (LA.cond, TL.cond), (lambda x: LA.eigh(x)[0], lambda x: TL.eigh(x)[0]),
             (LA.svdvals, TL.svdvals), (LA.matrix_exp, TL.matrix_exp), (LA.pinv, TL.pinv)]
    for fe, ft in pairs:
        e, t = fe(em.tensor(a)), ft(torch.tensor(a))
        assert tuple(e.shape) == tuple(t.shape)
        _close(e, t)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 3, 0)])
def test_lstsq_of_empty_matrices(shape):
    a = np.zeros(shape)
    b = np.ones(shape[:-1] + (1,))
    e, t = LA.lstsq(em.tensor(a), em.tensor(b)), TL.lstsq(torch.tensor(a), torch.tensor(b))
    assert tuple(e.solution.shape) == tuple(t.solution.shape)
    _close(e.solution, t.solution)
