"""Spatial transformer functionals: ``affine_grid`` and ``grid_sample``.

``grid_sample`` is a composite of Ember ops: grid coordinates are unnormalised to pixel
coordinates (PyTorch's formulas, padding modes applied to the coordinates), and each of the
2**d corner taps is one ``gather`` on the flattened spatial dims (whose VJP is a scatter-add,
giving the gradient to ``input``) times an interpolation weight computed from the grid in
differentiable ops (giving the gradient to ``grid``). Bicubic mode sums 4 x 4 taps with
Keys' weights (A = -0.75), padding each tap's coordinate as ATen does.
"""
from __future__ import annotations

from ...errors import ShapeError
from ...ops.dispatch import autocast_entry
from ...tensor import Tensor

__all__ = ['affine_grid', 'grid_sample']

_MODES = ("bilinear", "nearest", "bicubic")
_CUBIC_A = -0.75
_PADDING = ("zeros", "border", "reflection")


def _base_coords(n, align_corners, like):
    from ...ops.factories import linspace
    c = linspace(-1.0, 1.0, n, dtype=like.dtype, device=like.device)
    return c * ((n - 1) / n) if not align_corners and n > 1 else c * (0.0 if n == 1 else 1.0)


def affine_grid(theta: Tensor, size, align_corners: bool | None = None) -> Tensor:
    """A sampling grid (``(N, H, W, 2)`` or ``(N, D, H, W, 3)``) from affine matrices.

    Args:
        theta: ``(N, 2, 3)`` for 2-D or ``(N, 3, 4)`` for 3-D, floating point.
        size: the target output size ``(N, C, H, W)`` or ``(N, C, D, H, W)``.
        align_corners: as ``grid_sample``'s; ``None`` means False.

    Returns:
        The grid, in ``theta``'s dtype; differentiable with respect to ``theta``.
    """
    import ember
    size = tuple(int(s) for s in size)
    if not theta.dtype.is_floating_point:
        raise TypeError(f"affine_grid: expected a floating point theta, got {theta.dtype}")
    nd = len(size) - 2
    if nd not in (2, 3):
        raise ValueError(f"affine_grid: size must be 4-D (N, C, H, W) or 5-D (N, C, D, H, W), "
                         f"got {size}")
    want = (size[0], nd, nd + 1)
    if tuple(theta.shape) != want:
        raise ShapeError(f"affine_grid: expected theta of shape {want} for size {size}, got "
                         f"{tuple(theta.shape)}")
    if min(size[2:]) <= 0:
        raise ValueError(f"affine_grid: expected a non-zero, positive output size, got {size}")
    spatial = size[2:]
    # PyTorch's base grid is (..., W, H[, D], 1): x varies along the last spatial dim.
    axes = [_base_coords(n, bool(align_corners), theta) for n in reversed(spatial)]
    mesh = ember.meshgrid(*reversed(axes), indexing="ij")      # each (D?, H, W)
    cols = list(reversed(mesh)) + [ember.ones_like(mesh[0])]
    base = ember.stack(cols, dim=-1).reshape(1, -1, nd + 1)
    grid = base.matmul(theta.transpose(1, 2))                # (N, prod(spatial), nd)
    return grid.reshape((size[0],) + spatial + (nd,))


def _unnormalize(coord, n, align_corners):
    if align_corners:
        return (coord + 1) * ((n - 1) / 2)
    return ((coord + 1) * n - 1) / 2


def _reflect(coord, lo2, hi2):
    """Reflect ``coord`` into [lo2 / 2, hi2 / 2] (ATen's ``reflect_coordinates``)."""
    if lo2 == hi2:
        return coord * 0
    mn, span = lo2 / 2, (hi2 - lo2) / 2
    c = (coord - mn).abs()
    flips = (c / span).floor()
    extra = c - flips * span
    even = (flips.remainder(2) == 0)
    import ember
    return ember.where(even, extra + mn, span - extra + mn)


def _source_coord(coord, n, padding_mode, align_corners):
    c = _unnormalize(coord, n, align_corners)
    if padding_mode == "border":
        c = c.clamp(0, n - 1)
    elif padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (n - 1)) if align_corners else _reflect(c, -1, 2 * n - 1)
        c = c.clamp(0, n - 1)
    return c


def _check(input, grid, mode, padding_mode):
    if mode not in _MODES:
        raise ValueError(f"grid_sample: mode must be one of {_MODES}, got {mode!r}")
    if padding_mode not in _PADDING:
        raise ValueError(f"grid_sample: padding_mode must be one of {_PADDING}, got "
                         f"{padding_mode!r}")
    if input.ndim not in (4, 5) or grid.ndim != input.ndim:
        raise ShapeError(f"grid_sample: expected a 4-D input with a 4-D grid or a 5-D input "
                         f"with a 5-D grid, got input {tuple(input.shape)} and grid "
                         f"{tuple(grid.shape)}")
    nd = input.ndim - 2
    if mode == "bicubic" and nd != 2:
        raise ShapeError(f"grid_sample: mode='bicubic' supports only 4-D input, got input "
                         f"{tuple(input.shape)}")
    if grid.shape[0] != input.shape[0] or grid.shape[-1] != nd:
        raise ShapeError(f"grid_sample: grid must be (N, *out, {nd}) with N = input's batch "
                         f"{input.shape[0]}, got input {tuple(input.shape)} and grid "
                         f"{tuple(grid.shape)}")
    if not input.dtype.is_floating_point or grid.dtype != input.dtype:
        raise TypeError(f"grid_sample: input and grid must have the same floating dtype, got "
                        f"{input.dtype} and {grid.dtype}")


def _tap(flat, idx_list, sizes, valid, n, c):
    """``flat[n, c, idx]`` for integer per-dim indices (clamped), zero where not ``valid``."""
    lin = None
    for i, (idx, s) in enumerate(zip(idx_list, sizes)):
        idx = idx.clamp(0, s - 1)
        lin = idx if lin is None else lin * s + idx
    lin = lin.reshape(n, 1, -1).expand(n, c, lin[0].numel())
    vals = flat.gather(2, lin)
    if valid is not None:
        vals = vals * valid.reshape(n, 1, -1).to(vals.dtype)
    return vals


def _cubic_weights(t):
    """Keys' cubic convolution weights (A = -0.75) of the taps at -1, 0, 1, 2 from floor."""
    a = _CUBIC_A
    u = 1 - t
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * u - (a + 3)) * u * u + 1,
            ((a * (u + 1) - 5 * a) * (u + 1) + 8 * a) * (u + 1) - 4 * a]


def _bicubic(flat, grid, sizes, padding_mode, align_corners, n, c):
    """ATen's bicubic grid sampling: padding applied to each of the 4 x 4 tap coordinates."""
    coords = [_unnormalize(grid[..., 1 - i], sizes[i], align_corners) for i in range(2)]
    lo = [ci.floor().detach() for ci in coords]
    weights = [_cubic_weights(ci - l) for ci, l in zip(coords, lo)]
    out = None
    for a in range(4):
        for b in range(4):
            taps, valid = [], None
            for i, j in ((0, a), (1, b)):
                t = lo[i] + (j - 1)
                if padding_mode != "zeros":
                    t = _source_coord_px(t, sizes[i], padding_mode, align_corners)
                t = t.long()
                taps.append(t)
                if padding_mode == "zeros":
                    v = _inside(t, sizes[i])
                    valid = v if valid is None else valid.logical_and(v)
            w = (weights[0][a] * weights[1][b]).reshape(n, 1, -1)
            term = _tap(flat, taps, sizes, valid, n, c) * w
            out = term if out is None else out + term
    return out


def _source_coord_px(c, n, padding_mode, align_corners):
    """Padding of a pixel coordinate (ATen's ``compute_coordinates``)."""
    if padding_mode == "border":
        return c.clamp(0, n - 1)
    c = _reflect(c, 0, 2 * (n - 1)) if align_corners else _reflect(c, -1, 2 * n - 1)
    return c.clamp(0, n - 1)


def _inside(idx, s):
    return (idx >= 0).logical_and(idx <= s - 1)


@autocast_entry("grid_sampler")   # ATen: grid_sampler (CPU autocast: fp32)
def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear",
                padding_mode: str = "zeros", align_corners: bool | None = None) -> Tensor:
    """Sample ``input`` at the normalised locations in ``grid`` (PyTorch's ``grid_sample``).

    Args:
        input: ``(N, C, H, W)`` or ``(N, C, D, H, W)``.
        grid: ``(N, Ho, Wo, 2)`` or ``(N, Do, Ho, Wo, 3)``, (x, y[, z]) in [-1, 1].
        mode: ``'bilinear'`` (trilinear for 5-D), ``'nearest'`` or ``'bicubic'`` (4-D).
        padding_mode: ``'zeros'``, ``'border'`` or ``'reflection'``.
        align_corners: whether -1 and 1 are the centres (True) or the outer edges (False,
            the default) of the corner pixels.

    Returns:
        ``(N, C, *grid.shape[1:-1])``, differentiable with respect to input and grid (the
        gradient to grid is zero for ``'nearest'``).
    """
    _check(input, grid, mode, padding_mode)
    align_corners = bool(align_corners)
    n, c = input.shape[0], input.shape[1]
    sizes = tuple(input.shape[2:])
    out_sp = tuple(grid.shape[1:-1])
    nd = len(sizes)
    flat = input.reshape(n, c, -1)
    # grid's last dim is (x, y[, z]): x indexes the last spatial dim
    coords = [_source_coord(grid[..., nd - 1 - i], sizes[i], padding_mode, align_corners)
              for i in range(nd)]
    if mode == "bicubic":
        return _bicubic(flat, grid, sizes, padding_mode, align_corners, n, c).reshape(
            (n, c) + out_sp)
    zeros = padding_mode == "zeros"
    if mode == "nearest":
        idx = [ci.round().long() for ci in coords]
        valid = None
        if zeros:
            for i, s in zip(idx, sizes):
                v = _inside(i, s)
                valid = v if valid is None else valid.logical_and(v)
        out = _tap(flat, idx, sizes, valid, n, c)
        return out.reshape((n, c) + out_sp)
    lo = [ci.floor().detach() for ci in coords]
    frac = [ci - l for ci, l in zip(coords, lo)]              # weight of the upper tap
    lo = [l.long() for l in lo]
    out = None
    for corner in range(2 ** nd):
        bits = [(corner >> (nd - 1 - i)) & 1 for i in range(nd)]
        idx = [l + b for l, b in zip(lo, bits)]
        w, valid = None, None
        for i, b in enumerate(bits):
            wi = frac[i] if b else 1 - frac[i]
            w = wi if w is None else w * wi
            if zeros:
                v = _inside(idx[i], sizes[i])
                valid = v if valid is None else valid.logical_and(v)
        term = _tap(flat, idx, sizes, valid, n, c) * w.reshape(n, 1, -1)
        out = term if out is None else out + term
    return out.reshape((n, c) + out_sp)
