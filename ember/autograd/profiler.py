"""``torch.autograd.profiler``'s names: :class:`record_function` and the legacy
:func:`profile`, both :mod:`ember.profiler`'s (resolved on first use: ``ember.profiler``
sits above the autograd layer).

Example:
    >>> with ember.autograd.profiler.profile(record_shapes=True) as prof:
    ...     ember.ones(3) * 2
    >>> "mul" in prof.key_averages().table()
    True
"""
from __future__ import annotations

__all__ = ["profile", "record_function"]


def profile(enabled: bool = True, *, use_cuda: bool = False, use_device=None,
            record_shapes: bool = False, with_flops: bool = False,
            profile_memory: bool = False, with_stack: bool = False,
            with_modules: bool = False, use_kineto: bool = False, use_cpu: bool = True,
            experimental_config=None, acc_events: bool = False,
            custom_trace_id_callback=None):
    """``torch.autograd.profiler.profile``: an :class:`ember.profiler.profile` of the CPU
    ops (``use_cuda``/``use_device`` record nothing more: Ember has no GPU here)."""
    from ..profiler import profile as _profile
    return _profile(record_shapes=record_shapes, profile_memory=profile_memory,
                    with_stack=with_stack, enabled=enabled and use_cpu)


def __getattr__(name: str):
    if name == "record_function":
        from ..profiler import record_function
        return record_function
    raise AttributeError(f"module 'ember.autograd.profiler' has no attribute {name!r}")
