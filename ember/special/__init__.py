"""``ember.special``: PyTorch's ``torch.special`` namespace, name for name.

The functions PyTorch has elsewhere are the same Ember ops under their ``special`` names
(``expit`` is ``sigmoid``, ``gammaln`` is ``lgamma``, ``psi`` is ``digamma``...); the rest
are registry primitives in ``ember/ops/special_fns.py`` whose forward values come from
SciPy (imported on first use) or composites of them. Gradients exist where PyTorch has
them; the Bessel functions and orthogonal polynomials return results without gradient,
and ``zeta``/``gammainc``/``gammaincc`` are differentiable in their second argument only.

Example:
    >>> import ember
    >>> ember.special.xlogy(ember.tensor([0.0, 2.0]), ember.tensor([0.0, 3.0]))
    tensor([0.0000, 2.1972])
"""
from __future__ import annotations

from ..ops.composite_misc import logit, sinc
from ..ops.softmax import log_softmax, logsumexp, softmax
from ..ops.special_fns import (
    airy_ai, bessel_j0, bessel_j1, bessel_y0, bessel_y1, chebyshev_polynomial_t,
    chebyshev_polynomial_u, chebyshev_polynomial_v, chebyshev_polynomial_w, entr, erfcx,
    gammainc, gammaincc, hermite_polynomial_h, hermite_polynomial_he, i0, i0e, i1, i1e,
    laguerre_polynomial_l, legendre_polynomial_p, log_ndtr, modified_bessel_i0,
    modified_bessel_i1, modified_bessel_k0, modified_bessel_k1, ndtr, ndtri,
    scaled_modified_bessel_k0, scaled_modified_bessel_k1, shifted_chebyshev_polynomial_t,
    shifted_chebyshev_polynomial_u, shifted_chebyshev_polynomial_v,
    shifted_chebyshev_polynomial_w, spherical_bessel_j0, xlog1py, xlogy, zeta)
from ..ops.special_gamma import digamma, lgamma as gammaln, polygamma
from ..ops.unary import erf, erfc, erfinv, exp2, expm1, log1p, round, sigmoid as expit
from ._composites import multigammaln

psi = digamma

__all__ = ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "chebyshev_polynomial_t",
           "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w", "digamma",
           "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammainc",
           "gammaincc", "gammaln", "hermite_polynomial_h", "hermite_polynomial_he", "i0", "i0e",
           "i1", "i1e", "laguerre_polynomial_l", "legendre_polynomial_p", "log1p", "log_ndtr",
           "log_softmax", "logit", "logsumexp", "modified_bessel_i0", "modified_bessel_i1",
           "modified_bessel_k0", "modified_bessel_k1", "multigammaln", "ndtr", "ndtri",
           "polygamma", "psi", "round", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
           "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
           "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "sinc", "softmax",
           "spherical_bessel_j0", "xlog1py", "xlogy", "zeta"]
