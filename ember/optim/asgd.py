"""ASGD, averaged stochastic gradient descent (``torch.optim.ASGD``; PyTorch's formulas)."""
from __future__ import annotations

from ..ops.factories import ones, tensor, zeros_like
from . import _ops as O
from .adam import _advance, _new_step
from .optimizer import Optimizer, _check, _scalar_dtype

__all__ = ["ASGD"]


class ASGD(Optimizer):
    """ASGD (``torch.optim.ASGD``, Polyak & Juditsky 1992), with PyTorch's schedule::

        p = p * (1 - lambd * eta) - eta * g
        ax = ax + mu * (p - ax)            (ax = p while mu == 1)
        eta = lr / (1 + lambd * lr * t) ** alpha;  mu = 1 / max(1, t - t0)

    ``state[p]["ax"]`` is the running average of the iterates (what ASGD returns as its
    estimate). ``foreach``, ``capturable`` and ``differentiable`` are accepted for PyTorch
    compatibility.

    Example:
        >>> opt = ember.optim.ASGD(model.parameters(), lr=1e-2, t0=100)
    """

    def __init__(self, params, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75,
                 t0: float = 1e6, weight_decay: float = 0, foreach=None,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        _check(group["weight_decay"] >= 0.0, "weight_decay value", group["weight_decay"])
        _check(group["lambd"] >= 0.0, "lambd value", group["lambd"])

    def _state_keys(self, group) -> tuple:
        return ("step", "eta", "mu", "ax")

    def _update_group(self, group) -> None:
        lr, lambd, alpha, t0 = group["lr"], group["lambd"], group["alpha"], group["t0"]
        wd = group["weight_decay"]
        for p, g, state in self._grads(group):
            if not state:
                state["step"] = _new_step(p, group)
                state["eta"] = tensor(float(lr), dtype=_scalar_dtype(), device=p.device)
                state["mu"] = ones((), dtype=_scalar_dtype(), device=p.device)
                state["ax"] = zeros_like(p)
            if group["maximize"]:
                g = O.neg(g)
            step = _advance(state)
            if wd != 0:
                g = O.add(g, p, alpha=wd)
            eta, mu, ax = state["eta"], state["mu"], state["ax"]
            eta_value = eta.item()
            p.mul_(1 - lambd * eta_value)
            p.add_(g, alpha=-eta_value)
            if mu.item() != 1:
                ax.add_(O.add(p, ax, alpha=-1).mul_(mu.item()))
            else:
                ax.copy_(p)
            eta.fill_(lr / ((1 + lambd * lr * step) ** alpha))
            mu.fill_(1 / max(1, step - t0))
