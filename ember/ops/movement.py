"""Movement primitives: reshape, permute, expand (zero-copy views where the layout allows)."""
from __future__ import annotations

import math

from ..errors import ShapeError
from ..tensor import Tensor
from . import dispatch
from ._util import as_shape, wrap_dim
from .registry import defop

__all__ = ['reshape', 'view', 'permute', 'expand', 'broadcast_to', 'transpose', 't', 'unsqueeze', 'squeeze']

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
    kernel=lambda xp, x, shape: xp.reshape(x, shape),
    shape=lambda s, shape: shape,
    vjp=lambda g, out, x, shape: (g.reshape(x.shape),), jvp="linear")

permute_p = defop(
    "permute", nin=1, params={"dims": ()}, dtype="same", view=True, save=None,
    kernel=lambda xp, x, dims: xp.transpose(x, dims),
    shape=lambda s, dims: tuple(s[d] for d in dims),
    vjp=lambda g, out, x, dims: (g.permute(_inverse_perm(dims)),), jvp="linear")

expand_p = defop(
    "expand", nin=1, params={"shape": ()}, dtype="same", view=True, save=None,
    kernel=lambda xp, x, shape: xp.broadcast_to(x, shape),
    shape=lambda s, shape: shape,
    vjp=lambda g, out, x, shape: (_sum_to(g, x.shape),), jvp="linear")


def _sum_to(g, shape):
    from .reduce import sum_to
    return sum_to(g, shape)


def _inverse_perm(dims):
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return tuple(inv)


def reshape(input, *shape):
    """``input`` with a new shape; a view when the layout allows, else a copy."""
    shape = _infer_shape(as_shape(shape, "reshape"), input._data.size, "reshape")
    if shape == input._data.shape:
        return input if input._grad_fn is None and not input._requires_grad else \
            _apply(reshape_p, (input,), {"shape": shape})
    return _apply(reshape_p, (input,), {"shape": shape})


def view(input, *shape):
    """Like :func:`reshape` but never copies: raises if the layout does not allow a view."""
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        from .. import dtypes
        return input.view_as_dtype(dtypes.as_dtype(shape[0]))
    shape = _infer_shape(as_shape(shape, "view"), input._data.size, "view")
    r = _apply(reshape_p, (input,), {"shape": shape})
    if input._data.size and r._storage is not input._storage:
        raise ShapeError(
            f"view: size {shape} is not compatible with input tensor's size "
            f"{tuple(input.shape)} and stride {input.stride()} (at least one dimension spans "
            f"across two contiguous subspaces). Use .reshape(...) instead.")
    return r


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
    if out == input._data.shape:
        return input
    return _apply(expand_p, (input,), {"shape": out})


def broadcast_to(input, shape):
    return expand(input, *shape)


def transpose(input, dim0, dim1):
    nd = input.ndim
    if nd == 0:
        return input
    d0, d1 = wrap_dim(dim0, nd, "transpose"), wrap_dim(dim1, nd, "transpose")
    dims = list(range(nd))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return _apply(permute_p, (input,), {"dims": tuple(dims)})


def t(input):
    if input.ndim > 2:
        raise ShapeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                         f"{input.ndim}D")
    return transpose(input, 0, 1) if input.ndim == 2 else input


Tensor.reshape = reshape
Tensor.view = view
Tensor.permute = permute
Tensor.expand = expand
Tensor.broadcast_to = broadcast_to
Tensor.transpose = transpose
Tensor.t = t
Tensor.T = property(lambda self: permute(self, *reversed(range(self.ndim))))
Tensor.mT = property(lambda self: transpose(self, -2, -1))


def unsqueeze(input, dim):
    """Insert a size-1 dim at ``dim`` (a view)."""
    nd = input.ndim + 1
    d = wrap_dim(dim, nd, "unsqueeze")
    s = list(input._data.shape)
    s.insert(d, 1)
    return _apply(reshape_p, (input,), {"shape": tuple(s)})


def squeeze(input, dim=None):
    """Remove size-1 dims (all, or those in ``dim``) (a view)."""
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


Tensor.unsqueeze = unsqueeze
Tensor.squeeze = squeeze
