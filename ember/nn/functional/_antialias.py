"""``interpolate(..., antialias=True)`` for bilinear and bicubic: each spatial dim is
multiplied by a dense (out, in) matrix of normalised filter weights whose support widens
with the downscaling factor (ATen's ``_upsample_bilinear2d_aa`` / ``_upsample_bicubic2d_aa``).
"""
from __future__ import annotations


def _filter(mode):
    if mode == "bilinear":
        return 1.0, lambda x: max(0.0, 1.0 - abs(x))
    a = -0.5                                    # NOTE: ATen's antialiased bicubic uses a = -0.5

    def cubic(x):
        x = abs(x)
        if x < 1.0:
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        if x < 2.0:
            return (((x - 5.0) * x + 8.0) * x - 4.0) * a
        return 0.0
    return 2.0, cubic


def _weights(n_in, n_out, scale, align_corners, mode):
    """Rows of filter weights, one per output position, as nested lists."""
    if align_corners:
        s = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        s = (1.0 / scale) if scale else n_in / n_out
    half, fn = _filter(mode)
    support = half * s if s >= 1.0 else half
    inv = 1.0 / s if s >= 1.0 else 1.0
    rows = []
    for i in range(n_out):
        center = s * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        w = [fn((j + lo - center + 0.5) * inv) for j in range(hi - lo)]
        total = sum(w)
        row = [0.0] * n_in
        for j, v in enumerate(w):
            row[lo + j] = v / total if total else 0.0
        rows.append(row)
    return rows


def antialiased(x, sizes, scales, align_corners, mode):
    """Resample the two spatial dims of (N, C, H, W) ``x`` with antialiasing filters."""
    from ...ops.factories import tensor
    for i in range(2):
        dim = 2 + i
        if x.shape[dim] == sizes[i]:
            continue  # NOTE: ATen's separable antialiased kernel skips a dim of unchanged size
        m = tensor(_weights(x.shape[dim], sizes[i], scales[i], align_corners, mode),
                   dtype=x.dtype, device=x.device)
        x = (x.movedim(dim, -1) @ m.mT).movedim(-1, dim)
    return x

