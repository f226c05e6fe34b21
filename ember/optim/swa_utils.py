"""Stochastic weight averaging and EMA models (``torch.optim.swa_utils``).

Example:
    >>> swa_model = ember.optim.swa_utils.AveragedModel(model)
    >>> sched = ember.optim.swa_utils.SWALR(opt, swa_lr=0.05)
    >>> for epoch in range(100):
    ...     train_one_epoch(model, opt)
    ...     if epoch >= 75:
    ...         swa_model.update_parameters(model); sched.step()
    >>> ember.optim.swa_utils.update_bn(loader, swa_model)
"""
from __future__ import annotations

import itertools
import math
import warnings
from copy import deepcopy
from typing import Any, Callable, Iterable

from ..autograd.grad_mode import no_grad
from ..nn.module import Module
from ..ops.factories import tensor
from ..tensor import Tensor
from . import _ops as O
from ._lr_base import LRScheduler, _format_param

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn",
           "get_swa_multi_avg_fn", "get_ema_avg_fn", "get_swa_avg_fn"]


def _check_decay(decay: float) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in "
                         "[0,1] range.")


def _is_float(t: Tensor) -> bool:
    return t.is_floating_point() or t.dtype.is_complex


def get_ema_multi_avg_fn(decay: float = 0.999) -> Callable:
    """An exponential moving average over lists: ``ema = lerp(ema, p, 1 - decay)``.

    Example:
        >>> ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    """
    _check_decay(decay)

    def ema_update(ema_param_list, current_param_list, _) -> None:
        with no_grad():
            for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                if _is_float(ema_param_list[0]):
                    O.lerp_(p_ema, p_model, 1 - decay)
                else:
                    p_ema.copy_(p_ema * decay + p_model * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn() -> Callable:
    """The running mean over lists: ``avg = avg + (p - avg) / (n_averaged + 1)``."""
    def swa_update(averaged_param_list, current_param_list, num_averaged) -> None:
        n = float(num_averaged)
        with no_grad():
            for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                if _is_float(averaged_param_list[0]):
                    O.lerp_(p_avg, p_model, 1 / (n + 1))
                else:
                    p_avg.copy_(p_avg + (p_model - p_avg) / (n + 1))
    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> Callable:
    """Per-tensor EMA: returns ``decay * ema + (1 - decay) * p``."""
    _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn() -> Callable:
    """Per-tensor running mean: returns ``avg + (p - avg) / (num_averaged + 1)``."""
    def swa_update(averaged_param, current_param, num_averaged):
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)
    return swa_update


class AveragedModel(Module):
    """A copy of ``model`` whose parameters are averaged over the updates it sees
    (``torch.optim.swa_utils.AveragedModel``): the running mean by default (SWA), or any
    ``avg_fn(avg, p, n)`` / ``multi_avg_fn(avg_list, p_list, n)``, e.g.
    :func:`get_ema_multi_avg_fn` for an EMA. ``use_buffers=True`` averages buffers too;
    otherwise buffers are copied from ``model`` at each update.

    Example:
        >>> ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))
        >>> ema.update_parameters(model)
    """

    def __init__(self, model: Module, device=None, avg_fn: Callable | None = None,
                 multi_avg_fn: Callable | None = None, use_buffers: bool = False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise ValueError("AveragedModel: only one of avg_fn and multi_avg_fn should be "
                             "provided")
        from .. import dtypes as _dt
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype=_dt.int64, device=device))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _pairs(self, model: Module):
        if self.use_buffers:
            mine = itertools.chain(self.module.parameters(), self.module.buffers())
            theirs = itertools.chain(model.parameters(), model.buffers())
        else:
            mine, theirs = self.parameters(), model.parameters()
        return [(a.detach(), b.detach().to(a.device)) for a, b in zip(mine, theirs)]

    def update_parameters(self, model: Module) -> None:
        """Fold ``model``'s current parameters into the average (the first call copies)."""
        pairs = self._pairs(model)
        n = int(self.n_averaged)
        with no_grad():
            if n == 0:
                for a, b in pairs:
                    a.copy_(b)
            elif self.avg_fn is not None:
                for a, b in pairs:
                    a.copy_(self.avg_fn(a, b, self.n_averaged))
            else:
                multi = self.multi_avg_fn or get_swa_multi_avg_fn()
                for group in _by_dtype(pairs).values():
                    multi([a for a, _ in group], [b for _, b in group], self.n_averaged)
            if not self.use_buffers:
                for b_swa, b_model in zip(self.module.buffers(), model.buffers(), strict=True):
                    b_swa.copy_(b_model.detach().to(b_swa.device))
            self.n_averaged.add_(1)


def _by_dtype(pairs) -> dict:
    groups: dict = {}
    for a, b in pairs:
        groups.setdefault((str(a.device), a.dtype), []).append((a, b))
    return groups


def update_bn(loader: Iterable[Any], model: Module, device=None) -> None:
    """Recompute the batch-norm running statistics of ``model`` with one pass over
    ``loader`` (cumulative averages; the first element of tuple/list batches is the input).

    Example:
        >>> update_bn(train_loader, swa_model)
    """
    from ..nn.modules.normalization import _BatchNorm
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    with no_grad():
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            if device is not None:
                batch = batch.to(device)
            model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each group's lr to ``swa_lr`` over ``anneal_epochs`` epochs, then holds it
    (``torch.optim.swa_utils.SWALR``; ``anneal_strategy`` ``"cos"`` or ``"linear"``).

    Example:
        >>> sched = SWALR(opt, swa_lr=0.05, anneal_epochs=5, anneal_strategy="linear")
    """

    _EXCLUDE = ("optimizer", "anneal_func")

    def __init__(self, optimizer, swa_lr, anneal_epochs: int = 10,
                 anneal_strategy: str = "cos", last_epoch: int = -1) -> None:
        swa_lrs = _format_param("swa_lr", optimizer, swa_lr)
        for lr, group in zip(swa_lrs, optimizer.param_groups, strict=True):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got "
                             f"{anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t: float) -> float:
        return t

    @staticmethod
    def _cosine_anneal(t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def _set_anneal_func(self, anneal_strategy: str) -> None:
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" \
            else self._linear_anneal

    def get_lr(self) -> list[float]:
        """The lrs at the current step (call ``get_last_lr()`` from user code)."""
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please "
                          "use `get_last_lr()`.", UserWarning, stacklevel=2)
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha)
                    for g in self.optimizer.param_groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha)
                for g, lr in zip(self.optimizer.param_groups, prev_lrs, strict=True)]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (the anneal function follows ``_anneal_strategy``)."""
        super().load_state_dict(state_dict)
        self._set_anneal_func(self._anneal_strategy)
