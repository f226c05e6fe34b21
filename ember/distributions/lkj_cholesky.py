"""The LKJ distribution over Cholesky factors of correlation matrices
(``torch.distributions.LKJCholesky``; Lewandowski, Kurowicka & Joe 2009): density of the
correlation matrix ``C = L L^T`` proportional to ``det(C)^(eta - 1)``, expressed on ``L``.
Sampled by the onion method: row ``i`` is ``sqrt(y_i) u_i`` with ``y_i`` a Beta draw and
``u_i`` uniform on the sphere of the first ``i`` coordinates, the diagonal the remainder."""
from __future__ import annotations

import math

import ember
from ember.tensor import Size

from . import constraints
from .dirichlet import Beta
from .distribution import Distribution
from .utils import _standard_normal, broadcast_all

__all__ = ["LKJCholesky"]


class LKJCholesky(Distribution):
    """LKJ over ``dim x dim`` correlation Cholesky factors with ``concentration`` (eta);
    eta = 1 is uniform over correlation matrices, larger eta favours the identity.

    Example:
        >>> L = LKJCholesky(3, 0.5).sample()
        >>> [round(v, 6) for v in (L @ L.mT).diagonal().tolist()]
        [1.0, 1.0, 1.0]
    """

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim: int, concentration=1.0, validate_args=None):
        if dim < 2:
            raise ValueError(f"Expected dim to be an integer greater than or equal to 2. "
                             f"Found dim={dim}.")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        # NOTE: the onion method draws row k's squared length (k = 1 .. dim-1) from
        # Beta(k / 2, eta + (dim - 2) / 2 - (k - 1) / 2) (LKJ 2009, section 3.2); row 0 is
        # unused. PyTorch's first parameter is k - 1/2 instead, which biases its samples for
        # dim >= 3 (rows >= 2 come out too correlated).
        marginal = self.concentration + 0.5 * (dim - 2)
        offset = ember.arange(dim - 1, dtype=self.concentration.dtype)
        offset = ember.cat([ember.zeros(1, dtype=offset.dtype), offset])   # k - 1
        self._beta = Beta(0.5 * offset + 0.5, marginal.unsqueeze(-1) - 0.5 * offset,
                          validate_args=False)
        super().__init__(self.concentration.shape, (dim, dim), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = Size(batch_shape)
        new.dim = self.dim
        new.concentration = self.concentration.expand(tuple(batch_shape))
        new._beta = self._beta.expand(tuple(batch_shape) + (self.dim,))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape=()):
        with ember.no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)
            shape = self._extended_shape(sample_shape)
            u = _standard_normal(shape, y.dtype, y.device).tril(-1)
            norm = u.norm(dim=-1, keepdim=True)
            u = u / ember.where(norm == 0, 1.0, norm)        # NOTE: row 0 stays zero
            w = y.sqrt() * u
            tiny = ember.finfo(w.dtype).tiny
            diag = (1 - w.square().sum(-1)).clamp(min=tiny).sqrt()
            return w + ember.diag_embed(diag)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diag = value.diagonal(dim1=-2, dim2=-1)[..., 1:]
        order = ember.arange(2, self.dim + 1, dtype=value.dtype)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized = (order * diag.log()).sum(-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        # NOTE: LKJ's pi term is D(D-1)/4 log(pi), mvlgamma's (D-1)(D-2)/4 log(pi)
        normalizer = (0.5 * dm1 * math.log(math.pi) + ember.mvlgamma(alpha - 0.5, dm1)
                      - ember.lgamma(alpha) * dm1)
        return unnormalized - normalizer
