"""Movement primitives and views: reshape, permute, expand, slice (zero-copy where the layout
allows) and the shape functions built on them (flatten, squeeze, movedim...).

Views share their input's storage: writes through a view are seen by its base. The
``slice`` primitive is basic indexing (``x[1:5:2]``, ``narrow``, ``select``): one
``(start, stop, step)`` per dim; ints and ``None`` are a ``reshape`` on top of it.
"""
from __future__ import annotations

import math

from ..errors import ShapeError
from ..tensor import Tensor
from . import dispatch
from ._util import as_shape, wrap_dim
from . import batching_rules as _vb
from .registry import defop

__all__ = ['reshape', 'view', 'permute', 'expand', 'broadcast_to', 'transpose', 't', 'unsqueeze',
           'squeeze', 'flatten', 'unflatten', 'ravel', 'movedim', 'moveaxis', 'swapaxes',
           'swapdims', 'view_as', 'reshape_as', 'expand_as']

_apply = dispatch.apply


def _infer_shape(shape, numel, op):
    shape = list(shape)
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise ShapeError(f"{op}: only one dimension can be inferred (-1), got shape {tuple(shape)}")
    if any(s < -1 for s in shape):
        raise ShapeError(f"{op}: invalid shape dimension in {tuple(shape)}")
    known = math.prod(s for s in shape if s != -1)
    if neg:
        if known == 0 or numel % known:
            raise ShapeError(f"{op}: shape {tuple(shape)} is invalid for input of size {numel}")
        shape[neg[0]] = numel // known
    elif known != numel:
        raise ShapeError(f"{op}: shape {tuple(shape)} is invalid for input of size {numel}")
    return tuple(shape)


reshape_p = defop(
    "reshape", nin=1, params={"shape": ()}, dtype="same", view="maybe", save=None,
    batch=_vb.reshape,
    kernel=lambda xp, x, shape: xp.reshape(x, shape),
    shape=lambda s, shape: shape,
    vjp=lambda g, out, x, shape: (g.reshape(x.shape),), jvp="linear")

permute_p = defop(
    "permute", nin=1, params={"dims": ()}, dtype="same", view=True, save=None,
    batch=_vb.permute,
    kernel=lambda xp, x, dims: xp.transpose(x, dims),
    shape=lambda s, dims: tuple(s[d] for d in dims),
    vjp=lambda g, out, x, dims: (g.permute(_inverse_perm(dims)),), jvp="linear")

expand_p = defop(
    "expand", nin=1, params={"shape": ()}, dtype="same", view=True, save=None,
    batch=_vb.expand,
    kernel=lambda xp, x, shape: xp.broadcast_to(x, shape),
    shape=lambda s, shape: shape,
    vjp=lambda g, out, x, shape: (_sum_to(g, x.shape),), jvp="linear")


def _slice_vjp(g, out, x, slices):
    # NOTE: the gradient is g written into zeros at the slice's place in a C-contiguous
    # buffer of x's shape: one strided write (as_strided_scatter), no index tensors.
    from .strided import as_strided_scatter_p, contiguous_geometry, zero_base
    size, stride, off = contiguous_geometry(x.shape, slices)
    return (_apply(as_strided_scatter_p, (zero_base(x.shape, g), g),
                   {"size": size, "stride": stride, "storage_offset": off}),)


slice_p = defop(
    "slice", nin=1, params={"slices": ()}, dtype="same", view=True, save=None,
    batch=_vb.slice_,
    kernel=lambda xp, x, slices: x[tuple(slice(a, b, s) for a, b, s in slices)],
    shape=lambda s, slices: tuple(len(range(a, b, st)) for a, b, st in slices),
    vjp=_slice_vjp, jvp="linear")


def _sum_to(g, shape):
    from .reduce import sum_to
    return sum_to(g, shape)


def _inverse_perm(dims):
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return tuple(inv)


def norm_slice(s: slice, n: int, dim: int) -> tuple:
    """Canonical ``(start, stop, step)`` of a Python slice over a dim of size ``n``."""
    step = 1 if s.step is None else int(s.step)
    if step <= 0:
        if step == 0:
            raise ValueError("slice step cannot be zero")
        raise ValueError("step must be greater than zero")
    start, stop, step = slice(s.start, s.stop, step).indices(n)
    length = len(range(start, stop, step))
    return (start, start + (length - 1) * step + 1, step) if length else (start, start, step)


def apply_slices(x: Tensor, slices) -> Tensor:
    """The ``slice`` primitive, skipped when every dim is taken whole."""
    shape = x._data.shape
    if all(a == 0 and b == n and s == 1 for (a, b, s), n in zip(slices, shape)):
        return x
    return _apply(slice_p, (x,), {"slices": tuple(slices)})


# ------------------------------------------------------------------ reshape family
def reshape(input, *shape):
    """``input`` with a new shape; a view when the layout allows, else a copy.

    Example:
        >>> ember.arange(6).reshape(2, -1).shape
        ember.Size([2, 3])
    """
    shape = _infer_shape(as_shape(shape, "reshape"), input._data.size, "reshape")
    if shape == input._data.shape:
        return input if input._grad_fn is None and not input._requires_grad else \
            _apply(reshape_p, (input,), {"shape": shape})
    return _apply(reshape_p, (input,), {"shape": shape})


def view(input, *shape):
    """Like :func:`reshape` but never copies: raises if the layout does not allow a view."""
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        return view_dtype(input, shape[0])
    shape = _infer_shape(as_shape(shape, "view"), input._data.size, "view")
    if input._data.size and not _viewable(input._data.shape, input.stride(), shape):
        raise ShapeError(
            f"view: size {list(shape)} is not compatible with input tensor's size "
            f"{list(input.shape)} and stride {list(input.stride())} (at least one dimension "
            f"spans across two contiguous subspaces). Use .reshape(...) instead.")
    return _apply(reshape_p, (input,), {"shape": shape})


def _viewable(old, strides, new) -> bool:
    """Whether ``old`` (with ``strides``) can be re-viewed as ``new`` without a copy."""
    chunks = []  # merge dims that are contiguous with each other: (numel, inner stride)
    for n, s in zip(old, strides):
        if n == 1:
            continue
        if chunks and chunks[-1][1] == s * n:
            chunks[-1] = (chunks[-1][0] * n, s)
        else:
            chunks.append((n, s))
    i, acc = 0, 1
    for n in new:
        if n == 1:
            continue
        if i >= len(chunks):
            return False
        acc *= n
        if acc == chunks[i][0]:
            i, acc = i + 1, 1
        elif chunks[i][0] % acc:
            return False
    return i == len(chunks)


def view_dtype(input, dtype):
    """``input``'s bytes reinterpreted as ``dtype``, sharing its storage (``Tensor.view(dtype)``).

    Same element size: same shape and strides, any layout. A different size rescales the
    last dim, which must have stride 1; going to a larger element size also needs the
    last size, the storage offset and the other strides divisible by the size ratio
    (PyTorch's rules). Like PyTorch, the result is not differentiable.

    Example:
        >>> ember.tensor([1.0]).view(ember.int32)
        tensor([1065353216], dtype=ember.int32)
    """
    from .. import dtypes
    from ..autograd.grad_mode import state
    from ..tensor import _wrap
    new = dtypes.as_dtype(dtype)
    if state.modes and hasattr(state.modes[-1], "unsupported"):
        # NOTE: a bit cast is no primitive: a tracer would lift the result as an input
        # read from this very array at every run (stale values), so it breaks the graph.
        state.modes[-1].unsupported("Tensor.view(dtype)")
    old, arr = input._dtype, input._data
    if hasattr(input, "_batched_map"):          # inside ember.func.vmap: view the physical
        if new.itemsize != old.itemsize and input._bdim == input._phys.ndim - 1:
            input = input._batched_map(lambda p: p.movedim(-1, 0).contiguous(), 0)
        return input._batched_map(lambda p: view_dtype(p, dtype))
    if new.itemsize != old.itemsize:
        _check_view_dtype(input, old, new)
    return _wrap(arr.view(new.np), new, input._device, input._storage,
                 input._base if input._base is not None else input)


def _check_view_dtype(input, old, new):
    what = (f"view(dtype={new.name}): cannot view a {old.name} tensor of shape "
            f"{list(input.shape)} and stride {list(input.stride())} as {new.name}: ")
    if input.ndim == 0:
        raise RuntimeError(what + f"self.dim() cannot be 0 if self.element_size() "
                           f"({old.itemsize}) != dtype.itemsize ({new.itemsize})")
    if input.stride(-1) != 1:
        raise RuntimeError(what + "self.stride(-1) must be 1 to view between element sizes "
                           f"{old.itemsize} and {new.itemsize} (call .contiguous() first)")
    if new.itemsize > old.itemsize:
        r = new.itemsize // old.itemsize
        if input.shape[-1] % r:
            raise RuntimeError(what + f"self.size(-1) ({input.shape[-1]}) must be divisible "
                               f"by the ratio {r} between the element sizes")
        if input.storage_offset() % r:
            raise RuntimeError(what + f"self.storage_offset() ({input.storage_offset()}) must "
                               f"be divisible by the ratio {r} between the element sizes")
        if any(st % r for st in input.stride()[:-1]):
            raise RuntimeError(what + f"the strides of all dims but the last must be "
                               f"divisible by the ratio {r} between the element sizes")


def view_as(input, other):
    return view(input, other.shape)


def reshape_as(input, other):
    return reshape(input, other.shape)


def flatten(input, start_dim=0, end_dim=-1):
    """Merge dims ``start_dim..end_dim`` into one (``torch.flatten``).

    Example:
        >>> ember.zeros(2, 3, 4).flatten(1).shape
        ember.Size([2, 12])
    """
    nd = input.ndim
    if nd == 0:
        return reshape(input, 1)
    s, e = wrap_dim(start_dim, nd, "flatten"), wrap_dim(end_dim, nd, "flatten")
    if s > e:
        raise ShapeError(f"flatten() has invalid args: start_dim ({start_dim}) cannot come "
                         f"after end_dim ({end_dim})")
    shape = input._data.shape
    return reshape(input, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])


def unflatten(input, dim, sizes):
    """Split ``dim`` into ``sizes`` (one may be -1) (``torch.unflatten``)."""
    d = wrap_dim(dim, input.ndim, "unflatten")
    shape = input._data.shape
    sizes = _infer_shape(as_shape((sizes,), "unflatten"), shape[d], "unflatten")
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


def ravel(input):
    """The elements as a 1-D tensor (a view when contiguous) (``torch.ravel``)."""
    return reshape(input, -1)


# ------------------------------------------------------------------ permutations
def permute(input, *dims):
    """Reorder dimensions (a view)."""
    dims = as_shape(dims, "permute")
    nd = input.ndim
    if len(dims) != nd:
        raise ShapeError(f"permute: number of dims {len(dims)} does not match the input's "
                         f"{nd} dims (shape {tuple(input.shape)})")
    dims = tuple(wrap_dim(d, nd, "permute") for d in dims)
    if len(set(dims)) != nd:
        raise ShapeError(f"permute: repeated dim in {dims}")
    return _apply(permute_p, (input,), {"dims": dims})


def transpose(input, dim0, dim1):
    """Swap two dims (a view) (``torch.transpose``)."""
    nd = input.ndim
    if nd == 0:
        return input
    d0, d1 = wrap_dim(dim0, nd, "transpose"), wrap_dim(dim1, nd, "transpose")
    dims = list(range(nd))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return _apply(permute_p, (input,), {"dims": tuple(dims)})


swapaxes = swapdims = transpose


def t(input):
    if input.ndim > 2:
        raise ShapeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                         f"{input.ndim}D")
    return transpose(input, 0, 1) if input.ndim == 2 else input


def movedim(input, source, destination):
    """Move dims ``source`` to positions ``destination`` (a view) (``torch.movedim``)."""
    nd = input.ndim
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise ShapeError(f"movedim: Invalid source or destination dims: source ({list(src)} "
                         f"dims) should contain the same number of dims as destination "
                         f"({list(dst)} dims)")
    src = [wrap_dim(d, nd, "movedim") for d in src]
    dst = [wrap_dim(d, nd, "movedim") for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"movedim: repeated dim in source {src} or destination {dst}")
    order = [None] * nd
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(nd) if d not in src)
    order = [next(rest) if o is None else o for o in order]
    return _apply(permute_p, (input,), {"dims": tuple(order)}) if order != list(range(nd)) \
        else input


moveaxis = movedim


# ------------------------------------------------------------------ expand / squeeze
def expand(input, *sizes):
    """Broadcast to a larger shape as a stride-0 view; ``-1`` keeps a dim (``Tensor.expand``)."""
    sizes = as_shape(sizes, "expand")
    nd = input.ndim
    if len(sizes) < nd:
        raise ShapeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater "
                         f"or equal to the number of dimensions in the tensor ({nd})")
    lead = len(sizes) - nd
    out = []
    for i, s in enumerate(sizes):
        if i < lead:
            if s < 0:
                raise ShapeError(f"expand: -1 not allowed in a new leading dim, got {sizes}")
            out.append(s)
            continue
        cur = input._data.shape[i - lead]
        if s == -1:
            s = cur
        if cur != s and cur != 1:
            raise ShapeError(f"expand: the expanded size of the tensor ({s}) must match the "
                             f"existing size ({cur}) at non-singleton dimension {i}. Target "
                             f"sizes: {list(sizes)}. Tensor sizes: {list(input.shape)}")
        out.append(s)
    out = tuple(out)
    if out == input._data.shape and not input._requires_grad:
        return input      # NOTE: with grad, a view with its ExpandBackward, as PyTorch's
    return _apply(expand_p, (input,), {"shape": out})


def broadcast_to(input, shape):
    return expand(input, *shape)


def expand_as(input, other):
    return expand(input, *other.shape)


def unsqueeze(input, dim):
    """Insert a size-1 dim at ``dim`` (a view)."""
    nd = input.ndim + 1
    d = wrap_dim(dim, nd, "unsqueeze")
    s = list(input._data.shape)
    s.insert(d, 1)
    return _apply(reshape_p, (input,), {"shape": tuple(s)})


def squeeze(input, dim=None):
    """Remove size-1 dims (all, or those in ``dim``, an int or tuple) (a view)."""
    shape = input._data.shape
    if dim is None:
        dims = {i for i, n in enumerate(shape) if n == 1}
    else:
        dims = {wrap_dim(d, input.ndim, "squeeze") for d in
                ((dim,) if isinstance(dim, int) else dim)}
        dims = {d for d in dims if shape[d] == 1}
    if not dims:
        return input
    return _apply(reshape_p, (input,), {"shape": tuple(n for i, n in enumerate(shape)
                                                        if i not in dims)})


Tensor.reshape = reshape
Tensor.view = view
Tensor.view_as = view_as
Tensor.reshape_as = reshape_as
Tensor.permute = permute
Tensor.expand = expand
Tensor.expand_as = expand_as
Tensor.broadcast_to = broadcast_to
Tensor.transpose = transpose
Tensor.swapaxes = Tensor.swapdims = transpose
Tensor.t = t
Tensor.T = property(lambda self: permute(self, *reversed(range(self.ndim))))
Tensor.mT = property(lambda self: transpose(self, -2, -1))
Tensor.unsqueeze = unsqueeze
Tensor.squeeze = squeeze
Tensor.flatten = flatten
Tensor.unflatten = unflatten
Tensor.ravel = ravel
Tensor.movedim = Tensor.moveaxis = movedim

from .strided import *  # noqa: E402,F401,F403 - the rest of the movement family
from .join import *  # noqa: E402,F401,F403
from . import strided as _strided, join as _join  # noqa: E402

__all__ += _strided.__all__ + _join.__all__
