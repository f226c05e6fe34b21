"""``ember.signal.windows``: window functions (``torch.signal.windows``), computed by
``scipy.signal.windows`` in float64 and returned in ``dtype`` (default: the default dtype).

``sym=True`` gives the symmetric window (filter design); ``sym=False`` the periodic one
(spectral analysis: one point longer, last point dropped).

Example:
    >>> ember.signal.windows.hann(4, sym=False)
    tensor([0.0000, 0.5000, 1.0000, 0.5000])
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..ops.factories import tensor as _tensor

__all__ = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine",
           "general_hamming", "hamming", "hann", "kaiser", "nuttall"]


def _window(name: str, M, sym: bool, dtype, device, requires_grad, **kw):
    if not isinstance(M, (int, np.integer)) or isinstance(M, bool) or M < 0:
        raise ValueError(f"{name} requires non-negative window length, got M={M}")
    dt = _dt.get_default_dtype() if dtype is None else _dt.as_dtype(dtype)
    if not dt.is_floating_point:
        raise ValueError(f"{name} expects float32 or float64 dtypes, got: {dt}")
    from scipy.signal import windows as _sw     # NOTE: SciPy on first use
    w = np.asarray(getattr(_sw, name)(int(M), sym=sym, **kw), dtype=np.float64) if M else \
        np.zeros(0)
    return _tensor(w, dtype=dt, device=device, requires_grad=requires_grad)


def _simple(name: str, doc: str):
    def window(M, *, sym: bool = True, dtype=None, layout=None, device=None,
               requires_grad: bool = False):
        return _window(name, M, sym, dtype, device, requires_grad)
    window.__name__ = window.__qualname__ = name
    window.__doc__ = f"The {doc} window of length ``M`` (``torch.signal.windows.{name}``)."
    return window


bartlett = _simple("bartlett", "Bartlett (triangular, zero ends)")
blackman = _simple("blackman", "Blackman")
cosine = _simple("cosine", "cosine (sine)")
hamming = _simple("hamming", "Hamming")
hann = _simple("hann", "Hann")
nuttall = _simple("nuttall", "Nuttall (minimum 4-term Blackman-Harris)")


def exponential(M, *, center=None, tau: float = 1.0, sym: bool = True, dtype=None,
                layout=None, device=None, requires_grad: bool = False):
    """``exp(-|n - center| / tau)``; ``center`` defaults to the window's middle and may be
    given for periodic windows only."""
    if sym and center is not None:
        raise ValueError("Center must be None for symmetric windows")
    if tau <= 0:
        raise ValueError(f"Tau must be positive, got: {tau} instead.")
    if M == 1 and center is not None:    # NOTE: SciPy answers [1.] for any one-point window
        return _tensor([float(np.exp(-abs(center) / tau))],
                       dtype=_dt.get_default_dtype() if dtype is None else dtype, device=device,
                       requires_grad=requires_grad)
    return _window("exponential", M, sym, dtype, device, requires_grad, center=center, tau=tau)


def gaussian(M, *, std: float = 1.0, sym: bool = True, dtype=None, layout=None, device=None,
             requires_grad: bool = False):
    """``exp(-(n - (M-1)/2)**2 / (2 std**2))``."""
    if std <= 0:
        raise ValueError(f"Standard deviation must be positive, got: {std} instead.")
    return _window("gaussian", M, sym, dtype, device, requires_grad, std=std)


def general_cosine(M, *, a, sym: bool = True, dtype=None, layout=None, device=None,
                   requires_grad: bool = False):
    """``sum_k (-1)**k a[k] cos(2 pi k n / (M-1))``."""
    a = list(a)
    if not a:
        raise ValueError("Coefficients cannot be empty.")
    return _window("general_cosine", M, sym, dtype, device, requires_grad, a=a)


def general_hamming(M, *, alpha: float = 0.54, sym: bool = True, dtype=None, layout=None,
                    device=None, requires_grad: bool = False):
    """``alpha - (1 - alpha) cos(2 pi n / (M-1))``."""
    return _window("general_hamming", M, sym, dtype, device, requires_grad, alpha=alpha)


def kaiser(M, *, beta: float = 12.0, sym: bool = True, dtype=None, layout=None, device=None,
           requires_grad: bool = False):
    """``I0(beta sqrt(1 - (2n/(M-1) - 1)**2)) / I0(beta)``."""
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got: {beta} instead.")
    return _window("kaiser", M, sym, dtype, device, requires_grad, beta=beta)
