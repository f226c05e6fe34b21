"""OpInfos for the reduction family: reductions, max/min, statistics, scans, sort/topk,
softmax. References are plain NumPy (never Ember)."""
import numpy as np

import ember as em
from ember.ops.nll import nll_loss_backward_p, nll_loss_p
from ember.ops.softmax import log_softmax_backward
from ember.ops.sort import scatter_add_along_dim_p

from .core import OpInfo, Sample, rand

ALL_DIMS = (None, 0, -1, (0, 2), (-1, 1), (0, 1, 2))


def _ax(dim):
    return tuple(dim) if isinstance(dim, list) else dim


def _signed(rng, shape, dtype, lo=0.5, hi=1.5):
    """Values with |x| in [lo, hi) and random signs: away from 0 (prod, cumprod, norm)."""
    return (rand(rng, shape, dtype, lo, hi) * rng.choice([-1, 1], size=shape)).astype(dtype)


def red_samples(dims=ALL_DIMS, grad_kw=({"dim": 1}, {"dim": None}, {"dim": (0, 1),
                "keepdim": True}, {"dim": -1, "keepdim": True}), make=rand, zero_size=True,
                full_kw=None, extra=()):
    """Reduction samples: a 3-d input over many dims (keepdim both ways), a 0-d input, zero-size
    inputs (reduced over a non-empty dim), and small float64 gradient samples."""
    def gen(rng, dtype):
        mk = lambda r, s, d: np.asarray(make(r, s, d))  # noqa: E731 - rand(()) is a scalar
        x = mk(rng, (3, 4, 5), dtype)
        out = [Sample((x,), {"dim": d, "keepdim": k}, grad=False, name=f"dim={d},keep={k}")
               for d in dims for k in (False, True)]
        out.append(Sample((mk(rng, (), dtype),), dict(full_kw or {}), grad=False, name="0-d"))
        if zero_size:
            out.append(Sample((mk(rng, (0, 3), dtype),), {"dim": 1}, grad=False,
                              name="(0,3) dim=1"))
            if full_kw is None:
                out.append(Sample((mk(rng, (2, 0), dtype),), {"dim": 1}, grad=False,
                                  name="(2,0) dim=1"))
        out += [Sample((mk(rng, (2, 3), dtype),), dict(kw), name=f"grad{kw}") for kw in grad_kw]
        out += [Sample((mk(rng, s, dtype),), dict(kw), grad=g, name=f"{s}{kw}")
                for s, kw, g in extra]
        return out
    return gen


def _np_red(fn):
    return lambda x, dim=None, keepdim=False, **kw: fn(x, axis=_ax(dim), keepdims=keepdim, **kw)


def _np_sum(x, dim=None, keepdim=False):
    r = np.sum(x, axis=_ax(dim), keepdims=keepdim)
    return np.asarray(r).astype(np.int64 if x.dtype.kind in "biu" else x.dtype)


def _np_mean(x, dim=None, keepdim=False):
    with np.errstate(all="ignore"):
        r = np.mean(x, axis=_ax(dim), keepdims=keepdim) if x.size else \
            np.sum(x, axis=_ax(dim), keepdims=keepdim) / 0.0
    return np.asarray(r).astype(x.dtype)


def _np_arg(fn):
    def ref(x, dim=None, keepdim=False):
        if dim is None:
            r = np.asarray(fn(x.reshape(-1)), dtype=np.int64)
            return r.reshape((1,) * x.ndim) if keepdim else r
        return np.asarray(fn(x, axis=dim if x.ndim else None, keepdims=keepdim), dtype=np.int64)
    return ref


def _np_select(red, arg):
    def ref(x, dim, keepdim=False):
        if x.ndim == 0:
            return x.copy(), np.asarray(0, dtype=np.int64)
        return red(x, axis=dim, keepdims=keepdim), np.asarray(
            arg(x, axis=dim, keepdims=keepdim), dtype=np.int64)
    return ref


def _sel_samples(rng, dtype):
    x = rand(rng, (3, 4, 5), dtype)
    out = [Sample((x, d, k), grad=False, name=f"{d},{k}") for d in (0, 1, -1) for k in (0, 1)]
    out.append(Sample((np.asarray(rand(rng, (), dtype)), 0, False), grad=False, name="0-d"))
    out.append(Sample((rand(rng, (0, 3), dtype), 1, True), grad=False, name="(0,3) dim=1"))
    out += [Sample((rand(rng, (2, 3), dtype), d, k), name=f"grad{d},{k}")
            for d, k in ((1, False), (0, True), (-1, True))]
    return out


def _np_var(x, dim=None, keepdim=False, correction=1, unbiased=None):
    ddof = correction if unbiased is None else int(unbiased)
    with np.errstate(all="ignore"):
        return np.asarray(np.var(x, axis=_ax(dim), ddof=ddof, keepdims=keepdim)).astype(x.dtype)


def _var_samples(rng, dtype):
    gen = red_samples(dims=(None, 1, (0, -1)), zero_size=False)
    out = gen(rng, dtype)
    x = rand(rng, (4, 5), dtype)
    out += [Sample((x,), {"dim": 1, "correction": 0}, grad=False, name="correction=0"),
            Sample((x,), {"dim": 0, "correction": 2, "keepdim": True}, grad=False, name="c=2"),
            Sample((x,), {"dim": 1, "unbiased": False}, grad=False, name="unbiased=False"),
            Sample((rand(rng, (3,), dtype),), {"correction": 0}, name="grad c=0")]
    return [s for s in out if s.name != "0-d"]


def _np_logsumexp(x, dim=None, keepdim=False):
    m = np.max(x, axis=_ax(dim), keepdims=True)
    r = np.log(np.sum(np.exp(x - m), axis=_ax(dim), keepdims=True)) + m
    return r if keepdim else np.squeeze(r, axis=_ax(dim) if dim is not None else None)


def _np_norm(x, p="fro", dim=None, keepdim=False):
    ax = _ax(dim)
    a = np.abs(x.astype(np.float64))
    if p in ("fro", 2):
        r = np.sqrt(np.sum(a * a, axis=ax, keepdims=keepdim))
    elif p == np.inf:
        r = np.max(a, axis=ax, keepdims=keepdim)
    elif p == -np.inf:
        r = np.min(a, axis=ax, keepdims=keepdim)
    elif p == 0:
        r = np.sum(a != 0, axis=ax, keepdims=keepdim)
    else:
        r = np.sum(a ** p, axis=ax, keepdims=keepdim) ** (1.0 / p)
    return np.asarray(r).astype(x.dtype)


def _norm_samples(rng, dtype):
    x = _signed(rng, (3, 4), dtype)
    out = [Sample((x,), {"p": p, "dim": d, "keepdim": k}, grad=False, name=f"p={p},{d},{k}")
           for p in ("fro", 2, 1, np.inf, -np.inf, 0, 3, 0.5) for d, k in ((None, False),
                                                                             (1, True), (0, False))]
    out += [Sample((_signed(rng, (2, 3), dtype),), {"p": p, "dim": d}, name=f"grad p={p},{d}")
            for p, d in ((2, 1), (1, None), (np.inf, 1), (3, 0), (-np.inf, None), ("fro", None))]
    return out


def _np_scan(fn, int_out=True):
    def ref(x, dim):
        if x.ndim == 0:
            return ref(x.reshape(1), 0).reshape(())
        r = fn(x, axis=dim)
        return r.astype(np.int64 if x.dtype.kind in "biu" else x.dtype)
    return ref


def _scan_samples(make=rand):
    def gen(rng, dtype):
        x = make(rng, (3, 4, 5), dtype)
        out = [Sample((x, d), grad=False, name=f"dim={d}") for d in (0, 1, -1)]
        out += [Sample((np.asarray(make(rng, (), dtype)), 0), grad=False, name="0-d"),
                Sample((make(rng, (0, 3), dtype), 1), grad=False, name="(0,3)")]
        out += [Sample((make(rng, (2, 3), dtype), d), name=f"grad dim={d}") for d in (1, 0)]
        out.append(Sample((make(rng, (4,), dtype), -1), name="grad (4,)"))
        return out
    return gen


def _np_softmax(log):
    def ref(x, dim):
        e = np.exp(x - np.max(x, axis=dim, keepdims=True))
        s = np.sum(e, axis=dim, keepdims=True)
        return (x - np.max(x, axis=dim, keepdims=True) - np.log(s)) if log else e / s
    return ref


def _softmax_samples(rng, dtype):
    out = [Sample((rand(rng, (3, 4, 5), dtype, -5, 5), d), grad=False, name=f"dim={d}")
           for d in (0, 1, -1)]
    out += [Sample((rand(rng, (2, 3), dtype, 995, 1005), 1), grad=False, name="large"),
            Sample((rand(rng, (0, 3), dtype), 1), grad=False, name="(0,3)"),
            Sample((rand(rng, (2, 3), dtype), 1), name="grad dim=1"),
            Sample((rand(rng, (3, 2), dtype), 0), name="grad dim=0"),
            Sample((rand(rng, (4,), dtype), -1), name="grad (4,)")]
    return out


def _lsm_bw_samples(rng, dtype):
    """(g, y, dim) for log_softmax_backward: y any value (the formula needs no softmax)."""
    out = [Sample((rand(rng, (3, 4, 5), dtype), rand(rng, (3, 4, 5), dtype, -3, 0), d),
                  grad=False, name=f"dim={d}") for d in (0, 1, -1)]
    out += [Sample((rand(rng, (0, 3), dtype), rand(rng, (0, 3), dtype), 1), grad=False,
                   name="(0,3)"),
            Sample((rand(rng, (2, 3), dtype), rand(rng, (2, 3), dtype, -3, 0), 1),
                   name="grad dim=1"),
            Sample((rand(rng, (4,), dtype), rand(rng, (4,), dtype, -3, 0), 0),
                   name="grad (4,)")]
    return out


# (input shape, class dim) of nll_loss / nll_loss_backward: (N, C), (N, C, d), (C,)
_NLL_SHAPES = [((4, 5), 1), ((2, 3, 4), 1), ((5,), 0), ((3, 20), 1)]


def _nll_target(rng, shape, dim):
    return rng.integers(0, shape[dim], shape[:dim] + shape[dim + 1:]).astype(np.int64)


def _nll_samples(rng, dtype):
    return [Sample((rand(rng, s, dtype, -3, 0), _nll_target(rng, s, d)),
                   {"dim": d, "reduction": r}, name=f"{s} {r}")
            for s, d in _NLL_SHAPES for r in ("mean", "sum")]


def _nll_bw_samples(rng, dtype):
    return [Sample((rand(rng, (), dtype), _nll_target(rng, s, d)),
                   {"shape": s, "dim": d, "reduction": r}, name=f"{s} {r}")
            for s, d in _NLL_SHAPES for r in ("mean", "sum")]


def _np_nll(logp, t, dim=1, reduction="mean"):
    r = -np.take_along_axis(logp, np.expand_dims(t, dim), dim).sum()
    return np.asarray(r / t.size if reduction == "mean" else r, logp.dtype)


def _np_nll_bw(g, t, shape, dim=1, reduction="mean"):
    out = np.zeros(shape, g.dtype)
    v = -g / t.size if reduction == "mean" else -g
    np.put_along_axis(out, np.expand_dims(t, dim), v, dim)
    return out


def _np_lsm_bw(g, y, dim):
    return g - np.exp(y) * g.sum(axis=dim, keepdims=True)


def _np_sort(x, dim=-1, descending=False):
    idx = np.argsort(-x if descending else x, axis=dim, kind="stable")
    return np.take_along_axis(x, idx, axis=dim), idx.astype(np.int64)


def _sort_samples(rng, dtype):
    x = rand(rng, (3, 4, 5), dtype)
    out = [Sample((x,), {"dim": d, "descending": de}, grad=False, name=f"{d},{de}")
           for d in (0, 1, -1) for de in (False, True)]
    out += [Sample((rand(rng, (0, 3), dtype),), {"dim": 1}, grad=False, name="(0,3)"),
            Sample((rand(rng, (2, 3), dtype),), {"dim": 1}, name="grad"),
            Sample((rand(rng, (3, 2), dtype),), {"dim": 0, "descending": True}, name="grad desc")]
    return out


def _np_topk(x, k, dim=-1, largest=True):
    idx = np.argsort(-x if largest else x, axis=dim, kind="stable")
    idx = np.take(idx, np.arange(k), axis=dim)
    return np.take_along_axis(x, idx, axis=dim), idx.astype(np.int64)


def _topk_samples(rng, dtype):
    x = rand(rng, (3, 4, 40), dtype)
    out = [Sample((x, k), {"dim": d, "largest": la}, grad=False, name=f"{k},{d},{la}")
           for k, d, la in ((3, -1, True), (3, -1, False), (40, 2, True), (2, 0, False),
                            (0, 1, True), (1, 1, True))]
    out += [Sample((rand(rng, (2, 5), dtype), 2), {"dim": 1}, name="grad"),
            Sample((rand(rng, (4, 2), dtype), 3), {"dim": 0, "largest": False}, name="grad s")]
    return out


def _np_kth(x, k, dim=-1, keepdim=False):
    idx = np.take(np.argsort(x, axis=dim, kind="stable"), [k - 1], axis=dim)
    v = np.take_along_axis(x, idx, axis=dim)
    return (v, idx) if keepdim else (v.squeeze(dim), idx.squeeze(dim))


def _kth_samples(rng, dtype):
    x = rand(rng, (3, 4, 5), dtype)
    out = [Sample((x, k, d, kd), grad=False, name=f"{k},{d},{kd}")
           for k, d, kd in ((1, -1, False), (3, 1, True), (3, 0, False), (5, 2, False))]
    out.append(Sample((rand(rng, (2, 4), dtype), 2, 1), name="grad"))
    return out


def _median_ref(x, dim=None, keepdim=False):
    if dim is None:
        f = np.sort(x.reshape(-1))
        return f[(f.size - 1) // 2]
    return _np_kth(x, (x.shape[dim] + 1) // 2, dim, keepdim)


def _median_samples(rng, dtype):
    return [Sample((rand(rng, (3, 4), dtype),), grad=False, name="all"),
            Sample((rand(rng, (3, 4), dtype),), {"dim": 1}, grad=False, name="dim=1"),
            Sample((rand(rng, (3, 5), dtype),), {"dim": 1, "keepdim": True}, grad=False),
            Sample((rand(rng, (2, 3), dtype),), {"dim": 0}, name="grad"),
            Sample((rand(rng, (5,), dtype),), name="grad all")]


def _np_take(x, idx, dim=None):
    if dim is None:
        return np.take_along_axis(x.reshape(-1), idx.reshape(-1), axis=0)
    return np.take_along_axis(x, idx, axis=dim)


def _take_samples(rng, dtype):
    def ix(shape, n):
        return rng.integers(0, n, size=shape).astype(np.int64)
    return [Sample((rand(rng, (3, 4), dtype), ix((3, 6), 4), 1), grad=False, name="more"),
            Sample((rand(rng, (3, 4), dtype), ix((2, 4), 3), 0), grad=False, name="fewer"),
            Sample((rand(rng, (3, 4), dtype), ix((1, 2), 4), -1), grad=False, name="bcast"),
            Sample((rand(rng, (3, 4), dtype), ix((5,), 12)), grad=False, name="flat"),
            Sample((rand(rng, (2, 3), dtype), ix((2, 5), 3), 1), name="grad dups"),
            Sample((rand(rng, (3, 2), dtype), ix((2, 2), 3), 0), name="grad")]


def _np_scatter_add(g, idx, dim, shape):
    out = np.zeros(shape, dtype=g.dtype)
    pos = list(np.indices(idx.shape, sparse=True))
    pos[dim] = idx
    np.add.at(out, tuple(pos), g)
    return out


def _scatter_samples(rng, dtype):
    def ix(shape, n):
        return rng.integers(0, n, size=shape).astype(np.int64)
    return [Sample((rand(rng, (3, 6), dtype), ix((3, 6), 4)), {"dim": 1, "shape": (3, 4)},
                   grad=False, name="dups"),
            Sample((rand(rng, (0, 2), dtype), ix((0, 2), 4)), {"dim": 0, "shape": (4, 2)},
                   grad=False, name="empty"),
            Sample((rand(rng, (2, 4), dtype), ix((2, 4), 2)), {"dim": 0, "shape": (2, 4)},
                   name="grad")]


def _all_samples(rng, dtype):
    def make(rng, shape, dt):
        a = rand(rng, shape, dt)
        return np.where(rng.random(shape) < 0.2, 0, a).astype(dt)
    return red_samples(make=make, grad_kw=())(rng, dtype)


def _bool_red(fn):
    return lambda x, dim=None, keepdim=False: np.asarray(fn(x, axis=_ax(dim), keepdims=keepdim))


def _count_ref(x, dim=None):
    return np.asarray(np.count_nonzero(x, axis=_ax(dim)), dtype=np.int64)


def _count_samples(rng, dtype):
    return [Sample(s.args, {"dim": s.kwargs.get("dim")}, grad=False, name=s.name)
            for s in _all_samples(rng, dtype) if s.kwargs.get("keepdim") is not True]


def _binary_samples(rng, dtype):
    return [Sample((rand(rng, (3, 4), dtype), rand(rng, (4,), dtype)), grad=False),
            Sample((rand(rng, (2, 3), dtype), rand(rng, (2, 3), dtype)), name="grad")]


_PROD = red_samples(make=_signed, extra=(((2, 0), {"dim": None}, False),))
_EXT = red_samples(full_kw={}, grad_kw=({"dim": 1}, {"dim": None}, {"dim": (0, 1), "keepdim":
                                                                      True}))
_INTS = ("float32", "float64", "int64")

OPINFOS = [
    OpInfo("sum", em.sum, _np_sum, red_samples(), ("sum",), dtypes=_INTS + ("bool",)),
    OpInfo("mean", em.mean, _np_mean, red_samples(), ("sum", "div")),
    OpInfo("prod", em.prod, _np_red(np.prod), _PROD, ("prod",)),
    OpInfo("amax", em.amax, _np_red(np.amax), _EXT, ("amax",)),
    OpInfo("amin", em.amin, _np_red(np.amin), _EXT, ("amin",)),
    OpInfo("aminmax", lambda x, **kw: tuple(em.aminmax(x, **kw)),
           lambda x, dim=None, keepdim=False: (np.amin(x, axis=dim, keepdims=keepdim),
                                               np.amax(x, axis=dim, keepdims=keepdim)),
           red_samples(dims=(None, 1, -1), full_kw={}, grad_kw=({"dim": 1}, {"dim": None})),
           ("amin", "amax")),
    OpInfo("max_all", lambda x: em.max(x), lambda x: np.max(x),
           red_samples(dims=(), zero_size=False, grad_kw=({},)), ("amax",)),
    OpInfo("min_all", lambda x: x.min(), lambda x: np.min(x),
           red_samples(dims=(), zero_size=False, grad_kw=({},)), ("amin",)),
    OpInfo("max_dim", lambda x, d, k: tuple(em.max(x, d, k)), _np_select(np.max, np.argmax),
           _sel_samples, ("argmax", "take_along_dim", "scatter_add_along_dim")),
    OpInfo("min_dim", lambda x, d, k: tuple(x.min(dim=d, keepdim=k)),
           _np_select(np.min, np.argmin), _sel_samples, ("argmin", "take_along_dim")),
    OpInfo("max_binary", em.max, np.maximum, _binary_samples),
    OpInfo("min_binary", lambda a, b: a.min(b), np.minimum, _binary_samples),
    OpInfo("argmax", em.argmax, _np_arg(np.argmax),
           red_samples(dims=(None, 0, -1), full_kw={}, grad_kw=()), ("argmax",),
           dtypes=_INTS, grad=False),
    OpInfo("argmin", em.argmin, _np_arg(np.argmin),
           red_samples(dims=(None, 1), full_kw={}, grad_kw=()), ("argmin",),
           dtypes=_INTS, grad=False),
    OpInfo("all", em.all, _bool_red(np.all), _all_samples, ("all",), dtypes=_INTS + ("bool",),
           grad=False),
    OpInfo("any", em.any, _bool_red(np.any), _all_samples, ("any",), dtypes=_INTS + ("bool",),
           grad=False),
    OpInfo("count_nonzero", em.count_nonzero, _count_ref, _count_samples, ("sum", "cast"),
           dtypes=_INTS + ("bool",), grad=False),
    OpInfo("var", em.var, _np_var, _var_samples, ("sum", "sub", "mul", "div")),
    OpInfo("std", em.std, lambda x, **kw: np.sqrt(_np_var(x, **kw)), _var_samples, ("pow",)),
    OpInfo("var_mean", em.var_mean, lambda x, **kw: (_np_var(x, **kw), _np_mean(
        x, kw.get("dim"), True) if kw.get("keepdim") else _np_mean(x, kw.get("dim"))),
        _var_samples, ("sum",)),
    OpInfo("std_mean", em.std_mean, lambda x, **kw: (np.sqrt(_np_var(x, **kw)), _np_mean(
        x, kw.get("dim"), True) if kw.get("keepdim") else _np_mean(x, kw.get("dim"))),
        _var_samples, ("sum",)),
    OpInfo("logsumexp", em.logsumexp, _np_logsumexp,
           red_samples(dims=(None, 1, (0, 2)), zero_size=False, extra=(
               ((2, 3), {"dim": 1}, False),)), ("amax", "exp", "log", "where")),
    OpInfo("norm", em.norm, _np_norm, _norm_samples, ("sum", "pow", "where", "amax")),
    OpInfo("cumsum", em.cumsum, _np_scan(np.cumsum), _scan_samples(), ("cumsum",),
           dtypes=_INTS + ("bool",)),
    OpInfo("cumprod", em.cumprod, _np_scan(np.cumprod), _scan_samples(_signed), ("cumprod",)),
    OpInfo("softmax", em.softmax, _np_softmax(False), _softmax_samples, ("softmax",)),
    OpInfo("log_softmax", em.log_softmax, _np_softmax(True), _softmax_samples,
           ("log_softmax",)),
    OpInfo("log_softmax_backward", log_softmax_backward, _np_lsm_bw, _lsm_bw_samples,
           ("log_softmax_backward",)),
    OpInfo("nll_loss_primitive", nll_loss_p, _np_nll, _nll_samples, ("nll_loss",)),
    OpInfo("nll_loss_backward", nll_loss_backward_p, _np_nll_bw, _nll_bw_samples,
           ("nll_loss_backward",)),
    OpInfo("sort", lambda x, **kw: tuple(em.sort(x, **kw)), _np_sort, _sort_samples,
           ("argsort", "take_along_dim")),
    OpInfo("argsort", em.argsort, lambda x, **kw: _np_sort(x, **kw)[1], _sort_samples,
           ("argsort",), grad=False),
    OpInfo("msort", em.msort, lambda x: np.sort(x, axis=0),
           lambda rng, dt: [Sample((rand(rng, (4, 3), dt),), grad=False),
                            Sample((rand(rng, (3, 2), dt),), name="grad")], ("argsort",)),
    OpInfo("topk", lambda x, k, **kw: tuple(em.topk(x, k, **kw)), _np_topk, _topk_samples,
           ("argsort", "take_along_dim")),
    OpInfo("kthvalue", lambda *a: tuple(em.kthvalue(*a)), _np_kth, _kth_samples,
           ("argsort", "take_along_dim")),
    OpInfo("median", lambda x, **kw: tuple(em.median(x, **kw)) if kw else em.median(x),
           _median_ref, _median_samples, ("argsort", "take_along_dim")),
    OpInfo("take_along_dim", em.take_along_dim, _np_take, _take_samples, ("take_along_dim",)),
    OpInfo("scatter_add_along_dim", scatter_add_along_dim_p, _np_scatter_add, _scatter_samples,
           ("scatter_add_along_dim",)),
]
