"""Eager elementwise ops on a GPU through generated CUDA kernels (the dispatcher's fast path).

On a ``cuda`` device with the ``cuda_kernels`` capability (a real GPU, or the CPU stand-in
made to run CUDA text on the emulator in tests), the dispatcher
(:func:`ember.ops.dispatch.apply`) hands a large elementwise op here first. :func:`run`
answers with the output of the op's generated CUDA kernel — the same renderer, launcher
and kernel cache as the compiled graphs' fused kernels (:mod:`.render_cuda_ew`: several
elements per thread, 16-byte vector loads on contiguous operands) — or ``None``, and the
op's CuPy kernel runs as before. It takes an op when:

* ``ember.config.EAGER_KERNELS`` is on (``EMBER_EAGER_KERNELS=0`` turns it off);
* the op has a C template (``expr``) and every array operand is a floating point array
  (float32/float64/float16/bfloat16) of one dtype; Python numbers ride along as 0-d
  device arrays (copied to the device once per value: :mod:`.cuda_launch`);
* the output has at least :data:`THRESHOLD` elements: below it both are launch-bound and
  CuPy's dispatch costs less Python.

Why: CuPy's own elementwise kernels move one element per thread and reach ~1.6 TB/s on an
H200 (40 % of a device-to-device copy, bench/RESULTS.md); PyTorch's reach 3.6-3.8.

Numerics: float16/bfloat16 compute in float32 inside and round once (CuPy's float16 ufuncs
do the same for arithmetic); math functions are CUDA's libdevice ones, as CuPy's. Integer
and bool ops stay with CuPy (the kernels cannot raise on an integer division by zero).

Without ``cuda_kernels`` (the plain ``EMBER_FAKE_CUDA`` stand-in: NumPy arrays) the CPU's
eager kernels (:mod:`.eager`) take the call, as before.
"""
from __future__ import annotations

import hashlib

import numpy as np

from .. import config
from .. import dtypes as _dt
from .ir import InputSpec, Kernel, Load, OutSpec, call, infer
from .render_cuda_ew import render_row_entry

__all__ = ["THRESHOLD", "run", "stats"]

#: minimum output elements for the fast path. Measured on an H200 (bench/RESULTS.md, x*2
#: per call, kernel | CuPy): 2^16 34 | 23 us, 2^18 35 | 25, 2^20 67 | 23, 2^22 66 | 38;
#: at 2^26 the kernel moves 2.46 TB/s against CuPy's 1.6. The launch path's fixed cost wins
#: below ~2^24 elements (64 MB of float32), so the kernels take only arrays that large.
THRESHOLD = 1 << 24
#: ops left to CuPy: ``cast`` is ``astype``'s business.
EXCLUDE = frozenset(("cast",))
_FLOAT = frozenset(("float32", "float64", "float16", "bfloat16"))
_kernels: dict = {}       # (op, dtype, nin, params) -> (CudaModule, Kernel) or False
#: calls that ran through generated kernels (tests and benchmarks read it).
stats = {"runs": 0, "rows": 0}


def run(op, arrays, params):
    """``op(*arrays, **params)`` through a generated CUDA kernel, or None (caller runs
    the op's own kernel). ``arrays``: device arrays in the compute dtype, or Python
    numbers."""
    from ..device.base import _backends
    be = _backends["cuda"]
    if not be.has("cuda_kernels"):
        from .eager import run as host_run        # NOTE: the stand-in's NumPy arrays
        return host_run(op, arrays, params)
    if not config.EAGER_KERNELS or op.expr is None or op.name in EXCLUDE:
        return None
    xp = be.xp
    nd = xp.ndarray
    dt = None
    shapes = []
    for a in arrays:
        if isinstance(a, nd):
            if dt is None:
                dt = a.dtype
            elif a.dtype != dt:
                return None
            shapes.append(a.shape)
        elif a.__class__ is not float and a.__class__ is not int:
            return None
    if dt is None or dt.name not in _FLOAT:
        return None
    shape = shapes[0] if all(s == shapes[0] for s in shapes) else _broadcast(shapes)
    if shape is None:
        return None
    size = 1
    for n in shape:
        size *= n
    if size < THRESHOLD:
        return None
    entry = _kernel(op.name, dt.name, len(arrays), params)
    if entry is None:
        return None
    return _launch(entry, arrays, shape, xp)


def _broadcast(shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None            # NOTE: the op's own kernel then raises the dispatcher's error


def _kernel(name, dtype_name, nin, params):
    """``(CudaModule, Kernel)`` of (op, dtype, params), made on first use; None if the
    op does not take the dtype or its params are not plain values."""
    try:
        items = tuple(sorted(params.items()))
        key = (name, dtype_name, nin, items)
        entry = _kernels.get(key)
    except TypeError:
        return None                               # an unhashable param
    if entry is None:
        entry = _kernels[key] = _make(name, _dt.as_dtype(dtype_name), nin, dict(items))
    return entry or None


def _make(name, d, nin, params):
    from .cuda_launch import CudaModule
    try:
        compute, out = infer(name, [d] * nin, params)
        body = call(name, *[Load(i) for i in range(nin)], compute=compute, **params)
        # NOTE: a stable name (not hash(): salted per process), so the disk cache hits
        tag = hashlib.sha1(repr(sorted(params.items())).encode()).hexdigest()[:8] \
            if params else "p"
        k = Kernel([InputSpec(d, (1,))] * nin, OutSpec(out, (1,)), body,
                   name=f"ember_eager_{name}_{d.name}_{nin}_{tag}")
    except (TypeError, ValueError):
        return False
    mod = CudaModule([k], "block", k.name)
    # NOTE: eager kernels also get the row-broadcast entry (a bias add); fused graph
    # kernels do not (their NVRTC time), so it is added to this module's text only
    mod.source += render_row_entry(k)
    return mod, k


def _launch(entry, arrays, shape, xp):
    from .cuda_launch import kernel_plan
    mod, k = entry
    plan = _row_plan(k, arrays, shape, xp)
    if plan is None:
        plan = kernel_plan(k, arrays, xp, shape=shape)
    else:
        stats["rows"] += 1
    name, grid, block, args, outs = plan
    if int(args[-2] if name.endswith("_r") else args[-1]):     # n: no launch for none
        mod.function(name)(grid, block, args)
    stats["runs"] += 1
    return outs[0]


def _row_plan(k, arrays, shape, xp):
    """The ``NAME_r`` launch (:func:`~.render_cuda_ew.render_row_entry`) when every
    operand is a number, a C-contiguous array of the output's shape, a C-contiguous row
    repeated over its leading dims (a bias) or a column of per-row values, at least one a
    row or column (:func:`.cuda_launch.row_plan`); else None (``kernel_plan``'s entries)."""
    from .cuda_launch import row_plan
    return row_plan(k, arrays, shape, xp)
