"""Learning-rate schedulers (``torch.optim.lr_scheduler``).

A scheduler changes ``param_group["lr"]`` of an optimizer each time ``step()`` is called,
after ``optimizer.step()``. Values and state dicts follow PyTorch.

Linear warm-up, then cosine decay (the usual recipe for transformers)::

    opt = ember.optim.AdamW(model.parameters(), lr=3e-4)
    warmup = LinearLR(opt, start_factor=0.01, end_factor=1.0, total_iters=100)
    decay = CosineAnnealingLR(opt, T_max=900, eta_min=3e-5)
    sched = SequentialLR(opt, schedulers=[warmup, decay], milestones=[100])
    for it in range(1000):
        ...; opt.step(); sched.step()     # lr: 3e-6 -> 3e-4 over 100 its, then cosine

Example:
    >>> sched = ember.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    >>> opt.step(); sched.step(); sched.get_last_lr()
    [0.1]
"""
from ._lr_base import LRScheduler
from ._lr_simple import (ConstantLR, CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR,
                         MultiplicativeLR, MultiStepLR, PolynomialLR, StepLR)
from ._lr_cyclic import (ChainedScheduler, CosineAnnealingWarmRestarts, OneCycleLR,
                         ReduceLROnPlateau, SequentialLR)
from ._lr_cyclic_lr import CyclicLR

_LRScheduler = LRScheduler   # NOTE: PyTorch's old name

__all__ = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR",
           "LinearLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingLR",
           "CosineAnnealingWarmRestarts", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR",
           "ChainedScheduler", "CyclicLR"]
