"""The Adam family: Adam, AdamW, Adamax and NAdam (PyTorch's exact update formulas)."""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..autograd.grad_mode import state as _grad_state
from ..device.base import _backends
from ..ops.factories import ones, zeros, zeros_like
from . import _ops as O
from ..tensor import Tensor
from .optimizer import Optimizer, _check, _scalar_dtype
from .sgd import _check_betas

__all__ = ["Adam", "AdamW", "Adamax", "NAdam"]


def _new_step(p=None, group=None):
    """A parameter's step count: a 0-d tensor on the CPU (PyTorch's default), or on the
    parameter's device with ``capturable=True`` (so a compiled step on a GPU that
    ``GradScaler`` may skip updates it in the graph, without a host read)."""
    dev = p._device if p is not None and group is not None and group.get("capturable") \
        else None
    return zeros((), dtype=_scalar_dtype(), device=dev)


def _advance(state):
    """Increment ``state["step"]`` (a 0-d tensor, as in PyTorch) and return it as a float —
    or, while ``ember.compile`` traces, as a float64 0-d tensor, so the bias corrections are
    graph ops that follow the step count (PyTorch's ``capturable`` mode)."""
    step = state["step"]
    step.add_(1)
    if _grad_state.modes:
        return step.to(_dt.float64)
    return step.item()


class _AdamBase(Optimizer):
    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        _check(group["eps"] >= 0.0, "epsilon value", group["eps"])
        _check_betas(group["betas"])
        _check(group["weight_decay"] >= 0.0, "weight_decay value", group["weight_decay"])


class Adam(_AdamBase):
    """Adam (``torch.optim.Adam``), with optional AMSGrad and decoupled weight decay.

    With ``g = grad (+ weight_decay * p)`` and step count ``t``::

        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        v_max = max(v_max, v)                         (amsgrad)
        p = p - lr / (1 - beta1**t) * m / (sqrt(v or v_max) / sqrt(1 - beta2**t) + eps)

    ``decoupled_weight_decay=True`` (what AdamW does) instead multiplies ``p`` by
    ``1 - lr * weight_decay`` before the update.

    Example:
        >>> opt = ember.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    """

    _fused_capable = True     # fused=True: the compiled update (optim/_fused.py)

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None,
                 decoupled_weight_decay: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _state_keys(self, group) -> tuple:
        return ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"]
                                                    else ())

    def _update_group(self, group) -> None:
        eps, wd, amsgrad = group["eps"], group["weight_decay"], group["amsgrad"]
        lr = self._hyper(group, "lr")
        beta1, beta2 = group["betas"]
        maximize, decoupled = group["maximize"], group["decoupled_weight_decay"]
        if not amsgrad and _many_gpu(self, group, lr):
            return
        for p, g, state in self._grads(group):
            if not state:
                _init_state(state, p, amsgrad, group)
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            step = _advance(state)
            if not amsgrad and _one_pass(p, g, exp_avg, exp_avg_sq, group, lr, step):
                continue
            if maximize:
                g = O.neg(g)
            if wd != 0:
                if decoupled:
                    p.mul_(1 - lr * wd)
                else:
                    g = O.add(g, p, alpha=wd)
            O.lerp_(exp_avg, g, 1 - beta1)
            O.addcmul_(exp_avg_sq.mul_(beta2), g, g, value=1 - beta2)
            step_size = lr / (1 - beta1 ** step)
            bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
            if amsgrad:
                O.maximum_(state["max_exp_avg_sq"], exp_avg_sq)
                denom = O.sqrt(state["max_exp_avg_sq"])
            else:
                denom = O.sqrt(exp_avg_sq)
            O.div_(denom, bias_correction2_sqrt).add_(eps)
            O.addcdiv_(p, exp_avg, denom, value=-step_size)


def _one_pass(p, g, exp_avg, exp_avg_sq, group, lr, step) -> bool:
    """Adam's update as one bit-exact C loop over the raw arrays (``_update_group``'s
    passes, fused: :mod:`ember.codegen.optim_kernels`; on a GPU one CUDA kernel made from
    the same steps, :mod:`ember.codegen.cuda_optim`); False when it cannot run (traced,
    a tensor lr, non-contiguous or mixed operands, no compiler)."""
    beta1, beta2 = group["betas"]
    if lr.__class__ not in (float, int) or step.__class__ is not float:
        return False
    bc2_sqrt = (1 - beta2 ** step) ** 0.5
    if bc2_sqrt.__class__ is not float:     # NOTE: complex (a corrupt step): the passes raise
        return False
    arrays = O.kernel_arrays(p, g, exp_avg, exp_avg_sq)
    if arrays is None:
        return False
    from ..codegen import optim_kernels
    if not optim_kernels.adam(*arrays, lerp_weight=1 - beta1, beta2=beta2,
                              bias_correction2_sqrt=bc2_sqrt,
                              eps=group["eps"], step_size=lr / (1 - beta1 ** step),
                              weight_decay=group["weight_decay"],
                              decoupled=group["decoupled_weight_decay"], lr=lr,
                              maximize=group["maximize"], gpu=O.on_gpu(p)):
        return False
    O.bump(p, exp_avg, exp_avg_sq)
    return True


def _init_state(state, p, amsgrad: bool, group=None) -> None:
    """Adam's first-step state of parameter ``p`` (PyTorch's keys)."""
    state["step"] = _new_step(p, group)
    state["exp_avg"] = zeros_like(p)
    state["exp_avg_sq"] = zeros_like(p)
    if amsgrad:
        state["max_exp_avg_sq"] = zeros_like(p)


def _many_gpu(opt, group, lr) -> bool:
    """The group's update as one multi-tensor CUDA launch per step count (PyTorch's
    ``foreach`` path; :func:`.cuda_optim.launch_many`): :func:`_one_pass`'s kernel over
    every parameter, the same bits, when each parameter with a gradient would take it on
    one GPU in one dtype (two or more of them); False with no step advanced else (state
    already made stays, as the loop would make it)."""
    if lr.__class__ not in (float, int):
        return False
    items, dev, dt = [], None, None
    for p, g, state in opt._grads(group):
        if dev is None:
            dev, dt = p._device, p._dtype
            if not O.on_gpu(p):
                return False
        elif p._device is not dev and p._device != dev or p._dtype is not dt:
            return False
        if not state:
            _init_state(state, p, False, group)
        arrays = O.kernel_arrays(p, g, state["exp_avg"], state["exp_avg_sq"])
        step = state["step"]
        # NOTE: a negative count (a corrupt state) makes the bias correction complex: the
        # passes raise about it
        if arrays is None or step.__class__ is not Tensor or step._device.type != "cpu" or \
                not step._data.flags.writeable or not float(step._data) >= 0:
            return False
        items.append((p, state, arrays))
    from ..codegen import optim_kernels
    if len(items) < 2 or not optim_kernels.gpu_many_ready(items[0][2][0].dtype):
        return False
    by_step: dict = {}
    for p, state, arrays in items:
        # NOTE: _advance's step.add_(1) and .item() on the raw 0-d array (checked above: a
        # CPU tensor; no tracer, no autograd here)
        step = state["step"]
        d = step._data
        np.add(d, 1, out=d, casting="unsafe")
        step._storage.version += 1
        by_step.setdefault(d.item(), []).append(arrays)
        O.bump(p, state["exp_avg"], state["exp_avg_sq"])
    beta1, beta2 = group["betas"]
    xp = _backends[dev.type].xp
    for step, records in by_step.items():
        scalars, flags = optim_kernels.adam_scalars(
            lerp_weight=1 - beta1, beta2=beta2, bias_correction2_sqrt=(1 - beta2 ** step) ** 0.5,
            eps=group["eps"], step_size=lr / (1 - beta1 ** step),
            weight_decay=group["weight_decay"], decoupled=group["decoupled_weight_decay"],
            lr=lr, maximize=group["maximize"])
        optim_kernels.gpu_many("adam", xp, records, scalars, flags)
    return True


class AdamW(Adam):
    """Adam with decoupled weight decay (``torch.optim.AdamW``; default ``weight_decay=1e-2``).

    Example:
        >>> opt = ember.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)


class Adamax(_AdamBase):
    """Adamax, Adam with the infinity norm (``torch.optim.Adamax``)::

        m = beta1 * m + (1 - beta1) * g
        u = max(beta2 * u, |g| + eps)
        p = p - lr / (1 - beta1**t) * m / u

    Example:
        >>> opt = ember.optim.Adamax(model.parameters(), lr=2e-3)
    """

    def __init__(self, params, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, foreach=None, *,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _state_keys(self, group) -> tuple:
        return ("step", "exp_avg", "exp_inf")

    def _update_group(self, group) -> None:
        eps, wd, maximize = group["eps"], group["weight_decay"], \
            group["maximize"]
        lr = self._hyper(group, "lr")
        beta1, beta2 = group["betas"]
        for p, g, state in self._grads(group):
            if not state:
                state["step"] = _new_step(p, group)
                state["exp_avg"] = zeros_like(p)
                state["exp_inf"] = zeros_like(p)
            if maximize:
                g = O.neg(g)
            step = _advance(state)
            if wd != 0:
                g = O.add(g, p, alpha=wd)
            exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
            O.lerp_(exp_avg, g, 1 - beta1)
            O.maximum_(exp_inf.mul_(beta2), O.abs(g).add_(eps))
            clr = lr / (1 - beta1 ** step)
            O.addcdiv_(p, exp_avg, exp_inf, value=-clr)


class NAdam(_AdamBase):
    """Adam with Nesterov momentum (``torch.optim.NAdam``, Dozat 2016)::

        mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay));  P_t = prod(mu_1..mu_t)
        m, v as in Adam;  d = sqrt(v / (1 - beta2**t)) + eps
        p = p - lr * (1 - mu_t) / (1 - P_t) * g / d - lr * mu_{t+1} / (1 - P_t mu_{t+1}) * m / d

    ``decoupled_weight_decay=True`` gives NAdamW.

    Example:
        >>> opt = ember.optim.NAdam(model.parameters(), lr=2e-3)
    """

    def __init__(self, params, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        _check(group["momentum_decay"] >= 0.0, "momentum_decay value", group["momentum_decay"])

    def _state_keys(self, group) -> tuple:
        return ("step", "mu_product", "exp_avg", "exp_avg_sq")

    def _update_group(self, group) -> None:
        eps, wd = group["eps"], group["weight_decay"]
        lr = self._hyper(group, "lr")
        beta1, beta2 = group["betas"]
        mdecay, decoupled = group["momentum_decay"], group["decoupled_weight_decay"]
        for p, g, state in self._grads(group):
            if not state:
                state["step"] = _new_step(p, group)
                # NOTE: a 0-d tensor of the scalar dtype, as in PyTorch, so values match
                state["mu_product"] = ones((), dtype=_scalar_dtype())
                state["exp_avg"] = zeros_like(p)
                state["exp_avg_sq"] = zeros_like(p)
            if group["maximize"]:
                g = O.neg(g)
            step = _advance(state)
            if wd != 0:
                if decoupled:
                    p.mul_(1 - lr * wd)
                else:
                    g = O.add(g, p, alpha=wd)
            mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * mdecay)))
            mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * mdecay)))
            mu_product = state["mu_product"].mul_(mu).item()
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            O.lerp_(exp_avg, g, 1 - beta1)
            O.addcmul_(exp_avg_sq.mul_(beta2), g, g, value=1 - beta2)
            denom = O.sqrt_(O.div(exp_avg_sq, 1 - beta2 ** step)).add_(eps)
            O.addcdiv_(p, g, denom, value=-lr * (1.0 - mu) / (1.0 - mu_product))
            O.addcdiv_(p, exp_avg, denom, value=(-lr * mu_next) / (1.0 - mu_product * mu_next))
