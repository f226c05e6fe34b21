"""``ember.nn.utils.skip_init``: build a module without running its initialisation."""
from __future__ import annotations

import inspect

__all__ = ["skip_init"]


def skip_init(module_cls, *args, **kwargs):
    """Construct ``module_cls(*args, **kwargs)`` without initialising its parameters.

    Like PyTorch's, the class must accept a ``device`` argument; its ``reset_parameters``
    is not run (no random numbers are drawn), so the parameters hold uninitialised memory
    until the caller fills them.

    Raises:
        RuntimeError: ``module_cls`` takes no ``device`` argument.
    """
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError(f"skip_init: module {module_cls.__name__} must support a 'device' "
                           f"argument to skip initialization")
    # NOTE: a throwaway subclass whose reset_parameters does nothing; the instance gets
    # the real class back, so isinstance/type/state_dict are unaffected.
    skip = type(module_cls.__name__, (module_cls,), {"reset_parameters": lambda self: None})
    module = skip(*args, **kwargs)
    module.__class__ = module_cls
    return module
