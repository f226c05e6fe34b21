"""OpInfos for the indexing family: getitem/setitem, index_put, gather/scatter, index_*,
masks, nonzero, pad, one_hot. References are written with NumPy loops/fancy indexing."""
import numpy as np

import ember as em

from .core import OpInfo, Sample, rand

I64 = np.int64


def _i(*vals):
    return np.array(vals, dtype=I64)


def _get(key):
    """fn/ref pair for ``x[key]`` where the key's arrays are passed as extra arguments."""
    def split(args):
        return args[0], args[1:]

    def fn(*args):
        x, arrs = split(args)
        it = iter(arrs)
        return x[tuple(next(it) if k is np.ndarray else k for k in key)]

    def ref(*args):
        a, arrs = split(args)
        it = iter(arrs)
        return a[tuple(next(it) if k is np.ndarray else k for k in key)]
    return fn, ref


def _getitem_samples(rng, dt):
    x = lambda *s: rand(rng, s, dt)  # noqa: E731
    return [
        Sample((x(3, 4), 1), name="int"), Sample((x(3, 4), slice(1, None, 2)), name="slice"),
        Sample((x(2, 3), (Ellipsis, None, 1)), name="ellipsis-none"),
        Sample((x(2, 3), (slice(None), -1)), name="neg"),
        Sample((x(2, 3), (None, slice(5, 9))), name="empty", grad=False),
        Sample((x(3, 4), _i(2, 0, 2)), name="int-array"),
        Sample((x(3, 4), (slice(None), _i(1, 3))), name="mixed"),
        Sample((x(3, 4), (_i(0, 2), _i(1, 1))), name="pair"),
        Sample((x(2, 3, 4), (_i(1, 0), slice(None), _i(0, 3))), name="separated", grad=False),
        Sample((x(3, 4), rand(rng, (3, 4), np.bool_)), name="mask"),
        Sample((x(3, 4), rand(rng, (3,), np.bool_)), name="row-mask"),
        Sample((x(3,), True), name="true", grad=False), Sample((x(3,), False), grad=False),
    ]


def _getitem(x, key):
    return x[key]


def _ref_getitem(a, key):
    return a[key]


def _setitem(key, value_shape):
    def fn(x, v):
        y = x.clone()
        y[key] = v
        return y

    def ref(a, v):
        a = a.copy()
        a[key] = v
        return a

    def gen(rng, dt):
        return [Sample((rand(rng, (3, 4), dt), rand(rng, value_shape, dt)))]
    return fn, ref, gen


def _scatter_ref(a, dim, index, src, add=False):
    out = a.copy()
    for p in np.ndindex(*index.shape):
        q = list(p)
        q[dim] = index[p]
        v = src[p] if isinstance(src, np.ndarray) else src
        out[tuple(q)] = out[tuple(q)] + v if add else v
    return out


def _gather_ref(a, dim, index):
    out = np.empty(index.shape, a.dtype)
    for p in np.ndindex(*index.shape):
        q = list(p)
        q[dim] = index[p]
        out[p] = a[tuple(q)]
    return out


def _gather_samples(rng, dt):
    return [Sample((rand(rng, (3, 4), dt), 1, _i([0, 3, 3], [1, 0, 2]).reshape(2, 3))),
            Sample((rand(rng, (3, 2), dt), 0, _i([2, 0], [1, 1], [0, 2], [2, 2]).reshape(4, 2))),
            Sample((rand(rng, (2, 3), dt), -1, np.zeros((2, 0), I64)), grad=False)]


def _scatter_samples(rng, dt):
    # unique targets: overwrite order would otherwise be unspecified
    return [Sample((rand(rng, (3, 4), dt), 1, _i([3, 0], [1, 2]).reshape(2, 2),
                    rand(rng, (2, 3), dt))),
            Sample((rand(rng, (3,), dt), 0, _i(2, 0), rand(rng, (2,), dt)))]


def _scatter_add_samples(rng, dt):
    return [Sample((rand(rng, (3, 4), dt), 1, _i([3, 3], [1, 1]).reshape(2, 2),
                    rand(rng, (2, 3), dt))),
            Sample((rand(rng, (3,), dt), 0, _i(2, 2, 0), rand(rng, (3,), dt)))]


def _idx_dim_samples(src_shape=(3, 2)):
    def gen(rng, dt):
        return [Sample((rand(rng, (3, 4), dt), 0, _i(2, 0, 1), rand(rng, (3, 4), dt))),
                Sample((rand(rng, (3, 4), dt), 1, _i(3, 0), rand(rng, (3, 2), dt)))]
    return gen


def _index_add_ref(a, dim, index, src, alpha=1):
    out = a.copy()
    for k, i in enumerate(index):
        sl_o = [slice(None)] * a.ndim
        sl_s = [slice(None)] * a.ndim
        sl_o[dim], sl_s[dim] = i, k
        out[tuple(sl_o)] += alpha * src[tuple(sl_s)]
    return out


def _index_copy_ref(a, dim, index, src):
    out = np.moveaxis(a.copy(), dim, 0)
    out[index] = np.moveaxis(src, dim, 0)
    return np.moveaxis(out, 0, dim)


def _mask_samples(rng, dt):
    return [Sample((rand(rng, (3, 4), dt), rand(rng, (3, 4), np.bool_))),
            Sample((rand(rng, (2, 3), dt), rand(rng, (3,), np.bool_))),
            Sample((rand(rng, (0, 3), dt), rand(rng, (0, 3), np.bool_)), grad=False)]


def _masked_scatter_ref(a, m, src):
    out = a.copy()
    m = np.broadcast_to(m, a.shape)
    out[m] = src.reshape(-1)[:m.sum()]
    return out


def _pad_ref(a, pad, mode="constant", value=0.0):
    widths = [(0, 0)] * a.ndim
    for k in range(len(pad) // 2):
        widths[a.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(widths, a.shape))
    a = a[crop]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    npmode = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
              "circular": "wrap"}[mode]
    kw = {"constant_values": value} if mode == "constant" else {}
    return np.pad(a, widths, mode=npmode, **kw)


def _pad_samples(rng, dt):
    x = lambda *s: rand(rng, s, dt)  # noqa: E731
    return [Sample((x(2, 3), (1, 2))), Sample((x(2, 3), (1, 0, 0, 1)), {"value": 1.5}),
            Sample((x(3, 4), (-1, 2))), Sample((x(1, 2, 4), (2, 1), "reflect")),
            Sample((x(1, 3, 3), (1, 1, 2, 0), "replicate")),
            Sample((x(1, 2, 3), (2, 1), "circular")), Sample((x(0, 3), (1, 1)), grad=False)]


def _view_inplace(x):
    y = x * 1
    y[:, 1].mul_(2)
    y.t()[0].add_(x[:, 2])
    return y


def _ref_view_inplace(a):
    y = a.copy()
    y[:, 1] *= 2
    y[:, 0] += a[:, 2]
    return y


_gi = [_getitem, _ref_getitem]
_set_basic = _setitem((slice(1, None), 0), (2,))
_set_adv = _setitem(([0, 2], slice(None)), (4,))
_set_mask = _setitem((np.array([True, False, True]),), (1, 4))

OPINFOS = [
    OpInfo("getitem", _getitem, _ref_getitem, _getitem_samples,
           ("slice", "reshape", "index", "nonzero")),
    OpInfo("setitem_basic", _set_basic[0], _set_basic[1], _set_basic[2],
           ("as_strided_scatter", "as_strided", "clone")),
    OpInfo("setitem_advanced", _set_adv[0], _set_adv[1], _set_adv[2], ("index_put",)),
    OpInfo("setitem_mask", _set_mask[0], _set_mask[1], _set_mask[2], ("index_put",)),
    OpInfo("inplace_on_view", _view_inplace, _ref_view_inplace,
           lambda rng, dt: [Sample((rand(rng, (2, 3), dt),)), Sample((rand(rng, (0, 3), dt),),
                                                                     grad=False)],
           ("as_strided_scatter", "as_strided")),
    OpInfo("index_put", lambda x, i, v, **kw: x.index_put((i,), v, **kw),
           lambda a, i, v, accumulate=False: _put_ref(a, i, v, accumulate),
           lambda rng, dt: [Sample((rand(rng, (4, 2), dt), _i(3, 0), rand(rng, (2, 2), dt))),
                            Sample((rand(rng, (4,), dt), _i(1, 1, 2), rand(rng, (3,), dt)),
                                   {"accumulate": True}),
                            Sample((rand(rng, (3, 2), dt), _i(2), rand(rng, (2,), dt)),
                                   {"accumulate": True})], ("index_put",)),
    OpInfo("gather", lambda x, d, i: x.gather(d, i), _gather_ref, _gather_samples,
           ("take_along_dim",)),
    OpInfo("scatter", lambda x, d, i, s: x.scatter(d, i, s), _scatter_ref, _scatter_samples,
           ("index_put",)),
    OpInfo("scatter_value", lambda x, d, i, s: x.scatter(d, i, value=2.5),
           lambda a, d, i, s: _scatter_ref(a, d, i, np.float64(2.5).astype(a.dtype)),
           _scatter_samples, ("index_put",)),
    OpInfo("scatter_add", lambda x, d, i, s: x.scatter_add(d, i, s),
           lambda a, d, i, s: _scatter_ref(a, d, i, s, add=True), _scatter_add_samples,
           ("index_put",)),
    OpInfo("index_select", lambda x, d, i: x.index_select(d, i),
           lambda a, d, i: np.take(a, i, axis=d),
           lambda rng, dt: [Sample((rand(rng, (3, 4), dt), 1, _i(3, 0, 3))),
                            Sample((rand(rng, (3, 2), dt), 0, _i(2))),
                            Sample((rand(rng, (3, 2), dt), 0, np.zeros(0, I64)), grad=False)],
           ("index",)),
    OpInfo("index_add", lambda x, d, i, s: x.index_add(d, i, s, alpha=2),
           lambda a, d, i, s: _index_add_ref(a, d, i, s, 2),
           lambda rng, dt: [Sample((rand(rng, (3, 4), dt), 0, _i(2, 0, 2), rand(rng, (3, 4), dt))),
                            Sample((rand(rng, (3, 4), dt), 1, _i(3, 0), rand(rng, (3, 2), dt)))],
           ("index_put", "mul")),
    OpInfo("index_copy", lambda x, d, i, s: x.index_copy(d, i, s), _index_copy_ref,
           _idx_dim_samples(), ("index_put",)),
    OpInfo("index_fill", lambda x, d, i: x.index_fill(d, i, -1.5),
           lambda a, d, i: _index_copy_ref(a, d, i, np.full(
               a.shape[:d] + (len(i),) + a.shape[d + 1:], -1.5, a.dtype)),
           lambda rng, dt: [Sample((rand(rng, (3, 4), dt), 1, _i(3, 0)))], ("index_put",)),
    OpInfo("take", lambda x, i: x.take(i), lambda a, i: np.take(a, i),
           lambda rng, dt: [Sample((rand(rng, (3, 4), dt), _i([0, 11], [-1, 5]).reshape(2, 2))),
                            Sample((rand(rng, (), dt), _i(0)))], ("index", "reshape")),
    OpInfo("masked_fill", lambda x, m: x.masked_fill(m, -3.0),
           lambda a, m: np.where(m, np.array(-3.0, a.dtype), a), _mask_samples, ("where",)),
    OpInfo("masked_select", lambda x, m: x.masked_select(m),
           lambda a, m: np.broadcast_to(a, np.broadcast_shapes(a.shape, m.shape))[
               np.broadcast_to(m, np.broadcast_shapes(a.shape, m.shape))],
           _mask_samples, ("index", "nonzero")),
    OpInfo("masked_scatter", lambda x, m, s: x.masked_scatter(m, s), _masked_scatter_ref,
           lambda rng, dt: [Sample((rand(rng, (3, 4), dt), rand(rng, (3, 4), np.bool_),
                                    rand(rng, (3, 4), dt))),
                            Sample((rand(rng, (2, 3), dt), rand(rng, (3,), np.bool_),
                                    rand(rng, (7,), dt)))], ("index_put",)),
    OpInfo("nonzero", lambda x: x.nonzero(), lambda a: np.argwhere(a),
           lambda rng, dt: [Sample((np.asarray(rand(rng, s, dt, 0, 1)),), grad=False)
                            for s in ((3, 4), (5,), (), (0, 2))],
           ("nonzero",), dtypes=("int64", "bool", "float32"), grad=False),
    OpInfo("nonzero_tuple", lambda x: x.nonzero(as_tuple=True), lambda a: np.nonzero(a),
           lambda rng, dt: [Sample((np.asarray(rand(rng, s, dt, 0, 1)),), grad=False)
                            for s in ((3, 4), (5,))],
           ("nonzero",), dtypes=("int64", "bool"), grad=False),
    OpInfo("argwhere", em.argwhere, np.argwhere,
           lambda rng, dt: [Sample((rand(rng, (3, 4), dt, 0, 1),), grad=False)],
           ("nonzero",), dtypes=("int64",), grad=False),
    OpInfo("pad", lambda x, p, *m, **kw: em.pad(x, p, *m, **kw), _pad_ref, _pad_samples,
           ("pad", "index")),
    OpInfo("one_hot", em.one_hot, lambda a, n=-1: np.eye(
               a.max() + 1 if n == -1 else n, dtype=I64)[a],
           lambda rng, dt: [Sample((rand(rng, (2, 3), dt, 0, 3),), grad=False),
                            Sample((rand(rng, (4,), dt, 0, 2), 5), grad=False)],
           ("index_put",), dtypes=("int64",), grad=False),
]


def _put_ref(a, i, v, accumulate):
    out = a.copy()
    if accumulate:
        np.add.at(out, i, v)
    else:
        out[i] = v
    return out
