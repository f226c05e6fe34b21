"""OpInfos for ``ember.fft``: the ``fft_c2c``/``fft_r2c``/``fft_c2r`` primitives through the
public transforms, against ``numpy.fft`` (an independent pocketfft build from SciPy's).

Samples cover 1-D, 2-D and n-D transforms, ``n``/``s`` padding and cropping, every
``norm``, batched leading dims and zero-size batch dims; gradients are checked in float64
(real transforms) and complex128 (complex transforms) as pairs of reals.
"""
import numpy as np

import ember as em

from .core import OpInfo, Sample, rand

_C = dict(dtypes=("complex64", "complex128"), grad_dtype="complex128",
          atol={"complex64": 1e-4, "complex128": 1e-10},
          rtol={"complex64": 1e-4, "complex128": 1e-8})
_R = dict(atol={"float32": 1e-4, "float64": 1e-10})


def _samples(cases):
    """``cases``: (shape, kwargs, grad) for one transform."""
    def gen(rng, dtype):
        return [Sample((rand(rng, shape, dtype),), dict(kw), grad=g, name=f"{shape}{kw}")
                for shape, kw, g in cases]
    return gen


_ONE_D = [((8,), {}, True), ((3, 5), {"n": 8}, True), ((2, 6), {"n": 4, "norm": "ortho"}, True),
          ((4, 3), {"dim": 0, "norm": "forward"}, True), ((0, 5), {}, False),
          ((2, 3, 7), {"dim": 1}, False)]
_N_D = [((4, 6), {}, True), ((2, 3, 4), {"dim": (0, 2)}, True),
        ((3, 4), {"s": (5, 3), "norm": "ortho"}, True), ((0, 4, 4), {"dim": (1, 2)}, False),
        ((2, 4, 6), {"norm": "forward"}, False)]
_IRFFT = [((5,), {}, True), ((3, 5), {"n": 7}, True), ((2, 4), {"n": 4, "norm": "ortho"}, True),
          ((0, 5), {}, False), ((4, 3), {"dim": 0, "norm": "forward"}, True)]
_IRFFT_N = [((4, 4), {}, True), ((3, 4), {"s": (3, 5)}, True),
            ((2, 3, 4), {"dim": (0, 2), "norm": "ortho"}, True),
            ((0, 3, 3), {"dim": (1, 2)}, False)]


def _np_kw(kw, ndim):
    kw = dict(kw)
    if "dim" in kw:
        d = kw.pop("dim")
        kw["axis" if isinstance(d, int) else "axes"] = d
    elif "s" in kw:   # PyTorch: the last len(s) dims (NumPy 2 wants them spelled out)
        kw["axes"] = tuple(range(ndim - len(kw["s"]), ndim))
    return kw


def _np_typed(name, real_out=False):
    """NumPy's transform cast to PyTorch's output dtype (NumPy keeps float32 too, but its
    n-D real transforms upcast some paths)."""
    def ref(a, **kw):
        r = getattr(np.fft, name)(a, **_np_kw(kw, a.ndim))
        base = np.float32 if a.dtype in (np.float32, np.complex64) else np.float64
        return r.astype(base if real_out else np.result_type(base, np.complex64))
    return ref


def _hfftn_ref(a, s=None, dim=None, norm=None):
    swap = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}
    return _np_typed("irfftn", True)(np.conj(a), **({} if s is None else {"s": s}),
                                     **({} if dim is None else {"dim": dim}), norm=swap[norm])


OPINFOS = [
    OpInfo("fft.fft", em.fft.fft, _np_typed("fft"), _samples(_ONE_D), ("fft_c2c",), **_C),
    OpInfo("fft.ifft", em.fft.ifft, _np_typed("ifft"), _samples(_ONE_D), ("fft_c2c",), **_C),
    OpInfo("fft.fft_real", em.fft.fft, _np_typed("fft"), _samples(_ONE_D), ("fft_c2c",), **_R),
    OpInfo("fft.fftn", em.fft.fftn, _np_typed("fftn"), _samples(_N_D), ("fft_c2c",), **_C),
    OpInfo("fft.ifftn", em.fft.ifftn, _np_typed("ifftn"), _samples(_N_D), ("fft_c2c",), **_C),
    OpInfo("fft.rfft", em.fft.rfft, _np_typed("rfft"), _samples(_ONE_D), ("fft_r2c",), **_R),
    OpInfo("fft.rfftn", em.fft.rfftn, _np_typed("rfftn"), _samples(_N_D), ("fft_r2c",), **_R),
    OpInfo("fft.irfft", em.fft.irfft, _np_typed("irfft", True), _samples(_IRFFT),
           ("fft_c2r",), **_C),
    OpInfo("fft.irfftn", em.fft.irfftn, _np_typed("irfftn", True), _samples(_IRFFT_N),
           ("fft_c2r",), **_C),
    OpInfo("fft.hfft", em.fft.hfft, _np_typed("hfft", True), _samples(_IRFFT),
           ("fft_c2r", "conj"), **_C),
    OpInfo("fft.ihfft", em.fft.ihfft, _np_typed("ihfft"), _samples(_ONE_D),
           ("fft_r2c", "conj"), **_R),
    OpInfo("fft.hfftn", em.fft.hfftn, _hfftn_ref, _samples(_IRFFT_N), ("fft_c2r", "conj"),
           **_C),
]
