"""Padding (``torch.nn.functional.pad``): constant padding is a primitive; reflect,
replicate and circular padding gather rows with ``index`` along each padded dim.

The constant ``pad`` primitive takes one ``(before, after)`` pair per dim; negative
amounts crop. Its VJP is the same primitive with the amounts negated (crop what was
padded, zero-fill what was cropped).
"""
from __future__ import annotations

from ..device import get_backend
from .. import dtypes as _dt
from ..errors import ShapeError
from ..tensor import _wrap
from . import dispatch
from .dispatch import autocast_entry
from . import batching_rules as _vb
from .registry import defop

__all__ = ['pad']

_apply = dispatch.apply


def _pad_kernel(xp, x, pads, value):
    crop = tuple(slice(max(-a, 0), n - max(-b, 0)) for (a, b), n in zip(pads, x.shape))
    x = x[crop]
    widths = tuple((max(a, 0), max(b, 0)) for a, b in pads)
    return xp.pad(x, widths, mode="constant", constant_values=value)


def _pad_shape(s, pads, value):
    return tuple(n + a + b for n, (a, b) in zip(s, pads))


def _neg(pads):
    return tuple((-a, -b) for a, b in pads)


def _pad_check(x, pads, value):
    for d, (n, (a, b)) in enumerate(zip(x._data.shape, pads)):
        if n + a + b < 0:
            raise ShapeError(f"pad: the input size {n} at dimension {d}, plus negative padding "
                             f"{a} and {b}, resulted in a negative output size {n + a + b}")


pad_p = defop(
    "pad", nin=1, params={"pads": (), "value": 0.0}, dtype="same", save=None,
    batch=_vb.pad,
    kernel=_pad_kernel, shape=_pad_shape, check=_pad_check,
    vjp=lambda g, out, x, pads, value: (_apply(pad_p, (g,), {"pads": _neg(pads), "value": 0}),),
    jvp=lambda t, out, x, pads, value: _apply(pad_p, (t[0],), {"pads": pads, "value": 0}))


def _source_rows(mode, n, a, b, xp):
    """Which input row each output row of a dim (size ``n``, padded by ``a``/``b``) reads."""
    i = xp.arange(-a, n + b, dtype=xp.int64)
    if mode == "replicate":
        return xp.clip(i, 0, n - 1)
    if mode == "circular":
        return i % n
    i = xp.abs(i)                          # reflect: mirror at 0 and at n - 1
    return xp.where(i > n - 1, 2 * (n - 1) - i, i)


def _aten_pad(input, pad, mode="constant", value=None):
    """The ATen op PyTorch's ``F.pad`` runs (its autocast policy is that op's)."""
    kind = {"reflect": "reflection_pad", "replicate": "replication_pad"}.get(mode)
    return f"{kind}{len(pad) // 2}d" if kind else "constant_pad_nd"


@autocast_entry(_aten_pad)
def pad(input, pad, mode="constant", value=None):
    """Pad ``input``; ``pad`` = (left, right) for the last dim, then the one before, ...
    Modes: ``"constant"`` (with ``value``), ``"reflect"``, ``"replicate"``, ``"circular"``
    (``torch.nn.functional.pad``).

    Example:
        >>> ember.pad(ember.tensor([1., 2.]), (1, 2))
        tensor([0., 1., 2., 0., 0.])
    """
    pad = tuple(int(p) for p in pad)
    nd = input.ndim
    if len(pad) % 2 or len(pad) // 2 > nd:
        raise ShapeError(f"pad: padding length must be even and at most twice the number of "
                         f"dims ({nd}), got {len(pad)}")
    pairs = [(0, 0)] * nd
    for k in range(len(pad) // 2):
        pairs[nd - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    if mode == "constant":
        return _apply(pad_p, (input,), {"pads": tuple(pairs),
                                        "value": 0.0 if value is None else value})
    if mode not in ("reflect", "replicate", "circular"):
        raise ShapeError(f"pad: unsupported mode {mode!r}; expected 'constant', 'reflect', "
                         f"'replicate' or 'circular'")
    if value:
        raise ShapeError(f"pad: padding mode {mode!r} doesn't take in value argument")
    from .index import index_p
    xp = get_backend(input._device).xp
    r = input
    for d, (a, b) in enumerate(pairs):
        if not (a or b):
            continue
        n = input._data.shape[d]
        if mode == "reflect" and (a >= n or b >= n):
            raise ShapeError(f"pad: padding size should be less than the corresponding input "
                             f"dimension, but got: padding ({a}, {b}) at dimension {d} of "
                             f"input of size {n}")
        if mode == "circular" and (a > n or b > n):
            raise ShapeError(f"pad: padding value causes wrapping around more than once "
                             f"(padding ({a}, {b}) at dimension {d} of size {n})")
        if n == 0:
            raise ShapeError(f"pad: can't pad an empty dimension {d} in {mode} mode")
        rows = _wrap(_source_rows(mode, n, a, b, xp), _dt.int64, input._device)
        r = _apply(index_p, (r, rows), {"dims": (d,)})
    return r
