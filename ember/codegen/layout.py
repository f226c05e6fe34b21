"""Loop layouts: dimensions coalesced, and the class of each input's inner stride.

A generated function is specialised to a *layout class*, not to a shape: the number of
(coalesced) loop dimensions and, per input, whether its innermost stride is 1
(``"c"``: contiguous, the SIMD loop loads a vector), 0 (``"b"``: broadcast, loaded once
per row) or anything else (``"g"``: gathered). Shapes and strides are runtime arguments,
so one compiled kernel serves every shape of its class.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """Coalesced loop ``shape`` and per-input element ``strides`` over it."""
    shape: tuple
    strides: tuple

    @property
    def key(self) -> tuple:
        """The layout class: ``(ndim, inner-stride kinds)``."""
        return len(self.shape), tuple(_kind(s[-1]) for s in self.strides)


def _kind(s: int) -> str:
    return "c" if s == 1 else "b" if s == 0 else "g"


def coalesce(shape, strides) -> Layout:
    """Drop size-1 dims and merge adjacent dims every operand walks as one (C order).

    The output is contiguous, so only the inputs' strides decide.

    Example:
        >>> coalesce((4, 5, 6), [(30, 6, 1), (0, 0, 1)]).shape   # (20, 6)
    """
    dims = [(n, [s[k] for s in strides]) for k, n in enumerate(shape) if n != 1]
    merged: list = []
    for n, ss in dims:
        if merged:
            pn, pss = merged[-1]
            if all(p == s * n for p, s in zip(pss, ss)):
                merged[-1] = (pn * n, ss)
                continue
        merged.append((n, ss))
    if not merged:
        merged = [(1, [0] * len(strides))]
    return Layout(tuple(n for n, _ in merged),
                  tuple(tuple(ss[i] for _, ss in merged) for i in range(len(strides))))


def coalesce_rows(shape, strides, naxes: int):
    """Layout of a reduction: outer dims coalesced, the ``naxes`` inner ones as one dim.

    Returns ``(Layout, needs_copy)``; ``needs_copy[i]`` is True when input i's inner dims
    cannot be walked as one strided dim (the caller makes that input contiguous).
    """
    k = len(shape) - naxes
    inner = 1
    for n in shape[k:]:
        inner *= n
    outer = coalesce(shape[:k], [s[:k] for s in strides]) if k else None
    inner_strides, copy = [], []
    for s in strides:
        st = _inner_stride(shape[k:], s[k:])
        copy.append(st is None)
        inner_strides.append(1 if st is None else st)
    o_shape = outer.shape if outer is not None else ()
    o_strides = outer.strides if outer is not None else ((),) * len(strides)
    if copy and any(copy):   # a copied input is contiguous over the full shape
        o_strides = tuple(_contig_outer(shape, k, o_shape) if c else os
                          for c, os in zip(copy, o_strides))
    return (Layout(o_shape + (inner,), tuple(tuple(os) + (st,) for os, st in
                                               zip(o_strides, inner_strides))), copy)


def _inner_stride(shape, strides):
    """One stride walking ``shape`` with ``strides`` in C order, or None."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if not dims:
        return 1
    step = dims[-1][1]
    size = 1
    for n, s in reversed(dims):
        if s != step * size:
            return None
        size *= n
    return step


def _contig_outer(shape, k, o_shape):
    """Outer strides of a C-contiguous array of ``shape`` in the coalesced outer layout."""
    inner = 1
    for n in shape[k:]:
        inner *= n
    out, acc = [], inner
    for n in reversed(o_shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))
