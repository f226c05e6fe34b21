"""``ExponentialFamily`` (``torch.distributions.ExponentialFamily``): densities
``p(x) = h(x) exp(<t(x), theta> - F(theta))``. A family that gives its natural parameters
``theta`` (``_natural_params``), its log-normaliser ``F`` (``_log_normalizer``) and
``E[log h(x)]`` (``_mean_carrier_measure``) gets ``entropy`` and the KL divergence to its own
family as Bregman divergences of ``F``, differentiated by Ember's autograd. Ember's built-in
families override both with closed forms; this is what a user-defined family inherits."""
from __future__ import annotations

import ember

from .distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    """Base of exponential-family distributions (see the module docstring).

    Example:
        >>> import ember.distributions as D
        >>> d = D.Normal(ember.tensor([0.0]), ember.tensor([2.0]))
        >>> h = D.ExponentialFamily.entropy(d)      # the Bregman form
        >>> bool(((h - d.entropy()).abs() < 1e-6).all())
        True
    """

    @property
    def _natural_params(self):
        """The natural parameters ``theta`` as a tuple of tensors."""
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        """The log-normaliser ``F(theta)`` (batch shaped)."""
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self):
        """``E[log h(x)]``."""
        raise NotImplementedError

    def entropy(self):
        """``F(theta) - <theta, grad F(theta)> - E[log h(x)]``."""
        nparams = [p.detach().requires_grad_(True) for p in self._natural_params]
        with ember.enable_grad():
            lg = self._log_normalizer(*nparams)
            grads = ember.autograd.grad(lg.sum(), nparams, create_graph=True)
        result = lg - self._mean_carrier_measure
        for theta, g in zip(nparams, grads):
            result = result - (theta * g).reshape(tuple(self._batch_shape) + (-1,)).sum(-1)
        return result


def _kl_expfamily_expfamily(p, q):
    """Bregman divergence ``F(theta_q) - F(theta_p) - <theta_q - theta_p, grad F(theta_p)>``
    (both of one family)."""
    from .utils import _sum_rightmost
    if type(p) is not type(q):
        raise NotImplementedError("The cross KL-divergence between different exponential "
                                  "families cannot be computed using Bregman divergences")
    p_params = [t.detach().requires_grad_(True) for t in p._natural_params]
    with ember.enable_grad():
        lg = p._log_normalizer(*p_params)
        grads = ember.autograd.grad(lg.sum(), p_params)
    q_params = q._natural_params
    result = q._log_normalizer(*q_params) - lg
    for pn, qn, g in zip(p_params, q_params, grads):
        result = result - _sum_rightmost((qn - pn) * g, len(q.event_shape))
    return result
