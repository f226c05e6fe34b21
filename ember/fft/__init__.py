"""Discrete Fourier transforms (``torch.fft``): ``fft``/``ifft``, ``rfft``/``irfft``,
``hfft``/``ihfft``, their 2-D and n-D variants, ``fftfreq``/``rfftfreq`` and
``fftshift``/``ifftshift``.

Names, arguments (``n``/``s``, ``dim``, ``norm`` in ``"backward"``/``"ortho"``/``"forward"``)
and dtype rules follow PyTorch: integer inputs compute in the default float dtype, real
inputs of the complex transforms become complex, ``rfft`` refuses complex input, and the
signal is zero-padded or cropped to ``n``/``s`` before the transform. Every function is a
composite of three registry primitives (``fft_c2c``, ``fft_r2c``, ``fft_c2r`` in
``ember/ops/fft.py``) whose VJPs and JVPs give gradients of every transform. The CPU runs
SciPy's pocketfft on Ember's thread count (``ember.set_num_threads``).

Example:
    >>> x = ember.tensor([1.0, 2.0, 3.0, 4.0])
    >>> ember.fft.fft(x)
    tensor([10.+0.j, -2.+2.j, -2.+0.j, -2.-2.j])
    >>> ember.fft.irfft(ember.fft.rfft(x), n=4)
    tensor([1., 2., 3., 4.])
"""
from __future__ import annotations

from ._transforms import (fft, fft2, fftn, hfft, hfft2, hfftn, ifft, ifft2, ifftn, ihfft,
                          ihfft2, ihfftn, irfft, irfft2, irfftn, rfft, rfft2, rfftn)
from ._helpers import fftfreq, fftshift, ifftshift, rfftfreq
from ._stft import istft, stft  # noqa: F401 - ember.stft/istft, bound on Tensor

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2",
           "hfft2", "ihfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn", "fftfreq",
           "rfftfreq", "fftshift", "ifftshift"]
