"""OpInfos for the movement family: views, reshapes, joins, flips, tiling, strided views."""
import numpy as np

import ember as em

from .core import OpInfo, Sample, rand

V = ("reshape", "permute", "expand", "slice")


def _s(shapes, grad_shapes=((2, 3),), lo=-2, hi=2, **kw):
    """Samples over ``shapes`` (forward only) and ``grad_shapes`` (gradcheck too)."""
    def gen(rng, dtype):
        out = [Sample((rand(rng, s, dtype, lo, hi),), dict(kw), grad=False, name=str(s))
               for s in shapes]
        out += [Sample((rand(rng, s, dtype, lo, hi),), dict(kw), name=f"grad{s}")
                for s in grad_shapes]
        return out
    return gen


def _per(cases):
    """Samples from ``[(shape, kwargs, grad)]``."""
    def gen(rng, dtype):
        return [Sample((rand(rng, s, dtype),), dict(kw), grad=g, name=f"{s}{kw}")
                for s, kw, g in cases]
    return gen


def _many(cases):
    """Samples whose first arg is a list of arrays: ``[(shapes, kwargs, grad)]``."""
    def gen(rng, dtype):
        return [Sample(tuple(rand(rng, s, dtype) for s in shapes), dict(kw), grad=g,
                       name=f"{shapes}{kw}") for shapes, kw, g in cases]
    return gen


def _np_repeat(a, *sizes):
    a = a.reshape((1,) * (len(sizes) - a.ndim) + a.shape)
    return np.tile(a, sizes)


def _np_as_strided(a, size, stride, off):
    flat = np.ascontiguousarray(a).reshape(-1)
    out = np.empty(size, dtype=a.dtype)
    for i in np.ndindex(*size):
        out[i] = flat[off + sum(k * s for k, s in zip(i, stride))]
    return out


def _np_as_strided_scatter(a, src, size, stride, off):
    out = np.ascontiguousarray(a).copy()
    flat = out.reshape(-1)
    for i in np.ndindex(*size):
        flat[off + sum(k * s for k, s in zip(i, stride))] = src[i]
    return out


def _np_roll(a, shifts, dims=None):
    return np.roll(a, shifts, axis=dims)


def _np_tri(lower):
    def f(a, diagonal=0):
        r, c = np.indices(a.shape[-2:])
        keep = (c - r <= diagonal) if lower else (c - r >= diagonal)
        return np.where(keep, a, np.zeros((), a.dtype))
    return f


def _np_interleave(a, repeats, dim=None):
    if dim is None:
        a, dim = a.reshape(-1), 0
    return np.repeat(a, repeats, axis=dim)


def _np_diagonal(a, offset=0, dim1=0, dim2=1):
    return np.diagonal(a, offset, dim1, dim2).copy()


def _ass_samples(rng, dtype):
    return [Sample((rand(rng, (3, 4), dtype), rand(rng, (2, 2), dtype), (2, 2), (4, 1), 1)),
            Sample((rand(rng, (2, 3), dtype), rand(rng, (3,), dtype), (3,), (1,), 3)),
            Sample((rand(rng, (5,), dtype), rand(rng, (0,), dtype), (0,), (1,), 0), grad=False)]


OPINFOS = [
    OpInfo("reshape", lambda x, shape: x.reshape(shape), lambda a, shape: a.reshape(shape),
           _per([((2, 3), {"shape": (3, 2)}, True), ((2, 3), {"shape": (-1,)}, True),
                 ((), {"shape": (1, 1)}, False), ((0, 3), {"shape": (3, 0)}, False),
                 ((4, 6), {"shape": (2, 2, 3, -1)}, False)]), ("reshape",)),
    OpInfo("view", lambda x, shape: x.view(shape), lambda a, shape: a.reshape(shape),
           _per([((2, 3), {"shape": (3, 2)}, True), ((2, 3, 4), {"shape": (6, 4)}, False)]),
           ("reshape",), noncontig=False),
    OpInfo("permute", lambda x, dims: x.permute(dims), lambda a, dims: a.transpose(dims),
           _per([((2, 3, 4), {"dims": (2, 0, 1)}, False), ((2, 3), {"dims": (1, 0)}, True),
                 ((0, 2), {"dims": (1, 0)}, False)]), ("permute",)),
    OpInfo("transpose", lambda x: x.transpose(0, -1),
           lambda a: np.swapaxes(a, 0, -1) if a.ndim else a,
           _s([(2, 3, 4), ()]), ("permute",)),
    OpInfo("t", lambda x: x.t(), lambda a: a.T, _s([(4, 5), (3,)]), ("permute",)),
    OpInfo("T", lambda x: x.T, lambda a: a.T, _s([(2, 3, 4)]), ("permute",)),
    OpInfo("movedim", lambda x: em.movedim(x, (0, 1), (2, 0)),
           lambda a: np.moveaxis(a, (0, 1), (2, 0)), _s([(2, 3, 4)], [(1, 2, 3)]),
           ("permute",)),
    OpInfo("swapaxes", lambda x: em.swapaxes(x, 0, 1), lambda a: np.swapaxes(a, 0, 1),
           _s([(2, 3, 4)]), ("permute",)),
    OpInfo("expand", lambda x, shape: x.expand(*shape),
           lambda a, shape: np.broadcast_to(a, [n if n != -1 else m for n, m in
                                                zip(shape, (1,) * (len(shape) - a.ndim)
                                                    + a.shape)]),
           _per([((3, 1), {"shape": (2, 3, 4)}, True), ((), {"shape": (3,)}, True),
                 ((1, 4), {"shape": (-1, 4)}, False), ((1,), {"shape": (0,)}, False)]),
           ("expand",)),
    OpInfo("expand_as", lambda x: x.expand_as(em.zeros(2, 3)),
           lambda a: np.broadcast_to(a, (2, 3)), _s([(3,)], [(1, 3)]), ("expand",)),
    OpInfo("unsqueeze", lambda x: x.unsqueeze(-1), lambda a: a[..., None],
           _s([(), (2, 3)]), ("reshape",)),
    OpInfo("squeeze", lambda x, **kw: x.squeeze(**kw),
           lambda a, dim=None: np.squeeze(a, dim if not isinstance(dim, tuple) else
                                          tuple(d for d in dim if a.shape[d] == 1)),
           _per([((2, 1, 3, 1), {}, True), ((2, 1, 3, 1), {"dim": 1}, False),
                 ((2, 1, 3, 1), {"dim": (1, 2, 3)}, False), ((), {}, False)]), ("reshape",)),
    OpInfo("flatten", lambda x, **kw: x.flatten(**kw),
           lambda a, start_dim=0, end_dim=-1: a.reshape(
               a.shape[:start_dim] + (-1,) + (a.shape[end_dim:][1:] if end_dim != -1 else ()))
           if a.ndim else a.reshape(1),
           _per([((2, 3, 4), {}, True), ((2, 3, 4), {"start_dim": 1}, False),
                 ((2, 3, 4), {"start_dim": 0, "end_dim": 1}, False), ((), {}, False)]),
           ("reshape",)),
    OpInfo("unflatten", lambda x: x.unflatten(1, (2, -1)), lambda a: a.reshape(2, 2, -1),
           _s([(2, 6)], [(2, 4)]), ("reshape",)),
    OpInfo("ravel", lambda x: x.ravel(), lambda a: a.ravel(), _s([(2, 3), ()]), ("reshape",)),
    OpInfo("narrow", lambda x: x.narrow(1, 1, 2), lambda a: a[:, 1:3], _s([(3, 4)]),
           ("slice",)),
    OpInfo("select", lambda x: x.select(-1, 1), lambda a: a[..., 1], _s([(3, 4), (2,)]), V),
    OpInfo("unbind", lambda x: x.unbind(1), lambda a: tuple(np.moveaxis(a, 1, 0)),
           _s([(3, 4)], [(2, 3)]), V),
    OpInfo("split", lambda x, s: x.split(s, 1),
           lambda a, s: tuple(np.split(a, np.cumsum(s)[:-1] if isinstance(s, list) else
                                       range(s, a.shape[1], s), axis=1)),
           lambda rng, dt: [Sample((rand(rng, (2, 5), dt), 2)), Sample((rand(rng, (2, 5), dt),
                                                                        [1, 0, 4]))], V),
    OpInfo("chunk", lambda x: x.chunk(3, 0), lambda a: tuple(np.split(a, [2, 4], axis=0)),
           _s([(5, 2)], [(5, 2)]), ("slice",)),
    OpInfo("tensor_split", lambda x, s: x.tensor_split(s, 0),
           lambda a, s: tuple(np.array_split(a, s, axis=0)),
           lambda rng, dt: [Sample((rand(rng, (5, 2), dt), 3)),
                            Sample((rand(rng, (5,), dt), [1, 4]))], ("slice",)),
    OpInfo("as_strided", lambda x, *g: x.as_strided(*g), _np_as_strided,
           lambda rng, dt: [Sample((rand(rng, (3, 4), dt), (3, 3), (4, 1), 0)),
                            Sample((rand(rng, (6,), dt), (2, 3), (1, 1), 1)),   # overlapping
                            Sample((rand(rng, (5,), dt), (2, 2), (0, 2), 0)),
                            Sample((rand(rng, (4,), dt), (0, 3), (1, 1), 0), grad=False)],
           ("as_strided",), noncontig=False),
    OpInfo("as_strided_scatter", lambda x, s, *g: em.as_strided_scatter(x, s, *g),
           _np_as_strided_scatter, _ass_samples, ("as_strided_scatter",)),
    OpInfo("slice_scatter", lambda x, s: em.slice_scatter(x, s, 1, 0, None, 2),
           lambda a, s: _assign(a, (slice(None), slice(0, None, 2)), s),
           lambda rng, dt: [Sample((rand(rng, (2, 4), dt), rand(rng, (2, 2), dt)))],
           ("as_strided_scatter",)),
    OpInfo("diagonal", lambda x, **kw: x.diagonal(**kw), _np_diagonal,
           _per([((3, 4), {}, True), ((3, 4), {"offset": 1}, True),
                 ((2, 3, 3), {"offset": -1, "dim1": 1, "dim2": 2}, True),
                 ((2, 3, 4), {"dim1": 2, "dim2": 0}, False), ((2, 2), {"offset": 5}, False)]),
           ("as_strided",)),
    OpInfo("cat", lambda *xs, **kw: em.cat(xs, **kw), lambda *xs, dim=0: np.concatenate(xs, dim),
           _many([([(2, 3), (1, 3)], {}, True), ([(2, 1), (2, 2), (2, 0)], {"dim": 1}, True),
                  ([(0, 3), (2, 3)], {}, False), ([(3,), (0,)], {}, False)]), ("cat",)),
    OpInfo("stack", lambda *xs, **kw: em.stack(xs, **kw), lambda *xs, dim=0: np.stack(xs, dim),
           _many([([(2, 3), (2, 3)], {}, True), ([(2,), (2,), (2,)], {"dim": 1}, True),
                  ([(), ()], {}, False)]), ("cat", "reshape")),
    OpInfo("hstack", lambda *xs: em.hstack(xs), lambda *xs: np.hstack(xs),
           _many([([(2, 3), (2, 1)], {}, True), ([(2,), (3,)], {}, True)]), ("cat",)),
    OpInfo("vstack", lambda *xs: em.vstack(xs), lambda *xs: np.vstack(xs),
           _many([([(2, 3), (1, 3)], {}, True), ([(3,), (3,)], {}, True)]), ("cat",)),
    OpInfo("flip", lambda x, dims: x.flip(dims), lambda a, dims: np.flip(a, dims),
           _per([((2, 3), {"dims": (0, 1)}, True), ((2, 3, 4), {"dims": (-1,)}, False),
                 ((0, 2), {"dims": (0,)}, False), ((3,), {"dims": 0}, True)]), ("flip",)),
    OpInfo("fliplr", em.fliplr, np.fliplr, _s([(3, 4)]), ("flip",)),
    OpInfo("flipud", em.flipud, np.flipud, _s([(3, 4)]), ("flip",)),
    OpInfo("roll", lambda x, *a: x.roll(*a), _np_roll,
           lambda rng, dt: [Sample((rand(rng, (2, 3), dt), 1)),
                            Sample((rand(rng, (2, 3), dt), (1, -4), (0, 1))),
                            Sample((rand(rng, (4, 3), dt), 5, 0), grad=False)], ("cat",)),
    OpInfo("tril", lambda x, **kw: x.tril(**kw), _np_tri(True),
           _per([((3, 4), {}, True), ((2, 3, 3), {"diagonal": -1}, False),
                 ((3, 3), {"diagonal": 1}, True)]), ("tril",)),
    OpInfo("triu", lambda x, **kw: x.triu(**kw), _np_tri(False),
           _per([((3, 4), {}, True), ((2, 3, 3), {"diagonal": 2}, False),
                 ((3, 3), {"diagonal": -1}, True)]), ("triu",)),
    OpInfo("repeat", lambda x, s: x.repeat(*s), lambda a, s: _np_repeat(a, *s),
           lambda rng, dt: [Sample((rand(rng, (2, 3), dt), (2, 1))),
                            Sample((rand(rng, (3,), dt), (2, 1, 2))),
                            Sample((rand(rng, (), dt), (3,))),
                            Sample((rand(rng, (2,), dt), (0, 2)), grad=False)],
           ("reshape", "expand")),
    OpInfo("tile", lambda x, s: x.tile(s), lambda a, s: np.tile(a, s),
           lambda rng, dt: [Sample((rand(rng, (2, 3), dt), (2,))),
                            Sample((rand(rng, (3,), dt), (2, 2)))], ("reshape", "expand")),
    OpInfo("repeat_interleave", lambda x, r, **kw: x.repeat_interleave(
               em.tensor(r) if isinstance(r, list) else r, **kw), _np_interleave,
           lambda rng, dt: [Sample((rand(rng, (2, 3), dt), 2)),
                            Sample((rand(rng, (2, 3), dt), 2), {"dim": 1}),
                            Sample((rand(rng, (2, 3), dt), [1, 0, 2]), {"dim": 1}),
                            Sample((rand(rng, (3,), dt), [2, 1, 0]), {"dim": 0})],
           ("reshape", "expand", "index")),
]


def _assign(a, key, s):
    a = a.copy()
    a[key] = s
    return a

OPINFOS += [
    OpInfo("clone", lambda x: x.clone(), lambda a: a.copy(), _s([(2, 3), (), (0, 2)]),
           ("clone",)),
    OpInfo("contiguous", lambda x: x.t().contiguous(), lambda a: np.ascontiguousarray(a.T),
           _s([(2, 3), (3, 2)]), ("contiguous", "permute")),
]
