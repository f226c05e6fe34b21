"""OpInfos for the PyTorch-breadth composites (issue 17): addcmul/addcdiv/addmv/addr/addbmm,
logaddexp(2), inverse hyperbolics, deg2rad/rad2deg, float_power, trace, diag family, rot90,
select/diagonal scatters, nansum/nanmean, renorm, cummax/cummin, mode, scatter_reduce.

References are NumPy (loops where NumPy has no such function)."""
import numpy as np

import ember as em

from .core import OpInfo, Sample, binary_samples, rand, unary_samples

I64 = np.int64


def _three(lo2=-2.0, hi2=2.0):
    """(input, t1, t2) with broadcasting; t2 drawn from [lo2, hi2) (a divisor away from 0)."""
    def gen(rng, dt):
        r = lambda s, lo=-2.0, hi=2.0: rand(rng, s, dt, lo, hi)  # noqa: E731
        return [Sample((r((4, 5)), r((4, 5)), r((4, 5), lo2, hi2)), {"value": 0.5},
                       grad=False, name="same"),
                Sample((r((4, 1)), r((1, 5)), r((5,), lo2, hi2)), grad=False, name="bcast"),
                Sample((r((0, 3)), r((0, 3)), r((3,), lo2, hi2)), grad=False, name="empty"),
                Sample((r((2, 3)), r((2, 3)), r((2, 3), lo2, hi2)), {"value": -2}, name="g"),
                Sample((r((3,)), r((2, 3)), r((1, 3), lo2, hi2)), name="gbcast")]
    return gen


def _mat(shapes, kw=None):
    def gen(rng, dt):
        out = [Sample(tuple(rand(rng, s, dt) for s in shapes), kw or {}, name="g")]
        out.append(Sample(tuple(rand(rng, s, dt) for s in shapes), {"beta": 0.5, "alpha": 2},
                          name="scaled"))
        return out
    return gen


def _diag_ref(a, k=0):
    return np.diag(a, k).copy()


def _diag_embed_ref(a, offset=0, dim1=-2, dim2=-1):
    n = a.shape[-1] + abs(offset)
    out = np.zeros(a.shape[:-1] + (n, n), a.dtype)
    for i in range(a.shape[-1]):
        r, c = (i, i + offset) if offset >= 0 else (i - offset, i)
        out[..., r, c] = a[..., i]
    return np.moveaxis(out, (-2, -1), (dim1, dim2))


def _diag_scatter_ref(a, src, offset=0, dim1=0, dim2=1):
    out = a.copy()
    pos = np.diagonal(np.arange(a.size).reshape(a.shape), offset, dim1, dim2)
    out.reshape(-1)[pos.reshape(-1)] = src.reshape(-1)
    return out


def _select_scatter_ref(a, src, dim, index):
    out = a.copy()
    sl = [slice(None)] * a.ndim
    sl[dim] = index
    out[tuple(sl)] = src
    return out


def _renorm_ref(a, p, dim, maxnorm):
    others = tuple(i for i in range(a.ndim) if i != dim)
    n = np.sum(np.abs(a) ** p, axis=others, keepdims=True) ** (1.0 / p)
    return (a * np.where(n > maxnorm, maxnorm / (n + 1e-7), 1.0)).astype(a.dtype)


def _cum_ref(better):
    def ref(a, dim):
        a = np.moveaxis(a, dim, -1)
        vals, idx = np.empty_like(a), np.empty(a.shape, I64)
        for pos in np.ndindex(a.shape[:-1]):
            best, bi = None, 0
            for i, v in enumerate(a[pos]):
                if best is None or better(v, best) or v == best:
                    best, bi = v, i
                vals[pos + (i,)], idx[pos + (i,)] = best, bi
        return np.moveaxis(vals, -1, dim), np.moveaxis(idx, -1, dim)
    return ref


def _mode_ref(a, dim=-1, keepdim=False):
    a = np.moveaxis(a, dim, -1)
    vals, idx = np.empty(a.shape[:-1], a.dtype), np.empty(a.shape[:-1], I64)
    for pos in np.ndindex(a.shape[:-1]):
        row = list(a[pos])
        counts = {v: row.count(v) for v in row}
        best = min(v for v in counts if counts[v] == max(counts.values()))
        vals[pos], idx[pos] = best, max(i for i, v in enumerate(row) if v == best)
    if keepdim:
        vals, idx = np.expand_dims(vals, dim), np.expand_dims(idx, dim)
    return vals, idx


def _scatter_reduce_ref(a, dim, index, src, reduce, include_self=True):
    out = a.astype(np.float64).copy()
    groups = {}
    for pos in np.ndindex(index.shape):
        tgt = list(pos)
        tgt[dim] = index[pos]
        groups.setdefault(tuple(tgt), []).append(float(src[pos]))
    for tgt, vals in groups.items():
        vals = ([out[tgt]] if include_self else []) + vals
        out[tgt] = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max,
                    "amin": np.min}[reduce](vals)
    return out.astype(a.dtype)


def _scatter_samples(reduce):
    def gen(rng, dt):
        a, s = rand(rng, (4, 3), dt), rand(rng, (3, 3), dt)
        idx = np.array([[0, 2, 1], [0, 2, 3], [1, 2, 1]], I64)   # repeats and an untouched row
        return [Sample((a, 0, idx, s, reduce), name="self"),
                Sample((a, 0, idx, s, reduce), {"include_self": False}, name="noself"),
                Sample((rand(rng, (2, 5), dt), 1, np.array([[4, 0], [1, 1]], I64),
                        rand(rng, (2, 3), dt), reduce), name="dim1-smaller-index")]
    return gen


def _u(name, fn, ref, lo=-2.0, hi=2.0, prims=("mul",), **kw):
    return OpInfo(name, fn, ref, unary_samples(lo, hi), prims, **kw)


def _s(fn):
    """Samples built by ``fn(rng, dt)`` returning ``[(args, kwargs)]``; all gradient samples."""
    return lambda rng, dt: [Sample(a, k, name=str(i)) for i, (a, k) in enumerate(fn(rng, dt))]


_F64 = lambda f: (lambda *a: f(*[np.asarray(x, np.float64) for x in a]))  # noqa: E731

OPINFOS = [
    OpInfo("addcmul", em.addcmul, lambda a, b, c, value=1: a + value * b * c, _three(),
           ("mul", "add")),
    OpInfo("addcdiv", em.addcdiv, lambda a, b, c, value=1: a + value * b / c, _three(0.5, 2),
           ("div", "add")),
    OpInfo("addmv", em.addmv, lambda a, m, v, beta=1, alpha=1: beta * a + alpha * (m @ v),
           _mat(((3,), (3, 4), (4,))), ("matmul",)),
    OpInfo("addr", em.addr, lambda a, u, v, beta=1, alpha=1: beta * a + alpha * np.outer(u, v),
           _mat(((3, 4), (3,), (4,))), ("mul",)),
    OpInfo("addbmm", em.addbmm,
           lambda a, b1, b2, beta=1, alpha=1: beta * a + alpha * (b1 @ b2).sum(0),
           _mat(((3, 4), (2, 3, 5), (2, 5, 4))), ("matmul", "sum")),
    OpInfo("logaddexp", em.logaddexp, np.logaddexp, binary_samples(-5, 5),
           ("maximum", "log1p", "exp")),
    OpInfo("logaddexp2", em.logaddexp2, np.logaddexp2, binary_samples(-5, 5),
           ("maximum", "log1p", "exp")),
    _u("asinh", em.asinh, np.arcsinh, -3, 3, ("log1p", "sqrt", "where")),
    _u("acosh", em.acosh, np.arccosh, 1.2, 4, ("log1p", "sqrt", "where")),
    _u("atanh", em.atanh, np.arctanh, -0.9, 0.9, ("log1p", "div")),
    _u("deg2rad", em.deg2rad, np.deg2rad, -360, 360),
    _u("rad2deg", em.rad2deg, np.rad2deg),
    OpInfo("float_power", em.float_power, _F64(np.power), binary_samples(0.5, 2, -2, 2),
           ("cast", "pow")),
    OpInfo("trace", em.trace, np.trace, _s(lambda r, d: [((rand(r, (3, 4), d),), {}),
                                                        ((rand(r, (3, 3), d),), {})]),
           ("sum",)),
    OpInfo("diag", em.diag, _diag_ref,
           _s(lambda r, d: [((rand(r, (3,), d),), {}), ((rand(r, (3,), d), -1), {}),
                            ((rand(r, (3, 4), d), 1), {}), ((rand(r, (4, 3), d),), {})]),
           ("index_put",)),
    OpInfo("diag_embed", em.diag_embed, _diag_embed_ref,
           _s(lambda r, d: [((rand(r, (2, 3), d),), {}), ((rand(r, (2, 3), d), 1, 0, 2), {}),
                            ((rand(r, (3,), d), -1), {})]), ("index_put",)),
    OpInfo("diagflat", em.diagflat, lambda a, offset=0: np.diagflat(a, offset),
           _s(lambda r, d: [((rand(r, (2, 2), d),), {}), ((rand(r, (3,), d), 1), {})]),
           ("index_put",)),
    OpInfo("rot90", em.rot90, lambda a, k=1, dims=(0, 1): np.rot90(a, k, dims).copy(),
           _s(lambda r, d: [((rand(r, (2, 3), d),), {}), ((rand(r, (2, 3, 4), d), 2, (1, 2)),
                                                         {}),
                            ((rand(r, (2, 3), d), -1), {}), ((rand(r, (2, 3), d), 4), {})]),
           ("flip",)),
    OpInfo("diagonal_scatter", em.diagonal_scatter, _diag_scatter_ref,
           _s(lambda r, d: [((rand(r, (3, 3), d), rand(r, (3,), d)), {}),
                            ((rand(r, (3, 4), d), rand(r, (3,), d), 1), {}),
                            ((rand(r, (2, 3, 4), d), rand(r, (3, 2), d), 0, 0, 2), {})]),
           ("index_put",)),
    OpInfo("select_scatter", em.select_scatter, _select_scatter_ref,
           _s(lambda r, d: [((rand(r, (3, 4), d), rand(r, (4,), d), 0, 1), {}),
                            ((rand(r, (2, 3, 4), d), rand(r, (2, 4), d), 1, -1), {})]),
           ("index_put",)),
    OpInfo("nansum", em.nansum, np.nansum,
           _s(lambda r, d: [((rand(r, (3, 4), d),), {}), ((rand(r, (3, 4), d), 1), {})]),
           ("where", "sum")),
    OpInfo("nanmean", em.nanmean, np.nanmean,
           _s(lambda r, d: [((rand(r, (3, 4), d),), {}), ((rand(r, (3, 4), d), 0), {})]),
           ("where", "sum")),
    OpInfo("renorm", em.renorm, _renorm_ref,
           _s(lambda r, d: [((rand(r, (3, 4), d), 2, 0, 1.5), {}),
                            ((rand(r, (2, 3, 2), d), 1, 1, 2.0), {})]), ("where",)),
    OpInfo("cummax", em.cummax, _cum_ref(lambda v, b: v > b),
           _s(lambda r, d: [((rand(r, (3, 5), d), 1), {}), ((rand(r, (4, 2), d), 0), {})]),
           ("take_along_dim",)),
    OpInfo("cummin", em.cummin, _cum_ref(lambda v, b: v < b),
           _s(lambda r, d: [((rand(r, (3, 5), d), 1), {}), ((rand(r, (6,), d), 0), {})]),
           ("take_along_dim",)),
    OpInfo("mode", em.mode, _mode_ref,
           _s(lambda r, d: [((np.round(rand(r, (3, 6), d, 0, 3)),), {}),
                            ((np.round(rand(r, (4, 3), d, 0, 2)), 0, True), {})]),
           ("take_along_dim",), grad=False),   # NOTE: piecewise constant in which element wins
] + [OpInfo(f"scatter_reduce_{red}", em.scatter_reduce, _scatter_reduce_ref,
            _scatter_samples(red), ("scatter_add_along_dim",), gradgrad=red != "prod")
     for red in ("sum", "prod", "mean", "amax", "amin")]


# ------------------------------------------------------------------ composite_misc / grid
def _nanmedian_ref(a, dim):
    s = np.sort(a, axis=dim)
    k = np.sum(~np.isnan(a), axis=dim, keepdims=True)
    return np.take_along_axis(s, np.maximum((k - 1) // 2, 0), dim).squeeze(dim)


def _with_nans(rng, s, dt):
    a = rand(rng, s, dt)
    a.reshape(-1)[::4] = np.nan
    return a


def _index_reduce_ref(a, dim, index, src, reduce, include_self=True):
    full = np.broadcast_to(np.expand_dims(index, tuple(i for i in range(src.ndim) if i != dim)),
                           src.shape)
    return _scatter_reduce_ref(a, dim, full, src, reduce, include_self)


def _xlogy_ref(x, y):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((x == 0) & ~np.isnan(y), 0, x * np.log(np.where(x == 0, 1, y)))


def _cdist_ref(a, b, p=2.0):
    d = np.abs(a[..., :, None, :] - b[..., None, :, :])
    return (d ** p).sum(-1) ** (1 / p)


def _trap_ref(y, x=None, dx=1.0):
    h = dx if x is None else np.diff(x)
    return ((y[..., 1:] + y[..., :-1]) * h).sum(-1) / 2


def _cumtrap_ref(y, dx=1.0):
    return np.cumsum((y[..., 1:] + y[..., :-1]) * dx / 2, -1)


OPINFOS += [
    OpInfo("tensor_unfold", lambda x, d, s, st: x.unfold(d, s, st),
           lambda a, d, s, st: np.moveaxis(np.lib.stride_tricks.sliding_window_view(
               a, s, axis=d), d, d)[(slice(None),) * d + (slice(None, None, st),)].copy(),
           _s(lambda r, d: [((rand(r, (7,), d), 0, 3, 2), {}), ((rand(r, (3, 5), d), 1, 2, 1),
                                                                {}),
                            ((rand(r, (4, 3), d), 0, 4, 3), {})]), ("as_strided",)),
    OpInfo("nanmedian", lambda x, d: em.nanmedian(x, d).values, _nanmedian_ref,
           _s(lambda r, d: [((_with_nans(r, (3, 5), d), 1), {}),
                            ((_with_nans(r, (4, 3), d), 0), {})]), ("argsort",)),
    OpInfo("index_reduce_mean", em.index_reduce, _index_reduce_ref,
           _s(lambda r, d: [((rand(r, (4, 3), d), 0, np.array([0, 2, 0], I64),
                              rand(r, (3, 3), d), "mean"), {}),
                            ((rand(r, (2, 4), d), 1, np.array([3, 3]), rand(r, (2, 2), d),
                              "amax"), {"include_self": False})]), ("scatter_add_along_dim",)),
    OpInfo("xlogy", em.xlogy, lambda x, y: _xlogy_ref(x, y).astype(x.dtype),
           binary_samples(0.3, 2, scalars=(2.5,)), ("mul", "log", "where")),
    _u("logit", em.logit, lambda p: np.log(p / (1 - p)), 0.1, 0.9, ("log", "div")),
    _u("sinc", em.sinc, np.sinc, -2, 2, ("sin", "div", "where")),
    OpInfo("diff", em.diff, lambda a, n=1, dim=-1: np.diff(a, n, dim),
           _s(lambda r, d: [((rand(r, (3, 5), d),), {}), ((rand(r, (4, 3), d), 2, 0), {})]),
           ("sub",)),
    OpInfo("kron", em.kron, np.kron,
           _s(lambda r, d: [((rand(r, (2, 3), d), rand(r, (3, 2), d)), {}),
                            ((rand(r, (3,), d), rand(r, (2, 2), d)), {})]), ("mul",)),
    OpInfo("cross", em.cross, lambda a, b, dim=None: np.cross(a, b, axis=0 if dim is None
                                                              else dim),
           _s(lambda r, d: [((rand(r, (3, 4), d), rand(r, (3, 4), d)), {}),
                            ((rand(r, (2, 3), d), rand(r, (2, 3), d), 1), {})]), ("mul",)),
    OpInfo("dist", em.dist, lambda a, b, p=2: np.linalg.norm((a - b).ravel(), p),
           _s(lambda r, d: [((rand(r, (3, 4), d), rand(r, (3, 4), d)), {}),
                            ((rand(r, (5,), d), rand(r, (5,), d), 1), {})]), ("sum",)),
    OpInfo("cdist", em.cdist, _cdist_ref,
           _s(lambda r, d: [((rand(r, (3, 4), d), rand(r, (2, 4), d)), {}),
                            ((rand(r, (2, 3, 2), d), rand(r, (2, 4, 2), d), 1.5), {})]),
           ("sum", "sqrt")),
    OpInfo("vander", em.vander, lambda x, N=None, increasing=False: np.vander(x, N, increasing),
           _s(lambda r, d: [((rand(r, (4,), d),), {}), ((rand(r, (3,), d), 4, True), {})]),
           ("pow",), exact_dtype=False),   # NOTE: NumPy's vander/cov compute in float64
    OpInfo("trapezoid", em.trapezoid, _trap_ref,
           _s(lambda r, d: [((rand(r, (3, 5), d),), {}),
                            ((rand(r, (4,), d), np.sort(rand(r, (4,), d))), {}),
                            ((rand(r, (2, 4), d),), {"dx": 0.5})]), ("sum",)),
    OpInfo("cumulative_trapezoid", em.cumulative_trapezoid, _cumtrap_ref,
           _s(lambda r, d: [((rand(r, (3, 5), d),), {}), ((rand(r, (4,), d),), {"dx": 2.0})]),
           ("cumsum",)),
    OpInfo("cov", em.cov, lambda a, correction=1: np.cov(a, ddof=correction),
           _s(lambda r, d: [((rand(r, (3, 6), d),), {}), ((rand(r, (2, 5), d),),
                                                          {"correction": 0})]), ("matmul",),
           exact_dtype=False),
    OpInfo("corrcoef", em.corrcoef, np.corrcoef, _s(lambda r, d: [((rand(r, (3, 6), d),), {})]),
           ("matmul", "clamp"), exact_dtype=False),
    OpInfo("block_diag", lambda *ts: em.block_diag(*ts),
           lambda *a: _block_diag_ref(a),
           _s(lambda r, d: [((rand(r, (2, 3), d), rand(r, (3,), d), rand(r, (1, 2), d)), {})]),
           ("cat",)),
    OpInfo("cartesian_prod", lambda *ts: em.cartesian_prod(*ts),
           lambda *a: np.stack([g.ravel() for g in np.meshgrid(*a, indexing="ij")], 1),
           _s(lambda r, d: [((rand(r, (2,), d), rand(r, (3,), d)), {})]), ("expand",)),
    OpInfo("meshgrid_xy", lambda *ts: em.meshgrid(*ts, indexing="xy"),
           lambda *a: tuple(np.meshgrid(*a, indexing="xy")),
           _s(lambda r, d: [((rand(r, (2,), d), rand(r, (3,), d), rand(r, (4,), d)), {})]),
           ("expand",)),
    OpInfo("dstack", lambda *ts: em.dstack(ts), lambda *a: np.dstack(a),
           _s(lambda r, d: [((rand(r, (2, 3), d), rand(r, (2, 3), d)), {}),
                            ((rand(r, (2, 3, 2), d), rand(r, (2, 3), d)), {})]), ("cat",)),
    OpInfo("column_stack", lambda *ts: em.column_stack(ts), lambda *a: np.column_stack(a),
           _s(lambda r, d: [((rand(r, (3,), d), rand(r, (3, 2), d)), {})]), ("cat",)),
]


def _block_diag_ref(arrs):
    arrs = [a.reshape(1, -1) if a.ndim < 2 else a for a in arrs]
    out = np.zeros((sum(a.shape[0] for a in arrs), sum(a.shape[1] for a in arrs)),
                   arrs[0].dtype)
    r = c = 0
    for a in arrs:
        out[r:r + a.shape[0], c:c + a.shape[1]] = a
        r, c = r + a.shape[0], c + a.shape[1]
    return out


# ------------------------------------------------------------------ composite_more
def _quantile_samples(rng, dt):
    return [Sample((rand(rng, (3, 5), dt), 0.3), {"dim": 1}, name="row"),
            Sample((rand(rng, (4, 3), dt), np.array([0.1, 0.5, 0.9], dt)), {"dim": 0,
                                                                           "keepdim": True},
                   name="vector-q"),
            Sample((rand(rng, (2, 3), dt), 0.75), name="all"),
            Sample((rand(rng, (5,), dt), 0.4), {"interpolation": "midpoint"}, name="midpoint")]


def _np_quantile(a, q, dim=None, keepdim=False, interpolation="linear"):
    return np.quantile(a, q, axis=dim, keepdims=keepdim, method=interpolation).astype(a.dtype)


OPINFOS += [
    OpInfo("quantile", em.quantile, _np_quantile, _quantile_samples, ("argsort",)),
    OpInfo("ldexp", em.ldexp, lambda a, e: a * 2.0 ** e,
           _s(lambda r, d: [((rand(r, (3, 4), d), np.array([1, -2, 0, 3], I64)), {})]),
           ("mul", "pow"), exact_dtype=False),
    OpInfo("chain_matmul", lambda *m: em.chain_matmul(*m), lambda *m: m[0] @ m[1] @ m[2],
           _s(lambda r, d: [((rand(r, (2, 3), d), rand(r, (3, 4), d), rand(r, (4, 2), d)),
                             {})]), ("matmul",)),
    OpInfo("put", em.put, lambda a, i, s, acc=False: _put_ref(a, i, s, acc),
           _s(lambda r, d: [((rand(r, (3, 4), d), np.array([0, 5, -1], I64), rand(r, (3,), d)),
                             {}),
                            ((rand(r, (2, 2), d), np.array([1, 1], I64), rand(r, (2,), d),
                              True), {})]), ("index_put",)),
    OpInfo("combinations", em.combinations,
           lambda a, r=2, with_replacement=False: np.array(
               list((__import__("itertools").combinations_with_replacement if with_replacement
                     else __import__("itertools").combinations)(a, r)), a.dtype).reshape(-1, r),
           _s(lambda r, d: [((rand(r, (4,), d),), {}), ((rand(r, (3,), d), 3, True), {})]),
           ("index",)),
]


def _put_ref(a, idx, src, acc):
    out = a.copy().reshape(-1)
    if acc:
        np.add.at(out, idx, src)
    else:
        out[idx] = src
    return out.reshape(a.shape)


def _logcumsumexp_ref(a, dim):
    m = np.max(a, axis=dim, keepdims=True)
    return (np.log(np.cumsum(np.exp(a - m), axis=dim)) + m).astype(a.dtype)


OPINFOS += [
    OpInfo("logcumsumexp", em.logcumsumexp, _logcumsumexp_ref,
           _s(lambda r, d: [((rand(r, (3, 5), d), 1), {}), ((rand(r, (6, 2), d), 0), {}),
                            ((rand(r, (9,), d, -20, 20), -1), {})]),
           ("maximum", "log1p", "exp")),
]


# ------------------------------------------------------------------ gamma family
def _sp(name):
    def ref(a, *args):
        import scipy.special as sp   # NOTE: a test dependency (pyproject [test])
        return getattr(sp, name)(*args, a.astype(np.float64)).astype(a.dtype)
    return ref


def _mvlgamma_ref(a, p):
    import scipy.special as sp
    return np.vectorize(lambda v: sp.multigammaln(v, p))(a.astype(np.float64)).astype(a.dtype)


def _polygamma_samples(rng, dt):
    return [Sample((rand(rng, (3, 4), dt, 0.3, 4.0), 1), name="n1"),
            Sample((rand(rng, (5,), dt, 0.5, 3.0), 2), name="n2"),
            Sample((rand(rng, (2, 3), dt, -2.9, -2.1), 1), name="negative")]


OPINFOS += [
    _u("lgamma", em.lgamma, _sp("gammaln"), 0.2, 6.0, ("lgamma",)),
    _u("lgamma_negative", em.lgamma, _sp("gammaln"), -2.9, -2.1, ("lgamma",)),
    _u("digamma", em.digamma, _sp("digamma"), 0.2, 12.0, ("digamma",)),
    _u("digamma_negative", em.digamma, _sp("digamma"), -1.9, -1.1, ("digamma",)),
    OpInfo("polygamma", lambda x, n: em.polygamma(n, x), lambda a, n: _sp("polygamma")(a, n),
           _polygamma_samples, ("polygamma",)),
    OpInfo("mvlgamma", em.mvlgamma, lambda a, p: _mvlgamma_ref(a, p),
           _s(lambda r, d: [((rand(r, (3, 2), d, 2.0, 4.0), 3), {})]), ("lgamma",)),
]
