"""The multivariate normal (``torch.distributions.MultivariateNormal``), parameterised by
exactly one of ``covariance_matrix``, ``precision_matrix`` or ``scale_tril``; everything is
computed from the Cholesky factor ``L`` (``Sigma = L L^T``) with ``ember.linalg``'s
``cholesky`` and ``solve_triangular``, so it differentiates in every parameter."""
from __future__ import annotations

import math

import ember
from ember.tensor import Size

from . import constraints
from .distribution import Distribution
from .utils import _standard_normal, lazy_property

__all__ = ["MultivariateNormal"]


def _batch_mv(bmat, bvec):
    """Matrix-vector products over broadcast batch dims."""
    return ember.matmul(bmat, bvec.unsqueeze(-1)).squeeze(-1)


def _batch_mahalanobis(bL, bx):
    """``x^T (L L^T)^-1 x`` for lower-triangular ``L``, over the broadcast batch dims."""
    n = bx.shape[-1]
    batch = tuple(ember.broadcast_shapes(tuple(bL.shape[:-2]), tuple(bx.shape[:-1])))
    L = bL.expand(batch + (n, n))
    x = bx.expand(batch + (n,)).unsqueeze(-1)
    return ember.linalg.solve_triangular(L, x, upper=False).squeeze(-1).square().sum(-1)


def _precision_to_scale_tril(P):
    """Cholesky factor of ``P^-1`` without inverting ``P``: ``Lf = chol(flip(P))``."""
    Lf = ember.linalg.cholesky(ember.flip(P, (-2, -1)))
    L_inv = ember.flip(Lf, (-2, -1)).mT
    eye = ember.eye(P.shape[-1], dtype=P.dtype, device=P.device)
    return ember.linalg.solve_triangular(L_inv, eye, upper=False)


class MultivariateNormal(Distribution):
    """Normal over vectors with mean ``loc`` and covariance ``Sigma``.

    Example:
        >>> import ember.distributions as D
        >>> d = D.MultivariateNormal(ember.zeros(2), covariance_matrix=ember.eye(2))
        >>> round(float(d.log_prob(ember.zeros(2))), 4)
        -1.8379
    """

    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = [m is not None for m in (covariance_matrix, precision_matrix, scale_tril)]
        if sum(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        name, mat = next((n, m) for n, m in zip(
            ("covariance_matrix", "precision_matrix", "scale_tril"),
            (covariance_matrix, precision_matrix, scale_tril)) if m is not None)
        if mat.ndim < 2:
            raise ValueError(f"{name} matrix must be at least two-dimensional, with optional "
                             f"leading batch dimensions")
        batch_shape = tuple(ember.broadcast_shapes(tuple(mat.shape[:-2]),
                                                   tuple(loc.shape[:-1])))
        setattr(self, name, mat.expand(batch_shape + tuple(mat.shape[-2:])))
        self.loc = loc.expand(batch_shape + (loc.shape[-1],))
        super().__init__(batch_shape, self.loc.shape[-1:], validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = ember.linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = Size(batch_shape)
        n = self._event_shape[0]
        new.loc = self.loc.expand(tuple(batch_shape) + (n,))
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, getattr(self, name).expand(tuple(batch_shape) + (n, n)))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _full(self):
        return tuple(self._batch_shape) + tuple(self._event_shape) * 2

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._full())

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return ember.matmul(L, L.mT).expand(self._full())

    @lazy_property
    def precision_matrix(self):
        L = self._unbroadcasted_scale_tril
        eye = ember.eye(L.shape[-1], dtype=L.dtype, device=L.device)
        L_inv = ember.linalg.solve_triangular(L, eye, upper=False)
        return ember.matmul(L_inv.mT, L_inv).expand(self._full())

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.square().sum(-1).expand(
            tuple(self._batch_shape) + tuple(self._event_shape))

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(shape, self.loc.dtype, self.loc.device)
        return self.loc + _batch_mv(self._unbroadcasted_scale_tril, eps)

    def _half_log_det(self):
        return self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        n = self._event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + M) - self._half_log_det()

    def entropy(self):
        n = self._event_shape[0]
        H = 0.5 * n * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return H.expand(tuple(self._batch_shape)) if self._batch_shape else H
