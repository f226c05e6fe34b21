"""``ember.optim``: optimizers and learning-rate schedulers (``torch.optim``).

Example:
    >>> opt = ember.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    >>> sched = ember.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    >>> for x, y in loader:
    ...     opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    ...     sched.step()
"""
from .optimizer import Optimizer, required
from .sgd import SGD, Lion
from .adam import Adam, AdamW, Adamax, NAdam
from .adaptive import Adadelta, Adagrad, RMSprop
from .lbfgs import LBFGS
from .radam import RAdam
from .rprop import Rprop
from .asgd import ASGD
from .adafactor import Adafactor
from .muon import Muon
from .sparse_adam import SparseAdam
from ._stateless import swap_in_optimizer_params_and_state
from . import lr_scheduler, swa_utils

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adamax", "NAdam", "RMSprop", "Adagrad",
           "Adadelta", "Lion", "LBFGS", "RAdam",
           "Rprop", "ASGD", "Adafactor", "Muon", "SparseAdam", "lr_scheduler", "swa_utils",
           "swap_in_optimizer_params_and_state"]
