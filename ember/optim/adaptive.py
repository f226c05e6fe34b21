"""Per-coordinate adaptive methods: RMSprop, Adagrad and Adadelta (PyTorch's formulas)."""
from __future__ import annotations

from ..ops.factories import full_like, zeros_like
from . import _ops as O
from .adam import _advance, _new_step
from .optimizer import Optimizer, _check

__all__ = ["RMSprop", "Adagrad", "Adadelta"]


def _check_common(group) -> None:
    _check(group["eps"] >= 0.0, "epsilon value", group["eps"])
    _check(group["weight_decay"] >= 0.0, "weight_decay value", group["weight_decay"])


class RMSprop(Optimizer):
    """RMSprop (``torch.optim.RMSprop``; Hinton's lecture 6e, eps outside the root)::

        v = alpha * v + (1 - alpha) * g * g
        a = sqrt(v - mean_g**2) + eps  (centered, mean_g = EMA of g)  else  sqrt(v) + eps
        b = momentum * b + g / a;  p = p - lr * b      (momentum > 0)
        p = p - lr * g / a                             (otherwise)

    Example:
        >>> opt = ember.optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9)
    """

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False,
                 capturable: bool = False, foreach=None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                        momentum=momentum, centered=centered, foreach=foreach,
                        maximize=maximize, capturable=capturable,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        _check_common(group)
        _check(group["momentum"] >= 0.0, "momentum value", group["momentum"])
        _check(group["alpha"] >= 0.0, "alpha value", group["alpha"])

    def _state_keys(self, group) -> tuple:
        return ("step", "square_avg") + (("momentum_buffer",) if group["momentum"] > 0 else ()) \
            + (("grad_avg",) if group["centered"] else ())

    def _update_group(self, group) -> None:
        alpha, eps, wd = group["alpha"], group["eps"], group["weight_decay"]
        lr = self._hyper(group, "lr")
        momentum, centered = group["momentum"], group["centered"]
        for p, g, state in self._grads(group):
            if not state:
                state["step"] = _new_step(p, group)
                state["square_avg"] = zeros_like(p)
                if momentum > 0:
                    state["momentum_buffer"] = zeros_like(p)
                if centered:
                    state["grad_avg"] = zeros_like(p)
            if group["maximize"]:
                g = O.neg(g)
            _advance(state)
            if wd != 0:
                g = O.add(g, p, alpha=wd)
            square_avg = state["square_avg"]
            O.addcmul_(square_avg.mul_(alpha), g, g, value=1 - alpha)
            if centered:
                grad_avg = O.lerp_(state["grad_avg"], g, 1 - alpha)
                avg = O.sqrt_(O.addcmul_(O.clone(square_avg), grad_avg, grad_avg, value=-1))
            else:
                avg = O.sqrt(square_avg)
            avg.add_(eps)
            if momentum > 0:
                buf = O.addcdiv_(state["momentum_buffer"].mul_(momentum), g, avg)
                p.add_(buf, alpha=-lr)
            else:
                O.addcdiv_(p, g, avg, value=-lr)


class Adagrad(Optimizer):
    """Adagrad (``torch.optim.Adagrad``)::

        s = s + g * g;  p = p - lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)

    State is created for every parameter at construction (as in PyTorch), ``s`` starting at
    ``initial_accumulator_value``.

    Example:
        >>> opt = ember.optim.Adagrad(model.parameters(), lr=1e-2)
    """

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach=None, *,
                 maximize: bool = False, differentiable: bool = False, fused=None) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, group)

    def _state_keys(self, group) -> tuple:
        return ("step", "sum")

    def _init_state(self, p, group) -> None:
        state = self.state[p]
        if not state:
            state["step"] = _new_step(p, group)
            state["sum"] = full_like(p, group["initial_accumulator_value"])

    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        _check_common(group)
        _check(group["lr_decay"] >= 0.0, "lr_decay value", group["lr_decay"])
        _check(group["initial_accumulator_value"] >= 0.0, "initial_accumulator_value value",
               group["initial_accumulator_value"])

    def _update_group(self, group) -> None:
        eps, wd, lr_decay = group["eps"], group["weight_decay"], \
            group["lr_decay"]
        lr = self._hyper(group, "lr")
        for p, g, state in self._grads(group):
            self._init_state(p, group)
            step = _advance(state)
            if group["maximize"]:
                g = O.neg(g)
            if wd != 0:
                g = O.add(g, p, alpha=wd)
            clr = lr / (1 + (step - 1) * lr_decay)
            s = O.addcmul_(state["sum"], g, g)
            std = O.sqrt(s).add_(eps)
            O.addcdiv_(p, g, std, value=-clr)


class Adadelta(Optimizer):
    """Adadelta (``torch.optim.Adadelta``, Zeiler 2012)::

        v = rho * v + (1 - rho) * g * g
        d = sqrt(u + eps) / sqrt(v + eps) * g
        u = rho * u + (1 - rho) * d * d
        p = p - lr * d

    Example:
        >>> opt = ember.optim.Adadelta(model.parameters(), lr=1.0, rho=0.9)
    """

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0, foreach=None, *, capturable: bool = False,
                 maximize: bool = False, differentiable: bool = False) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, capturable=capturable,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        _check_common(group)
        _check(0.0 <= group["rho"] <= 1.0, "rho value", group["rho"])

    def _state_keys(self, group) -> tuple:
        return ("step", "square_avg", "acc_delta")

    def _update_group(self, group) -> None:
        rho, eps, wd = group["rho"], group["eps"], group["weight_decay"]
        lr = self._hyper(group, "lr")
        for p, g, state in self._grads(group):
            if not state:
                state["step"] = _new_step(p, group)
                state["square_avg"] = zeros_like(p)
                state["acc_delta"] = zeros_like(p)
            _advance(state)
            if group["maximize"]:
                g = O.neg(g)
            if wd != 0:
                g = O.add(g, p, alpha=wd)
            square_avg, acc_delta = state["square_avg"], state["acc_delta"]
            O.addcmul_(square_avg.mul_(rho), g, g, value=1 - rho)
            std = O.sqrt_(O.add(square_avg, eps))
            delta = O.sqrt_(O.add(acc_delta, eps))
            O.div_(delta, std).mul_(g)
            O.addcmul_(acc_delta.mul_(rho), delta, delta, value=1 - rho)
            p.add_(delta, alpha=-lr)
