"""Fractional max pooling (``F.fractional_max_pool2d/3d`` and their ``_with_indices``
forms; Graham, *Fractional Max-Pooling*, 2014), PyTorch's pseudo-random windows.

Each (sample, channel) plane draws one number ``u`` in [0, 1) per pooled dim
(``_random_samples``, shape ``(N, C, 2)`` or ``(N, C, 3)``; drawn with ``ember.rand`` when
not given) and the window starts are PyTorch's sequence
``start[i] = int((i + u) * a) - int(u * a)``, ``a = (in - k) / (out - 1)``, with the
last window flush with the end (``start[out-1] = in - k``), computed in the input's
floating type as PyTorch's CPU kernel does, so equal ``_random_samples`` give PyTorch's
windows. Each pooled dim is gathered (``take_along_dim``) and reduced with ``max`` in
turn, innermost first (so ties resolve to the first maximum in row-major order, as in
PyTorch, and no ``kH * kW`` window tensor is built), and gradients flow as for any
composite. The window starts are read on
the host from ``_random_samples`` (a graph break under ``ember.compile``).
"""
from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from ...tensor import Tensor
from ...ops.dispatch import autocast_entry

__all__ = ['fractional_max_pool2d', 'fractional_max_pool3d',
           'fractional_max_pool2d_with_indices', 'fractional_max_pool3d_with_indices']


def _ntuple(v, nd, name, op):
    t = (v,) * nd if isinstance(v, (int, float)) else tuple(v)
    if len(t) != nd:
        raise ValueError(f"{op}: {name} must be a number or a tuple of {nd} numbers, got {v!r}")
    return t


def _starts(u, size, out, k, ftype):
    """PyTorch's ``generate_intervals`` for every plane at once: (P, out) int64 starts."""
    u = u.astype(ftype)
    seq = np.zeros(u.shape + (out,), dtype=np.int64)
    if out > 1:
        alpha = ftype(size - k) / ftype(out - 1)
        i = np.arange(out, dtype=ftype)
        seq = ((i + u[:, None]) * alpha).astype(np.int64) - (u * alpha).astype(np.int64)[:, None]
    if out > 0:
        seq[:, out - 1] = size - k
    return seq


def _pool_stages(x, starts, ks, outs):
    """Max over each window, one dim at a time from the last: (values, args per stage).

    Reducing the innermost dim first and the outermost last picks, among tied maxima, the
    first in row-major order (smallest ``h``, then smallest ``w``), as PyTorch's loops do.
    """
    from ...ops.factories import tensor
    from ...ops.sort import take_along_dim
    nd, args = len(ks), [None] * len(ks)
    for d in reversed(range(nd)):
        pos = starts[d][:, :, None] + np.arange(ks[d])[None, None, :]   # (P, out_d, k_d)
        shape = [pos.shape[0]] + [1] * nd
        shape[1 + d] = outs[d] * ks[d]
        idx = tensor(pos.reshape(shape), device=x.device)
        g = take_along_dim(x, idx, dim=1 + d)
        g = g.reshape(*g.shape[:1 + d], outs[d], ks[d], *g.shape[2 + d:])
        x, args[d] = g.max(dim=2 + d)
    return x, args


def _flat_indices(starts, args, sizes):
    """Flat input index of each maximum, from the per-stage window offsets (NumPy)."""
    nd = len(sizes)
    p = starts[0].shape[0]
    outs = args[0].shape[1:]
    grid = np.indices((p,) + tuple(outs), sparse=True)
    flat, chosen = 0, []
    for d in range(nd):
        a = args[d].cpu().numpy()
        # NOTE: stage d's args are indexed by the positions already chosen in dims < d
        a = a[(grid[0],) + tuple(chosen) + tuple(grid[1 + d:])]
        pos = starts[d][grid[0], grid[1 + d]] + a
        chosen.append(pos)
        flat = flat * sizes[d] + pos
    return flat


def _fractional(input, kernel_size, output_size, output_ratio, return_indices,
                _random_samples, nd):
    from ...ops.factories import tensor
    from ...random import rand
    op = f"fractional_max_pool{nd}d"
    if not isinstance(input, Tensor) or input.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{op}: expected a {nd + 1}-D (unbatched) or {nd + 2}-D input, got "
                         f"shape {tuple(getattr(input, 'shape', ()))}")
    if not input.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point input, got {input.dtype}")
    ks = tuple(int(k) for k in _ntuple(kernel_size, nd, "kernel_size", op))
    sizes = tuple(input.shape[-nd:])
    if output_size is None:
        if output_ratio is None:
            raise ValueError(f"{op} requires specifying either an output_size or an "
                             f"output_ratio")
        ratio = _ntuple(output_ratio, nd, "output_ratio", op)
        output_size = tuple(int(s * r) for s, r in zip(sizes, ratio))
    outs = tuple(int(o) for o in _ntuple(output_size, nd, "output_size", op))
    # NOTE: PyTorch's bound: output + kernel - 1 <= input in 2-D, < input in 3-D.
    bound, rel = (0, "<=") if nd == 2 else (1, "<")
    for s, o, k in zip(sizes, outs, ks):
        if o + k - 1 > s - bound:
            raise ShapeError(f"{op}: kernel_size {ks} with output_size {outs} is too large "
                             f"for input of spatial size {sizes} (need output + kernel - 1 "
                             f"{rel} input in each dim)")
    x = input.unsqueeze(0) if input.ndim == nd + 1 else input
    n, c = x.shape[0], x.shape[1]
    if _random_samples is None:
        _random_samples = rand(n, c, nd, dtype=input.dtype, device=input.device)
    if tuple(_random_samples.shape) != (n, c, nd):
        raise ShapeError(f"{op}: expected _random_samples of shape {(n, c, nd)} for input of "
                         f"shape {tuple(input.shape)}, got {tuple(_random_samples.shape)}")
    ftype = np.float64 if input.dtype.itemsize == 8 else np.float32
    u = np.asarray(_random_samples.detach().cpu().numpy(), dtype=np.float64).reshape(n * c, nd)
    # NOTE: 2-D uses samples (W, H) in that order; 3-D uses (T, H, W) — PyTorch's kernels.
    order = (1, 0) if nd == 2 else (0, 1, 2)
    starts = [_starts(u[:, order[d]], sizes[d], outs[d], ks[d], ftype) for d in range(nd)]
    vals, args = _pool_stages(x.reshape(n * c, *sizes), starts, ks, outs)
    unb = input.ndim == nd + 1
    out = vals.reshape(n, c, *outs)
    out = out.squeeze(0) if unb else out
    if not return_indices:
        return out
    ind = tensor(_flat_indices(starts, args, sizes), device=x.device).reshape(n, c, *outs)
    return out, (ind.squeeze(0) if unb else ind)


@autocast_entry("fractional_max_pool2d")
def fractional_max_pool2d(input: Tensor, kernel_size, output_size=None, output_ratio=None,
                          return_indices: bool = False, _random_samples: Tensor | None = None):
    """2-D fractional max pooling (``F.fractional_max_pool2d``).

    Args:
        input: ``(N, C, H, W)`` or unbatched ``(C, H, W)``, floating point.
        kernel_size: window size, an int or ``(kH, kW)``.
        output_size: ``(oH, oW)`` (or an int); or give ``output_ratio`` instead.
        output_ratio: fractions of the input size, each in (0, 1).
        return_indices: also return each maximum's flat ``H * W`` index.
        _random_samples: ``(N, C, 2)`` numbers in [0, 1) fixing the windows.

    Example:
        >>> x = ember.randn(1, 1, 8, 8)
        >>> ember.nn.functional.fractional_max_pool2d(x, 2, output_size=5).shape
        ember.Size([1, 1, 5, 5])
    """
    return _fractional(input, kernel_size, output_size, output_ratio, return_indices,
                       _random_samples, 2)


@autocast_entry("fractional_max_pool3d")
def fractional_max_pool3d(input: Tensor, kernel_size, output_size=None, output_ratio=None,
                          return_indices: bool = False, _random_samples: Tensor | None = None):
    """3-D fractional max pooling (``F.fractional_max_pool3d``); as
    :func:`fractional_max_pool2d` with ``(N, C, T, H, W)`` input and ``(N, C, 3)`` samples."""
    return _fractional(input, kernel_size, output_size, output_ratio, return_indices,
                       _random_samples, 3)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices: bool = False, _random_samples=None):
    """``fractional_max_pool2d(..., return_indices=True)``: (values, flat indices)."""
    return fractional_max_pool2d(input, kernel_size, output_size, output_ratio, True,
                                 _random_samples)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices: bool = False, _random_samples=None):
    """``fractional_max_pool3d(..., return_indices=True)``: (values, flat indices)."""
    return fractional_max_pool3d(input, kernel_size, output_size, output_ratio, True,
                                 _random_samples)
