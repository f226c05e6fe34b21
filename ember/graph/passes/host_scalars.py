"""A GPU graph's groups of CPU scalars, run on the host (NumPy) instead of as CUDA kernels.

A compiled training step on a GPU carries CPU 0-d values: the optimizer's step counts
(PyTorch keeps ``state["step"]`` on the CPU) and what is computed from them (Adam's bias
corrections, one chain per parameter) and the lifted learning rate. :mod:`.fuse_cuda` once
made each such chain a 0-d CUDA kernel, so the executor copied its CPU inputs to the GPU
and its outputs (the new step) back: per parameter a launch, a host-to-device copy and a
device-to-host copy (which waits for the GPU): ~600 tiny launches and copies of a GPT step.

:class:`HostFusedOp` runs such a group's kernel IR with NumPy on the host, each operation
the registry's own CPU kernel (what eager mode runs on those CPU tensors, so the values
are eager's bits: :func:`ember.codegen.interp.evaluate`'s rules), flattened once into a
list of steps. The executor keeps CPU values on the host and copies to the GPU, in one
upload per run, only those a device kernel reads (:mod:`ember.graph.executor`).
"""
from __future__ import annotations

import math

import numpy as np

from ...codegen.ir import Apply, Const, Kernel, Load
from ...ops.registry import REGISTRY
from ..host_steps import HOST_MAX
from ..ir import GraphOp

__all__ = ["HostFusedOp", "batch_runner", "is_host_group", "HOST_MAX"]


def is_host_group(lowered) -> bool:
    """Whether a lowered group reads and writes only small CPU values (a step count's
    chain): an elementwise kernel of at most :data:`HOST_MAX` elements."""
    k = lowered.kernel
    return (isinstance(k, Kernel) and math.prod(k.out.shape) <= HOST_MAX
            and all(v.device is not None and v.device.type == "cpu"
                    for v in list(lowered.outs) + list(lowered.inputs)))


class HostFusedOp(GraphOp):
    """A graph op evaluating one elementwise kernel with NumPy on the host (CPU values of
    a GPU graph). ``host`` tells the executor its arrays are NumPy's whatever the graph's
    device (see the module doc)."""

    __slots__ = ("kernel", "ops")
    host = True

    def __init__(self, lowered):
        self.kernel, self.ops = lowered.kernel, lowered.ops
        super().__init__("fused", host_runner(lowered.kernel, len(lowered.outs)))

    def __repr__(self) -> str:
        return f"<graph op {self.name} (host): {self.ops}>"


def host_runner(k: Kernel, nouts: int):
    """``run(xp, *arrays) -> array or tuple``: kernel ``k`` with NumPy, equal to
    :func:`ember.codegen.interp.run_elementwise` (``xp`` is ignored: host arrays)."""
    code, slots, outs = _flatten(k)
    shape = tuple(k.out.shape)
    single = nouts == 1

    def run(_xp, *arrays, **_params):
        vals = list(slots)
        for i, a in enumerate(arrays):
            vals[i] = a if a.shape == shape else np.broadcast_to(a, shape)
        _evaluate(code, vals)
        res = [_store(vals[j], shape, d) for j, d in outs]
        return res[0] if single else tuple(res)
    return run


def _evaluate(code, vals) -> None:
    """Run :func:`_flatten`'s steps over the slot list ``vals`` (filled in place)."""
    with np.errstate(all="ignore"):
        for fn, args, casts, kw, dt, dst in code:
            if casts is None:
                r = fn(np, *[vals[j] for j in args], **kw)
            else:
                r = fn(np, *[vals[j] if c is None else np.asarray(vals[j]).astype(c)
                             for j, c in zip(args, casts)], **kw)
            vals[dst] = r if getattr(r, "dtype", None) == dt else np.asarray(r).astype(dt)


def batch_runner(k: Kernel, nouts: int, members: int):
    """``run(xp, *arrays) -> tuple``: kernel ``k`` for ``members`` independent argument
    sets at once (member ``i``'s inputs at ``arrays[i * nin:(i + 1) * nin]``; its outputs
    at ``[i * nouts:(i + 1) * nouts]`` of the result, each a new array): every operation
    one NumPy call over the stacked values instead of one per member — AdamW's bias
    corrections, one chain per parameter (~150 in a GPT step), as one. Element by
    element the same operations as :func:`host_runner`'s, on the same dtypes."""
    code, slots, outs = _flatten(k)
    shape = tuple(k.out.shape)
    nin = len(k.inputs)
    lead = (members,) + shape

    def run(_xp, *arrays, **_params):
        vals = list(slots)
        for j in range(nin):
            vals[j] = np.stack([a if a.shape == shape else np.broadcast_to(a, shape)
                                for a in arrays[j::nin]])
        _evaluate(code, vals)
        res = [_store(vals[j], lead, d) for j, d in outs]
        return tuple(np.array(r[i], dtype=r.dtype) for i in range(members) for r in res)
    return run


def _store(v, shape, dtype):
    v = np.asarray(v)
    if v.shape != shape:
        v = np.broadcast_to(v, shape)
    return np.array(v, dtype=dtype)


def _flatten(k: Kernel):
    """``(code, slots, outs)``: the expression DAG of ``k``'s outputs as steps ``(kernel,
    arg slots, per-arg cast dtype or None (None: no casts), kwargs, result dtype, slot)``
    in dependency order; ``slots`` the initial slot list (inputs first, then constants,
    weak ones already in the dtype their consumer computes in); ``outs`` each output's
    ``(slot, dtype)``. Casts are :func:`~ember.codegen.interp.evaluate`'s, left out where
    the value already has the compute dtype."""
    slots: list = [None] * len(k.inputs)
    dtypes: list = [s.dtype.np for s in k.inputs]
    code: list = []
    memo: dict = {}

    def add(value, dtype) -> int:
        slots.append(value)
        dtypes.append(dtype)
        return len(slots) - 1

    def visit(e, compute=None) -> int:
        if isinstance(e, Const) and e.dtype is None and compute is not None:
            return add(np.asarray(e.value).astype(compute), np.dtype(compute))
        got = memo.get(e)
        if got is not None:
            return got
        if isinstance(e, Load):
            j = e.index
        elif isinstance(e, Const):
            j = add(e.value, None) if e.dtype is None else \
                add(np.asarray(e.value, e.dtype.np), e.dtype.np)
        elif isinstance(e, Apply):
            want = [None if e.compute is None or (e.op == "where" and i == 0)
                    else e.compute.np for i in range(len(e.args))]
            args = tuple(visit(a, c) for a, c in zip(e.args, want))
            casts = tuple(None if c is None or dtypes[j] == c else c
                          for j, c in zip(args, want))
            j = add(None, e.dtype.np)
            code.append((REGISTRY[e.op].kernel_for("cpu"), args,
                         casts if any(c is not None for c in casts) else None,
                         dict(e.kwargs), e.dtype.np, j))
        else:
            raise TypeError(f"host_scalars: {e!r} is not an elementwise expression")
        memo[e] = j
        return j
    outs = [(visit(e), d.np) for d, e in k.outputs]
    return code, slots, outs
