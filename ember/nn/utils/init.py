"""``ember.nn.utils.skip_init``: build a module without running its initialisation."""
from __future__ import annotations

import inspect

__all__ = ["skip_init"]


def skip_init(module_cls, *args, **kwargs):
    """Construct ``module_cls(*args, **kwargs)`` without initialising its parameters.

    As PyTorch does, the module is built on the ``meta`` device (its initialisation runs
    there: no memory is written, no random numbers are drawn) and then given uninitialised
    storage on ``device`` (default CPU) with ``to_empty``; the caller fills it.

    Example:
        >>> lin = ember.nn.utils.skip_init(ember.nn.Linear, 4, 2)
        >>> lin.weight.shape
        ember.Size([2, 4])

    Raises:
        RuntimeError: ``module_cls`` takes no ``device`` argument.
    """
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError(f"skip_init: module {module_cls.__name__} must support a 'device' "
                           f"argument to skip initialization")
    final_device = kwargs.pop("device", None) or "cpu"
    kwargs["device"] = "meta"
    return module_cls(*args, **kwargs).to_empty(device=final_device)
