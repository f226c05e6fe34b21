"""Stochastic gradient descent with momentum, and Lion (sign momentum)."""
from __future__ import annotations

from ..ops.factories import zeros_like
from . import _ops as O
from .optimizer import Optimizer, _check

__all__ = ["SGD", "Lion"]


class SGD(Optimizer):
    """Stochastic gradient descent (``torch.optim.SGD``), optionally with (Nesterov) momentum.

    With ``g = grad + weight_decay * p`` (negated when ``maximize``)::

        b = g                                  (first step)
        b = momentum * b + (1 - dampening) * g (later steps)
        g = g + momentum * b if nesterov else b
        p = p - lr * g

    Example:
        >>> opt = ember.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    """

    _fused_capable = True     # fused=True: the compiled update (optim/_fused.py)

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach=None, differentiable: bool = False, fused=None) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def _fused_worth(self, group) -> bool:
        # NOTE: plain SGD is already one raw ``p -= lr * g`` pass per parameter: measured no
        # faster compiled (0.51 vs 0.48 ms for W1's 670K parameters), so it keeps the loop.
        return group["momentum"] != 0 or group["weight_decay"] != 0

    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        _check(group["momentum"] >= 0.0, "momentum value", group["momentum"])
        _check(group["weight_decay"] >= 0.0, "weight_decay value", group["weight_decay"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening "
                             f"(got momentum={group['momentum']}, "
                             f"dampening={group['dampening']})")

    def _state_keys(self, group) -> tuple:
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _update_group(self, group) -> None:
        wd, mom = group["weight_decay"], group["momentum"]
        lr = self._hyper(group, "lr")
        damp, nesterov, maximize = group["dampening"], group["nesterov"], group["maximize"]
        if _many(self, group, lr):
            return
        for p, g, state in self._grads(group):
            if getattr(g, "is_sparse", False):     # Embedding(sparse=True)'s COO gradient
                from .sparse_adam import sgd_sparse_update
                g = sgd_sparse_update(p, g, group, lr)
                if g is None:
                    continue
            if _one_pass(p, g, state, group, lr):
                continue
            if maximize:
                g = O.neg(g)
            if wd != 0:
                g = O.add(g, p, alpha=wd)
            if mom != 0:
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = O.clone(g)
                else:
                    buf.mul_(mom).add_(g, alpha=1 - damp)
                g = O.add(g, buf, alpha=mom) if nesterov else buf
            p.add_(g, alpha=-lr)


def _many(opt, group, lr) -> bool:
    """The whole group's update in one C call (``optim_kernels.sgd_many``: :func:`_one_pass`'s
    loop for each parameter in turn, the same bits) when every parameter with a gradient
    would take :func:`_one_pass`'s CPU loop, in one dtype; on a GPU, in one multi-tensor
    launch of :func:`_one_pass`'s CUDA kernel (``optim_kernels.gpu_many``: PyTorch's
    ``foreach``); False (nothing written) else. Saves each parameter's ctypes call and
    address queries (W1: six per step), or its kernel launch."""
    if lr.__class__ not in (float, int):
        return False
    mom = group["momentum"]
    items, ts = [], []
    gpu = None
    for p, g, state in opt._grads(group):
        if mom != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                return False
            arrays = O.kernel_arrays(p, g, buf)
        else:
            buf, arrays = None, O.kernel_arrays(p, g)
        if arrays is None or (items and arrays[0].dtype != items[0][0].dtype):
            return False
        if gpu is None:
            gpu = p._device if O.on_gpu(p) else False
        elif gpu is not False and p._device is not gpu and p._device != gpu or \
                gpu is False and O.on_gpu(p):
            return False
        items.append((arrays[0], arrays[1], None if buf is None else arrays[2]))
        ts.append(p)
        if buf is not None:
            ts.append(buf)
    if len(items) < 2:
        return False
    from ..codegen import optim_kernels
    kw = dict(weight_decay=group["weight_decay"], momentum=mom, dampening=group["dampening"],
              nesterov=group["nesterov"], maximize=group["maximize"], lr=lr)
    if gpu:
        from ..device.base import _backends
        scalars, flags = optim_kernels.sgd_scalars(**kw)
        records = [(p, g, p if buf is None else buf) for p, g, buf in items]
        if not optim_kernels.gpu_many("sgd", _backends[gpu.type].xp, records, scalars, flags):
            return False
    elif not optim_kernels.sgd_many(items, **kw):
        return False
    O.bump(*ts)
    return True


def _one_pass(p, g, state, group, lr) -> bool:
    """SGD's update as one bit-exact C loop over the raw arrays (``_update_group``'s passes,
    fused: :mod:`ember.codegen.optim_kernels`; a CUDA kernel on a GPU); False when it
    cannot run (traced, a tensor lr, the step that creates the momentum buffer,
    sparse/non-contiguous/mixed operands)."""
    mom = group["momentum"]
    if lr.__class__ not in (float, int):
        return False
    if mom != 0:
        buf = state.get("momentum_buffer")
        arrays = None if buf is None else O.kernel_arrays(p, g, buf)
    else:
        buf, arrays = None, O.kernel_arrays(p, g)
    if arrays is None:
        return False
    from ..codegen import optim_kernels
    if not optim_kernels.sgd(arrays[0], arrays[1], arrays[2] if buf is not None else None,
                             weight_decay=group["weight_decay"], momentum=mom,
                             dampening=group["dampening"], nesterov=group["nesterov"],
                             maximize=group["maximize"], lr=lr, gpu=O.on_gpu(p)):
        return False
    O.bump(p)
    if buf is not None:
        O.bump(buf)
    return True


class Lion(Optimizer):
    """Lion, EvoLved Sign Momentum (Chen et al. 2023; not in PyTorch).

    Follows the paper and lucidrains' ``lion-pytorch``::

        p = p * (1 - lr * weight_decay)               (decoupled weight decay)
        p = p - lr * sign(beta1 * m + (1 - beta1) * g)
        m = beta2 * m + (1 - beta2) * g

    Use a learning rate 3-10x smaller than AdamW's and a weight decay 3-10x larger.

    Example:
        >>> opt = ember.optim.Lion(model.parameters(), lr=1e-4, weight_decay=1e-2)
    """

    def __init__(self, params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0, *, maximize: bool = False) -> None:
        defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        _check_betas(group["betas"])
        _check(group["weight_decay"] >= 0.0, "weight_decay value", group["weight_decay"])

    def _state_keys(self, group) -> tuple:
        return ("exp_avg",)

    def _update_group(self, group) -> None:
        wd, maximize = group["weight_decay"], group["maximize"]
        lr = self._hyper(group, "lr")
        beta1, beta2 = group["betas"]
        for p, g, state in self._grads(group):
            if maximize:
                g = O.neg(g)
            if not state:
                state["exp_avg"] = zeros_like(p)
            m = state["exp_avg"]
            if wd != 0:
                p.mul_(1 - lr * wd)
            u = O.clone(m).mul_(beta1).add_(g, alpha=1 - beta1)
            p.add_(O.sign(u), alpha=-lr)
            m.mul_(beta2).add_(g, alpha=1 - beta2)


def _check_betas(betas) -> None:
    _check(0.0 <= betas[0] < 1.0, "beta parameter at index 0", betas[0])
    _check(0.0 <= betas[1] < 1.0, "beta parameter at index 1", betas[1])
