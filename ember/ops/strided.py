"""Strided geometry: ``as_strided``, ``as_strided_scatter`` and ``diagonal``.

Both primitives read their geometry (``size``, ``stride``, ``storage_offset``, in
elements) against the input's C-contiguous flattening, which makes them pure functions
of the input's values (what tracing and VJPs need). :func:`as_strided` translates
PyTorch's storage-relative arguments into that form. ``as_strided_scatter`` is the
out-of-place write that gradients of views and in-place writes through views
(``y[0] = z``, ``y[:, 1].mul_(2)``) are built on.
"""
from __future__ import annotations

import math

import numpy as np

from ..autograd.grad_mode import state
from ..device import get_backend
from ..errors import EmberIndexError, ShapeError
from ..tensor import Tensor, _wrap, contiguous_strides
from .. import dtypes as _dt
from . import dispatch
from ._util import as_shape, wrap_dim
from . import batching_rules as _vb
from .registry import defop

__all__ = ['as_strided', 'as_strided_scatter', 'slice_scatter', 'diagonal', 'zero_base']

_apply = dispatch.apply




def contiguous_geometry(shape, slices) -> tuple:
    """``(size, stride, offset)`` of ``x[slices]`` within a C-contiguous ``x`` of ``shape``."""
    cs = contiguous_strides(shape)
    size = tuple(len(range(a, b, s)) for a, b, s in slices)
    stride = tuple(c * s for c, (a, b, s) in zip(cs, slices))
    off = sum(c * a for c, (a, b, s) in zip(cs, slices)) if all(size) else 0
    return size, stride, off


def overlaps(size, stride) -> bool:
    """Whether two different indices of the geometry reach the same element."""
    dims = sorted((s, n) for n, s in zip(size, stride) if n > 1)
    reach = 0
    for s, n in dims:
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


def _check_geometry(op, numel, size, stride, storage_offset):
    if len(size) != len(stride):
        raise ShapeError(f"{op}: mismatch in length of strides ({len(stride)}) and shape "
                         f"({len(size)})")
    if any(s < 0 for s in stride) or any(n < 0 for n in size) or storage_offset < 0:
        raise ShapeError(f"{op}: negative sizes, strides or offsets are not supported, got "
                         f"size={size}, stride={stride}, storage_offset={storage_offset}")
    if math.prod(size):
        last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= numel:
            raise ShapeError(f"{op}: setStorage: sizes {list(size)}, strides {list(stride)}, "
                             f"storage offset {storage_offset} reach element {last}, but the "
                             f"input has only {numel} elements")


def _view_kernel(xp, flat, size, stride, storage_offset):
    isz = flat.dtype.itemsize
    return xp.lib.stride_tricks.as_strided(flat[storage_offset:], size,
                                           tuple(s * isz for s in stride))


def _as_strided_kernel(xp, x, size, stride, storage_offset):
    # NOTE: a view of a C-contiguous x (else of a compact copy: reshape(-1) alone may keep
    # odd strides, e.g. the zero strides of an expanded array).
    return _view_kernel(xp, xp.ascontiguousarray(x).reshape(-1), size, stride, storage_offset)


def zero_base(shape, like):
    """The zeros a view's gradient is scattered into: in eager mode a broadcast 0-d zero
    (``as_strided_scatter``'s kernel then allocates the result zeroed, with no full-size
    copy of a zero tensor first); under a dispatch mode (tracers, vmap) a full-size zeros
    tensor, the form the compiled graph's ``scatter_stack`` pass recognises."""
    from .factories import zeros
    if state.modes or not shape:
        return zeros(shape, dtype=like.dtype, device=like.device)
    return zeros((), dtype=like.dtype, device=like.device).expand(shape)


def _as_strided_vjp(g, out, x, size, stride, storage_offset):
    from .factories import zeros
    geo = {"size": size, "stride": stride, "storage_offset": storage_offset}
    if not overlaps(size, stride):
        return (_apply(as_strided_scatter_p, (zero_base(x.shape, g), g), geo),)
    z = zeros(x.shape, dtype=g.dtype, device=g.device)
    # Elements reached several times collect the sum of their gradients.
    from .index import index_put_p
    ids = _apply(as_strided_p, (_arange(math.prod(x.shape), g.device),), geo)
    flat = _apply(index_put_p, (z.reshape(-1), g.reshape(-1), ids.reshape(-1)),
                  {"dims": (0,), "accumulate": True})
    return (flat.reshape(x.shape),)


as_strided_p = defop(
    "as_strided", nin=1, params={"size": (), "stride": (), "storage_offset": 0},
    batch=_vb.as_strided,
    dtype="same", view="maybe", save=None, kernel=_as_strided_kernel,
    shape=lambda s, size, stride, storage_offset: size,
    check=lambda x, size, stride, storage_offset: _check_geometry(
        "as_strided", x._data.size, size, stride, storage_offset),
    vjp=_as_strided_vjp, jvp="linear")


def _scatter_kernel(xp, base, src, size, stride, storage_offset):
    if base.size > 1 and not any(base.strides):
        # A broadcast scalar (the eager slice gradient's zeros, see zero_base): a fresh
        # buffer of that value, no pass reading a full-size base first.
        v = base[(0,) * base.ndim].item()       # a host scalar (CuPy's 0-d arrays too)
        zero = v == 0 and math.copysign(1.0, v.real) > 0 and math.copysign(1.0, v.imag) > 0
        out = xp.zeros(base.shape, base.dtype) if zero else xp.full(base.shape, v, base.dtype)
    else:
        out = xp.array(base, copy=True, order="C")
    if math.prod(size):
        _view_kernel(xp, out.reshape(-1), size, stride, storage_offset)[...] = src
    return out


def _scatter_check(base, src, size, stride, storage_offset):
    _check_geometry("as_strided_scatter", base._data.size, size, stride, storage_offset)
    if tuple(src._data.shape) != tuple(size):
        raise ShapeError(f"as_strided_scatter: expected src to have a size equal to the slice "
                         f"of self. src size = {list(src.shape)}, slice size = {list(size)}")
    if overlaps(size, stride):
        raise ShapeError("as_strided_scatter: the geometry reaches some elements more than "
                         "once; writes would be ambiguous")


as_strided_scatter_p = defop(
    "as_strided_scatter", nin=2, params={"size": (), "stride": (), "storage_offset": 0},
    batch=_vb.as_strided_scatter,
    dtype=lambda base, src, **p: (base._dtype, base._dtype), save=None,
    kernel=_scatter_kernel, check=_scatter_check,
    shape=lambda b, s, size, stride, storage_offset: b,
    vjp=(lambda g, out, base, src, **p: _apply(
            as_strided_scatter_p, (g, _zeros(src.shape, g)), p),
         lambda g, out, base, src, **p: _apply(as_strided_p, (g,), p)),
    jvp=lambda t, out, base, src, **p: _apply(as_strided_scatter_p, (t[0], t[1]), p))


def _zeros(shape, like):
    from .factories import zeros
    return zeros(shape, dtype=like.dtype, device=like.device)


def _arange(n, dev) -> Tensor:
    xp = get_backend(dev).xp
    return _wrap(xp.arange(n, dtype=xp.int64), _dt.int64, dev)


# ------------------------------------------------------------------ public functions
def _fits(t: Tensor, size, stride, offset) -> bool:
    if not t.is_contiguous():
        return False
    rel = offset - t.storage_offset()
    if not math.prod(size):
        return rel >= 0
    return rel >= 0 and rel + sum((n - 1) * s for n, s in zip(size, stride)) < t._data.size


def strided_view(input, size, stride, storage_offset):
    """``as_strided`` over ``input`` or, if it is a non-contiguous view, over its base; None
    when neither holds the requested elements contiguously."""
    b = input._base
    for t in (input, b):
        if t is None or not _fits(t, size, stride, storage_offset):
            continue
        if t is b and (b._requires_grad != input._requires_grad or
                       bool(b._fw) != bool(input._fw)):
            continue  # a detached alias or a dual view: the base has other autograd state
        return _apply(as_strided_p, (t,), {"size": size, "stride": stride,
                                          "storage_offset": storage_offset - t.storage_offset()})
    return None


def as_strided(input, size, stride, storage_offset=None):
    """A view with the given sizes and strides (in elements) into ``input``'s storage
    (``torch.as_strided``).

    Example:
        >>> ember.arange(9.).as_strided((2, 2), (3, 1), 1)
        tensor([[1., 2.],
                [4., 5.]])
    """
    size, stride = as_shape((size,), "as_strided"), as_shape((stride,), "as_strided")
    off = input.storage_offset() if storage_offset is None else int(storage_offset)
    if len(size) != len(stride):
        raise ShapeError(f"as_strided: mismatch in length of strides ({len(stride)}) and shape "
                         f"({len(size)})")
    r = strided_view(input, size, stride, off)
    if r is None:
        raise ShapeError(
            f"as_strided: size {list(size)}, stride {list(stride)}, storage_offset {off} reach "
            f"outside the elements of the input (shape {list(input.shape)}, stride "
            f"{list(input.stride())}, storage_offset {input.storage_offset()}) and of its "
            f"contiguous base; call .contiguous() first")
    return r


def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """A copy of ``input`` with ``src`` written at ``as_strided(size, stride, offset)``
    (offsets relative to a contiguous ``input``) (``torch.as_strided_scatter``)."""
    size, stride = as_shape((size,), "as_strided_scatter"), as_shape((stride,), "as_strided")
    return _apply(as_strided_scatter_p, (input, src), {
        "size": size, "stride": stride, "storage_offset": int(storage_offset or 0)})


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """A copy of ``input`` with ``src`` written at ``input[..., start:end:step, ...]``."""
    from .movement import norm_slice
    d = wrap_dim(dim, input.ndim, "slice_scatter")
    sl = [(0, n, 1) for n in input.shape]
    sl[d] = norm_slice(slice(start, end, step), input.shape[d], d)
    size, stride, off = contiguous_geometry(tuple(input.shape), sl)
    return _apply(as_strided_scatter_p, (input, src),
                  {"size": size, "stride": stride, "storage_offset": off})


def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal of the ``dim1``/``dim2`` planes as the last dim (a view) (``torch.diagonal``).

    Example:
        >>> ember.tensor([[1, 2], [3, 4]]).diagonal()
        tensor([1, 4])
    """
    nd = input.ndim
    d1, d2 = wrap_dim(dim1, nd, "diagonal"), wrap_dim(dim2, nd, "diagonal")
    if d1 == d2:
        raise ShapeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    shape, st = input._data.shape, input.stride()
    n1, n2 = shape[d1], shape[d2]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    rest = [d for d in range(nd) if d not in (d1, d2)]
    size = tuple(shape[d] for d in rest) + (length,)
    stride = tuple(st[d] for d in rest) + (st[d1] + st[d2],)
    start = (offset * st[d2] if offset >= 0 else -offset * st[d1]) if length else 0
    r = strided_view(input, size, stride, input.storage_offset() + start)
    if r is None:  # a non-contiguous tensor without a contiguous base: read a copy
        c = input.contiguous()
        cs = c.stride()
        stride = tuple(cs[d] for d in rest) + (cs[d1] + cs[d2],)
        start = (offset * cs[d2] if offset >= 0 else -offset * cs[d1]) if length else 0
        r = _apply(as_strided_p, (c,), {"size": size, "stride": stride, "storage_offset": start})
    return r


# ------------------------------------------------------------------ views inside their base
def view_geometry(view: Tensor, base: Tensor):
    """``(size, stride, offset)`` of ``view`` inside ``base``'s C-order flattening, or an int64
    array of base flat indices per view element when ``base`` is not C-contiguous."""
    size, stride = tuple(view._data.shape), view.stride()
    if base.is_contiguous():
        off = view.storage_offset() - base.storage_offset() if view._data.size else 0
        return size, stride, off
    pos_b = _positions(base._data.shape, base.stride(), base.storage_offset()).reshape(-1)
    pos_v = _positions(size, stride, view.storage_offset()).reshape(-1)
    order = np.argsort(pos_b, kind="stable")
    k = np.searchsorted(pos_b[order], pos_v)
    k = np.minimum(k, max(pos_b.size - 1, 0))
    if pos_v.size and (pos_b.size == 0 or (pos_b[order][k] != pos_v).any()):
        raise EmberIndexError("in-place write through a view that reaches memory outside its "
                              "base tensor is not supported")
    return order[k].reshape(size)


def _positions(shape, stride, offset):
    pos = np.full(shape, offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(shape, stride)):
        ax = [1] * len(shape)
        ax[d] = n
        pos = pos + (np.arange(n, dtype=np.int64) * s).reshape(ax)
    return pos


Tensor.as_strided = as_strided
Tensor.as_strided_scatter = as_strided_scatter
Tensor.slice_scatter = slice_scatter
Tensor.diagonal = diagonal
