"""``DataLoader(pin_memory=True)``: batches copied into page-locked host memory.

With a CUDA device (CuPy, or the ``EMBER_FAKE_CUDA`` stand-in, where it is a plain copy)
every tensor of a batch (in tuples, lists and dicts) gets :meth:`Tensor.pin_memory`, so
``x.to("cuda", non_blocking=True)`` can copy asynchronously. Without one PyTorch warns once
and leaves the batch alone; so does Ember.
"""
from __future__ import annotations

import warnings

from ..tensor import Tensor

_warned: list = []


def pin_batch(batch):
    """``batch`` with every tensor in pinned memory (unchanged without a CUDA device)."""
    from ..device.base import cuda_backend
    if cuda_backend()[0] is None:
        if not _warned:
            _warned.append(True)
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, "
                          "then device pinned memory won't be used.", UserWarning, stacklevel=3)
        return batch
    return _pin(batch)


def _pin(x):
    if isinstance(x, Tensor):
        return x.pin_memory()
    if isinstance(x, tuple) and hasattr(x, "_fields"):   # a namedtuple
        return type(x)(*(_pin(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_pin(v) for v in x)
    if isinstance(x, dict):
        return {k: _pin(v) for k, v in x.items()}
    return x
