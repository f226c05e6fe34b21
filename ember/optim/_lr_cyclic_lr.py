"""``CyclicLR``: the cyclical learning-rate policy (``torch.optim.lr_scheduler.CyclicLR``)."""
from __future__ import annotations

import math
import types
from functools import partial
from typing import Any, Callable

from ._lr_base import LRScheduler, _format_param
from ._lr_cyclic import _MomentumCycling
from .optimizer import Optimizer

__all__ = ["CyclicLR"]


class CyclicLR(_MomentumCycling, LRScheduler):
    """Cycles each group's lr between ``base_lr`` and ``max_lr`` (Smith 2017), stepped
    once per *batch*: ``step_size_up`` iterations up, ``step_size_down`` (default the same)
    down. ``mode`` scales the amplitude per cycle: ``"triangular"`` (constant),
    ``"triangular2"`` (halved each cycle) or ``"exp_range"`` (``gamma**iteration``); a
    custom ``scale_fn(x)`` with ``scale_mode`` ``"cycle"`` or ``"iterations"`` overrides it.
    With ``cycle_momentum`` the momentum (or Adam's ``beta1``) cycles inversely between
    ``max_momentum`` and ``base_momentum``.

    Example:
        >>> opt = ember.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        >>> sched = CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=200)
        >>> for batch in loader:
        ...     train_batch(batch); opt.step(); sched.step()
    """

    def __init__(self, optimizer: Optimizer, base_lr, max_lr, step_size_up: int = 2000,
                 step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None,
                 scale_mode: str = "cycle", cycle_momentum: bool = True,
                 base_momentum: float = 0.8, max_momentum: float = 0.9,
                 last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        base_lrs = _format_param("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups, strict=True):
                group["lr"] = lr
        self.max_lrs = _format_param("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        if up <= 0 or down <= 0:
            raise ValueError(f"CyclicLR: step_size_up ({step_size_up}) and step_size_down "
                             f"({step_size_down}) must be > 0")
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"mode is invalid and scale_fn is None (got mode={mode!r}; valid: "
                             "'triangular', 'triangular2', 'exp_range', or pass scale_fn)")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self._init_momentum(optimizer, base_momentum, max_momentum, last_epoch)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_momentum(self, optimizer, base_momentum, max_momentum, last_epoch) -> None:
        self._check_momentum(optimizer)
        self.base_momentums = _format_param("base_momentum", optimizer, base_momentum)
        self.max_momentums = _format_param("max_momentum", optimizer, max_momentum)
        self._start_momentum(optimizer, self.max_momentums, self.base_momentums, last_epoch)

    def _init_scale_fn(self) -> None:
        if self._scale_fn_custom is not None:
            return
        if self.mode == "triangular":
            self._scale_fn_ref, self.scale_mode = self._triangular_scale_fn, "cycle"
        elif self.mode == "triangular2":
            self._scale_fn_ref, self.scale_mode = self._triangular2_scale_fn, "cycle"
        elif self.mode == "exp_range":
            self._scale_fn_ref = partial(self._exp_range_scale_fn, self.gamma)
            self.scale_mode = "iterations"

    def scale_fn(self, x) -> float:
        """The amplitude scale at cycle (or iteration) ``x``."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        return self._scale_fn_ref(x)

    @staticmethod
    def _triangular_scale_fn(x: float) -> float:
        return 1.0

    @staticmethod
    def _triangular2_scale_fn(x: float) -> float:
        return 1 / (2.0 ** (x - 1))

    @staticmethod
    def _exp_range_scale_fn(gamma: float, x: float) -> float:
        return gamma ** x

    def get_lr(self) -> list[float]:
        """The lrs at ``last_epoch`` (and, with ``cycle_momentum``, sets the momenta)."""
        self._warn_get_lr()
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + ((top - base) * scale_factor) * scale
               for base, top in zip(self.base_lrs, self.max_lrs, strict=True)]
        if self.cycle_momentum:
            for group, b, m in zip(self.optimizer.param_groups, self.base_momentums,
                                   self.max_momentums, strict=True):
                self._set_momentum(group, m - ((m - b) * scale_factor) * scale)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        """Like PyTorch's: the built-in scale function is dropped, a custom callable
        object's ``__dict__`` kept (a plain function is stored as ``None``)."""
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("optimizer", "_scale_fn_ref", "_scale_fn_custom")}
        fn = self._scale_fn_custom
        state["_scale_fn_custom"] = None if fn is None or isinstance(fn, types.FunctionType) \
            else dict(fn.__dict__)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; the scale function is rebuilt from ``mode``."""
        state_dict = dict(state_dict)
        fn = state_dict.pop("_scale_fn_custom", None)
        super().load_state_dict(state_dict)
        if fn is not None and self._scale_fn_custom is not None:
            self._scale_fn_custom.__dict__.update(fn)
        self._init_scale_fn()
