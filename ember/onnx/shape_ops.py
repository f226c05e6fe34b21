"""Converters for movement, indexing, padding and convolution primitives.

Shapes in an exported graph are those of the example inputs (Ember specialises every
graph to its shapes), so ``reshape``/``expand`` targets and gather indices are constants.
``unfold`` (im2col, which convolutions and pooling are built on) becomes a ``Pad`` and one
``Gather`` of precomputed pixel indices, an exact reproduction of the kernel.
"""
from __future__ import annotations

import numpy as np

from .ops import converts, unsupported

_BIG = np.iinfo(np.int64).max


@converts("reshape")
def _reshape(b, node, ins):
    return b.op("Reshape", [ins[0], b.ints(node.params["shape"])], allowzero=1)


@converts("permute")
def _permute(b, node, ins):
    return b.op("Transpose", ins, perm=list(node.params["dims"]))


@converts("expand")
def _expand(b, node, ins):
    return b.op("Expand", [ins[0], b.ints(node.params["shape"])])


@converts("slice")
def _slice(b, node, ins):
    sl = node.params["slices"]
    axes = [d for d, (a, e, s) in enumerate(sl)
            if not (a in (0, None) and (e is None or e >= node.inputs[0].shape[d]) and s == 1)]
    if not axes:
        return b.op("Identity", ins)
    starts, ends, steps = [], [], []
    for d in axes:
        a, e, s = sl[d]
        starts.append((0 if s > 0 else _BIG) if a is None else a)
        ends.append((_BIG if s > 0 else -_BIG) if e is None else e)
        steps.append(s)
    return b.op("Slice", [ins[0], b.ints(starts), b.ints(ends), b.ints(axes), b.ints(steps)])


@converts("flip")
def _flip(b, node, ins):
    dims = [d % node.inputs[0].ndim for d in node.params["dims"]]
    if not dims:
        return b.op("Identity", ins)
    n = len(dims)
    return b.op("Slice", [ins[0], b.ints([-1] * n), b.ints([-_BIG] * n), b.ints(dims),
                          b.ints([-1] * n)])


@converts("cat")
def _cat(b, node, ins):
    return b.op("Concat", ins, axis=node.params.get("dim", 0))


@converts("tril", "triu")
def _trilu(b, node, ins):
    k = b.const(np.asarray(node.params.get("diagonal", 0), np.int64))
    return b.op("Trilu", [ins[0], k], upper=int(node.op.name == "triu"))


@converts("pad")
def _pad(b, node, ins):
    pads = node.params["pads"]
    value = b.scalar(node.params.get("value", 0.0), node.outs[0].dtype)
    flat = [p[0] for p in pads] + [p[1] for p in pads]
    return b.op("Pad", [ins[0], b.ints(flat), value], mode="constant")


@converts("take_along_dim")
def _take_along_dim(b, node, ins):
    return b.op("GatherElements", ins, axis=node.params.get("dim", 0))


@converts("scatter_add_along_dim")
def _scatter_add(b, node, ins):
    if b.opset < 16:
        raise unsupported(node, "needs opset >= 16 (ScatterElements reduction='add')")
    src, idx = ins
    out = node.outs[0]
    zeros = b.const(np.zeros(out.shape, out.dtype.np), "zeros")
    return b.op("ScatterElements", [zeros, idx, src], axis=node.params.get("dim", 0),
                reduction="add")


@converts("nonzero")
def _nonzero(b, node, ins):
    return b.op("Transpose", [b.op("NonZero", ins)], perm=[1, 0])


@converts("as_strided")
def _as_strided(b, node, ins):
    p = node.params
    idx = np.full(p["size"], p["storage_offset"], np.int64)
    for d, (n, s) in enumerate(zip(p["size"], p["stride"])):
        shape = [1] * len(p["size"])
        shape[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    flat = b.op("Reshape", [ins[0], b.ints([-1])])
    return b.op("Gather", [flat, b.const(idx, "strided_idx")], axis=0)


# ---------------------------------------------------------------------- indexing
@converts("index")
def _index(b, node, ins):
    """NumPy advanced indexing of ``x`` by integer tensors at ``dims``."""
    x, idx, dims = node.inputs[0], node.inputs[1:], list(node.params["dims"])
    if any(not i.dtype.name.startswith(("int", "uint")) for i in idx):
        raise unsupported(node, "boolean mask indices (data-dependent shapes)")
    if len(idx) == 1:
        return b.op("Gather", [ins[0], ins[1]], axis=dims[0])
    # several index tensors: move the indexed dims first, gather N-d, place the result
    # dims where NumPy does (in place of the first indexed dim when they are adjacent).
    rest = [d for d in range(x.ndim) if d not in dims]
    xt = b.op("Transpose", [ins[0]], perm=dims + rest)
    bshape = np.broadcast_shapes(*(i.shape for i in idx))
    cols = [b.op("Unsqueeze", [b.op("Expand", [n, b.ints(bshape)]), b.ints([-1])])
            for n in ins[1:]]
    r = b.op("GatherND", [xt, b.op("Concat", cols, axis=-1)])
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:
        nb, lead = len(bshape), dims[0]
        perm = list(range(nb, nb + lead)) + list(range(nb)) + \
            list(range(nb + lead, nb + len(rest)))
        r = b.op("Transpose", [r], perm=perm)
    return r


# ---------------------------------------------------------------------- convolution
def _blocks(size, k, d, pads, s):
    return (size + pads[0] + pads[1] - d * (k - 1) - 1) // s + 1


@converts("unfold")
def _unfold(b, node, ins):
    """im2col as Pad + Gather: column ``c*kh*kw + i*kw + j``, block ``oh*OW + ow`` reads
    padded pixel ``(oh*sh + i*dh, ow*sw + j*dw)`` of channel ``c``."""
    n, c, h, w = node.inputs[0].shape
    p = node.params
    (kh, kw), (dh, dw), (sh, sw) = p["kernel_size"], p["dilation"], p["stride"]
    (pt, pb), (pl, pr) = p["padding"]
    oh, ow = _blocks(h, kh, dh, (pt, pb), sh), _blocks(w, kw, dw, (pl, pr), sw)
    hp, wp = h + pt + max(pb, 0), w + pl + max(pr, 0)
    x = ins[0]
    if pt or pl or pb > 0 or pr > 0:
        value = b.scalar(p.get("pad_value", 0.0), node.outs[0].dtype)
        x = b.op("Pad", [x, b.ints([0, 0, pt, pl, 0, 0, max(pb, 0), max(pr, 0)]), value],
                 mode="constant")
    rows = (np.arange(oh) * sh)[None, None, :, None] + (np.arange(kh) * dh)[:, None, None, None]
    cols = (np.arange(ow) * sw)[None, None, None, :] + (np.arange(kw) * dw)[None, :, None, None]
    pix = (rows * wp + cols).reshape(kh * kw, oh * ow).astype(np.int64)
    flat = b.op("Reshape", [x, b.ints([n, c, hp * wp])])
    g = b.op("Gather", [flat, b.const(pix, "im2col_idx")], axis=2)
    return b.op("Reshape", [g, b.ints([n, c * kh * kw, oh * ow])])
