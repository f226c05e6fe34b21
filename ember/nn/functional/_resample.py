"""Resampling functionals: ``interpolate`` (nearest, nearest-exact, (bi/tri)linear, bicubic, area) and
``pixel_shuffle`` / ``pixel_unshuffle``.

Interpolation is separable: each spatial dim is resampled in turn by an index gather
(``index_select``, whose VJP is a scatter-add) and, for the linear modes, a weighted sum of the
two neighbours. Source coordinates follow PyTorch's formulas (computed in the input's float
precision), so results match ``torch.nn.functional.interpolate``.
"""
from __future__ import annotations

import math

from ...errors import ShapeError
from ...tensor import Tensor

__all__ = ['interpolate', 'upsample', 'pixel_shuffle', 'pixel_unshuffle']

_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}
_MODES = ("nearest", "nearest-exact", "area", "bicubic") + tuple(_LINEAR)
_CUBIC_A = -0.75


def _coord_dtype(x):
    from ... import dtypes
    return x.dtype if x.dtype in (dtypes.float32, dtypes.float64) else dtypes.float32


def _out_sizes(x, size, scale_factor, nd):
    """(output sizes, per-dim scale factor given by the user or None)."""
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: exactly one of size or scale_factor should be defined")
    if size is not None:
        sizes = (size,) * nd if isinstance(size, int) else tuple(int(s) for s in size)
        if len(sizes) != nd:
            raise ValueError(f"interpolate: input with spatial shape {tuple(x.shape[2:])} "
                             f"needs {nd} sizes, got size={size}")
        return sizes, (None,) * nd
    sf = (float(scale_factor),) * nd if isinstance(scale_factor, (int, float)) else \
        tuple(float(s) for s in scale_factor)
    if len(sf) != nd:
        raise ValueError(f"interpolate: input with spatial shape {tuple(x.shape[2:])} needs "
                         f"{nd} scale factors, got scale_factor={scale_factor}")
    return tuple(math.floor(x.shape[2 + i] * sf[i]) for i in range(nd)), sf


def _nearest_index(n_in, n_out, scale, exact, like, nd):
    from ... import dtypes
    from ...ops.factories import arange
    if not exact and nd == 2 and n_out in (n_in, 2 * n_in):
        # NOTE: ATen's 2-D nearest kernel (nearest_idx) ignores scale_factor when the size is
        # kept or exactly doubled; its 1-D and 3-D kernels do not take that shortcut.
        return arange(n_out, device=like.device) // (n_out // n_in)
    s = (1.0 / scale) if scale else n_in / n_out
    # NOTE: PyTorch computes nearest source indices in float32 whatever the input dtype
    dst = arange(n_out, dtype=dtypes.float32, device=like.device)
    src = ((dst + 0.5) * s if exact else dst * s).floor()
    return src.long().clamp(max=n_in - 1)


def _linear_index(n_in, n_out, scale, align_corners, like):
    """(i0, i1, w0, w1) for one dim: out = w0 * x[i0] + w1 * x[i1]."""
    from ...ops.factories import arange
    dst = arange(n_out, dtype=_coord_dtype(like), device=like.device)
    if align_corners:
        src = dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        s = (1.0 / scale) if scale else n_in / n_out
        src = ((dst + 0.5) * s - 0.5).clamp(min=0.0)
    i0 = src.floor().long().clamp(max=n_in - 1)
    i1 = (i0 + 1).clamp(max=n_in - 1)
    w1 = (src - i0.to(src.dtype)).clamp(0.0, 1.0).to(like.dtype)
    return i0, i1, 1.0 - w1, w1


def _cubic_taps(n_in, n_out, scale, align_corners, like):
    """Four (index, weight) taps per output position along one dim, as ATen's
    ``upsample_bicubic2d``: Keys' kernel (A = -0.75) at the unclamped source coordinate, tap
    indices clamped to the border."""
    from ...ops.factories import arange
    dst = arange(n_out, dtype=_coord_dtype(like), device=like.device)
    if align_corners:
        src = dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        s = (1.0 / scale) if scale else n_in / n_out
        src = (dst + 0.5) * s - 0.5
    i0 = src.floor()
    t = src - i0
    a = _CUBIC_A
    near = [t, 1.0 - t]                                # distances to taps 1 and 2
    w = [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
         ((a + 2) * near[0] - (a + 3)) * near[0] * near[0] + 1,
         ((a + 2) * near[1] - (a + 3)) * near[1] * near[1] + 1,
         ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]
    i0 = i0.long()
    return [((i0 + j - 1).clamp(0, n_in - 1), w[j].to(like.dtype)) for j in range(4)]


def _bicubic(x, sizes, scales, align_corners):
    for i in range(2):
        dim, view = 2 + i, (sizes[i],) + (1,) * (1 - i)
        taps = _cubic_taps(x.shape[dim], sizes[i], scales[i], align_corners, x)
        out = None
        for idx, w in taps:
            term = x.index_select(dim, idx) * w.reshape(view)
            out = term if out is None else out + term
        x = out
    return x


def _check(input, mode, align_corners, nd):
    if not isinstance(input, Tensor) or input.ndim < 3 or input.ndim > 5:
        raise ShapeError(f"interpolate: expected a 3-D, 4-D or 5-D input (N, C, *spatial), got "
                         f"{tuple(getattr(input, 'shape', ()))}")
    if mode not in _MODES:
        raise ValueError(f"interpolate: mode must be one of {', '.join(_MODES)}, got {mode!r}")
    if mode == "bicubic" and nd != 2:
        raise ShapeError(f"interpolate: mode='bicubic' expects a 4-D input, got shape "
                         f"{tuple(input.shape)}")
    if mode in _LINEAR and _LINEAR[mode] != nd:
        raise ShapeError(f"interpolate: mode={mode!r} expects a {_LINEAR[mode] + 2}-D input, got "
                         f"shape {tuple(input.shape)}")
    if align_corners is not None and mode not in _LINEAR and mode != "bicubic":
        raise ValueError("interpolate: align_corners option can only be set with the "
                         "interpolating modes: linear | bilinear | bicubic | trilinear")
    if not input.dtype.is_floating_point and mode != "nearest":
        raise TypeError(f"interpolate: mode={mode!r} needs a floating point input, got "
                        f"{input.dtype.name}")


def _area3d(x, sizes):
    """Adaptive average pooling of (N, C, D, H, W) to ``sizes``, one dim at a time."""
    from ...ops.pool import _pool_matrix
    if not x.dtype.is_floating_point:
        raise TypeError(f"interpolate: mode='area' needs a floating point input, got "
                        f"{x.dtype.name}")
    for i, o in enumerate(sizes):
        dim = 2 + i
        x = (x.movedim(dim, -1) @ _pool_matrix(x.shape[dim], o, x).mT).movedim(-1, dim)
    return x


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dims of ``(N, C, *spatial)`` ``input`` to ``size`` or by ``scale_factor``.

    Example:
        >>> F.interpolate(ember.ones(1, 1, 2, 2), scale_factor=2, mode="bilinear").shape
        ember.Size([1, 1, 4, 4])
    """
    nd = getattr(input, "ndim", 0) - 2
    _check(input, mode, align_corners, nd)
    if antialias and mode not in ("bilinear", "bicubic"):
        raise ValueError(f"interpolate: anti-alias option is restricted to bilinear and "
                         f"bicubic modes and requires a 4-D tensor as input, got "
                         f"mode={mode!r}")
    sizes, scales = _out_sizes(input, size, scale_factor, nd)
    if min(sizes) < 1:
        raise ShapeError(f"interpolate: output size {sizes} must be positive (input shape "
                         f"{tuple(input.shape)})")
    if recompute_scale_factor:
        if size is not None:
            raise ValueError(f"interpolate: recompute_scale_factor is not meaningful with an "
                             f"explicit size (size={size!r}); pass scale_factor instead")
        scales = (None,) * nd
    if mode == "area":
        from ...ops import pool
        if nd == 3:
            return _area3d(input, sizes)
        fn = pool.adaptive_avg_pool1d if nd == 1 else pool.adaptive_avg_pool2d
        return fn(input, sizes if nd > 1 else sizes[0])
    if antialias:
        from ._antialias import antialiased
        return antialiased(input, sizes, scales, bool(align_corners), mode)
    if mode == "bicubic":
        return _bicubic(input, sizes, scales, bool(align_corners))
    x = input
    for i in range(nd):
        n_in, n_out, dim = x.shape[2 + i], sizes[i], 2 + i
        if mode in _LINEAR:
            if n_in == n_out:
                continue  # NOTE: ATen's linear kernels copy a dim whose size is unchanged
            i0, i1, w0, w1 = _linear_index(n_in, n_out, scales[i], bool(align_corners), x)
            view = (n_out,) + (1,) * (nd - 1 - i)
            x = x.index_select(dim, i0) * w0.reshape(view) + \
                x.index_select(dim, i1) * w1.reshape(view)
        elif n_in != n_out or scales[i] is not None:
            x = x.index_select(dim, _nearest_index(n_in, n_out, scales[i],
                                                   mode == "nearest-exact", x, nd))
    return x


def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    """Deprecated alias of :func:`interpolate` (kept for ported code)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C·r², H, W) -> (*, C, H·r, W·r).

    Example:
        >>> F.pixel_shuffle(ember.ones(1, 8, 2, 3), 2).shape
        ember.Size([1, 2, 4, 6])
    """
    r = int(upscale_factor)
    if input.ndim < 3 or r < 1 or input.shape[-3] % (r * r):
        raise ShapeError(f"pixel_shuffle: expected (*, C * {r}^2, H, W) input, got shape "
                         f"{tuple(input.shape)}")
    *lead, c, h, w = input.shape
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    k = len(lead)
    x = x.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H·r, W·r) -> (*, C·r², H, W), the inverse of :func:`pixel_shuffle`."""
    r = int(downscale_factor)
    if input.ndim < 3 or r < 1 or input.shape[-1] % r or input.shape[-2] % r:
        raise ShapeError(f"pixel_unshuffle: expected (*, C, H, W) input with H and W divisible "
                         f"by {r}, got shape {tuple(input.shape)}")
    *lead, c, h, w = input.shape
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    k = len(lead)
    x = x.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)
