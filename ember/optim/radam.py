"""RAdam, rectified Adam (``torch.optim.RAdam``, Liu et al. 2019; PyTorch's formulas)."""
from __future__ import annotations

from ..ops.factories import zeros_like
from . import _ops as O
from .adam import _AdamBase, _advance, _new_step

__all__ = ["RAdam"]


class RAdam(_AdamBase):
    """RAdam (``torch.optim.RAdam``): Adam whose adaptive step is switched on only once
    the variance of the adaptive learning rate is tractable.

    With ``rho_inf = 2 / (1 - beta2) - 1`` and
    ``rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t)``::

        m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
        m_hat = m / (1 - beta1**t)
        p = p - lr * m_hat * r_t * sqrt(1 - beta2**t) / (sqrt(v) + eps)   (rho_t > 5)
        p = p - lr * m_hat                                                (otherwise)

    where ``r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))``.
    ``decoupled_weight_decay=True`` multiplies ``p`` by ``1 - lr * weight_decay`` instead of
    adding ``weight_decay * p`` to the gradient. ``foreach``, ``capturable`` and
    ``differentiable`` are accepted for PyTorch compatibility (one implementation serves all).

    Example:
        >>> opt = ember.optim.RAdam(model.parameters(), lr=1e-3, weight_decay=1e-2,
        ...                         decoupled_weight_decay=True)
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0,
                 decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _state_keys(self, group) -> tuple:
        return ("step", "exp_avg", "exp_avg_sq")

    def _update_group(self, group) -> None:
        eps, wd = group["eps"], group["weight_decay"]
        lr = self._hyper(group, "lr")
        beta1, beta2 = group["betas"]
        for p, g, state in self._grads(group):
            if not state:
                state["step"] = _new_step(p, group)
                state["exp_avg"] = zeros_like(p)
                state["exp_avg_sq"] = zeros_like(p)
            if group["maximize"]:
                g = O.neg(g)
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            step = _advance(state)
            if wd != 0:
                if group["decoupled_weight_decay"]:
                    p.mul_(1 - lr * wd)
                else:
                    g = O.add(g, p, alpha=wd)
            O.lerp_(exp_avg, g, 1 - beta1)
            O.addcmul_(exp_avg_sq.mul_(beta2), g, g, value=1 - beta2)
            _rectified_update(p, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps)


def _rectified_update(p, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps) -> None:
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    m_hat = O.div(exp_avg, bias_correction1)
    rho_inf = 2 / (1 - beta2) - 1
    rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2

    def rect():
        return ((rho_t - 4) * (rho_t - 2) * rho_inf
                / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5

    def adaptive_lr():
        return (bias_correction2 ** 0.5) / O.sqrt(exp_avg_sq).add_(eps)

    if isinstance(rho_t, float):
        if rho_t > 5.0:
            p.add_(m_hat * lr * adaptive_lr() * rect(), alpha=-1.0)
        else:
            p.add_(m_hat * lr, alpha=-1.0)
        return
    # NOTE: while ember.compile traces, the step is a tensor: PyTorch's capturable branch
    from ..ops.select import where
    update = where(rho_t > 5.0, rect() * adaptive_lr(), 1.0)
    p.add_(m_hat * lr * update, alpha=-1.0)
