"""Short-time Fourier transforms: ``ember.stft`` and ``ember.istft`` (``torch.stft``/
``torch.istft``), composites of ``pad``, ``unfold`` (frames as a strided view), the FFT
primitives and ``index_add`` (overlap-add), so gradients flow to the signal and the window.
"""
from __future__ import annotations

import warnings

from ..errors import DTypeError, ShapeError
from ..ops.dispatch import autocast_entry
from ..tensor import Tensor
from ._transforms import fft, ifft, irfft, rfft


def _window(window, win_length, n_fft, ref, op):
    """The window zero-padded (centred) to ``n_fft`` points; ones when not given."""
    from ..ops.factories import ones
    from ..ops.pad import pad
    if window is None:
        if op == "stft":
            warnings.warn("A window was not provided. A rectangular window will be applied, "
                          "which is known to cause spectral leakage; pass window= (e.g. "
                          "ember.hann_window(n_fft)) or window=ember.ones(n_fft) (PyTorch "
                          "warns the same)", UserWarning, stacklevel=4)
        window = ones(win_length, dtype=ref.dtype.to_real(), device=ref.device)
    elif window.ndim != 1 or window.shape[0] != win_length:
        raise ShapeError(f"{op}: expected a 1D window tensor of size equal to win_length="
                         f"{win_length}, but got window with size {tuple(window.shape)}")
    if win_length < n_fft:
        left = (n_fft - win_length) // 2
        window = pad(window, (left, n_fft - win_length - left))
    return window


def _lengths(n_fft, hop_length, win_length, op):
    hop = n_fft // 4 if hop_length is None else int(hop_length)
    win = n_fft if win_length is None else int(win_length)
    if n_fft <= 0 or hop <= 0 or not 0 < win <= n_fft:
        raise ValueError(f"{op}: expected 0 < n_fft, 0 < hop_length and 0 < win_length <= "
                         f"n_fft, but got n_fft={n_fft}, hop_length={hop}, win_length={win}")
    return hop, win


@autocast_entry("stft")
def stft(input: Tensor, n_fft: int, hop_length=None, win_length=None, window=None,
         center: bool = True, pad_mode: str = "reflect", normalized: bool = False,
         onesided=None, return_complex=None) -> Tensor:
    """Short-time Fourier transform of a 1-D ``(L,)`` or batched ``(B, L)`` signal
    (``torch.stft``).

    Args:
        n_fft: FFT size; ``hop_length`` (default ``n_fft // 4``) and ``win_length``
            (default ``n_fft``) as PyTorch.
        window: 1-D tensor of ``win_length`` points (zero-padded to ``n_fft``, centred);
            default all ones.
        center: pad ``n_fft // 2`` on both sides with ``pad_mode`` first.
        normalized: scale by ``n_fft ** -0.5``.
        onesided: keep ``n_fft // 2 + 1`` bins (default for real input and window).
        return_complex: must be given for real inputs, as PyTorch requires; ``False``
            (deprecated in PyTorch too) returns ``view_as_real`` of the result.

    Returns:
        ``(B?, n_freq, n_frames)`` complex tensor.

    Example:
        >>> ember.stft(ember.randn(64), 16, window=ember.hann_window(16),
        ...            return_complex=True).shape
        ember.Size([9, 17])
    """
    from ..ops.complex import view_as_real
    from ..ops.pad import pad
    complex_in = input.dtype.is_complex or (window is not None and window.dtype.is_complex)
    if return_complex is None:
        if not complex_in:
            raise RuntimeError("stft requires the return_complex parameter be given for real "
                               "inputs, and will further require that return_complex=True "
                               "in a future PyTorch release.")
        return_complex = True
    if input.ndim not in (1, 2):
        raise ShapeError(f"stft: expected a 1D or 2D tensor, got shape {tuple(input.shape)}")
    n_fft = int(n_fft)
    hop, win = _lengths(n_fft, hop_length, win_length, "stft")
    x = input if input.ndim == 2 else input.unsqueeze(0)
    if center:
        half = n_fft // 2
        x = pad(x.unsqueeze(1), (half, half), mode=pad_mode).squeeze(1)
    if not 0 < n_fft <= x.shape[-1]:
        raise ValueError(f"stft: expected 0 < n_fft <= {x.shape[-1]} (the padded signal "
                         f"length), but got n_fft={n_fft}")
    frames = x.unfold(-1, n_fft, hop) * _window(window, win, n_fft, input, "stft")
    onesided = (not complex_in) if onesided is None else bool(onesided)
    if onesided and complex_in:
        raise RuntimeError("stft: cannot have onesided output if window or input is complex")
    norm = "ortho" if normalized else "backward"
    spec = (rfft(frames, norm=norm) if onesided else fft(frames, norm=norm)).transpose(-1, -2)
    if input.ndim == 1:
        spec = spec.squeeze(0)
    if not return_complex:
        warnings.warn("stft with return_complex=False is deprecated (as in PyTorch); use "
                      "return_complex=True and view_as_real", UserWarning, stacklevel=2)
        return view_as_real(spec)
    return spec


def istft(input: Tensor, n_fft: int, hop_length=None, win_length=None, window=None,
          center: bool = True, normalized: bool = False, onesided=None, length=None,
          return_complex: bool = False) -> Tensor:
    """Inverse short-time Fourier transform by windowed overlap-add (``torch.istft``).

    Args:
        input: ``(B?, n_freq, n_frames)`` complex spectrogram (as :func:`stft` returns).
        n_fft, hop_length, win_length, window, center, normalized: as :func:`stft`.
        onesided: whether ``input`` holds ``n_fft // 2 + 1`` bins (default: inferred from
            ``n_freq``).
        length: trim or zero-pad the output to this many samples.
        return_complex: return a complex signal (needs a two-sided ``input``).

    Example:
        >>> w = ember.hann_window(16)
        >>> x = ember.randn(64)
        >>> y = ember.istft(ember.stft(x, 16, window=w, return_complex=True), 16, window=w,
        ...                 length=64)             # y ≈ x
    """
    if not input.dtype.is_complex:
        raise DTypeError(f"istft requires a complex-valued input tensor, got "
                         f"{input.dtype.name}")
    if input.ndim not in (2, 3):
        raise ShapeError(f"istft: expected a 2D or 3D complex tensor (n_freq, n_frames), got "
                         f"shape {tuple(input.shape)}")
    n_fft = int(n_fft)
    hop, win = _lengths(n_fft, hop_length, win_length, "istft")
    spec = input if input.ndim == 3 else input.unsqueeze(0)
    n_freq, n_frames = spec.shape[-2], spec.shape[-1]
    onesided = (n_freq != n_fft) if onesided is None else bool(onesided)
    want = n_fft // 2 + 1 if onesided else n_fft
    if n_freq != want:
        raise ShapeError(f"istft: expected the frequency dimension (2nd to last) of input to "
                         f"have {want} bins for n_fft={n_fft} and onesided={onesided}, got "
                         f"{n_freq}")
    if return_complex and onesided:
        raise RuntimeError("istft: cannot have onesided output if return_complex=True")
    norm = "ortho" if normalized else "backward"
    frames = spec.transpose(-1, -2)
    frames = irfft(frames, n=n_fft, norm=norm) if onesided else ifft(frames, norm=norm)
    if not return_complex and frames.dtype.is_complex:
        frames = frames.real
    w = _window(window, win, n_fft, frames, "istft")
    y, env = _overlap_add(frames * w, w * w, hop, n_frames)
    start = n_fft // 2 if center else 0
    total = y.shape[-1]
    end = total - (n_fft // 2 if center else 0) if length is None else start + int(length)
    y, env = y[..., start:min(end, total)], env[start:min(end, total)]
    if env.numel() and float(env.abs().min()) < 1e-11:
        raise RuntimeError("istft: window overlap add min < 1e-11: the window's squares do "
                           "not overlap-add to a nonzero envelope (NOLA); use a different "
                           "window or hop_length")
    y = y / env
    if end > total:
        from ..ops.pad import pad
        y = pad(y, (0, end - total))
    return y if input.ndim == 3 else y.squeeze(0)


def _overlap_add(frames, wsq, hop, n_frames):
    """Sum frame ``t`` into ``[t * hop, t * hop + n_fft)``: (signal, window envelope)."""
    from ..ops.factories import arange, zeros
    b, n_fft = frames.shape[0], frames.shape[-1]
    total = n_fft + hop * (n_frames - 1)
    idx = (arange(n_frames).unsqueeze(1) * hop + arange(n_fft)).reshape(-1)
    y = zeros(b, total, dtype=frames.dtype, device=frames.device)
    y = y.index_add(-1, idx, frames.reshape(b, -1))
    env = zeros(total, dtype=wsq.dtype, device=wsq.device)
    env = env.index_add(0, idx, wsq.expand(n_frames, n_fft).reshape(-1))
    return y, env


def _bind() -> None:
    Tensor.stft = stft
    Tensor.istft = istft


_bind()
