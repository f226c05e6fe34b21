"""Muon, momentum orthogonalised by Newton-Schulz (``torch.optim.Muon``; PyTorch's variant)."""
from __future__ import annotations

import math

from .. import dtypes as _dt
from ..ops.factories import zeros_like
from . import _ops as O
from .optimizer import Optimizer

__all__ = ["Muon"]

EPS = 1e-7
DEFAULT_A, DEFAULT_B, DEFAULT_C = 3.4445, -4.7750, 2.0315
DEFAULT_NS_STEPS = 5


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _zeropower_via_newtonschulz(grad, ns_coefficients, ns_steps: int, eps: float):
    """An approximately orthogonal matrix with ``grad``'s row/column spaces, by
    ``ns_steps`` quintic Newton-Schulz iterations in bfloat16 (as PyTorch)."""
    from ..ops.linalg import addmm
    _require(ns_steps < 100, "Number of steps must be less than 100 for computational "
                             "efficiency")
    _require(grad.ndim == 2, f"Input tensor gradient must be a 2D matrix, got shape "
                             f"{tuple(grad.shape)}")
    _require(len(ns_coefficients) == 3, "Coefficients must be a tuple of exactly 3 values")
    a, b, c = ns_coefficients
    x = grad.to(_dt.bfloat16)
    tall = grad.shape[0] > grad.shape[1]
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        gram_update = addmm(gram, gram, gram, beta=b, alpha=c)
        x = addmm(x, gram_update, x, beta=a)
    return x.T if tall else x


def _adjust_lr(lr: float, adjust_lr_fn, shape) -> float:
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        ratio = math.sqrt(max(1, rows / cols))
    elif adjust_lr_fn == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(rows, cols))
    else:
        ratio = 1.0
    return lr * ratio


class Muon(Optimizer):
    """Muon (``torch.optim.Muon``) for 2-D parameters::

        b = lerp(b, g, 1 - momentum);  u = lerp(g, b, momentum) (nesterov) else b
        p = p * (1 - lr * weight_decay) - lr' * NewtonSchulz(u)

    with ``lr' = lr * sqrt(max(1, rows / cols))`` (``adjust_lr_fn="original"``/None) or
    ``0.2 * lr * sqrt(max(rows, cols))`` (``"match_rms_adamw"``).

    Example:
        >>> opt = ember.optim.Muon([lin.weight], lr=2e-2)
    """

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1,
                 momentum: float = 0.95, nesterov: bool = True,
                 ns_coefficients: tuple = (DEFAULT_A, DEFAULT_B, DEFAULT_C), eps: float = EPS,
                 ns_steps: int = DEFAULT_NS_STEPS, adjust_lr_fn: str | None = None) -> None:
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                        nesterov=nesterov, ns_coefficients=ns_coefficients, eps=eps,
                        ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                _require(p.ndim == 2, "Muon only supports 2D parameters whereas we found a "
                                      f"parameter with size: {tuple(p.shape)}")

    def _validate_group(self, group) -> None:
        lr = group["lr"]
        _require(not isinstance(lr, (int, float)) or lr >= 0.0,
                 f"Learning rate should be >= 0 but is: {lr}")
        super()._validate_group(group)
        _require(group["momentum"] >= 0.0,
                 f"momentum should be >= 0 but is: {group['momentum']}")
        _require(group["weight_decay"] >= 0.0,
                 f"weight decay should be >= 0 but is: {group['weight_decay']}")
        _require(group["adjust_lr_fn"] in (None, "original", "match_rms_adamw"),
                 f"Adjust learning rate function {group['adjust_lr_fn']} is not supported "
                 "(valid: None, 'original', 'match_rms_adamw')")

    _complex_as_real = False   # NOTE: refuses complex parameters (below), as PyTorch

    def _state_keys(self, group) -> tuple:
        return ("momentum_buffer",)

    def _update_group(self, group) -> None:
        lr, wd, momentum = group["lr"], group["weight_decay"], group["momentum"]
        for p, g, state in self._grads(group):
            if p.dtype.is_complex:
                raise RuntimeError("Muon does not support complex parameters")
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = zeros_like(g)
            buf = O.lerp_(state["momentum_buffer"], g, 1 - momentum)
            update = O.lerp_(O.clone(g), buf, momentum) if group["nesterov"] else buf
            update = _zeropower_via_newtonschulz(update, group["ns_coefficients"],
                                                 group["ns_steps"], group["eps"])
            adjusted_lr = _adjust_lr(lr, group["adjust_lr_fn"], p.shape)
            p.mul_(1 - lr * wd)
            p.add_(update, alpha=-adjusted_lr)
