"""Draws from the distributions ``ember.distributions`` samples: gamma (differentiable),
Poisson, binomial, Dirichlet.

- ``_standard_gamma(alpha)`` (``torch._standard_gamma``) is a *random primitive*
  (``random=True``: never folded, merged or dropped by the graph passes, and a replay of a
  compiled graph draws again from the same generator). Its VJP is the implicit
  reparameterisation gradient ``dx/dalpha = -(dF/dalpha)(x; alpha) / f(x; alpha)`` for the
  Gamma(alpha, 1) CDF ``F`` and density ``f`` (Figurnov et al. 2018), i.e. the derivative of
  the quantile function ``F^-1(u; alpha)`` at fixed ``u``, as PyTorch's.
- ``_standard_gamma_grad(alpha, x)`` is that derivative (a deterministic primitive without a
  VJP of its own, like PyTorch's). ``dF/dalpha`` is a fourth-order central difference
  (Richardson over steps ``h``, ``2h``, ``h = 1e-3 alpha / (1 + sqrt(alpha))``: the scale on
  which F moves with alpha) of SciPy's regularised incomplete gamma, differencing ``P`` below
  ``x = alpha`` and ``Q = 1 - P`` above, so that nothing cancels in the tails: about 1e-9
  relative error in float64 up to alpha = 1e6 (float32 results take a plain central
  difference, half the SciPy calls, ~1e-7).
- ``poisson``, ``binomial`` and ``_sample_dirichlet`` draw through :func:`ember.random._drawn`,
  like ``ember.rand``: seeded by ``ember.manual_seed``, traced as ``random`` nodes. Their
  gradients are zero (PyTorch's ``poisson``/``binomial`` formulas are zeros; Dirichlet's
  reparameterised sample is built from gammas by ``ember.distributions.Dirichlet``).

Example:
    >>> _ = ember.manual_seed(0)
    >>> a = ember.tensor([2.0, 3.0], requires_grad=True)
    >>> x = ember._standard_gamma(a)
    >>> x.sum().backward()
    >>> bool((a.grad > 0).all())
    True
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import DTypeError
from ..random import _drawn, _gen, _zero_grad_link
from ..tensor import Tensor
from . import dispatch
from . import batching_rules as _vb
from .registry import defop

__all__ = ["poisson", "binomial"]


def _check_float(x, op):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{op}: expected a floating point tensor, got {x.dtype}; valid: "
                         f"float16, bfloat16, float32, float64")


def _gamma_kernel(xp, alpha, generator=None):
    ct = np.float32 if alpha.dtype == np.float32 else np.float64
    bad = ~(alpha >= 0)                           # NOTE: negative or NaN: no such law
    with np.errstate(invalid="ignore"):
        x = _gen(generator).standard_gamma(np.where(bad, 1, alpha).astype(ct, copy=False),
                                           dtype=ct)
    x = np.where(bad, np.nan, x)
    # NOTE: PyTorch clamps to the smallest normal number (of the output dtype, float16's
    # too) so that log(x) stays finite.
    tiny = _dt.finfo(_dt.as_dtype(alpha.dtype)).tiny
    return np.maximum(np.asarray(x).astype(alpha.dtype, copy=False), np.asarray(tiny, alpha.dtype))


def _dP_dalpha(a, x, fourth_order: bool = True):
    """d/da of the regularised lower incomplete gamma P(a, x), by central differences of P
    where x <= a (below about the median) and of -Q = P - 1 above (the smaller tail:
    nothing cancels); Richardson-extrapolated (fourth order) unless ``fourth_order`` is
    False (float32 results: half the SciPy calls, ~1e-8 relative error)."""
    from scipy import special as sp
    out = np.empty(a.shape)
    for fn, sign, m in ((sp.gammainc, 1.0, x <= a), (sp.gammaincc, -1.0, x > a)):
        am, xm = a[m], x[m]
        # NOTE: P(a, x) varies in a on the scale of a (small a) or sqrt(a) (large a: the
        # law's width), so the step follows a / (1 + sqrt(a))
        width = am / (1 + np.sqrt(am))
        if fourth_order:
            h = 1e-3 * width
            d = (8 * (fn(am + h, xm) - fn(am - h, xm))
                 - (fn(am + 2 * h, xm) - fn(am - 2 * h, xm))) / (12 * h)
        else:
            h = 1e-4 * width
            d = (fn(am + h, xm) - fn(am - h, xm)) / (2 * h)
        out[m] = sign * d
    return out


def _gamma_grad_kernel(xp, alpha, x):
    from scipy import special as sp
    dt = np.result_type(alpha, x)
    a, x = np.broadcast_arrays(alpha.astype(np.float64), x.astype(np.float64))
    with np.errstate(all="ignore"):
        log_pdf = (a - 1) * np.log(x) - x - sp.gammaln(a)
        res = -_dP_dalpha(a, x, fourth_order=dt != np.float32) * np.exp(-log_pdf)
    # NOTE: 0 where the sample underflowed or the density vanished (PyTorch returns 0 too).
    return np.where(np.isfinite(res), res, 0.0).astype(dt)


def _gamma_grad(alpha, x):
    return dispatch.apply(standard_gamma_grad_p, (alpha, x), {})


standard_gamma_grad_p = defop(
    "standard_gamma_grad", nin=2, kernels={"cpu": _gamma_grad_kernel}, dtype="float", save=None,
    batch="elementwise",
    shape=lambda a, x: dispatch.broadcast_shapes(a, x, op="standard_gamma_grad"),
    doc="dx/dalpha of a Gamma(alpha, 1) sample x at fixed CDF value (no VJP, as PyTorch)")

standard_gamma_p = defop(
    "standard_gamma", nin=1, kernels={"cpu": _gamma_kernel}, dtype="float", random=True,
    batch="elementwise",
    params={"generator": None}, shape=lambda s, **p: s, save="both",
    vjp=lambda g, out, a, **p: (g * _gamma_grad(a, out),),
    jvp=lambda t, out, a, **p: t[0] * _gamma_grad(a, out),
    doc="Gamma(alpha, 1) samples; implicit reparameterisation gradient")


def _standard_gamma(input: Tensor, generator=None) -> Tensor:
    """Gamma(``input``, 1) samples (``torch._standard_gamma``), differentiable in ``input``
    by implicit reparameterisation. Samples are at least the dtype's smallest normal number
    (as PyTorch's); a negative or NaN concentration gives NaN.

    Example:
        >>> ember._standard_gamma(ember.full((3,), 2.0)).shape
        ember.Size([3])
    """
    _check_float(input, "_standard_gamma")
    return dispatch.apply(standard_gamma_p, (input,), {"generator": generator})


def _standard_gamma_grad(self: Tensor, output: Tensor) -> Tensor:
    """``d output / d self`` of :func:`_standard_gamma`'s samples ``output`` at fixed CDF
    value (``torch._standard_gamma_grad``)."""
    _check_float(self, "_standard_gamma_grad")
    return _gamma_grad(self, output)


def poisson(input: Tensor, generator=None) -> Tensor:
    """Poisson samples with rates ``input``, in ``input``'s dtype (``torch.poisson``).

    Example:
        >>> ember.poisson(ember.zeros(2)).tolist()
        [0.0, 0.0]
    """
    _check_float(input, "poisson")
    dt = input.dtype

    def draw(r):
        r = r.astype(np.float64)
        if not np.all(r >= 0):
            raise ValueError(f"poisson: invalid Poisson rate, expected rate to be "
                             f"non-negative (and not NaN), got min {np.min(r)}")
        return _gen(generator).poisson(r).astype(dt.np)
    out = _drawn(draw, dt, input.device, False, "poisson", (input.detach(),))
    return _zero_grad_link(out, input)


def binomial(count: Tensor, prob: Tensor, generator=None) -> Tensor:
    """Binomial(``count``, ``prob``) samples in ``count``'s dtype (``torch.binomial``).

    Example:
        >>> ember.binomial(ember.tensor([5.0]), ember.tensor([1.0])).tolist()
        [5.0]
    """
    _check_float(count, "binomial")
    _check_float(prob, "binomial")
    dispatch.broadcast_shapes(tuple(count.shape), tuple(prob.shape), op="binomial")
    dt = _dt.result_type(count, prob)

    def draw(n, p):
        n, p = np.broadcast_arrays(n, p)
        return _gen(generator).binomial(np.round(n).astype(np.int64),
                                        np.clip(p.astype(np.float64), 0, 1)).astype(dt.np)
    out = _drawn(draw, dt, count.device, False, "binomial", (count.detach(), prob.detach()))
    return _zero_grad_link(out, count, prob)


def _sample_dirichlet(input: Tensor, generator=None) -> Tensor:
    """Dirichlet samples with concentrations along the last dim (``torch._sample_dirichlet``;
    not differentiable: ``ember.distributions.Dirichlet.rsample`` is)."""
    _check_float(input, "_sample_dirichlet")
    dt = input.dtype

    def draw(a):
        ct = np.float32 if a.dtype == np.float32 else np.float64
        g = np.maximum(_gen(generator).standard_gamma(a.astype(ct), dtype=ct), np.finfo(ct).tiny)
        return (g / g.sum(-1, keepdims=True)).astype(dt.np)
    return _drawn(draw, dt, input.device, False, "_sample_dirichlet", (input.detach(),))


def _sample_categorical(probs: Tensor, sample_shape=(), generator=None) -> Tensor:
    """Indices (int64, shape ``sample_shape + probs.shape[:-1]``) drawn by inverting the CDF
    of each row of the non-negative weights ``probs`` (normalised here)."""
    shape = tuple(sample_shape) + tuple(probs.shape[:-1])

    def draw(p):
        cdf = np.cumsum(p.astype(np.float64), -1)
        cdf = cdf / cdf[..., -1:]
        u = _gen(generator).random(shape)
        idx = (u[..., None] >= cdf).sum(-1)
        return np.minimum(idx, p.shape[-1] - 1).astype(np.int64)
    return _drawn(draw, _dt.int64, probs.device, False, "categorical", (probs.detach(),))


def _sample_multinomial(total_count: int, probs: Tensor, sample_shape=(),
                        generator=None) -> Tensor:
    """Counts (``probs``' dtype, shape ``sample_shape + probs.shape``) of ``total_count``
    draws from each row of ``probs``."""
    shape = tuple(sample_shape) + tuple(probs.shape)
    dt = probs.dtype

    def draw(p):
        p = p.astype(np.float64)
        p = np.ascontiguousarray(np.broadcast_to(p / p.sum(-1, keepdims=True), shape))
        return _gen(generator).multinomial(int(total_count), p).astype(dt.np)
    return _drawn(draw, dt, probs.device, False, "multinomial", (probs.detach(),))


def _sample_von_mises(loc: Tensor, concentration: Tensor, sample_shape=(),
                      generator=None) -> Tensor:
    """Von Mises angles in [-pi, pi) (NumPy's Best-Fisher sampler), shape
    ``sample_shape + broadcast(loc, concentration)``."""
    dt = _dt.result_type(loc, concentration)
    shape = tuple(sample_shape) + tuple(np.broadcast_shapes(tuple(loc.shape),
                                                            tuple(concentration.shape)))

    def draw(mu, kappa):
        mu, kappa = (np.broadcast_to(a.astype(np.float64), shape) for a in (mu, kappa))
        x = _gen(generator).vonmises(mu, kappa)
        return (np.mod(x + np.pi, 2 * np.pi) - np.pi).astype(dt.np)
    return _drawn(draw, dt, loc.device, False, "von_mises",
                  (loc.detach(), concentration.detach()))
