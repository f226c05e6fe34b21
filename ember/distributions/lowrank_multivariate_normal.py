"""The multivariate normal with low-rank-plus-diagonal covariance ``W W^T + diag(D)``
(``torch.distributions.LowRankMultivariateNormal``): log_prob and entropy cost O(n m^2)
through the ``m x m`` capacitance matrix ``I + W^T D^-1 W`` (Woodbury, matrix determinant
lemma)."""
from __future__ import annotations

import math

import ember
from ember.tensor import Size

from . import constraints
from .distribution import Distribution
from .multivariate_normal import _batch_mahalanobis, _batch_mv
from .utils import _standard_normal, lazy_property

__all__ = ["LowRankMultivariateNormal"]


def _batch_capacitance_tril(W, D):
    """Cholesky factor of ``I + W^T D^-1 W``."""
    m = W.shape[-1]
    K = ember.matmul(W.mT / D.unsqueeze(-2), W)
    return ember.linalg.cholesky(K + ember.eye(m, dtype=W.dtype, device=W.device))


def _batch_lowrank_logdet(W, D, capacitance_tril):
    return 2 * capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + D.log().sum(-1)


def _batch_lowrank_mahalanobis(W, D, x, capacitance_tril):
    Wt_Dinv_x = _batch_mv(W.mT / D.unsqueeze(-2), x)
    return (x.square() / D).sum(-1) - _batch_mahalanobis(capacitance_tril, Wt_Dinv_x)


class LowRankMultivariateNormal(Distribution):
    """Normal over vectors with covariance ``cov_factor @ cov_factor.mT + diag(cov_diag)``.

    Example:
        >>> import ember.distributions as D
        >>> d = D.LowRankMultivariateNormal(ember.zeros(2), ember.zeros(2, 1), ember.ones(2))
        >>> round(float(d.log_prob(ember.zeros(2))), 4)
        -1.8379
    """

    arg_constraints = {"loc": constraints.real_vector,
                       "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        n = loc.shape[-1]
        if cov_factor.ndim < 2:
            raise ValueError("cov_factor must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        if cov_factor.shape[-2] != n:
            raise ValueError(f"cov_factor must be a batch of matrices with shape {n} x m")
        if tuple(cov_diag.shape[-1:]) != (n,):
            raise ValueError(f"cov_diag must be a batch of vectors with shape ({n},)")
        try:
            loc_, self.cov_factor, diag_ = ember.broadcast_tensors(
                loc.unsqueeze(-1), cov_factor, cov_diag.unsqueeze(-1))
        except (ValueError, RuntimeError) as e:
            raise ValueError(f"Incompatible batch shapes: loc {tuple(loc.shape)}, cov_factor "
                             f"{tuple(cov_factor.shape)}, cov_diag {tuple(cov_diag.shape)}"
                             ) from e
        self.loc, self.cov_diag = loc_[..., 0], diag_[..., 0]
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        self._capacitance_tril = _batch_capacitance_tril(cov_factor, cov_diag)
        super().__init__(self.loc.shape[:-1], (n,), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        batch_shape = Size(batch_shape)
        n = self._event_shape[0]
        new.loc = self.loc.expand(tuple(batch_shape) + (n,))
        new.cov_diag = self.cov_diag.expand(tuple(batch_shape) + (n,))
        new.cov_factor = self.cov_factor.expand(tuple(batch_shape) + tuple(
            self.cov_factor.shape[-2:]))
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _full(self):
        return tuple(self._batch_shape) + tuple(self._event_shape) * 2

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @lazy_property
    def variance(self):
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        return (W.square().sum(-1) + D).expand(tuple(self._batch_shape)
                                            + tuple(self._event_shape))

    @lazy_property
    def scale_tril(self):
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        n = self._event_shape[0]
        d_sqrt = D.sqrt().unsqueeze(-1)
        Dinvsqrt_W = W / d_sqrt
        K = ember.matmul(Dinvsqrt_W, Dinvsqrt_W.mT) + ember.eye(n, dtype=W.dtype)
        return (d_sqrt * ember.linalg.cholesky(K)).expand(self._full())

    @lazy_property
    def covariance_matrix(self):
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        return (ember.matmul(W, W.mT) + ember.diag_embed(D)).expand(self._full())

    @lazy_property
    def precision_matrix(self):
        W, D = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        A = ember.linalg.solve_triangular(self._capacitance_tril, W.mT / D.unsqueeze(-2),
                                          upper=False)
        return (ember.diag_embed(D.reciprocal()) - ember.matmul(A.mT, A)).expand(self._full())

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        W = self._unbroadcasted_cov_factor
        eps_W = _standard_normal(shape[:-1] + (W.shape[-1],), self.loc.dtype, self.loc.device)
        eps_D = _standard_normal(shape, self.loc.dtype, self.loc.device)
        return (self.loc + _batch_mv(W, eps_W)
                + self._unbroadcasted_cov_diag.sqrt() * eps_D)

    def _log_det(self):
        return _batch_lowrank_logdet(self._unbroadcasted_cov_factor,
                                     self._unbroadcasted_cov_diag, self._capacitance_tril)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _batch_lowrank_mahalanobis(self._unbroadcasted_cov_factor,
                                       self._unbroadcasted_cov_diag, diff,
                                       self._capacitance_tril)
        n = self._event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + self._log_det() + M)

    def entropy(self):
        n = self._event_shape[0]
        H = 0.5 * (n * (1.0 + math.log(2 * math.pi)) + self._log_det())
        return H.expand(tuple(self._batch_shape)) if self._batch_shape else H
