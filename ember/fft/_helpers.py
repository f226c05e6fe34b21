"""``fftfreq``/``rfftfreq`` (sample frequencies) and ``fftshift``/``ifftshift`` (rolls)."""
from __future__ import annotations

from .. import dtypes as _dt
from ..ops.factories import arange


def _freq_dtype(dtype, op):
    dtype = _dt.get_default_dtype() if dtype is None else _dt.as_dtype(dtype)
    if not dtype.is_floating_point:
        raise TypeError(f"{op}: expected a floating dtype, got {dtype.name}")
    return dtype


def fftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False):
    """The DFT sample frequencies ``[0, 1, ..., n//2 - 1 (or (n-1)//2), -n//2, ..., -1] /
    (d * n)`` (``torch.fft.fftfreq``).

    Example:
        >>> ember.fft.fftfreq(4)          # tensor([ 0.0000,  0.2500, -0.5000, -0.2500])
    """
    dtype = _freq_dtype(dtype, "fftfreq")
    n = int(n)
    k = arange(n, dtype=_dt.int64, device=device)
    k = (k - n * (k >= (n + 1) // 2).long()).to(dtype)
    r = k * (1.0 / (d * n)) if n else k
    return r.requires_grad_(requires_grad)


def rfftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False):
    """The one-sided sample frequencies ``[0, 1, ..., n//2] / (d * n)``
    (``torch.fft.rfftfreq``).

    Example:
        >>> ember.fft.rfftfreq(4)         # tensor([0.0000, 0.2500, 0.5000])
    """
    dtype = _freq_dtype(dtype, "rfftfreq")
    n = int(n)
    r = arange(n // 2 + 1, dtype=dtype, device=device) * (1.0 / (d * n))
    return r.requires_grad_(requires_grad)


def _shift(input, dim, op, inverse):
    dims = list(range(input.ndim)) if dim is None else (
        [dim] if isinstance(dim, int) else list(dim))
    if not dims:
        return input
    shifts = [(input.shape[d] + 1) // 2 if inverse else input.shape[d] // 2 for d in dims]
    return input.roll(shifts, dims)


def fftshift(input, dim=None):
    """Move the zero-frequency bin to the centre of ``dim`` (all dims by default)
    (``torch.fft.fftshift``).

    Example:
        >>> ember.fft.fftshift(ember.fft.fftfreq(4))   # tensor([-0.5000, -0.2500, 0.0000, 0.2500])
    """
    return _shift(input, dim, "fftshift", inverse=False)


def ifftshift(input, dim=None):
    """The inverse of :func:`fftshift` (``torch.fft.ifftshift``)."""
    return _shift(input, dim, "ifftshift", inverse=True)
