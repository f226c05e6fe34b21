"""``ember.nn.utils.stateless.functional_call``: call a module with other parameters.

PyTorch's older spelling of :func:`ember.func.functional_call` (one dict only); both run
the same code (:mod:`ember.func.functional_call`).
"""
from __future__ import annotations

from ...func.functional_call import call_with

__all__ = ["functional_call"]


def functional_call(module, parameters_and_buffers: dict, args=None, kwargs=None, *,
                    tie_weights: bool = True, strict: bool = False):
    """Call ``module`` with some parameters and buffers replaced.

    Args:
        module: the module to call.
        parameters_and_buffers: ``{name: tensor}`` by the names of ``named_parameters``/
            ``named_buffers``.
        args: a positional argument or tuple of them.
        kwargs: keyword arguments.
        tie_weights: a value given for one of several tied names is used for all.
        strict: every parameter and buffer must be given, and nothing else.

    Returns:
        The module's output; the module's own tensors are restored afterwards.

    Raises:
        RuntimeError: ``strict`` and keys are missing or unexpected.
        AttributeError: a key names no parameter or buffer.

    Example:
        >>> functional_call(ember.nn.Linear(3, 2), {"bias": ember.zeros(2)}, ember.randn(4, 3))
    """
    if not isinstance(parameters_and_buffers, dict):
        raise TypeError(f"functional_call: expected parameters_and_buffers to be a dict, got "
                        f"{type(parameters_and_buffers).__name__} (ember.func.functional_call "
                        f"takes a tuple of dicts)")
    return call_with(module, parameters_and_buffers, args, kwargs, tie_weights, strict,
                     (parameters_and_buffers,))
