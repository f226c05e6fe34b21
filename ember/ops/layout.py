"""Memory layouts: the strides a new tensor takes, by PyTorch's rules.

* :func:`like_strides` — a ``*_like(input, memory_format=)`` factory's strides.
  ``preserve_format`` (the default) copies ``input``'s strides when ``input`` is dense and
  non-overlapping (a permutation of a contiguous tensor, such as a transpose or a
  ``channels_last`` image); otherwise it takes the channels-last layout ``input``'s strides
  suggest, else row-major. ``channels_last``/``channels_last_3d`` and ``contiguous_format``
  set a layout.
* :func:`memory_order` — the order of dimensions an elementwise op's output is laid out in:
  PyTorch's ``TensorIterator`` rule, where the first operand whose strides tell two
  dimensions apart decides (so ``x_channels_last + y_contiguous`` is channels-last, and
  ``x.t() + y`` keeps ``x.t()``'s column-major layout). NumPy's ufuncs fall back to
  row-major when operands disagree; the dispatcher uses this order instead.
* :func:`empty_strided_array` — a buffer of the backend seen with given strides.
* :func:`kept_order` / :func:`in_order` / :func:`inverse` — a compiled call's outputs keep the layout eager
  gave them (Inductor's ``keep_output_stride``): the dim order of a dense, not row-major
  result is recorded at capture, and later runs lay the program's output out that way.
"""
from __future__ import annotations

from ..tensor import contiguous_strides

CHANNELS_LAST = {"channels_last": (4, (0, 2, 3, 1)), "channels_last_3d": (5, (0, 2, 3, 4, 1))}


def strides_in_order(shape, order) -> tuple:
    """Dense strides (in elements) of ``shape`` laid out in ``order`` (outermost dim first)."""
    st = [0] * len(shape)
    step = 1
    for d in reversed(order):
        st[d] = step
        step *= shape[d]
    return tuple(st)


def is_dense(shape, strides) -> bool:
    """Whether ``strides`` lay ``shape`` out without gaps or overlaps (any dim order)."""
    dims = sorted((d for d in range(len(shape)) if shape[d] != 1), key=lambda d: strides[d])
    step = 1
    for d in dims:
        if strides[d] != step:
            return False
        step *= shape[d]
    return True


def suggests_channels_last(shape, strides) -> str | None:
    """PyTorch's ``suggest_memory_format``: the channels-last format whose dim order
    ``strides`` follow (``is_channels_last_strides_2d/3d``), or None."""
    rank = len(shape)
    if rank not in (4, 5) or strides[1] == 0:
        return None
    walk = (1, 3, 2, 0) if rank == 4 else (1, 4, 3, 2, 0)
    low = 0
    for d in walk:
        if shape[d] == 0 or strides[d] < low:
            return None
        if d == 0 and low == strides[1]:     # N111: contiguous and channels-last alike
            return None
        low = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return "channels_last" if rank == 4 else "channels_last_3d"


def format_strides(shape, name: str, op: str) -> tuple:
    """Strides of ``shape`` in channels-last format ``name``."""
    rank, order = CHANNELS_LAST[name]
    if len(shape) != rank:
        raise RuntimeError(f"{op}: required rank {rank} tensor to use {name} format, got "
                           f"shape {tuple(shape)}")
    return strides_in_order(shape, order)


def like_strides(input, memory_format=None, op: str = "empty_like") -> tuple | None:
    """Strides (in elements) of a ``*_like(input, memory_format=)`` result, or None where
    they are row-major. Meta tensors keep no layout: None."""
    name = "preserve_format" if memory_format is None else getattr(memory_format, "name", None)
    shape = tuple(input.shape)
    if name in ("contiguous_format", "legacy_contiguous_format"):
        return None
    if name in CHANNELS_LAST:
        st = format_strides(shape, name, op)
    elif name != "preserve_format":
        raise TypeError(f"{op}: memory_format must be ember.preserve_format, "
                        f"contiguous_format, channels_last or channels_last_3d, got "
                        f"{memory_format!r}")
    elif input._device.type == "meta":
        return None
    else:
        st = tuple(input.stride())   # NOTE: exactly, size-1 dims' strides included
        if st == contiguous_strides(shape):
            return None
        if not is_dense(shape, st):
            fmt = suggests_channels_last(shape, st)
            if fmt is None:
                return None
            st = strides_in_order(shape, CHANNELS_LAST[fmt][1])
    return None if st == contiguous_strides(shape) else st


def empty_strided_array(be, shape, strides, np_dtype):
    """An uninitialised array of backend ``be`` with ``shape`` and dense ``strides``."""
    n = 1
    for s in shape:
        n *= s
    flat = be.empty((n,), np_dtype)
    return strided_view(be.xp, flat, shape, strides)


def strided_view(xp, flat, shape, strides):
    """The 1-D contiguous array ``flat`` seen with ``shape`` and dense ``strides``."""
    size = flat.itemsize
    return xp.lib.stride_tricks.as_strided(flat, tuple(shape), tuple(s * size for s in strides))


def memory_order(arrays, ndim: int) -> tuple | None:
    """Dims of an elementwise op's ``ndim``-D output, outermost first, when its operands
    (arrays; other values are scalars) ask for other than row-major; else None.

    PyTorch's ``TensorIterator::reorder_dimensions``: an insertion sort of the dims,
    innermost first, where two dims compare by the first operand whose strides for both
    are non-zero and unequal (equal strides: the larger dim goes outer)."""
    ops = []
    for a in arrays:
        if hasattr(a, "strides") and hasattr(a, "ndim") and a.ndim:
            pad = ndim - a.ndim
            ops.append(((0,) * pad + tuple(a.strides), (1,) * pad + tuple(a.shape)))
    if not ops:
        return None
    shape = [1] * ndim
    for _, sh in ops:
        shape = [max(x, y) for x, y in zip(shape, sh)]
    strides = [tuple(0 if sh[d] == 1 and shape[d] != 1 else st[d] for d in range(ndim))
               for st, sh in ops]

    def swap(d0, d1):      # > 0: d0 (now inner) belongs outside d1
        for st in strides:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))       # innermost first
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    order = tuple(reversed(perm))
    return None if order == tuple(range(ndim)) else order


def kept_order(a) -> tuple | None:
    """The dim order (outermost first) of array ``a`` when it is dense and not row-major
    (a channels-last image, a transpose): what a compiled call records of an output it
    returns (:func:`in_order`); None for row-major, non-dense or zero-size arrays."""
    shape = getattr(a, "shape", None)
    if shape is None or len(shape) < 2 or 0 in shape or a.flags.c_contiguous:
        return None
    item = a.itemsize
    strides = tuple(s // item for s in a.strides)
    if not is_dense(shape, strides):
        return None
    return memory_order([a], len(shape))


def in_order(xp, a, order):
    """Array ``a`` laid out in dim ``order`` (from :func:`kept_order`; None: ``a``)."""
    if order is None or a.ndim != len(order):
        return a
    t = a.transpose(order)
    if t.flags.c_contiguous:
        return a
    return xp.ascontiguousarray(t).transpose(inverse(order))


def inverse(order) -> tuple:
    """The permutation that undoes ``order`` (``a.transpose(order).transpose(inverse(order))
    is a``'s layout)."""
    inv = [0] * len(order)
    for i, d in enumerate(order):
        inv[d] = i
    return tuple(inv)
