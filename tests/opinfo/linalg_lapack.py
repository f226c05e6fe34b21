"""OpInfos for ember.linalg's LAPACK primitives and the composites around them.

Inputs are built well-conditioned (a shifted random matrix, ``X X^T + n I`` for symmetric
positive-definite ones) so the float64 finite differences are meaningful; functions whose
outputs have a sign gauge (eigenvectors, singular vectors) are checked through
gauge-invariant expressions (``Q * Q``, ``U @ Vh``), as PyTorch's OpInfos do. References are
NumPy / SciPy calls, one matrix at a time where they do not batch.
"""
import numpy as np
import scipy.linalg as sl

import ember as em
import ember.linalg as LA

from .core import OpInfo, Sample

LOOSE32 = {"float32": 1e-4, "float64": 1e-10}   # LAPACK in float32: ~1e-6 relative
RTOL = {"float32": 1e-4, "float64": 1e-7}


def _gen(rng, shape, dtype, shift=0.0):
    a = rng.uniform(-1, 1, size=shape)
    if shift:
        a = a + shift * np.eye(*shape[-2:])
    return a.astype(dtype)


def _square(shift=3.0, shapes=((3, 3), (2, 3, 3)), big=((4, 5, 5), (0, 3, 3), (2, 0, 0))):
    def gen(rng, dtype):
        out = [Sample((_gen(rng, s, dtype, shift),), name=str(s)) for s in shapes]
        return out + [Sample((_gen(rng, s, dtype, shift),), grad=False, name=str(s))
                      for s in big]
    return gen


def _spd(a):
    """Symmetric positive-definite from any square ``a`` (NumPy or Ember)."""
    n = a.shape[-1]
    at = a.mT if isinstance(a, em.Tensor) else np.swapaxes(a, -1, -2)
    return a @ at + n * (em.eye(n, dtype=a.dtype, device=a.device) if isinstance(a, em.Tensor) else
                         np.eye(n, dtype=a.dtype))


def _sym(a):
    at = a.mT if isinstance(a, em.Tensor) else np.swapaxes(a, -1, -2)
    return (a + at) / 2


def _each(fn, *arrays, batch_nd=2):
    """Apply a one-matrix NumPy/SciPy ``fn`` over the leading dims of ``arrays``."""
    batch = np.broadcast_shapes(*(a.shape[:-batch_nd] for a in arrays))
    arrs = [np.broadcast_to(a, batch + a.shape[-batch_nd:]).reshape((-1,) + a.shape[-batch_nd:])
            for a in arrays]
    outs = [np.asarray(fn(*xs)) for xs in zip(*arrs)]
    if not outs:
        probe = fn(*[np.eye(*a.shape[-2:], dtype=a.dtype) if a.ndim >= 2 else a[0] * 0
                     for a in arrs])
        return np.zeros(batch + np.asarray(probe).shape, dtype=np.asarray(probe).dtype)
    return np.stack(outs).reshape(batch + outs[0].shape)


# ------------------------------------------------------------------ triangular solves
def _tri_samples(rng, dtype):
    r = lambda s, shift=0.0: _gen(rng, s, dtype, shift)  # noqa: E731
    return [Sample((r((3, 3), 3), r((3, 2))), {"upper": False}),
            Sample((r((2, 3, 3), 3), r((2, 3, 2))), {"upper": True}),
            Sample((r((3, 3), 3), r((2, 3))), {"upper": True, "left": False}),
            Sample((r((2, 1, 3, 3), 3), r((3, 3, 1))), {"upper": False, "unitriangular": True}),
            Sample((r((4, 4), 3), r((5, 4, 3))), {"upper": True}, grad=False),
            Sample((r((0, 3, 3), 3), r((0, 3, 2))), {"upper": False}, grad=False)]


def _tri_ref(a, b, upper, left=True, unitriangular=False):
    if not left:
        return np.swapaxes(_tri_ref(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2), not upper,
                                    True, unitriangular), -1, -2)
    return _each(lambda x, y: sl.solve_triangular(x, y, lower=not upper,
                                                  unit_diagonal=unitriangular), a, b)


# ------------------------------------------------------------------ solve
def _solve_samples(rng, dtype):
    r = lambda s, shift=0.0: _gen(rng, s, dtype, shift)  # noqa: E731
    return [Sample((r((3, 3), 3), r((3, 2))), name="mat"),
            Sample((r((2, 3, 3), 3), r((2, 3))), name="vector rhs"),
            Sample((r((2, 1, 3, 3), 3), r((3, 3, 2))), name="broadcast"),
            Sample((r((3, 3), 3), r((2, 3))), {"left": False}, name="left=False"),
            Sample((r((5, 5), 3), r((4, 5, 1))), grad=False),
            Sample((r((0, 3, 3), 3), r((0, 3, 2))), grad=False)]


def _solve_ref(a, b, left=True):
    if not left:
        return np.swapaxes(np.linalg.solve(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)),
                           -1, -2)
    if b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1]):
        return np.linalg.solve(a, b[..., None])[..., 0]
    return np.linalg.solve(a, b)


# ------------------------------------------------------------------ det with a singular case
def _det_samples(rng, dtype):
    out = _square(1.0)(rng, dtype)
    s = _gen(rng, (3, 3), dtype)
    s[:, 2] = s[:, 0] + s[:, 1]              # rank 2: the cofactor path through the SVD
    return out + [Sample((s,), name="singular")]


# ------------------------------------------------------------------ spectral
def _eigh_fn(a, UPLO="L"):
    w, q = LA.eigh(_sym(a), UPLO)
    return w, q * q


def _eigh_ref(a, UPLO="L"):
    w, q = np.linalg.eigh(_sym(a), UPLO)
    return w, q * q


def _sym_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype) + np.diag(np.arange(s[-1]) * 1.5).astype(dtype)  # noqa
    return [Sample((r((3, 3)),)), Sample((r((2, 3, 3)),), {"UPLO": "U"}),
            Sample((r((4, 5, 5)),), grad=False), Sample((r((0, 3, 3)),), grad=False)]


def _svd_fn(a, full_matrices=False):
    U, S, Vh = LA.svd(a, full_matrices=full_matrices)
    k = S.shape[-1]
    return S, U.narrow(-1, 0, k) @ Vh.narrow(-2, 0, k), U * U, Vh * Vh


def _svd_ref(a, full_matrices=False):
    U, S, Vh = np.linalg.svd(a, full_matrices=full_matrices)
    k = S.shape[-1]
    return S, U[..., :k] @ Vh[..., :k, :], U * U, Vh * Vh


def _svd_samples(rng, dtype):
    # distinct singular values: a random matrix plus a spread diagonal
    def r(s):
        a = _gen(rng, s, dtype)
        k = min(s[-2:])
        a[..., range(k), range(k)] += np.arange(1, k + 1) * 1.5
        return a
    return [Sample((r((3, 3)),)), Sample((r((4, 2)),)), Sample((r((2, 2, 4)),)),
            Sample((r((3, 3)),), {"full_matrices": True}, name="full square"),
            Sample((r((2, 5, 3)),), {"full_matrices": True}, grad=False),
            Sample((r((0, 3, 2)),), grad=False)]


def _mat_samples(rng, dtype):
    return [Sample((_gen(rng, s, dtype, 1.0 if s[-1] == s[-2] else 0.0),)) for s in
            ((3, 3), (4, 2), (2, 3, 4))] + \
        [Sample((_gen(rng, s, dtype),), grad=False) for s in ((6, 5), (0, 3, 2))]


def _qr_ref(a, mode="reduced"):
    return np.linalg.qr(a, mode=mode)


def _qr_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype, 1.0)  # noqa: E731
    return [Sample((r((3, 3)),)), Sample((r((4, 2)),)), Sample((r((2, 2, 4)),)),
            Sample((r((3, 3)),), {"mode": "complete"}),
            Sample((r((2, 5, 3)),), {"mode": "complete"}, grad=False),
            Sample((r((0, 3, 2)),), grad=False)]


# ------------------------------------------------------------------ LU
def _lu_ref(a):
    return _each(lambda x: sl.lu_factor(x)[0], a)


def _lu_solve_fn(a, b):
    LU, piv = LA.lu_factor(a)
    return LA.lu_solve(LU, piv, b)


def _lu_pair_samples(rng, dtype):
    r = lambda s, shift=0.0: _gen(rng, s, dtype, shift)  # noqa: E731
    return [Sample((r((3, 3), 0.5), r((3, 2)))), Sample((r((2, 3, 3), 0.5), r((2, 3, 1)))),
            Sample((r((4, 4), 0.5), r((4, 4))), grad=False)]


def _lu_dense_fn(a):
    return tuple(LA.lu(a))


def _lu_dense_ref(a):
    return tuple(_each(lambda x: sl.lu(x)[i], a) for i in range(3))


# ------------------------------------------------------------------ lstsq, pinv, expm
def _lstsq_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype)  # noqa: E731
    return [Sample((r((4, 2)), r((4, 3)))), Sample((r((2, 3, 3)) + np.eye(3, dtype=dtype),
                                                   r((2, 3, 2)))),
            Sample((r((5, 3)), r((5, 2))), {"driver": "gelsd"}),
            Sample((r((3, 6, 4)), r((3, 6, 2))), grad=False)]


def _lstsq_ref(a, b, driver=None):
    return _each(lambda x, y: np.linalg.lstsq(x, y, rcond=None)[0], a, b)


def _pinv_ref(a, hermitian=False):
    return np.linalg.pinv(a, hermitian=hermitian)


def _expm_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype) * 0.7  # noqa: E731
    return [Sample((r((3, 3)),)), Sample((r((2, 2, 2)),)), Sample((r((4, 6, 6)),), grad=False),
            Sample((r((0, 3, 3)),), grad=False)]


# ------------------------------------------------------------------ norms
def _mnorm_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype)  # noqa: E731
    out = [Sample((r((3, 4)),), {"ord": o}, name=str(o)) for o in
           ("fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf)]
    return out + [Sample((r((2, 3, 3)),), {"ord": "nuc", "keepdim": True}),
                  Sample((r((3, 2, 4)),), {"ord": 1, "dim": (0, 2)}),
                  Sample((r((5, 4, 6)),), {"ord": 2}, grad=False)]


def _mnorm_ref(a, ord="fro", dim=(-2, -1), keepdim=False):
    return np.linalg.norm(a, ord=ord, axis=dim, keepdims=keepdim)


def _vnorm_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype)  # noqa: E731
    return [Sample((r((3, 4)),), {"ord": o}, name=str(o)) for o in (2, 1, 3.5, np.inf)] + [
        Sample((r((2, 3, 4)),), {"ord": 2, "dim": (0, 2), "keepdim": True}),
        Sample((r((6, 5)),), {"ord": 0}, grad=False)]


def _vnorm_ref(a, ord=2, dim=None, keepdim=False):
    if dim is None:
        return np.linalg.norm(a.reshape(-1), ord=ord)
    if ord == 0:
        return (a != 0).sum(axis=dim, keepdims=keepdim).astype(a.dtype)
    if ord == np.inf:
        return np.abs(a).max(axis=dim, keepdims=keepdim)
    return (np.abs(a) ** ord).sum(axis=dim, keepdims=keepdim) ** (1 / ord)


def _cond_ref(a, p=None):
    return np.linalg.cond(a, p=p)


def _cond_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype, 2.0)  # noqa: E731
    return [Sample((r((3, 3)),)), Sample((r((2, 3, 3)),), {"p": "fro"}),
            Sample((r((3, 3)),), {"p": 1}), Sample((r((4, 4)),), {"p": -2}, grad=False)]


def _mpow_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype, 2.0) * 0.5  # noqa: E731
    return [Sample((r((3, 3)), n), name=str(n)) for n in (0, 1, 3, -2)] + \
        [Sample((r((2, 4, 4)), 5), grad=False)]


def _multi_dot_samples(rng, dtype):
    r = lambda *s: _gen(rng, s, dtype)  # noqa: E731
    return [Sample((r(2, 3), r(3, 4), r(4, 2))), Sample((r(3), r(3, 2), r(2))),
            Sample((r(5, 2), r(2, 6), r(6, 3), r(3, 4)), grad=False)]


def _multi_dot_ref(*ts):
    return np.linalg.multi_dot(ts)


def _pair(shapes_grad, shapes=()):
    def gen(rng, dtype):
        return [Sample((_gen(rng, a, dtype), _gen(rng, b, dtype))) for a, b in shapes_grad] + \
            [Sample((_gen(rng, a, dtype), _gen(rng, b, dtype)), grad=False) for a, b in shapes]
    return gen


def _chol_solve_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype)  # noqa: E731
    return [Sample((r((3, 2)), r((3, 3)))), Sample((r((2, 3, 2)), r((2, 3, 3))), {"upper": True}),
            Sample((r((4, 1)), r((4, 4))), grad=False)]


def _chol_solve_fn(b, a, upper=False):
    L = LA.cholesky(_spd(a), upper=upper)
    return em.cholesky_solve(b, L, upper=upper)


def _chol_solve_ref(b, a, upper=False):
    return np.linalg.solve(_spd(a), b)


def _chol_bwd_fn(g, L):
    from ember.ops.dispatch import apply
    from ember.ops.linalg_lapack import cholesky_backward_p
    return apply(cholesky_backward_p, (g, L), {})


def _chol_bwd_ref(g, L):
    """PyTorch's formula L^{-H} Φ(L^H g) L^{-1} on L's lower triangle, by SciPy solves."""
    L = np.tril(L)
    T = np.tril(np.swapaxes(L, -1, -2) @ g)
    S = 0.5 * (T + np.swapaxes(np.tril(T, -1), -1, -2))
    X = _each(lambda l, s: sl.solve_triangular(l, s, lower=True, trans=1), L, S)
    X = _each(lambda l, x: sl.solve_triangular(l, x.T, lower=True, trans=1).T, L, X)
    return X.astype(np.result_type(g, L))


def _chol_bwd_samples(rng, dtype):
    """(g, L): L a Cholesky factor (some with values above the diagonal, which the
    primitive ignores); n = 100 takes the large-matrix (``sygst``) path."""
    def fac(shape, junk=False):
        L = np.linalg.cholesky(_spd(_gen(rng, shape, np.float64)))
        return (L + (np.triu(_gen(rng, shape, np.float64), 1) if junk else 0)).astype(dtype)
    r = lambda s: _gen(rng, s, dtype)  # noqa: E731
    return [Sample((r((3, 3)), fac((3, 3)))), Sample((r((2, 3, 3)), fac((2, 3, 3), True))),
            Sample((r((2, 3, 3)), fac((3, 3), True)), name="broadcast L"),
            Sample((r((100, 100)), fac((100, 100), True)), grad=False, name="sygst"),
            Sample((r((4, 5, 5)), fac((4, 5, 5))), grad=False),
            Sample((r((0, 3, 3)), np.zeros((0, 3, 3), dtype)), grad=False)]


def _eig_fn(a):
    L, V = LA.eig(a)
    return L.real, L.imag, V.abs() ** 2       # |V|² does not depend on the phase gauge


def _eig_ref(a):
    L, V = np.linalg.eig(a)
    return L.real, L.imag, np.abs(V) ** 2


def _eig_samples(rng, dtype):
    r = lambda s: _gen(rng, s, dtype) + np.diag(np.arange(s[-1]) * 1.0).astype(dtype)  # noqa
    return [Sample((r((3, 3)),)), Sample((r((2, 3, 3)),)), Sample((r((4, 5, 5)),), grad=False),
            Sample((r((0, 3, 3)),), grad=False)]


def _eigvals_fn(a):
    L = LA.eigvals(a)
    return L.real, L.imag


def _eigvals_ref(a):
    L = np.linalg.eigvals(a)
    return L.real, L.imag


def _ldl_fn(a):
    LD, piv = LA.ldl_factor(_sym(a))
    return LD, piv, LA.ldl_solve(LD, piv, a)


def _ldl_ref(a):
    s = _sym(a)
    lds = _each(lambda x: np.tril(sl.lapack.get_lapack_funcs("sytrf", (x,))(x, lower=1)[0]), s)
    pivs = _each(lambda x: sl.lapack.get_lapack_funcs("sytrf", (x,))(x, lower=1)[1], s,
                 ).astype(np.int32)
    return lds, pivs, np.linalg.solve(s, a)


def _geqrf_fn(a):
    return tuple(em.geqrf(a))


def _geqrf_ref(a):
    f = lambda x: sl.lapack.get_lapack_funcs("geqrf", (x,))(x)  # noqa: E731
    return _each(lambda x: f(x)[0], a), _each(lambda x: f(x)[1], a, batch_nd=2)


_sq = _square()
OPINFOS = [
    OpInfo("linalg.cholesky", lambda a, upper=False: LA.cholesky(_spd(a), upper=upper),
           lambda a, upper=False: (lambda L: np.swapaxes(L, -1, -2) if upper else L)(
               np.linalg.cholesky(_spd(a))),
           lambda rng, dt: _sq(rng, dt) + [Sample((_gen(rng, (2, 3, 3), dt),), {"upper": True})],
           ("linalg_cholesky", "linalg_solve_triangular", "linalg_cholesky_backward"),
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg_cholesky_backward", _chol_bwd_fn, _chol_bwd_ref, _chol_bwd_samples,
           ("linalg_cholesky_backward",), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.solve_triangular", LA.solve_triangular, _tri_ref, _tri_samples,
           ("linalg_solve_triangular",), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.inv", LA.inv, np.linalg.inv, _sq, ("linalg_inv",), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.solve", LA.solve, _solve_ref, _solve_samples, ("linalg_solve",),
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.det", LA.det, np.linalg.det, _det_samples,
           ("linalg_det", "linalg_inv", "linalg_svd"), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.slogdet", LA.slogdet, lambda a: tuple(np.linalg.slogdet(a)),
           _square(1.0), ("linalg_slogdet", "linalg_inv", "linalg_solve"), out_index=1,
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.eigh", _eigh_fn, _eigh_ref, _sym_samples, ("linalg_eigh",),
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.eigvalsh", lambda a, UPLO="L": LA.eigvalsh(_sym(a), UPLO),
           lambda a, UPLO="L": np.linalg.eigvalsh(_sym(a), UPLO), _sym_samples,
           ("linalg_eigvalsh", "linalg_eigh"), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.svd", _svd_fn, _svd_ref, _svd_samples, ("linalg_svd",),
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.svdvals", LA.svdvals, lambda a: np.linalg.svd(a, compute_uv=False),
           lambda rng, dt: [s for s in _svd_samples(rng, dt) if not s.kwargs],
           ("linalg_svdvals", "linalg_svd"), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.qr", lambda a, mode="reduced": tuple(LA.qr(a, mode)), _qr_ref, _qr_samples,
           ("linalg_qr", "linalg_solve_triangular"), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.lu_factor", lambda a: LA.lu_factor(a).LU, _lu_ref,
           _square(0.5, big=((4, 5, 5), (0, 3, 3))),
           ("linalg_lu_factor", "linalg_solve_triangular"), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.lu", _lu_dense_fn, _lu_dense_ref, _square(0.5, big=((4, 5, 5),)),
           ("linalg_lu_factor",), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.lu_solve", _lu_solve_fn, lambda a, b: np.linalg.solve(a, b),
           _lu_pair_samples, ("linalg_lu_factor", "linalg_solve_triangular"),
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.lstsq", lambda a, b, driver=None: LA.lstsq(a, b, driver=driver).solution,
           _lstsq_ref, _lstsq_samples, ("linalg_lstsq", "linalg_pinv"), atol=LOOSE32,
           rtol=RTOL),
    OpInfo("linalg.pinv", LA.pinv, _pinv_ref, _mat_samples, ("linalg_pinv",),
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.matrix_exp", LA.matrix_exp, lambda a: _each(sl.expm, a) if a.size else a,
           _expm_samples, ("linalg_matrix_exp",), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.matrix_norm", LA.matrix_norm, _mnorm_ref, _mnorm_samples,
           ("linalg_svd", "linalg_svdvals"), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.vector_norm", LA.vector_norm, _vnorm_ref, _vnorm_samples, (),
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.cond", LA.cond, _cond_ref, _cond_samples, ("linalg_svdvals", "linalg_inv"),
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.matrix_power", LA.matrix_power, np.linalg.matrix_power, _mpow_samples,
           ("linalg_inv",), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.multi_dot", lambda *ts: LA.multi_dot(ts), _multi_dot_ref, _multi_dot_samples, (),
           noncontig=False, atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.cross", LA.cross, lambda a, b: np.cross(a, b),
           _pair([((2, 3), (2, 3))], [((4, 1, 3), (5, 3))]), (), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.vecdot", LA.vecdot, lambda a, b: (a * b).sum(-1),
           _pair([((2, 3), (3,))], [((4, 5), (4, 5))]), (), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.eig", _eig_fn, _eig_ref, _eig_samples, ("linalg_eig", "linalg_solve"),
           atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.eigvals", _eigvals_fn, _eigvals_ref, _eig_samples,
           ("linalg_eigvals", "linalg_eig"), atol=LOOSE32, rtol=RTOL),
    OpInfo("linalg.ldl_factor", _ldl_fn, _ldl_ref, _square(3.0, big=((4, 5, 5),)),
           ("linalg_ldl_factor", "linalg_ldl_solve"), grad=False, atol=LOOSE32, rtol=RTOL),
    OpInfo("geqrf", _geqrf_fn, _geqrf_ref, _mat_samples, ("linalg_geqrf",), grad=False,
           atol=LOOSE32, rtol=RTOL),
    OpInfo("cholesky_solve", _chol_solve_fn, _chol_solve_ref, _chol_solve_samples,
           ("linalg_cholesky", "linalg_solve_triangular"), atol=LOOSE32, rtol=RTOL),
]
