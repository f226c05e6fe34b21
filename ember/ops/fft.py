"""Discrete Fourier transform primitives, as ATen's ``_fft_c2c``/``_fft_r2c``/``_fft_c2r``.

Every ``ember.fft`` function is a composite of these three (plus casts, ``conj`` and the
``pad`` primitive that resizes a signal to ``n``/``s``):

==========  =====================================================  ======================
primitive   computes                                               VJP (adjoint)
==========  =====================================================  ======================
``fft_c2c``  ``scale * DFT±(x)`` over ``dim``, complex -> complex   c2c, opposite direction
``fft_r2c``  ``scale * DFT-(x)``, real -> complex (one-sided: the   c2r(g, the bins that
             last dim keeps ``n // 2 + 1`` bins)                    stand for two halved)
``fft_c2r``  ``scale * DFT+(x)`` of the Hermitian signal whose      r2c(g), the bins that
             one-sided half is ``x``, complex -> real               stand for two doubled
==========  =====================================================  ======================

``norm`` is PyTorch's string for the direction the primitive runs: a forward transform
scales by 1 (``"backward"``), ``1/sqrt(n)`` (``"ortho"``) or ``1/n`` (``"forward"``), an
inverse one by ``1/n``, ``1/sqrt(n)``, 1. The adjoint of a transform runs the other
direction with the same scale, i.e. with ``"backward"`` and ``"forward"`` swapped. All three
are linear, so their JVP is the primitive applied to the tangent; VJPs follow PyTorch's
convention for complex gradients (``grad = A^H g``). The CPU kernels are SciPy's pocketfft
(``scipy.fft``, imported on first use) on Ember's thread count; other backends use
``xp.fft``.
"""
from __future__ import annotations

from . import dispatch
from .complex import real
from .pad import pad_p
from . import batching_rules as _vb
from .registry import defop

_apply = dispatch.apply
_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _scipy_fft():
    import scipy.fft   # NOTE: lazy: ``import ember`` must not pay for SciPy
    return scipy.fft


def _workers() -> int:
    from ..codegen.runtime import num_threads   # NOTE: codegen sits above ops
    return num_threads()


# ------------------------------------------------------------------ kernels
def _scipy(one_d, n_d, x, dim, norm, one_kw=None, n_kw=None):
    """``one_d`` (a SciPy 1-D transform) over one dim, else ``n_d`` over ``dim``."""
    # NOTE: one dim goes to scipy's 1-D entry points: their argument handling costs a third
    # of the n-D ones' (10 us of a 1024-point transform).
    if len(dim) == 1:
        return one_d(x, axis=dim[0], norm=norm, workers=_workers(), **(one_kw or {}))
    return n_d(x, axes=dim, norm=norm, workers=_workers(), **(n_kw or {}))


def _c2c_cpu(xp, x, dim=(), norm="backward", forward=True):
    sf = _scipy_fft()
    return (_scipy(sf.fft, sf.fftn, x, dim, norm) if forward
            else _scipy(sf.ifft, sf.ifftn, x, dim, norm))


def _c2c_xp(xp, x, dim=(), norm="backward", forward=True):
    if x.size == 0:       # NOTE: cuFFT refuses zero-point transforms; NumPy gives an empty
        return x.astype(xp.result_type(x.dtype, xp.complex64), copy=True)
    return (xp.fft.fftn if forward else xp.fft.ifftn)(x, axes=dim, norm=norm)


def _r2c_cpu(xp, x, dim=(), norm="backward", onesided=True):
    sf = _scipy_fft()
    return (_scipy(sf.rfft, sf.rfftn, x, dim, norm) if onesided
            else _scipy(sf.fft, sf.fftn, x, dim, norm))


def _r2c_xp(xp, x, dim=(), norm="backward", onesided=True):
    return (xp.fft.rfftn if onesided else xp.fft.fftn)(x, axes=dim, norm=norm)


def _c2r_sizes(x, dim, last_dim_size):
    return [x.shape[d] for d in dim[:-1]] + [last_dim_size]


def _c2r_cpu(xp, x, dim=(), norm="backward", last_dim_size=1):
    sf = _scipy_fft()
    return _scipy(sf.irfft, sf.irfftn, x, dim, norm, one_kw={"n": last_dim_size},
                  n_kw={"s": _c2r_sizes(x, dim, last_dim_size)})


def _c2r_xp(xp, x, dim=(), norm="backward", last_dim_size=1):
    return xp.fft.irfftn(x, s=_c2r_sizes(x, dim, last_dim_size), axes=dim, norm=norm)


# ------------------------------------------------------------------ rules
def _r2c_shape(s, dim=(), norm="backward", onesided=True):
    out = list(s)
    if onesided:
        out[dim[-1]] = s[dim[-1]] // 2 + 1
    return tuple(out)


def _c2r_shape(s, dim=(), norm="backward", last_dim_size=1):
    out = list(s)
    out[dim[-1]] = last_dim_size
    return tuple(out)


def _to_complex_rule(x, **_):
    return None, x._dtype.to_complex()


def _to_real_rule(x, **_):
    return None, x._dtype.to_real()


def _r2c_vjp(g, out, x, dim=(), norm="backward", onesided=True):
    if not onesided:
        full = _apply(fft_c2c_p, (g,), {"dim": dim, "norm": _SWAP[norm], "forward": False})
        return (real(full),)
    # NOTE: the adjoint is real(c2c⁻(g zero-padded to n)) (PyTorch's formula). The same
    # values come from c2r of g with the bins c2r counts twice halved: c2r(y) is the real
    # part of the inverse DFT of y's Hermitian extension, and real parts commute with the
    # other dims' inverse DFTs. It skips the padded copy and the complex full-size transform.
    n = x.shape[dim[-1]]
    return (_apply(fft_c2r_p, (_bin_weights(g, dim[-1], n, 0.5),),
                   {"dim": dim, "norm": _SWAP[norm], "last_dim_size": n}),)


def _c2r_vjp(g, out, x, dim=(), norm="backward", last_dim_size=1):
    # NOTE: PyTorch's _fft_c2r_backward: r2c of g; each bin that stands for itself and its
    # mirror image (all but DC and, for even n, Nyquist) gets its gradient twice.
    gi = _apply(fft_r2c_p, (g,), {"dim": dim, "norm": _SWAP[norm], "onesided": True})
    return (_bin_weights(gi, dim[-1], last_dim_size, 2.0),)


def _bin_weights(spec, last, n, factor):
    """``spec`` with the one-sided bins that stand for two (1 .. n - n//2 - 1 along ``last``)
    scaled by ``factor``."""
    h = spec.shape[last]
    doubled = n - h
    if doubled <= 0:
        return spec
    from .factories import tensor
    w = tensor([1.0] + [factor] * doubled + [1.0] * (h - 1 - doubled),
               dtype=spec.dtype.to_real(), device=spec.device)
    return spec * w.reshape([h if d == last else 1 for d in range(spec.ndim)])


# ------------------------------------------------------------------ primitives
fft_c2c_p = defop(
    "fft_c2c", nin=1, params={"dim": (), "norm": "backward", "forward": True}, dtype="same",
    batch=_vb.reduce_dims,
    kernels={"cpu": _c2c_cpu, "xp": _c2c_xp}, shape=lambda s, **p: tuple(s), save=None,
    vjp=lambda g, out, x, dim=(), norm="backward", forward=True: (_apply(
        fft_c2c_p, (g,), {"dim": dim, "norm": _SWAP[norm], "forward": not forward}),),
    jvp="linear")
fft_r2c_p = defop(
    "fft_r2c", nin=1, params={"dim": (), "norm": "backward", "onesided": True},
    batch=_vb.reduce_dims,
    dtype=_to_complex_rule, kernels={"cpu": _r2c_cpu, "xp": _r2c_xp}, shape=_r2c_shape,
    save=None, vjp=_r2c_vjp, jvp="linear")
fft_c2r_p = defop(
    "fft_c2r", nin=1, params={"dim": (), "norm": "backward", "last_dim_size": 1},
    batch=_vb.reduce_dims,
    dtype=_to_real_rule, kernels={"cpu": _c2r_cpu, "xp": _c2r_xp}, shape=_c2r_shape,
    save=None, vjp=_c2r_vjp, jvp="linear")


def c2c(x, dim, norm, forward):
    """``fft_c2c`` on a complex tensor over the (sorted, non-negative) dims ``dim``."""
    return _apply(fft_c2c_p, (x,), {"dim": tuple(dim), "norm": norm, "forward": forward})


def r2c(x, dim, norm, onesided):
    """``fft_r2c`` on a real floating tensor."""
    return _apply(fft_r2c_p, (x,), {"dim": tuple(dim), "norm": norm, "onesided": onesided})


def c2r(x, dim, norm, last_dim_size):
    """``fft_c2r`` on a complex tensor holding one-sided Hermitian spectra."""
    return _apply(fft_c2r_p, (x,), {"dim": tuple(dim), "norm": norm,
                                    "last_dim_size": int(last_dim_size)})


def resize(x, dims, sizes):
    """``x`` zero-padded or cropped at the end of each of ``dims`` to ``sizes``
    (PyTorch's ``resize_fft_input``)."""
    want = dict(zip(dims, sizes))
    if all(x.shape[d] == n for d, n in want.items()):
        return x
    pads = tuple((0, want[d] - x.shape[d]) if d in want else (0, 0) for d in range(x.ndim))
    return _apply(pad_p, (x,), {"pads": pads, "value": 0.0})

