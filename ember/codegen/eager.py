"""Single-op generated kernels for eager mode (not wired into the dispatcher yet).

``elementwise_kernel(op, dtypes, shapes)`` returns a cached callable running one registry
op as a generated kernel, with the dispatcher's promotion; eager mode may send large
elementwise ops there where that beats NumPy. Measured with ``bench/kernels.py`` (4M
float32, see ``bench/RESULTS.md``): transcendentals (exp, tanh, erf, sigmoid) win because
libmvec's SIMD functions and OpenMP threads beat NumPy's loops; plain arithmetic
(add, mul) is memory bound and gains only from the second thread.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..ops.registry import REGISTRY
from .ir import InputSpec, Kernel, Load, OutSpec, call, infer
from .runtime import compile
from .toolchain import find_compiler

_cache: dict = {}

#: elements below which the eager fast path is not worth a ctypes call (~5 us).
MIN_ELEMENTS = 1 << 16


def _contig(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc if n != 1 else 0)
        acc *= n
    return tuple(reversed(out))


def _bstrides(in_shape, in_strides, out_shape):
    """Element strides of an input over the broadcast output shape (0 on broadcast dims)."""
    pad = len(out_shape) - len(in_shape)
    st = [0] * pad
    for n, s, o in zip(in_shape, in_strides, out_shape[pad:]):
        st.append(0 if n == 1 and o != 1 else s)
    return tuple(st)


def elementwise_kernel(op_name: str, dtypes, shapes, strides=None, params=None):
    """A compiled single-op kernel: ``fn(*arrays) -> ndarray`` (None without a compiler).

    Args:
        op_name: a registry primitive with a C template (``"exp"``, ``"add"``...).
        dtypes: the inputs' Ember dtypes (or names); ``shapes``: their shapes.
        strides: their element strides (default: C-contiguous); the compiled variant
            serves every call with the same layout class, whatever the shape.
        params: the op's params (``{"min": 0.0}`` for clamp...).

    Example:
        >>> fn = elementwise_kernel("tanh", [ember.float32], [(4096, 1024)])
        >>> y = fn(x)          # x: a float32 NumPy array of that shape
    """
    if find_compiler() is None:
        return None
    dts = tuple(_dt.as_dtype(d) for d in dtypes)
    out_shape = np.broadcast_shapes(*[tuple(s) for s in shapes])
    strides = strides or [_contig(tuple(s)) for s in shapes]
    specs = tuple(InputSpec(d, _bstrides(tuple(s), tuple(st), out_shape))
                  for d, s, st in zip(dts, shapes, strides))
    items = tuple(sorted((params or {}).items()))
    compute, out_dt = infer(op_name, list(dts), dict(items))
    key = (op_name, dts, items, out_shape, tuple(sp.strides for sp in specs))
    fn = _cache.get(key)
    if fn is None:
        body = call(op_name, *[Load(i) for i in range(len(dts))], compute=compute, **dict(items))
        fn = compile(Kernel(specs, OutSpec(out_dt, tuple(out_shape)), body,
                            name=f"ember_{op_name}"))
        _cache[key] = fn
    return fn


def supported(op_name: str) -> bool:
    """Whether ``op_name`` has a C template (and so a generated kernel)."""
    op = REGISTRY.get(op_name)
    return op is not None and op.expr is not None
