"""The ``meta`` device: tensors with a shape and a dtype but no data.

``with ember.device("meta"): model = GPT(cfg)`` builds a model of any size in no memory
and no time; ``model.to_empty(device="cuda")`` then gives it real (uninitialised) storage
to fill from a checkpoint or ``reset_parameters()`` — PyTorch's recipe for models larger
than host memory. Ops on meta tensors compute only what their output looks like: every op
runs its registry declaration's shape rule (broadcasting for elementwise ops) and dtype
rule, the same abstract evaluation :mod:`ember.graph` traces with, so shapes, dtype
promotion and shape errors match eager exactly — forward, backward and optimizer steps.

A meta tensor's array is a zero-stride NumPy placeholder that owns one element, so a meta
tensor of any size costs a few bytes. Writes into it are skipped; reading its values
(``item``, ``tolist``, ``bool``, ``.cpu()``) raises, as in PyTorch. Ember deliberately
differs in one point: a meta tensor keeps no strides, so every meta tensor reports
contiguous strides (PyTorch tracks a view's strides on meta too).

Example:
    >>> with ember.device("meta"):
    ...     lin = ember.nn.Linear(4096, 4096)
    >>> lin(ember.empty(8, 4096, device="meta")).shape
    ember.Size([8, 4096])
    >>> lin.to_empty(device="cpu").weight.device
    device(type='cpu')
"""
from __future__ import annotations

import numpy as np

from .base import Backend, device
from .cpu import CountingAllocator

#: the copy-out error PyTorch gives (``Tensor.cpu()``, ``tolist()`` of a meta tensor)
NO_DATA = "Cannot copy out of meta tensor; no data!"
#: what ``item()``, ``bool()``, ``int()`` of a meta tensor raise (PyTorch's words)
NO_ITEM = "Tensor.item() cannot be called on meta tensors"


def placeholder(shape, np_dtype):
    """A read-only array of ``shape`` and ``np_dtype`` that owns one element of memory (its
    own: placeholders never seem to share memory, so no op mistakes one for an alias)."""
    return np.broadcast_to(np.zeros((), np_dtype), tuple(shape))


def _shape(a):
    return a.shape if a.__class__ is np.ndarray else ()


def meta_kernel(op):
    """The ``meta`` kernel of registry ``op``: a placeholder of the output's shape and dtype
    from the op's shape rule (broadcasting for elementwise ops). An op with neither has an
    output shape that depends on the input's values (``nonzero``): it raises."""
    name, rule, kind = op.name, op.shape, op.dtype
    out_np = (np.dtype(np.bool_) if kind in ("bool", "compare") else
              np.dtype(np.int64) if kind == "int64" else None)

    def kernel(xp, *arrays, **params):
        shapes = [_shape(a) for a in arrays]
        if rule is not None:
            shape = rule(*shapes, **params)
        elif op.elementwise:
            from ..ops.dispatch import broadcast_shapes
            shape = broadcast_shapes(*shapes, op=name)
        else:
            raise NotImplementedError(
                f"{name}: the output's shape depends on the input's values, which a meta "
                f"tensor does not have (inputs of shapes {[tuple(s) for s in shapes]}); run "
                f"it on a real device")
        # NOTE: the dispatcher casts to the op's output dtype where this guess differs
        dt = out_np or next((a.dtype for a in arrays if a.__class__ is np.ndarray),
                            np.dtype(np.float32))
        return placeholder(shape, dt)
    kernel.__name__ = f"{name}_meta"
    return kernel


class MetaBackend(Backend):
    """The ``meta`` device's backend: placeholder arrays, no host memory, no kernels but
    :func:`meta_kernel`. Its allocator counts the bytes the tensors would take."""

    type = "meta"
    xp = np
    capabilities = frozenset({"no_data"})

    def __init__(self):
        self.device = device("meta")
        self.allocator = CountingAllocator()

    def empty(self, shape, np_dtype):
        return placeholder(shape, np_dtype)

    def asarray(self, data, np_dtype=None):
        a = np.asarray(data, dtype=np_dtype)
        return placeholder(a.shape, a.dtype)

    def to_host(self, arr):
        raise NotImplementedError(NO_DATA)
