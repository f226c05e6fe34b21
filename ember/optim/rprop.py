"""Rprop, resilient backpropagation (``torch.optim.Rprop``; PyTorch's formulas)."""
from __future__ import annotations

from ..ops.factories import full_like, zeros_like
from ..ops.select import where
from . import _ops as O
from .adam import _advance, _new_step
from .optimizer import Optimizer, _check

__all__ = ["Rprop"]


class Rprop(Optimizer):
    """Rprop (``torch.optim.Rprop``): per-coordinate step sizes adapted from gradient signs.

    With ``s = sign(g * g_prev)``::

        step_size = clamp(step_size * (etaplus if s > 0, etaminus if s < 0, 1 if s == 0),
                          step_size_min, step_size_max)
        g = 0 where s < 0                     (no move after a sign change)
        p = p - sign(g) * step_size;  g_prev = g

    Step sizes start at ``lr``. ``foreach``, ``capturable`` and ``differentiable`` are
    accepted for PyTorch compatibility.

    Example:
        >>> opt = ember.optim.Rprop(model.parameters(), lr=1e-2, etas=(0.5, 1.2))
    """

    def __init__(self, params, lr: float = 1e-2, etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *, capturable: bool = False,
                 foreach=None, maximize: bool = False, differentiable: bool = False) -> None:
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach,
                        maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        etas = tuple(group["etas"])
        _check(len(etas) == 2 and 0.0 < etas[0] < 1.0 < etas[1],
               "eta values (need 0 < etaminus < 1 < etaplus)", ", ".join(map(str, etas)))
        sizes = tuple(group["step_sizes"])
        _check(len(sizes) == 2 and 0.0 <= sizes[0] <= sizes[1],
               "step_sizes (need 0 <= step_size_min <= step_size_max)",
               ", ".join(map(str, sizes)))

    def _state_keys(self, group) -> tuple:
        return ("step", "prev", "step_size")

    def _update_group(self, group) -> None:
        etaminus, etaplus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        for p, g, state in self._grads(group):
            if not state:
                state["step"] = _new_step(p, group)
                state["prev"] = zeros_like(p)
                state["step_size"] = full_like(g, group["lr"])
            if group["maximize"]:
                g = O.neg(g)
            _advance(state)
            prev, step_size = state["prev"], state["step_size"]
            sign = O.sign(g * prev)
            # NOTE: full_like, not Python scalars: a compiled graph's where() rounds scalar
            # operands to float32 (etaplus 1.2 would drift); etaminus < 1 < etaplus, so
            # "factor == etaminus" (PyTorch's test) is "sign < 0"
            down = sign < 0
            factor = where(down, full_like(sign, etaminus), full_like(sign, 1.0))
            factor = where(sign > 0, full_like(sign, etaplus), factor)
            step_size.mul_(factor).clamp_(step_size_min, step_size_max)
            g = where(down, zeros_like(g), g)
            O.addcmul_(p, O.sign(g), step_size, value=-1)
            prev.copy_(g)
