"""The transforms of ``ember.fft``: argument handling as PyTorch's ``SpectralOps.cpp``
(``canonicalize_fft_shape_and_dim_args``, ``promote_tensor_fft``, ``resize_fft_input``)
over the ``fft_c2c``/``fft_r2c``/``fft_c2r`` primitives.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..errors import DTypeError, ShapeError
from ..ops import fft as _p
from ..ops.complex import cj
from ..ops.dispatch import autocast_entry
from ..ops.inplace import copy_into_out

_NORMS = ("backward", "ortho", "forward")
_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


# ------------------------------------------------------------------ argument handling
def _norm(norm, op: str) -> str:
    if norm is None:
        return "backward"
    if norm not in _NORMS:
        raise ValueError(f'{op}: invalid normalization mode: "{norm}"; valid: "backward", '
                         f'"ortho", "forward" or None')
    return norm


def _promote(x, op: str, require_complex: bool):
    """PyTorch's promote_tensor_fft: integers -> default float, reals -> complex if asked."""
    d = x.dtype
    if d.category < _dt.FLOAT:
        x = x.to(_dt.get_default_dtype())
    elif d in (_dt.float16, _dt.bfloat16) or d not in (*_dt.COMPLEX_TYPES, _dt.float32,
                                                       _dt.float64):
        raise DTypeError(f"{op}: unsupported dtype {d.name} on the CPU; valid: float32, "
                         f"float64, complex64, complex128 (and integer/bool inputs, which "
                         f"compute in the default float dtype)")
    if require_complex and not x.dtype.is_complex:
        x = x.to(x.dtype.to_complex())
    return x


def _dims_and_sizes(x, s, dim, op: str):
    """(dims in the given order, signal sizes) like canonicalize_fft_shape_and_dim_args."""
    nd = x.ndim
    if dim is not None:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [_wrap(d, nd, op) for d in dims]
        if len(set(dims)) != len(dims):
            raise ShapeError(f"{op}: FFT dims must be unique, got dim={tuple(dim)}")
    if s is not None:
        s = [int(n) for n in s]
        if dim is not None and len(s) != len(dims):
            raise ShapeError(f"{op}: when given, dim and shape arguments must have the same "
                             f"length, got s={tuple(s)} and dim={tuple(dims)}")
        if len(s) > nd:
            raise ShapeError(f"{op}: got shape with {len(s)} values but input tensor only has "
                             f"{nd} dimensions (shape {tuple(x.shape)})")
        if dim is None:
            dims = list(range(nd - len(s), nd))
        sizes = [x.shape[d] if n == -1 else n for n, d in zip(s, dims)]
    else:
        if dim is None:
            dims = list(range(nd))
        sizes = [x.shape[d] for d in dims]
    for n, d in zip(sizes, dims):
        if n < 1:
            raise ShapeError(f"{op}: invalid number of data points ({n}) specified for dim {d} "
                             f"of an input of shape {tuple(x.shape)}")
    return dims, sizes


def _wrap(d: int, nd: int, op: str) -> int:
    if not -nd <= d < max(nd, 1):
        raise IndexError(f"{op}: dimension out of range (expected to be in range of "
                         f"[{-nd}, {nd - 1}], but got {d})")
    return d % nd if nd else 0


def _one(n, dim):
    return None if n is None else (n,), (dim,)


def _finish(r, out):
    return r if out is None else copy_into_out(out, r)


# ------------------------------------------------------------------ n-D transforms
def _c2c_n(input, s, dim, norm, forward, op, out):
    x = _promote(input, op, require_complex=True)
    dims, sizes = _dims_and_sizes(x, s, dim, op)
    x = _p.resize(x, dims, sizes)
    return _finish(_p.c2c(x, sorted(dims), _norm(norm, op), forward), out)


def _r2c_n(input, s, dim, norm, op, out):
    if input.dtype.is_complex:
        raise DTypeError(f"{op} expects a real input tensor, but got {input.dtype.name}")
    x = _promote(input, op, require_complex=False)
    dims, sizes = _dims_and_sizes(x, s, dim, op)
    x = _p.resize(x, dims, sizes)
    return _finish(_p.r2c(x, dims, _norm(norm, op), onesided=True), out)


def _c2r_n(input, s, dim, norm, op, out):
    x = _promote(input, op, require_complex=True)
    dims, sizes = _dims_and_sizes(x, s, dim, op)
    last = sizes[-1] if s is not None else 2 * (x.shape[dims[-1]] - 1)
    if last < 1:
        raise ShapeError(f"{op}: invalid number of data points ({last}) specified (the "
                         f"output length along dim {dims[-1]}; pass n= or s=)")
    x = _p.resize(x, dims, sizes[:-1] + [last // 2 + 1])
    return _finish(_p.c2r(x, dims, _norm(norm, op), last), out)


@autocast_entry("fft_fftn")
def fftn(input, s=None, dim=None, norm=None, *, out=None):
    """N-dimensional DFT over ``dim`` (all dims by default) (``torch.fft.fftn``).

    Args:
        input: the signal; real inputs are treated as complex.
        s: signal size per transformed dim (zero-padded or cropped; -1 keeps the size).
        dim: the dims to transform (the last ``len(s)`` dims when only ``s`` is given).
        norm: ``"backward"`` (default, no scaling), ``"ortho"`` (``1/sqrt(n)``) or
            ``"forward"`` (``1/n``).

    Example:
        >>> ember.fft.fftn(ember.ones(2, 2))      # tensor([[4.+0.j, 0.+0.j], [0.+0.j, 0.+0.j]])
    """
    return _c2c_n(input, s, dim, norm, True, "fftn", out)


@autocast_entry("fft_ifftn")
def ifftn(input, s=None, dim=None, norm=None, *, out=None):
    """N-dimensional inverse DFT (``torch.fft.ifftn``); ``"backward"`` scales by ``1/n``."""
    return _c2c_n(input, s, dim, norm, False, "ifftn", out)


@autocast_entry("fft_rfftn")
def rfftn(input, s=None, dim=None, norm=None, *, out=None):
    """N-dimensional DFT of a real signal; the last transformed dim keeps ``n // 2 + 1``
    bins (``torch.fft.rfftn``)."""
    return _r2c_n(input, s, dim, norm, "rfftn", out)


@autocast_entry("fft_irfftn")
def irfftn(input, s=None, dim=None, norm=None, *, out=None):
    """Inverse of :func:`rfftn`: a real signal whose last transformed dim has ``s[-1]``
    points (default ``2 * (m - 1)``) (``torch.fft.irfftn``)."""
    return _c2r_n(input, s, dim, norm, "irfftn", out)


def hfftn(input, s=None, dim=None, norm=None, *, out=None):
    """N-dimensional DFT of a Hermitian-symmetric signal given by its one-sided half; the
    result is real (``torch.fft.hfftn``): ``irfftn(conj(input))`` scaled as a forward
    transform."""
    return irfftn(cj(_promote(input, "hfftn", True)), s, dim, _SWAP[_norm(norm, "hfftn")],
                  out=out)


def ihfftn(input, s=None, dim=None, norm=None, *, out=None):
    """Inverse of :func:`hfftn`: the one-sided half of a real signal's inverse DFT
    (``torch.fft.ihfftn``)."""
    return _finish(cj(rfftn(input, s, dim, _SWAP[_norm(norm, "ihfftn")])), out)


# ------------------------------------------------------------------ 1-D and 2-D forms
@autocast_entry("fft_fft")
def fft(input, n=None, dim=-1, norm=None, *, out=None):
    """1-D DFT along ``dim`` of a signal zero-padded/cropped to ``n`` (``torch.fft.fft``).

    Example:
        >>> ember.fft.fft(ember.tensor([1., 0., 0., 0.]))   # tensor([1.+0.j, 1.+0.j, ...])
    """
    return _c2c_n(input, *_one(n, dim), norm, True, "fft", out)


@autocast_entry("fft_ifft")
def ifft(input, n=None, dim=-1, norm=None, *, out=None):
    """1-D inverse DFT (``torch.fft.ifft``)."""
    return _c2c_n(input, *_one(n, dim), norm, False, "ifft", out)


@autocast_entry("fft_rfft")
def rfft(input, n=None, dim=-1, norm=None, *, out=None):
    """1-D DFT of a real signal, ``n // 2 + 1`` bins (``torch.fft.rfft``)."""
    return _r2c_n(input, *_one(n, dim), norm, "rfft", out)


@autocast_entry("fft_irfft")
def irfft(input, n=None, dim=-1, norm=None, *, out=None):
    """Inverse of :func:`rfft`; ``n`` output points, default ``2 * (m - 1)``
    (``torch.fft.irfft``)."""
    return _c2r_n(input, *_one(n, dim), norm, "irfft", out)


@autocast_entry("fft_hfft")
def hfft(input, n=None, dim=-1, norm=None, *, out=None):
    """1-D DFT of a Hermitian signal given by its one-sided half; real output of ``n``
    points (``torch.fft.hfft``)."""
    return hfftn(input, *_one(n, dim), norm, out=out)


@autocast_entry("fft_ihfft")
def ihfft(input, n=None, dim=-1, norm=None, *, out=None):
    """Inverse of :func:`hfft` for a real signal (``torch.fft.ihfft``)."""
    return ihfftn(input, *_one(n, dim), norm, out=out)


@autocast_entry("fft_fft2")
def fft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """2-D DFT over the last two dims (``torch.fft.fft2``)."""
    return _c2c_n(input, s, dim, norm, True, "fft2", out)


@autocast_entry("fft_ifft2")
def ifft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """2-D inverse DFT (``torch.fft.ifft2``)."""
    return _c2c_n(input, s, dim, norm, False, "ifft2", out)


@autocast_entry("fft_rfft2")
def rfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """2-D DFT of a real signal (``torch.fft.rfft2``)."""
    return _r2c_n(input, s, dim, norm, "rfft2", out)


@autocast_entry("fft_irfft2")
def irfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """Inverse of :func:`rfft2` (``torch.fft.irfft2``)."""
    return _c2r_n(input, s, dim, norm, "irfft2", out)


def hfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """2-D :func:`hfftn` (``torch.fft.hfft2``)."""
    return hfftn(input, s, dim, norm, out=out)


def ihfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):
    """2-D :func:`ihfftn` (``torch.fft.ihfft2``)."""
    return ihfftn(input, s, dim, norm, out=out)
