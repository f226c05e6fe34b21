"""Warm restarts, one-cycle, plateau and composed schedulers (``torch.optim.lr_scheduler``)."""
from __future__ import annotations

import math
import warnings
from bisect import bisect_right
from typing import Any, Sequence

from ._lr_base import (EPOCH_DEPRECATION_WARNING, LRScheduler, _Flag, _format_param,
                       _group_lrs)
from .optimizer import Optimizer

__all__ = ["CosineAnnealingWarmRestarts", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR",
           "ChainedScheduler"]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing restarted every ``T_i`` epochs, ``T_0`` first then ``T_i *= T_mult``
    (SGDR, Loshchilov & Hutter 2017): ``lr = eta_min + (base - eta_min)(1 + cos(pi T_cur/T_i))/2``.

    ``step(epoch)`` accepts fractional epochs, e.g. ``sched.step(epoch + i / iters)``.

    Example:
        >>> sched = CosineAnnealingWarmRestarts(opt, T_0=10, T_mult=2, eta_min=1e-5)
    """

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1):
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(f"Expected float or int eta_min, but got {eta_min} of type "
                             f"{type(eta_min).__name__}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        self._warn_get_lr()
        c = (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch, or set the (possibly fractional) ``epoch``."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i *= self.T_mult
        elif epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        elif epoch >= self.T_0:
            if self.T_mult == 1:
                self.T_cur = epoch % self.T_0
            else:
                n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                self.T_i = self.T_0 * self.T_mult ** n
        else:
            self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        with _Flag(self, "_get_lr_called_within_step"):
            for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
                group["lr"] = lr
        self._last_lr = _group_lrs(self.optimizer)


def _one_cycle_phases(total: int, pct: float, three_phase: bool) -> list[dict]:
    def ph(end, lr0, lr1, m0, m1):
        return {"end_step": end, "start_lr": lr0, "end_lr": lr1, "start_momentum": m0,
                "end_momentum": m1}
    up = float(pct * total) - 1
    if three_phase:
        return [ph(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                ph(float(2 * pct * total) - 2, "max_lr", "initial_lr", "base_momentum",
                   "max_momentum"),
                ph(total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
    return [ph(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
            ph(total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]


class _MomentumCycling:
    """Mixin of the schedulers that cycle the momentum (or Adam's ``beta1``) of each group."""

    def _check_momentum(self, optimizer) -> None:
        if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
            raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` "
                             "option enabled")
        self.use_beta1 = "betas" in optimizer.defaults
        # NOTE: a momentum/beta1 that changes every step would be a new compiled update
        # every step: the optimizer keeps its per-parameter loop (optim/_fused.py), from
        # its first step on, so a run resumed from a checkpoint takes the same path.
        optimizer.__dict__["_fused_off"] = f"{type(self).__name__} cycles its momentum"

    def _start_momentum(self, optimizer, maxs, bases, last_epoch) -> None:
        if last_epoch == -1:
            for m, b, group in zip(maxs, bases, optimizer.param_groups, strict=True):
                self._set_momentum(group, m)
                group["max_momentum"], group["base_momentum"] = m, b

    def _set_momentum(self, group, m) -> None:
        if self.use_beta1:
            group["betas"] = (m, *group["betas"][1:])
        else:
            group["momentum"] = m


class OneCycleLR(_MomentumCycling, LRScheduler):
    """The 1cycle policy (Smith & Topin 2018), stepped once per *batch*.

    The lr rises from ``max_lr / div_factor`` to ``max_lr`` over ``pct_start`` of the
    ``total_steps`` (or ``epochs * steps_per_epoch``), then anneals (``"cos"`` or
    ``"linear"``) to ``initial_lr / final_div_factor``; ``three_phase`` goes back down to
    ``initial_lr`` first. With ``cycle_momentum`` the momentum (or Adam's ``beta1``) moves
    inversely between ``max_momentum`` and ``base_momentum``.

    Example:
        >>> sched = OneCycleLR(opt, max_lr=0.1, epochs=10, steps_per_epoch=len(loader))
    """

    def __init__(self, optimizer, max_lr, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        self.total_steps = _total_steps(total_steps, epochs, steps_per_epoch)
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._schedule_phases = _one_cycle_phases(self.total_steps, pct_start, three_phase)
        self._anneal_func_type = anneal_strategy
        max_lrs = _format_param("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for m, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = m / div_factor
                group["max_lr"] = m
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self._init_momentum(optimizer, base_momentum, max_momentum, last_epoch)
        super().__init__(optimizer, last_epoch)

    def _init_momentum(self, optimizer, base_momentum, max_momentum, last_epoch) -> None:
        self._check_momentum(optimizer)
        maxs = _format_param("max_momentum", optimizer, max_momentum)
        bases = _format_param("base_momentum", optimizer, base_momentum)
        self._start_momentum(optimizer, maxs, bases, last_epoch)

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        self._warn_get_lr()
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps "
                             f"is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, ph in enumerate(self._schedule_phases):
                end = ph["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal(group[ph["start_lr"]], group[ph["end_lr"]], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(
                            group[ph["start_momentum"]], group[ph["end_momentum"]], pct))
                    break
                start = end
        return lrs


def _total_steps(total_steps, epochs, steps_per_epoch) -> int:
    if total_steps is not None:
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        return total_steps
    if epochs is not None and steps_per_epoch is not None:
        if not isinstance(epochs, int) or epochs <= 0:
            raise ValueError(f"Expected positive integer epochs, but got {epochs}")
        if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
            raise ValueError(f"Expected positive integer steps_per_epoch, but got "
                             f"{steps_per_epoch}")
        return epochs * steps_per_epoch
    raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by ``factor`` when a metric has stopped improving for ``patience`` epochs.

    ``step(metric)`` takes the monitored value (``mode="min"`` for a loss, ``"max"`` for an
    accuracy). Improvement means ``a < best * (1 - threshold)`` (``"rel"``) or
    ``a < best - threshold`` (``"abs"``); after a reduction, ``cooldown`` epochs are ignored;
    lrs never go below ``min_lr``, and changes smaller than ``eps`` are skipped.

    Example:
        >>> sched = ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=3)
        >>> for epoch in range(50):
        ...     val_loss = train_and_validate(); sched.step(val_loss)
    """

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr=0, eps: float = 1e-8):
        if factor >= 1.0:
            raise ValueError(f"Factor should be < 1.0, got {factor}.")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.factor, self.optimizer = factor, optimizer
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(optimizer.param_groups):
                raise ValueError(f"expected {len(optimizer.param_groups)} min_lrs, got "
                                 f"{len(min_lr)}")
            self.default_min_lr, self.min_lrs = None, list(min_lr)
        else:
            self.default_min_lr, self.min_lrs = min_lr, [min_lr] * len(optimizer.param_groups)
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.last_epoch = 0
        self._last_lr = _group_lrs(optimizer)
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics, epoch=None) -> None:  # type: ignore[override]
        """Record this epoch's metric value and reduce the lr if it plateaued."""
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # NOTE: bad epochs in cooldown don't count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _group_lrs(self.optimizer)

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(f"The number of param groups in the `optimizer` "
                                   f"({len(groups)}) differs from when `ReduceLROnPlateau` was "
                                   f"initialized ({len(self.min_lrs)}); set `min_lrs` to match.")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for i, group in enumerate(groups):
            old = float(group["lr"])
            new = max(old * self.factor, self.min_lrs[i])
            if old - new > self.eps:
                group["lr"] = new

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < best * (1.0 - self.threshold) if self.threshold_mode == "rel" else \
                a < best - self.threshold
        return a > best * (self.threshold + 1.0) if self.threshold_mode == "rel" else \
            a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode} is unknown! (expected 'min' or 'max')")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold mode {threshold_mode} is unknown! (expected 'rel' "
                             "or 'abs')")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)


def _check_schedulers(name: str, optimizer, schedulers) -> None:
    if len(schedulers) < 1:
        raise ValueError(f"{name} expects at least one scheduler, but got no scheduler.")
    for i, s in enumerate(schedulers):
        if not hasattr(s, "optimizer"):
            raise TypeError(f"{name} at index {i} should have `optimizer` as its attribute.")
        if isinstance(s, ReduceLROnPlateau):
            raise ValueError(f"{name} does not support `ReduceLROnPlateau` scheduler as it "
                             "requires additional kwargs to be specified when calling `step`, "
                             f"but got one at index {i} in the given schedulers sequence.")
        if s.optimizer is not optimizer:
            raise ValueError(f"{name} expects all schedulers to belong to the same optimizer, "
                             f"but got scheduler {type(s).__name__} at index {i} with a "
                             "different optimizer.")


class _ComposedState:
    """state_dict of a scheduler made of schedulers: theirs are nested under ``_schedulers``."""

    _EXCLUDE = ("optimizer", "_schedulers")

    def state_dict(self) -> dict[str, Any]:
        sd = LRScheduler.state_dict(self)
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        LRScheduler.load_state_dict(self, state_dict)
        for s, sd in zip(self._schedulers, state_dict["_schedulers"]):
            s.load_state_dict(sd)


class SequentialLR(_ComposedState, LRScheduler):
    """Run ``schedulers`` one after another, switching at the epochs in ``milestones``.

    Example (linear warm-up for 5 epochs, then cosine decay):
        >>> warmup = LinearLR(opt, start_factor=0.01, total_iters=5)
        >>> decay = CosineAnnealingLR(opt, T_max=95)
        >>> sched = SequentialLR(opt, schedulers=[warmup, decay], milestones=[5])
    """

    def __init__(self, optimizer, schedulers: list, milestones: list[int], last_epoch=-1):
        _check_schedulers(type(self).__name__, optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be "
                             "one more than the number of milestone points, but got number of "
                             f"schedulers {len(schedulers)} and the number of milestones to be "
                             f"equal to {len(milestones)}")
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:   # NOTE: undo the sub-schedulers' initial steps
            group["lr"] = group["initial_lr"]
        for s in self._schedulers:
            _undo(s)
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = self._schedulers[idx].get_last_lr()

    def step(self) -> None:  # type: ignore[override]
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            s._update_lr(0)
        else:
            s.step()
        self._last_lr = s.get_last_lr()


def _undo(s) -> None:
    if hasattr(s, "_schedulers"):
        for c in s._schedulers:
            _undo(c)
    elif hasattr(s, "last_epoch"):
        s.last_epoch -= 1


class ChainedScheduler(_ComposedState, LRScheduler):
    """Step several schedulers together each epoch (their factors multiply).

    Example:
        >>> sched = ChainedScheduler([ConstantLR(opt, 0.1, total_iters=2),
        ...                           ExponentialLR(opt, gamma=0.9)])
    """

    def __init__(self, schedulers: Sequence, optimizer: Optimizer | None = None):
        optimizer = optimizer or (schedulers[0].optimizer if len(schedulers) else None)
        _check_schedulers(type(self).__name__, optimizer, schedulers)
        self._schedulers, self.optimizer = list(schedulers), optimizer
        self._last_lr = _group_lrs(self._schedulers[-1].optimizer)

    def step(self) -> None:  # type: ignore[override]
        for s in self._schedulers:
            s.step()
        self._last_lr = _group_lrs(self._schedulers[-1].optimizer)
