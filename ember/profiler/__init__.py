"""``ember.profiler``: where an Ember program's time goes, by op (PyTorch's ``torch.profiler``).

Example:
    >>> from ember.profiler import profile, record_function, ProfilerActivity
    >>> with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    ...     with record_function("step"):
    ...         loss = model(x).sum(); loss.backward()
    >>> print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
    >>> prof.export_chrome_trace("trace.json")      # chrome://tracing or ui.perfetto.dev

Ember's backward ops are named like its ``grad_fn`` nodes (``MulBackward``: PyTorch's node
names without the overload digit); forward ops by primitive name (``mul``, ``matmul``; no
``aten::`` prefix); compiled programs' kernels by their graph op names (fused kernels
included).
"""
from ._events import FunctionEvent, record_function
from ._table import EventList, FunctionEventAvg
from .profiler import (ProfilerAction, ProfilerActivity, profile, schedule,
                       supported_activities, tensorboard_trace_handler)

__all__ = ["profile", "record_function", "schedule", "ProfilerActivity", "ProfilerAction",
           "tensorboard_trace_handler", "supported_activities", "EventList",
           "FunctionEvent", "FunctionEventAvg"]
