"""Batching rules of the primitives that need more than a dim shift (see :mod:`.batching`).

Movement (``permute``, ``reshape``, ``expand``, ``slice``, ``pad``), ``argmax``, indexing
(``index``, ``index_put``, ``scatter_add_along_dim``), ``matmul``, ``einsum``, attention and
``unfold``/``fold``. Each is ``rule(inputs, bdims, **params) -> (out, out_bdim)`` on physical
tensors; none loops over the batch.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..device import get_backend
from ..tensor import _wrap
from .batching import batch_size, front, logical_ndim, materialize, pad_rank, _p, _shift

__all__ = ["permute", "reshape", "expand", "slice_", "pad", "argext", "as_strided",
           "as_strided_scatter", "index", "index_put",
           "scatter_add", "matmul", "einsum", "sdpa", "sdpa_grad", "unfold", "fold"]


# ---------------------------------------------------------------------------- movement
def permute(inputs, bdims, dims):
    x = front(inputs[0], bdims[0])
    return _p("permute")(x, dims=(0,) + tuple(d + 1 for d in dims)), 0


def reshape(inputs, bdims, shape):
    x = front(inputs[0], bdims[0])
    return _p("reshape")(x, shape=(x.shape[0],) + tuple(shape)), 0


def expand(inputs, bdims, shape):
    x = pad_rank(front(inputs[0], bdims[0]), len(shape))
    return _p("expand")(x, shape=(x.shape[0],) + tuple(shape)), 0


def slice_(inputs, bdims, slices):
    x = front(inputs[0], bdims[0])
    return _p("slice")(x, slices=((0, x.shape[0], 1),) + tuple(slices)), 0


def pad(inputs, bdims, pads, value):
    x = front(inputs[0], bdims[0])
    return _p("pad")(x, pads=((0, 0),) + tuple(pads), value=value), 0


def argext(name):
    """``argmax``/``argmin``: ``dim=None`` flattens each example (not the batch)."""
    def rule(inputs, bdims, dim=None, keepdim=False):
        x = front(inputs[0], bdims[0])
        r = x.ndim - 1
        op = _p(name)
        if dim is not None:
            return op(x, dim=_shift(dim, r), keepdim=keepdim), 0
        n = x.shape[0]
        out = op(_p("reshape")(x, shape=(n, -1)), dim=1, keepdim=False)
        if keepdim:
            out = _p("reshape")(out, shape=(n,) + (1,) * r)
        return out, 0
    return rule


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def as_strided(inputs, bdims, size, stride, storage_offset):
    """Geometry relative to each example's contiguous values: one more (outer) dim that
    steps over whole examples."""
    x = front(inputs[0], bdims[0])
    step = _numel(x.shape[1:]) or 1
    return _p("as_strided")(x, size=(x.shape[0],) + tuple(size), stride=(step,) + tuple(stride),
                            storage_offset=storage_offset), 0


def as_strided_scatter(inputs, bdims, size, stride, storage_offset):
    n = batch_size(inputs, bdims)
    base, src = (materialize(x, d, n) for x, d in zip(inputs, bdims))
    step = _numel(base.shape[1:]) or 1
    return _p("as_strided_scatter")(base, src, size=(n,) + tuple(size),
                                    stride=(step,) + tuple(stride),
                                    storage_offset=storage_offset), 0


# ---------------------------------------------------------------------------- indexing
def _adjacent(dims) -> bool:
    s = sorted(dims)
    return s == list(range(s[0], s[0] + len(s))) if s else True


def _batch_index(n, k, like):
    be = get_backend(like.device)
    a = be.xp.arange(n, dtype="int64").reshape((n,) + (1,) * k)
    return _wrap(a, _dt.int64, like.device)


def _index_layout(x, idx, ibd, dims, n):
    """Physical ``x`` (batch first) and index list for a batched advanced index.

    Returns ``(x, idx, dims, k, perm)``: when an index is batched, the batch dim becomes an
    advanced index too (an ``arange``), so the result's leading dims are ``(B, *index)``;
    ``perm`` then restores the per-example layout (``None`` when it already matches).
    """
    k = max((logical_ndim(i, d) for i, d in zip(idx, ibd)), default=0)
    idx = [i if d is None else pad_rank(front(i, d), k) for i, d in zip(idx, ibd)]
    idx = [_batch_index(n, k, x)] + idx
    new_dims = (0,) + tuple(d + 1 for d in dims)
    perm = None
    m = min(dims) if dims else 0
    if dims and _adjacent(dims) and m > 0:          # per example: (before, index, after)
        r = x.ndim                                   # physical rank of the result so far
        perm = (0,) + tuple(range(k + 1, k + 1 + m)) + tuple(range(1, k + 1))
        perm = perm + tuple(range(k + 1 + m, r - len(dims) + k))
    return idx, new_dims, k, perm


def index(inputs, bdims, dims):
    x, idx = inputs[0], list(inputs[1:])
    xb, ibd = bdims[0], list(bdims[1:])
    n = batch_size(inputs, bdims)
    op = _p("index")
    x = materialize(x, xb, n)
    if all(d is None for d in ibd):
        out = op(x, *idx, dims=tuple(d + 1 for d in dims))
        if dims and not _adjacent(dims):            # index dims go first, then the batch
            return out, max((i.ndim for i in idx), default=0)
        return out, 0
    idx, new_dims, k, perm = _index_layout(x, idx, ibd, dims, n)
    out = op(x, *idx, dims=new_dims)
    if perm is not None:
        out = _p("permute")(out, dims=perm)
    return out, 0


def index_put(inputs, bdims, dims, accumulate):
    x, v, idx = inputs[0], inputs[1], list(inputs[2:])
    xb, vb, ibd = bdims[0], bdims[1], list(bdims[2:])
    n = batch_size(inputs, bdims)
    op = _p("index_put")
    x = materialize(x, xb, n)
    r = x.ndim - 1
    k = max((logical_ndim(i, d) for i, d in zip(idx, ibd)), default=0)
    region = k + r - len(dims)                       # rank of the per-example region
    if all(d is None for d in ibd):
        new_dims = tuple(d + 1 for d in dims)
        split = bool(dims) and not _adjacent(dims)   # region is (index, B, rest)
        if vb is not None or split:
            v = pad_rank(materialize(v, vb, n), region)
            if split:
                v = _move0(v, k)
        return op(x, v, *idx, dims=new_dims, accumulate=accumulate), 0
    idx, new_dims, k, perm = _index_layout(x, idx, ibd, dims, n)
    v = pad_rank(materialize(v, vb, n), region)
    if perm is not None:                             # region is (B, index, before, after)
        m = min(dims)
        v = _p("permute")(v, dims=(0,) + tuple(range(m + 1, m + 1 + k)) +
                          tuple(range(1, m + 1)) + tuple(range(m + 1 + k, region + 1)))
    return op(x, v, *idx, dims=new_dims, accumulate=accumulate), 0


def _move0(v, to):
    dims = tuple(range(1, to + 1)) + (0,) + tuple(range(to + 1, v.ndim))
    return _p("permute")(v, dims=dims)


def scatter_add(inputs, bdims, dim, shape):
    n = batch_size(inputs, bdims)
    g, idx = (materialize(x, d, n) for x, d in zip(inputs, bdims))
    return _p("scatter_add_along_dim")(g, idx, dim=_shift(dim, len(shape)),
                                       shape=(n,) + tuple(shape)), 0


# ---------------------------------------------------------------------------- products
def matmul(inputs, bdims):
    (x, y), (bx, by) = inputs, bdims
    rx, ry = logical_ndim(x, bx), logical_ndim(y, by)
    x, y = front(x, bx), front(y, by)
    if rx == 1:                                      # (m,) -> (1, m)
        x = _unsq(x, bx, 0)
    if ry == 1:                                      # (m,) -> (m, 1)
        y = _unsq(y, by, 1)
    lead = max(max(rx, 2), max(ry, 2)) - 2
    if bx is not None:
        x = pad_rank(x, lead + 2)
    if by is not None:
        y = pad_rank(y, lead + 2)
    if x.shape[-1] == 1 and rx > 1 and ry > 1:
        # NOTE: a batch of outer products (per-example weight gradients g.mT @ x): one
        # broadcast multiply writes each product once; a stacked GEMM with k = 1 runs one
        # tiny BLAS call per example (4x slower at (128, 512, 784)).
        return _p("mul")(x, y), 0
    out = _p("matmul")(x, y)
    if rx == 1 or ry == 1:
        s = tuple(out.shape)
        keep = s[:-2] + ((s[-2],) if rx != 1 else ()) + ((s[-1],) if ry != 1 else ())
        out = _p("reshape")(out, shape=keep)
    return out, 0


def _unsq(x, bd, at):
    """Insert a size-1 logical dim at ``at`` of a 1-D per-example value."""
    s = tuple(x.shape)
    pos = at + (bd is not None)
    return _p("reshape")(x, shape=s[:pos] + (1,) + s[pos:])


def einsum(inputs, bdims, equation):
    lhs, rhs = equation.split("->")
    terms = lhs.split(",")
    used = set(equation)
    letter = next(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                  if c not in used)
    xs, new_terms = [], []
    for x, d, t in zip(inputs, bdims, terms):
        xs.append(front(x, d))
        new_terms.append(t if d is None else letter + t)
    eq = ",".join(new_terms) + "->" + letter + rhs
    return _p("einsum")(*xs, equation=eq), 0


# ---------------------------------------------------------------------------- attention
def sdpa(inputs, bdims, scale, is_causal):
    n = batch_size(inputs, bdims)
    q, k, v = (materialize(x, d, n) for x, d in zip(inputs, bdims))
    return _p("sdpa")(q, k, v, scale=scale, is_causal=is_causal), 0


def sdpa_grad(inputs, bdims, scale, is_causal):
    """The flat ``(dq, dk, dv)`` of each example: the batched call's flat output holds all
    examples' ``dq`` first, so each part is split per example and the parts re-joined."""
    n = batch_size(inputs, bdims)
    g, q, k, v = (materialize(x, d, n) for x, d in zip(inputs, bdims))
    flat = _p("sdpa_grad")(g, q, k, v, scale=scale, is_causal=is_causal)
    parts, off = [], 0
    for t in (q, k, v):
        size = 1
        for s in t.shape:
            size *= s
        piece = _p("slice")(flat, slices=((off, off + size, 1),))
        parts.append(_p("reshape")(piece, shape=(n, size // n if n else 0)))
        off += size
    return _p("cat")(*parts, dim=1), 0


# ---------------------------------------------------------------------------- conv columns
def _merge(x, bd):
    """Batch dim folded into the leading (N) dim: ``(B, N, ...) -> (B * N, ...)``."""
    x = front(x, bd)
    s = tuple(x.shape)
    return _p("reshape")(x, shape=(s[0] * s[1],) + s[2:]), s[0], s[1]


def unfold(inputs, bdims, **params):
    x, b, n = _merge(inputs[0], bdims[0])
    out = _p("unfold")(x, **params)
    return _p("reshape")(out, shape=(b, n) + tuple(out.shape[1:])), 0


def fold(inputs, bdims, **params):
    x, b, n = _merge(inputs[0], bdims[0])
    out = _p("fold")(x, **params)
    return _p("reshape")(out, shape=(b, n) + tuple(out.shape[1:])), 0


# ---------------------------------------------------------------------------- by name
from .batching import dim_rule, dims_rule  # noqa: E402  (re-exported for the defops)

reduce_dims = dims_rule("dim", none_means_all=False)
one_dim = dim_rule("dim")
argmax, argmin = argext("argmax"), argext("argmin")


def leading(name, *cores):
    """Rule of an op that broadcasts leading (batch) dims over trailing cores of fixed
    ranks ``cores`` (one per input): each batched input gets the same number of leading
    dims, the vmap batch dim first."""
    def rule(inputs, bdims, **params):
        lead = max(logical_ndim(x, d) - c for x, d, c in zip(inputs, bdims, cores))
        xs = [x if d is None else pad_rank(front(x, d), lead + c)
              for x, d, c in zip(inputs, bdims, cores)]
        return _p(name)(*xs, **params), 0
    return rule


def recurrent_layer(name, n_weights):
    """Fused recurrent layers (``xp (L, N, G)``, states ``(N, H)``..., then ``n_weights``
    weights shared by the batch): with unbatched weights the vmap batch joins ``N``; batched
    weights (an ensemble) decline, so they run per example."""
    def rule(inputs, bdims, **params):
        if any(d is not None for d in bdims[len(bdims) - n_weights:]):
            return NotImplemented
        n = batch_size(inputs, bdims)
        xp = materialize(inputs[0], bdims[0], n)                 # (B, L, N, G)
        s = tuple(xp.shape)
        xp = _p("reshape")(_p("permute")(xp, dims=(1, 0, 2, 3)), shape=(s[1], n * s[2], s[3]))
        states = []
        for x, d in zip(inputs[1:len(inputs) - n_weights], bdims[1:]):
            x = materialize(x, d, n)                              # (B, N, H)
            states.append(_p("reshape")(x, shape=(n * x.shape[1],) + tuple(x.shape[2:])))
        out = _p(name)(xp, *states, *inputs[len(inputs) - n_weights:], **params)
        o = tuple(out.shape)                                       # (L, B * N, K)
        return _p("reshape")(out, shape=(o[0], n, s[2]) + o[2:]), 1
    return rule
