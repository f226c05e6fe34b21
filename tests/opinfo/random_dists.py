"""OpInfo entries for the distribution samplers' primitives (ember/ops/random_dists.py).

``standard_gamma`` is checked draw for draw against NumPy's PCG64 stream with the same seed.
Its gradient is the *implicit* reparameterisation gradient (the quantile function's
derivative at fixed CDF value), which central differences of a rejection sampler at a fixed
seed do not compute, so ``grad=False`` here: tests/distributions/test_gamma_grad.py checks it
against finite differences of ``scipy.special.gammaincinv``.
"""
import numpy as np
from scipy import integrate, special

import ember as em
from ember.ops import random_dists as rd

from .core import OpInfo, Sample, rand


def _gamma(a):
    return rd._standard_gamma(a, generator=em.Generator().manual_seed(0))


def _ref_gamma(a):
    ct = np.float32 if a.dtype == np.float32 else np.float64
    x = np.random.Generator(np.random.PCG64(0)).standard_gamma(a.astype(ct), dtype=ct)
    return np.maximum(x, np.finfo(ct).tiny).astype(a.dtype)


def _gamma_samples(rng, dtype):
    return [Sample((rand(rng, s, dtype, 0.2, 6.0),), grad=False, name=str(s))
            for s in ((5, 7), (4,), (), (2, 3, 4), (0, 3))]


def _dP_da(a, x):
    """d/da of P(a, x) by quadrature: with t = x v^(1/a), int_0^x log(t) t^(a-1) e^-t dt
    = x^a / a int_0^1 (log x + log(v) / a) exp(-x v^(1/a)) dv."""
    f = lambda v: (np.log(x) + np.log(v) / a) * np.exp(-x * v ** (1 / a))  # noqa: E731
    integral = integrate.quad(f, 0, 1, epsabs=0, epsrel=1e-11, limit=200)[0]
    return x ** a / a * integral / special.gamma(a) - special.digamma(a) * special.gammainc(a, x)


def _ref_gamma_grad(a, x):
    a64, x64 = np.broadcast_arrays(a.astype(np.float64), x.astype(np.float64))
    out = np.empty(a64.shape)
    for i in np.ndindex(a64.shape):
        pdf = np.exp((a64[i] - 1) * np.log(x64[i]) - x64[i] - special.gammaln(a64[i]))
        out[i] = -_dP_da(a64[i], x64[i]) / pdf
    return out.astype(np.result_type(a, x))


def _gamma_grad_samples(rng, dtype):
    pairs = [((5, 7), (5, 7)), ((4,), (3, 4)), ((), ()), ((2, 1, 4), (3, 1)), ((0, 3), (3,))]
    return [Sample((rand(rng, s, dtype, 0.5, 4.0), rand(rng, t, dtype, 0.2, 3.0)), grad=False,
                   name=f"{s},{t}") for s, t in pairs]


OPINFOS = [
    OpInfo("_standard_gamma", _gamma, _ref_gamma, _gamma_samples, ("standard_gamma",),
           grad=False, atol={"float32": 0.0, "float64": 0.0},
           rtol={"float32": 0.0, "float64": 0.0}),
    OpInfo("_standard_gamma_grad", rd._standard_gamma_grad, _ref_gamma_grad,
           _gamma_grad_samples, ("standard_gamma_grad",), grad=False,
           rtol={"float32": 1e-5, "float64": 1e-8}),
]
