"""Joining, splitting, flipping and tiling: cat (primitive), stack, narrow/select/split/chunk
(views), flip (primitive), roll, tril/triu (primitives), repeat, tile, repeat_interleave.

``cat`` is variadic: its VJP hands each input the ``narrow`` of the gradient at its place.
``tril``/``triu`` are primitives because a mask built from ops would cost a constant tensor
of the input's size per call; they are linear, so their rules are one line each.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..errors import DTypeError, EmberIndexError, ShapeError
from ..tensor import Tensor
from . import dispatch
from ._util import as_shape, wrap_dim, wrap_dims
from .movement import apply_slices, reshape_p
from . import batching_rules as _vb
from .registry import defop
from .dispatch import autocast_entry
from .unbind_node import fast_unbind

__all__ = ['cat', 'concat', 'concatenate', 'stack', 'hstack', 'vstack', 'narrow', 'select',
           'unbind', 'split', 'chunk', 'tensor_split', 'flip', 'fliplr', 'flipud', 'roll',
           'tril', 'triu', 'repeat_interleave', 'tile']

_apply = dispatch.apply


def _cat_vjp(g, out, *inputs, dim):
    res, off = [], 0
    for x in inputs:
        n = x.shape[dim]
        res.append(g.narrow(dim, off, n))
        off += n
    return tuple(res)


def _cat_jvp(tangents, out, *inputs, dim):
    from .factories import zeros
    ts = [t if t is not None else zeros(x.shape, dtype=out.dtype, device=out.device)
          for t, x in zip(tangents, inputs)]
    return _apply(cat_p, tuple(t.to(out.dtype) for t in ts), {"dim": dim})


def _cat_kernel(xp, xs, dim):
    # NOTE: C order like PyTorch's cat of non-channels-last inputs; NumPy's concatenate
    # would copy the layout of permuted inputs (unbind's stacked gradient relies on this).
    x0 = xs[0]
    if x0.ndim < 2 or all(x.flags.c_contiguous for x in xs):
        return xp.concatenate(xs, axis=dim)
    dt = xp.result_type(*xs)
    out = xp.empty(_cat_shape(*(x.shape for x in xs), dim=dim), dtype=dt)
    return xp.concatenate(xs, axis=dim, out=out)


def _cat_shape(*shapes, dim):
    s = list(shapes[0])
    s[dim] = sum(x[dim] for x in shapes)
    return tuple(s)


cat_p = defop(
    "cat", nin=-1, params={"dim": 0}, dtype="promote", save=None,
    batch="materialize_dim",
    kernel=lambda xp, *xs, dim: _cat_kernel(xp, xs, dim),
    shape=_cat_shape, vjp=_cat_vjp, jvp=_cat_jvp)

flip_p = defop(
    "flip", nin=1, params={"dims": ()}, dtype="same", save=None,
    batch=_vb.dims_rule("dims", none_means_all=False),
    kernel=lambda xp, x, dims: xp.ascontiguousarray(xp.flip(x, dims)),
    shape=lambda s, dims: s,
    vjp=lambda g, out, x, dims: (_apply(flip_p, (g,), {"dims": dims}),), jvp="linear")

tril_p = defop(
    "tril", nin=1, params={"diagonal": 0}, dtype="same", save=None,
    batch="front",
    kernel=lambda xp, x, diagonal: xp.tril(x, diagonal), shape=lambda s, diagonal: s,
    vjp=lambda g, out, x, diagonal: (_apply(tril_p, (g,), {"diagonal": diagonal}),),
    jvp="linear")

triu_p = defop(
    "triu", nin=1, params={"diagonal": 0}, dtype="same", save=None,
    batch="front",
    kernel=lambda xp, x, diagonal: xp.triu(x, diagonal), shape=lambda s, diagonal: s,
    vjp=lambda g, out, x, diagonal: (_apply(triu_p, (g,), {"diagonal": diagonal}),),
    jvp="linear")


# ------------------------------------------------------------------ cat / stack
@autocast_entry("cat")
def cat(tensors, dim=0, *, out=None):
    """Concatenate along ``dim``, promoting dtypes (``torch.cat``).

    Example:
        >>> ember.cat([ember.zeros(2, 3), ember.ones(1, 3)]).shape
        ember.Size([3, 3])
    """
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise DTypeError(f"cat(): expected a sequence of Tensors, but element {i} is "
                             f"{type(t).__name__}")
    # NOTE: like PyTorch, 1-D empty tensors are skipped (legacy "empty" placeholders).
    full = [t for t in tensors if not (t.ndim == 1 and t._data.shape[0] == 0)]
    if not full:
        full = tensors[:1]
    ref = full[0]
    if ref.ndim == 0:
        raise ShapeError("cat(): zero-dimensional tensor (at position 0) cannot be "
                         "concatenated")
    d = wrap_dim(dim, ref.ndim, "cat")
    for i, t in enumerate(tensors):
        if t.ndim == 1 and t._data.shape[0] == 0 and t is not ref:
            continue
        if t.ndim != ref.ndim:
            raise ShapeError(f"cat(): Tensors must have same number of dimensions: got "
                             f"{ref.ndim} and {t.ndim} (tensor number {i} in the list)")
        for k, (a, b) in enumerate(zip(ref._data.shape, t._data.shape)):
            if k != d and a != b:
                raise ShapeError(f"cat(): Sizes of tensors must match except in dimension "
                                 f"{d}. Expected size {a} but got size {b} for tensor number "
                                 f"{i} in the list (dimension {k}).")
    if len(full) < len(tensors):  # the skipped empties still take part in type promotion
        dt = _dt.result_type(*tensors)
        full = [t.to(dt) for t in full]
    r = full[0] if len(full) == 1 else _apply(cat_p, tuple(full), {"dim": d})
    if len(full) == 1:
        r = r.clone()
    if out is not None:
        from .inplace import copy_into_out
        return copy_into_out(out, r)
    return r


concat = concatenate = cat


@autocast_entry("stack")
def stack(tensors, dim=0, *, out=None):
    """Join equally shaped tensors along a new dim (``torch.stack``)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack expects a non-empty TensorList")
    s0 = tuple(tensors[0].shape)
    for i, t in enumerate(tensors):
        if tuple(t.shape) != s0:
            raise ShapeError(f"stack expects each tensor to be equal size, but got {list(s0)} "
                             f"at entry 0 and {list(t.shape)} at entry {i}")
    d = wrap_dim(dim, len(s0) + 1, "stack")
    return cat([t.unsqueeze(d) for t in tensors], d, out=out)


def hstack(tensors, *, out=None):
    """Concatenate column-wise: dim 1, or dim 0 for 1-D tensors (``torch.hstack``)."""
    ts = [t.reshape(1) if t.ndim == 0 else t for t in tensors]
    return cat(ts, 0 if ts[0].ndim == 1 else 1, out=out)


def vstack(tensors, *, out=None):
    """Concatenate row-wise after making inputs at least 2-D (``torch.vstack``)."""
    ts = [t.reshape(1, -1) if t.ndim < 2 else t for t in tensors]
    return cat(ts, 0, out=out)


# ------------------------------------------------------------------ narrowing and splitting
def narrow(input, dim, start, length):
    """Elements ``start..start+length`` of ``dim`` (a view) (``torch.narrow``).

    Example:
        >>> ember.tensor([1, 2, 3, 4]).narrow(0, 1, 2)
        tensor([2, 3])
    """
    nd = input.ndim
    if nd == 0:
        raise ShapeError("narrow() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, nd, "narrow")
    n = input._data.shape[d]
    start, length = int(start), int(length)
    if not -n <= start <= n:
        raise EmberIndexError(f"narrow: start ({start}) out of range for dimension {d} of "
                              f"size {n} (expected to be in range of [{-n}, {n}])")
    start = start + n if start < 0 else start
    if length < 0 or start + length > n:
        raise ShapeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size "
                         f"({n}) of dimension {d}")
    sl = [(0, m, 1) for m in input._data.shape]
    sl[d] = (start, start + length, 1)
    return apply_slices(input, sl)


def select(input, dim, index):
    """Slice at ``index`` along ``dim``, removing it (a view) (``torch.select``)."""
    d = wrap_dim(dim, input.ndim, "select")
    n = input._data.shape[d]
    i = int(index)
    if not -n <= i < n:
        raise EmberIndexError(f"select(): index {i} out of range for tensor of size "
                              f"{list(input.shape)} at dimension {d}")
    r = narrow(input, d, i + n if i < 0 else i, 1)
    return _apply(reshape_p, (r,), {"shape": r._data.shape[:d] + r._data.shape[d + 1:]})


def unbind(input, dim=0):
    """All slices along ``dim`` as a tuple of views (``torch.unbind``).

    Eager calls record one node whose backward stacks the gradients (``unbind_node.py``);
    under a dispatch mode or forward AD it is one ``select`` per slice.

    Example:
        >>> a, b = ember.tensor([[1, 2], [3, 4]]).unbind(1)   # [1, 3] and [2, 4]
    """
    d = wrap_dim(dim, input.ndim, "unbind")
    r = fast_unbind(input, d)
    if r is not None:
        return r
    return tuple(select(input, d, i) for i in range(input._data.shape[d]))


def split(tensor, split_size_or_sections, dim=0):
    """Views of ``split_size``-long pieces (last may be shorter), or of the given sizes.

    Example:
        >>> [p.shape[0] for p in ember.zeros(5).split([2, 3])]
        [2, 3]
    """
    d = wrap_dim(dim, tensor.ndim, "split")
    n = tensor._data.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ShapeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                             f"(input tensor's size at dimension {d}), but got split_sizes="
                             f"{sizes}")
    else:
        size = int(split_size_or_sections)
        if size <= 0 and not (size == 0 and n == 0):
            raise ShapeError(f"split: split_size must be positive, got {size}")
        sizes = [min(size, n - i) for i in range(0, n, size)] if n else [0]
    return _pieces(tensor, d, sizes)


def _pieces(x, d, sizes):
    out, off = [], 0
    for s in sizes:
        out.append(narrow(x, d, off, s))
        off += s
    return tuple(out)


def chunk(input, chunks, dim=0):
    """Split into ``chunks`` pieces of size ``ceil(n / chunks)`` (maybe fewer) (views)."""
    if chunks <= 0:
        raise ShapeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = wrap_dim(dim, input.ndim, "chunk")
    n = input._data.shape[d]
    return split(input, max(1, -(-n // chunks)), d)


def tensor_split(input, indices_or_sections, dim=0):
    """Split into ``n`` nearly equal views, or at the given indices (``torch.tensor_split``)."""
    d = wrap_dim(dim, input.ndim, "tensor_split")
    n = input._data.shape[d]
    if isinstance(indices_or_sections, Tensor) and indices_or_sections.ndim == 0:
        indices_or_sections = int(indices_or_sections)
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0:
            raise ShapeError(f"tensor_split: number of sections must be larger than 0, got {k}")
        q, r = divmod(n, k)
        return _pieces(input, d, [q + 1] * r + [q] * (k - r))
    bounds = [min(max(int(i) + (n if int(i) < 0 else 0), 0), n) for i in indices_or_sections]
    out, prev = [], 0
    for b in bounds + [n]:
        b = max(b, prev)
        out.append(narrow(input, d, prev, b - prev))
        prev = b
    return tuple(out)


# ------------------------------------------------------------------ flips and rolls
def flip(input, dims):
    """Reverse the order of elements along ``dims`` (a copy) (``torch.flip``)."""
    dims = wrap_dims((dims,) if isinstance(dims, int) else dims, input.ndim, "flip")
    if not dims or input.ndim == 0:
        return input.clone()
    return _apply(flip_p, (input,), {"dims": dims})


def fliplr(input):
    if input.ndim < 2:
        raise ShapeError("fliplr: Input must be >= 2-d.")
    return flip(input, (1,))


def flipud(input):
    if input.ndim < 1:
        raise ShapeError("flipud: Input must be >= 1-d.")
    return flip(input, (0,))


def roll(input, shifts, dims=None):
    """Shift elements circularly along ``dims`` (flattened if None) (``torch.roll``).

    Example:
        >>> ember.tensor([1, 2, 3]).roll(1)
        tensor([3, 1, 2])
    """
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if dims is None:
        if len(shifts) != 1:
            raise ShapeError(f"roll: shifts {shifts} need matching dims")
        return roll(input.reshape(-1), shifts, 0).reshape(input.shape)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ShapeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, "
                         f"dims: {len(dims)}")
    r = input
    for s, d in zip(shifts, dims):
        d = wrap_dim(d, input.ndim, "roll")
        n = input._data.shape[d]
        s = s % n if n else 0
        if s:
            r = cat([r.narrow(d, n - s, s), r.narrow(d, 0, n - s)], d)
    return r if r is not input else input.clone()


def _tri(op, input, diagonal):
    if input.ndim < 2:
        raise ShapeError(f"{op.name}: input tensor must have at least 2 dimensions, got "
                         f"{input.ndim}")
    return _apply(op, (input,), {"diagonal": int(diagonal)})


def tril(input, diagonal=0):
    """Lower triangle (elements with ``col - row <= diagonal``); others zero (``torch.tril``)."""
    return _tri(tril_p, input, diagonal)


def triu(input, diagonal=0):
    """Upper triangle (elements with ``col - row >= diagonal``); others zero (``torch.triu``)."""
    return _tri(triu_p, input, diagonal)


# ------------------------------------------------------------------ repetition
def repeat(input, *sizes):
    """Tile the whole tensor ``sizes[i]`` times along each dim (``Tensor.repeat``).

    Example:
        >>> ember.tensor([1, 2]).repeat(2)
        tensor([1, 2, 1, 2])
    """
    sizes = as_shape(sizes, "repeat")
    if len(sizes) < input.ndim:
        raise ShapeError(f"repeat: number of repeat dims ({len(sizes)}) can not be smaller "
                         f"than number of dimensions of tensor ({input.ndim})")
    if any(s < 0 for s in sizes):
        raise ShapeError(f"repeat: repeats can not be negative, got {sizes}")
    shape = (1,) * (len(sizes) - input.ndim) + tuple(input._data.shape)
    inter, big = [], []
    for r, n in zip(sizes, shape):
        inter += [1, n]
        big += [r, n]
    x = input.reshape(tuple(inter)).expand(*big)
    return x.reshape(tuple(r * n for r, n in zip(sizes, shape)))


def tile(input, dims):
    """Like :func:`repeat`, with missing leading repeats taken as 1 (``torch.tile``)."""
    dims = as_shape((dims,), "tile")
    dims = (1,) * (input.ndim - len(dims)) + dims
    return repeat(input, *dims)


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each element ``repeats`` times (an int or one count per element) along ``dim``
    (the flattened input if None) (``torch.repeat_interleave``).

    Example:
        >>> ember.tensor([1, 2]).repeat_interleave(2)
        tensor([1, 1, 2, 2])
    """
    if repeats is None:  # repeat_interleave(counts): indices repeated by their counts
        return _interleave_index(input, input._data.shape[0] if input.ndim else 1)
    if dim is None:
        input, dim = input.reshape(-1), 0
    d = wrap_dim(dim, input.ndim, "repeat_interleave")
    n = input._data.shape[d]
    if isinstance(repeats, Tensor) and repeats.numel() == 1 and repeats.ndim <= 1:
        repeats = int(repeats.item())
    if isinstance(repeats, int):
        if repeats < 0:
            raise ShapeError(f"repeat_interleave: repeats can not be negative, got {repeats}")
        shape = input._data.shape
        x = input.unsqueeze(d + 1).expand(*shape[:d + 1], repeats, *shape[d + 1:])
        return x.reshape(shape[:d] + (n * repeats,) + shape[d + 1:])
    from .scatter import index_select
    return index_select(input, d, _interleave_index(repeats, n).to(input.device))


def _interleave_index(repeats, n):
    import numpy as np
    from .factories import tensor
    if not isinstance(repeats, Tensor) or repeats._dtype.category == _dt.FLOAT:
        raise DTypeError("repeat_interleave: repeats must be an int or an integer tensor")
    counts = np.asarray(repeats.detach()).reshape(-1)
    if counts.size != n:
        raise ShapeError(f"repeat_interleave: repeats must have the same size as input along "
                         f"dim, got {counts.size} repeats for size {n}")
    if (counts < 0).any():
        raise ShapeError("repeat_interleave: repeats can not be negative")
    return tensor(np.repeat(np.arange(n, dtype=np.int64), counts), device=repeats.device)


Tensor.narrow = narrow
Tensor.select = select
Tensor.unbind = unbind
Tensor.split = split
Tensor.chunk = chunk
Tensor.tensor_split = tensor_split
Tensor.flip = flip
Tensor.fliplr = fliplr
Tensor.flipud = flipud
Tensor.roll = roll
Tensor.tril = tril
Tensor.triu = triu
Tensor.repeat = repeat
Tensor.tile = tile
Tensor.repeat_interleave = repeat_interleave
