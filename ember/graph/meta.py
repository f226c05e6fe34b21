"""Abstract evaluation: the shape and dtype an op gives, without computing it.

Reads the registry's rules — the op's ``shape`` rule, broadcasting for elementwise ops, and
the dispatcher's own dtype logic (so graphs promote exactly like eager). Ops without a
shape rule (advanced indexing) are evaluated on zero-stride placeholder arrays, which
cost no memory. Tensors that stand for graph values use the same placeholders
(:func:`meta_tensor`), so Ember ops, VJP rules included, can run on them to build graphs.
"""
from __future__ import annotations

import numpy as np

from ..device.meta import placeholder
from ..ops import dispatch as _dispatch
from ..tensor import Tensor, _wrap
from .ir import Var


def meta_tensor(shape, dtype, device) -> Tensor:
    """A tensor with the right shape/dtype/device whose values are meaningless zeros."""
    return _wrap(placeholder(shape, dtype.np), dtype, device)


def _as_meta(x):
    if x.__class__ is Var:
        return meta_tensor(x.shape, x.dtype, x.device)
    return x


def compute_dtypes(op, inputs, params):
    """``(compute dtype or None, output dtype)`` for ``op`` on tensors/scalars ``inputs``."""
    x0 = next(x for x in inputs if isinstance(x, Tensor))
    return _dispatch._compute_dtype(op, op.dtype, inputs, x0, params)


def infer(op, inputs, params):
    """``(shape, dtype, compute dtype)`` of registry ``op`` applied to Vars/scalars."""
    tensors = [_as_meta(x) for x in inputs]
    ct, out_dt = compute_dtypes(op, tensors, params)
    shapes = [tuple(x.shape) if isinstance(x, Tensor) else () for x in tensors]
    if op.shape is not None:
        shape = tuple(op.shape(*shapes, **params))
    elif op.elementwise:
        shape = _dispatch.broadcast_shapes(*shapes, op=op.name)
    else:
        arrays = [x._data if isinstance(x, Tensor) else x for x in tensors]
        if ct is not None:
            arrays = [a.astype(ct.np) if isinstance(a, np.ndarray) else a for a in arrays]
        dev = next(x for x in tensors if isinstance(x, Tensor))._device
        from ..device.base import _backends
        shape = tuple(np.shape(op.kernel_for(dev.type)(_backends[dev.type].xp, *arrays,
                                                        **params)))
    return shape, out_dt, ct
