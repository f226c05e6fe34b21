"""Optimizer hooks (PyTorch's): around ``step`` — per optimizer
(``register_step_pre_hook``/``register_step_post_hook``) and for every optimizer
(:func:`register_optimizer_step_pre_hook`/``post``) — and around ``state_dict`` /
``load_state_dict``.

Step hooks are PyTorch's ``hook(optimizer, args, kwargs)``, where ``args`` includes the
optimizer itself; a pre-hook may return ``(new_args, new_kwargs)`` for the step to use.
"""
from __future__ import annotations

from collections import OrderedDict
from itertools import chain

from ..nn._hooks import RemovableHandle  # noqa: F401 - the handles optimizers return

__all__ = ["register_optimizer_step_pre_hook", "register_optimizer_step_post_hook"]

_global_pre: OrderedDict = OrderedDict()
_global_post: OrderedDict = OrderedDict()


def register_optimizer_step_pre_hook(hook) -> RemovableHandle:
    """``hook(optimizer, args, kwargs)`` before every optimizer's ``step``
    (``torch.optim.optimizer.register_optimizer_step_pre_hook``)."""
    return RemovableHandle(_global_pre, hook)


def register_optimizer_step_post_hook(hook) -> RemovableHandle:
    """``hook(optimizer, args, kwargs)`` after every optimizer's ``step``."""
    return RemovableHandle(_global_post, hook)


def store(opt, name: str) -> OrderedDict:
    """The optimizer's hook table ``name``, made on first use (subclasses need not call
    ``Optimizer.__init__`` before registering)."""
    d = opt.__dict__.get(name)
    if d is None:
        d = opt.__dict__[name] = OrderedDict()
    return d


def has_step_hooks(opt) -> bool:
    d = opt.__dict__
    return bool(_global_pre or _global_post or d.get("_optimizer_step_pre_hooks")
                or d.get("_optimizer_step_post_hooks"))


def hooked_step(step, args: tuple, kwargs: dict):
    """``step(*args, **kwargs)`` between the pre- and post-hooks; a subclass's step
    calling its parent's (``super().step()``) runs the hooks once."""
    opt = args[0]
    if opt.__dict__.get("_in_hooked_step"):
        return step(*args, **kwargs)
    d = opt.__dict__
    for hook in chain(_global_pre.values(), d.get("_optimizer_step_pre_hooks", {}).values()):
        res = hook(opt, args, kwargs)
        if res is not None:
            if not (isinstance(res, tuple) and len(res) == 2):
                raise RuntimeError(f"{type(opt).__name__}.step: a step pre-hook must return "
                                   f"None or a tuple (new_args, new_kwargs), got {res!r}")
            args, kwargs = res
    d["_in_hooked_step"] = True
    try:
        out = step(*args, **kwargs)
    finally:
        d["_in_hooked_step"] = False
    for hook in chain(d.get("_optimizer_step_post_hooks", {}).values(), _global_post.values()):
        hook(opt, args, kwargs)
    return out
