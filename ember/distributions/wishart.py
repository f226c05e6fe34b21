"""The Wishart distribution over positive definite matrices (``torch.distributions.Wishart``),
parameterised like MultivariateNormal by one of ``covariance_matrix``, ``precision_matrix``
or ``scale_tril`` plus degrees of freedom ``df`` (> p - 1). ``rsample`` is Bartlett's
decomposition ``L A A^T L^T`` (``A`` lower triangular, chi-distributed diagonal through
``Chi2.rsample``), so samples are differentiable in every parameter."""
from __future__ import annotations

import math

import ember
from ember.tensor import Size

from . import constraints
from .distribution import Distribution
from .gamma import Chi2
from .multivariate_normal import _precision_to_scale_tril
from .utils import _standard_normal, lazy_property

__all__ = ["Wishart"]


def _mvdigamma(a, p: int):
    """Multivariate digamma ``sum_{i<p} digamma(a - i/2)``."""
    i = ember.arange(p, dtype=a.dtype, device=a.device)
    return ember.digamma(a.unsqueeze(-1) - i / 2).sum(-1)


class Wishart(Distribution):
    """Wishart with ``df`` degrees of freedom and scale matrix ``Sigma`` (p x p).

    Example:
        >>> import ember.distributions as D
        >>> d = D.Wishart(ember.tensor(5.0), covariance_matrix=ember.eye(2))
        >>> d.mean.tolist()
        [[5.0, 0.0], [0.0, 5.0]]
    """

    arg_constraints = {"covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky,
                       "df": constraints.greater_than(0)}
    support = constraints.positive_definite
    has_rsample = True

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        given = [(n, m) for n, m in (("covariance_matrix", covariance_matrix),
                                     ("precision_matrix", precision_matrix),
                                     ("scale_tril", scale_tril)) if m is not None]
        if len(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        name, mat = given[0]
        if mat.ndim < 2:
            raise ValueError("scale_tril must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        df = df if isinstance(df, ember.Tensor) else ember.tensor(float(df), dtype=mat.dtype)
        p = mat.shape[-1]
        batch_shape = tuple(ember.broadcast_shapes(tuple(mat.shape[:-2]), tuple(df.shape)))
        setattr(self, name, mat.expand(batch_shape + (p, p)))
        self.df = df.expand(batch_shape)
        super().__init__(batch_shape, (p, p), validate_args=validate_args)
        if self._validate_args and not bool((self.df > p - 1).all()):
            raise ValueError(f"Value of df={df} expected to be greater than ndim - 1 = {p - 1}.")
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = ember.linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)
        # NOTE: Bartlett: A_ii^2 ~ chi2(df - i)
        i = ember.arange(p, dtype=self.df.dtype, device=self.df.device)
        self._dist_chi2 = Chi2(self.df.unsqueeze(-1) - i, validate_args=False)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Wishart, _instance)
        batch_shape = Size(batch_shape)
        p = self._event_shape[-1]
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        new.df = self.df.expand(tuple(batch_shape))
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, getattr(self, name).expand(tuple(batch_shape) + (p, p)))
        new._dist_chi2 = self._dist_chi2.expand(tuple(batch_shape) + (p,))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _full(self):
        return tuple(self._batch_shape) + tuple(self._event_shape)

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._full())

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return (L @ L.mT).expand(self._full())

    @lazy_property
    def precision_matrix(self):
        L = self._unbroadcasted_scale_tril
        eye = ember.eye(L.shape[-1], dtype=L.dtype, device=L.device)
        L_inv = ember.linalg.solve_triangular(L, eye, upper=False)
        return (L_inv.mT @ L_inv).expand(self._full())

    @property
    def mean(self):
        return self.df.reshape(tuple(self.df.shape) + (1, 1)) * self.covariance_matrix

    @property
    def mode(self):
        p = self._event_shape[-1]
        factor = (self.df - p - 1).reshape(tuple(self.df.shape) + (1, 1))
        return ember.where(factor > 0, factor * self.covariance_matrix, math.nan)

    @property
    def variance(self):
        V = self.covariance_matrix
        diag = V.diagonal(dim1=-2, dim2=-1)
        return self.df.reshape(tuple(self.df.shape) + (1, 1)) * (
            V.square() + diag.unsqueeze(-1) * diag.unsqueeze(-2))

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        noise = _standard_normal(shape, self.df.dtype, self.df.device).tril(-1)
        chi = self._dist_chi2.rsample(sample_shape).sqrt()
        LA = self._unbroadcasted_scale_tril @ (noise + ember.diag_embed(chi))
        return LA @ LA.mT

    def _log_det_scale(self):
        return 2 * self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        p = self._event_shape[-1]
        nu = self.df
        L = self._unbroadcasted_scale_tril
        batch = tuple(ember.broadcast_shapes(tuple(L.shape[:-2]), tuple(value.shape[:-2])))
        # NOTE: tr(Sigma^-1 X) = ||L^-1 chol(X)||_F^2
        lx = ember.linalg.cholesky(value)
        M = ember.linalg.solve_triangular(L.expand(batch + (p, p)), lx.expand(batch + (p, p)),
                                          upper=False)
        log_det_x = 2 * lx.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return (0.5 * (nu - p - 1) * log_det_x - 0.5 * M.square().sum((-2, -1))
                - 0.5 * nu * p * math.log(2) - 0.5 * nu * self._log_det_scale()
                - ember.mvlgamma(0.5 * nu, p))

    def entropy(self):
        p = self._event_shape[-1]
        nu = self.df
        return (0.5 * (p + 1) * self._log_det_scale() + 0.5 * p * (p + 1) * math.log(2)
                + ember.mvlgamma(0.5 * nu, p) - 0.5 * (nu - p - 1) * _mvdigamma(0.5 * nu, p)
                + 0.5 * nu * p)
