"""``LRScheduler``: the base of the learning-rate schedulers (``torch.optim.lr_scheduler``)."""
from __future__ import annotations

import copy
import warnings
from typing import Any

from .optimizer import Optimizer

__all__ = ["LRScheduler"]

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated "
    "where possible. Please use `scheduler.step()` to step the scheduler. During the "
    "deprecation, if epoch is different from None, the closed form is used instead of the "
    "new chainable form, where available.")


def _group_lrs(optimizer: Optimizer, key: str = "lr") -> list:
    return [group[key] for group in optimizer.param_groups]


def _format_param(name: str, optimizer: Optimizer, param) -> list:
    """One value per param group: a scalar is repeated, a list must match the groups."""
    if isinstance(param, (list, tuple)):
        if len(param) != len(optimizer.param_groups):
            raise ValueError(f"{name} must have the same length as optimizer.param_groups. "
                             f"{name} has {len(param)} values, param_groups has "
                             f"{len(optimizer.param_groups)}.")
        return list(param)
    return [param] * len(optimizer.param_groups)


class _Flag:
    """Sets a boolean attribute of a scheduler for the duration of a ``with`` block."""

    def __init__(self, obj, name: str) -> None:
        self.obj, self.name = obj, name

    def __enter__(self):
        setattr(self.obj, self.name, True)

    def __exit__(self, *exc):
        setattr(self.obj, self.name, False)


class LRScheduler:
    """Base class of the learning-rate schedulers.

    At construction, the scheduler records each group's ``initial_lr`` (``base_lrs``) and
    takes its initial step (``last_epoch`` becomes 0). Call ``scheduler.step()`` once per
    epoch (or per iteration, for iteration-based schedules) *after* ``optimizer.step()``.
    Subclasses implement ``get_lr()``, the chainable form: the new lrs from the groups'
    current lrs, so several schedulers can act on one optimizer.

    Example:
        >>> sched = ember.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
        >>> for epoch in range(100):
        ...     train(...); opt.step(); sched.step()
    """

    _get_lr_called_within_step: bool = False
    _is_initial: bool = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   "when resuming a scheduler with last_epoch >= 0 (load the "
                                   "optimizer's state dict first, or use last_epoch=-1)")
        self.base_lrs: list[float] = _group_lrs(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        with _Flag(self, "_is_initial"):
            self.step()

    def get_lr(self) -> list[float]:
        """The lrs for the current ``last_epoch`` (called by ``step()``)."""
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The lrs this scheduler last set, one per param group.

        Example:
            >>> sched.get_last_lr()
            [0.1]
        """
        return self._last_lr

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``, deprecated, using the closed form)."""
        if self._step_count == 1 and not getattr(self.optimizer, "_opt_called", False):
            warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`. "
                          "You should call them in the opposite order: `optimizer.step()` "
                          "before `lr_scheduler.step()`. Failure to do this will result in "
                          "skipping the first value of the learning rate schedule.",
                          UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        with _Flag(self, "_get_lr_called_within_step"):
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed = getattr(self, "_get_closed_form_lr", None)
                values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = _group_lrs(self.optimizer)

    def _warn_get_lr(self) -> None:
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use "
                          "`get_last_lr()`.", UserWarning, stacklevel=3)

    _EXCLUDE: tuple[str, ...] = ("optimizer",)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer (plain values: ints, floats, lists, strings).

        Example:
            >>> sd = sched.state_dict(); sd["last_epoch"]
            0
        """
        return {k: v for k, v in self.__dict__.items() if k not in self._EXCLUDE}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (values are copied).

        Example:
            >>> sched2.load_state_dict(sched.state_dict())
        """
        self.__dict__.update({k: copy.deepcopy(v) for k, v in state_dict.items()
                              if k not in self._EXCLUDE})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, " \
               f"last_lr={getattr(self, '_last_lr', None)})"


class _LambdaStateMixin:
    """state_dict for schedulers holding user callables: only callable objects' ``__dict__``."""

    _EXCLUDE = ("optimizer", "lr_lambdas")

    def state_dict(self) -> dict[str, Any]:
        sd = LRScheduler.state_dict(self)
        sd["lr_lambdas"] = [None if _is_plain_function(fn) else dict(fn.__dict__)
                            for fn in self.lr_lambdas]
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        LRScheduler.load_state_dict(self, state_dict)
        for fn, saved in zip(self.lr_lambdas, state_dict.get("lr_lambdas", ())):
            if saved is not None:
                fn.__dict__.update(saved)


def _is_plain_function(fn) -> bool:
    import types
    return isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)) or \
        not hasattr(fn, "__dict__")
