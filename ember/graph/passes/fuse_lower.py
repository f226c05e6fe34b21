"""Lowering a fusion group to a codegen kernel, and the graph op that runs it.

Each member becomes an :class:`~ember.codegen.ir.Apply` carrying the node's own compute
dtype (``Node.ct``, what the dispatcher cast to) and output dtype, so the kernel promotes
and casts exactly as the unfused nodes did; reductions become
:class:`~ember.codegen.ir.Reduce` stages read back as ``Row`` values; softmax and
log_softmax become two stages (max, sum of exp) and a full value, NumPy's formula.
Every member value that a node outside the group (or the graph's output list) reads is
an output of the kernel: full-shape outputs, and per-row outputs for row values.

:class:`FusedOp` runs the compiled kernel. Per call it only looks up the prepared launch
for the arrays' strides (layouts are prepared on first sight) and makes one ctypes call
through :mod:`ember.codegen.launch`. Outputs are new arrays, except that
single-output kernels take ``out=``, so the executor's memory planner can hand them dead
buffers (or write in place over a dying input), and elementwise multi-output kernels take
``outs=`` (one array or None per output), so state an optimizer step writes back (Adam's
moments and parameter: one kernel) is computed straight into the state's own arrays.
"""
from __future__ import annotations

import numpy as np

from ...codegen import launch as _launch
from ...codegen.eager import _bstrides, _contig
from ...codegen.ir import (Apply, Const, InputSpec, Kernel, Load, OutSpec, Reduce,
                           ReduceKernel, Row, call)
from ...codegen.render_c import PARALLEL_THRESHOLD
from ...codegen.runtime import CompiledKernel, num_threads
from ...ops.layout import inverse, memory_order
from ..ir import GraphOp, Var
from .fuse_groups import REDUCTIONS


class Lowered:
    """A group as a kernel: ``inputs`` (external vars), ``outs`` (member vars it writes)."""

    __slots__ = ("kernel", "inputs", "outs", "ops", "group")

    def __init__(self, kernel, inputs, outs, ops, group):
        self.kernel, self.inputs, self.outs, self.ops, self.group = \
            kernel, inputs, outs, ops, group


def lower(group, order: dict, needed) -> Lowered | None:
    """Lower ``group``; ``order`` maps id(node) to its index, ``needed(var)`` tells whether
    a member value is read outside the group. None when nothing is needed (dead code)."""
    members = sorted(group.members, key=lambda m: order[id(m[0])])
    inside = {n.out.id for n, _ in members}
    inputs: list = []
    env: dict = {}
    for n, _ in members:
        for x in n.var_inputs():
            if x.id not in inside and x.id not in env:
                env[x.id] = Load(len(inputs))
                inputs.append(x)
    stages: list = []
    cls_of: dict = {}
    cols: list = []             # NOTE: GPU groups only (fuse_colsum): sums over the rows
    for n, cls in members:
        cls_of[n.out.id] = cls
        name = n.op.name
        if cls == "col":
            cols.append((n.out, env[n.inputs[0].id]))
        elif name in REDUCTIONS:
            stages.append(Reduce(REDUCTIONS[name], env[n.inputs[0].id], n.out.dtype))
            env[n.out.id] = Row(len(stages) - 1)
        elif name in ("softmax", "log_softmax"):
            env[n.out.id] = _rowwise(name, env[n.inputs[0].id], n.out.dtype, stages)
        else:
            args = tuple(env[x.id] if x.__class__ is Var else Const(x) for x in n.inputs)
            params = {**n.op.params, **n.params}
            env[n.out.id] = Apply(name, args, tuple(sorted(params.items())), n.ct,
                                  n.out.dtype)
    outs = [n.out for n, cls in members if cls != "col" and needed(n.out)]
    if not outs:
        return None
    space = group.space
    specs = [InputSpec(x.dtype, _bstrides(x.shape, _contig(x.shape), space)) for x in inputs]
    ops = ",".join(n.op.name for n, _ in members)
    if cols:
        from ...codegen.cuda_rowcols import ColReduceKernel
        k = ColReduceKernel(specs, space, group.naxes, stages, env[outs[0].id],
                            OutSpec(outs[0].dtype, space if cls_of[outs[0].id] == "full"
                                    else space[:-1]), full=cls_of[outs[0].id] == "full",
                            name="ember_fused_red", extra=tuple(
                                (v.dtype, env[v.id], cls_of[v.id] == "full") for v in outs[1:]),
                            cols=tuple((v.dtype, e) for v, e in cols))
        return Lowered(k, inputs, outs + [v for v, _ in cols], ops, group)
    if group.naxes == 0:
        k = Kernel(specs, OutSpec(outs[0].dtype, space), env[outs[0].id], "ember_fused",
                   extra=tuple((v.dtype, env[v.id]) for v in outs[1:]))
    else:
        full = [cls_of[v.id] == "full" for v in outs]
        flat = tuple(space[:len(space) - group.naxes])
        k = ReduceKernel(specs, space, group.naxes, stages, env[outs[0].id],
                         OutSpec(outs[0].dtype, space if full[0] else flat), full=full[0],
                         name="ember_fused_red",
                         extra=tuple((v.dtype, env[v.id], f) for v, f in
                                     zip(outs[1:], full[1:])))
    return Lowered(k, inputs, outs, ops, group)


#: float32 ``exp`` is fast (libmvec's vector path) down to about -87.3; exp(-87) ~ FLT_MIN.
_EXP_FLOOR_F32 = -87.0


def _shifted_exp(x, m, dt):
    """``exp(x - m)`` for a row ``x`` and its max ``m``, fast when many ``x`` are ``-inf``.

    NOTE: glibc's vector ``expf`` (libmvec) sends every SIMD lane below about -87.3 to a
    scalar fallback. A causal attention mask makes half of each softmax row ``-inf``: the
    W3 GPT's ``where,softmax`` kernel measured 1.9 ms instead of 0.5 ms per call. So the
    shifted value ``s = x - m`` (eager's) is clamped to ``floor = -87`` and the result
    multiplied by ``keep``: 0 for a clamped lane, else 1 (the smallest step above -87 is
    7.6e-6, times 2**100 is > 1). Only results under exp(-87) = 1.6e-38 change, to 0.
    A NaN or inf row max gives NaN lanes as before (maximum and minimum propagate NaN).

    Why this shape: GCC sees through simpler ones. ``where(s <= floor, 0, exp(...))``
    tells it the clamped lanes' exp is unused (it passes the unclamped value again), and
    a constant floor turns ``exp(max(s, -87))`` into ``c ? exp(s) : exp(-87)``. So the
    floor is ``(m - m) - 87``, a row value (NaN when m is inf), and ``keep`` arithmetic.
    """
    s = call("sub", x, m, compute=dt)
    if dt.name != "float32":
        return call("exp", s, compute=dt)
    floor = call("add", call("sub", m, m, compute=dt), _EXP_FLOOR_F32, compute=dt)
    sc = call("maximum", s, floor, compute=dt)
    step = call("mul", call("sub", sc, floor, compute=dt), float(2 ** 100), compute=dt)
    keep = call("minimum", step, 1.0, compute=dt)
    return call("mul", call("exp", sc, compute=dt), keep, compute=dt)


def _rowwise(name, x, dt, stages):
    """softmax / log_softmax of ``x`` over the row: NumPy's formula (shift by the max)."""
    stages.append(Reduce("amax", x, dt))
    m = Row(len(stages) - 1)
    e = _shifted_exp(x, m, dt)
    stages.append(Reduce("sum", e, dt))
    s = Row(len(stages) - 1)
    if name == "softmax":
        return call("div", e, s, compute=dt)
    shifted = call("sub", x, m, compute=dt)
    return call("sub", shifted, call("log", s, compute=dt), compute=dt)


class FusedOp(GraphOp):
    """A graph op running one generated kernel (see the module docstring).

    A single-output kernel takes ``out=`` (``accepts_out``), so the executor's memory
    planner may hand it a dead buffer, or the buffer of an input that dies at this node:
    an output element is written only after the same element of every input was read.
    A multi-output elementwise kernel (every output full-size) takes ``outs=`` for the
    same reason (``accepts_outs = "inplace"``): the generated loop body loads every input
    element ``i`` before it stores any output element ``i``.
    """

    __slots__ = ("kernel", "ops", "compiled", "accepts_out", "accepts_outs", "memory_order")

    def __init__(self, lowered: Lowered, compiled):
        name = "fused_reduce" if isinstance(lowered.kernel, ReduceKernel) else "fused"
        super().__init__(name, _runner(compiled, lowered.outs))
        self.kernel = lowered.kernel
        self.ops = lowered.ops
        self.compiled = compiled
        single = len(lowered.outs) == 1
        full = single and lowered.outs[0].shape == lowered.group.space
        self.accepts_out = ("inplace" if full else "out") if single else None
        self.accepts_outs = "inplace" if not single and isinstance(lowered.kernel, Kernel) \
            and all(v.shape == lowered.group.space for v in lowered.outs) else None
        #: an elementwise kernel whose result only leaves the graph may write it in its
        #: inputs' memory order (the program passes ``memory_order=True``: see _runner)
        self.memory_order = full and isinstance(lowered.kernel, Kernel) and \
            isinstance(compiled, CompiledKernel)

    def __repr__(self) -> str:
        return f"<graph op {self.name}: {self.ops}>"


def _runner(ck, outs):
    """The run function of a fused node: ``run(xp, *arrays, out=None, outs=None) -> array
    or tuple``. ``outs``: per output, a C-contiguous array to write it into, or None."""
    metas = [(v.shape, v.dtype.np) for v in outs]
    prepared: dict = {}
    single = len(metas) == 1
    fast = _launch.launcher() if isinstance(ck, CompiledKernel) else None
    empty = all(int(np.prod(v.shape)) == 0 for v in outs)
    # NOTE: below the threshold the kernel runs serially whatever it is told: skip asking
    # (num_threads reads the environment, ~1.5 us, more than a small kernel's launch).
    big = fast is not None and int(np.prod(ck.shape)) >= PARALLEL_THRESHOLD

    def run(xp, *arrays, out=None, outs=None, memory_order=False, **_params):
        if memory_order and out is None and outs is None and not empty:
            res = _in_memory_order(arrays)
            if res is not None:
                return res
        if outs is not None:
            res = [np.empty(shape, dt) if o is None else o
                   for o, (shape, dt) in zip(outs, metas)]
        else:
            res = [np.empty(shape, dt) for shape, dt in metas] if out is None else [out]
        if not empty:
            key = tuple([a.strides for a in arrays])
            p = prepared.get(key)
            if p is None:
                p = prepared[key] = _prepare(ck, arrays, fast)
            if p is False:
                ck(*arrays, out=res[0], extra_outs=res[1:])
            else:
                fast(p.fn_addr, arrays + tuple(res), p.shape_addr, p.strides_addr,
                     num_threads() if big else 1)
        return res[0] if single else tuple(res)

    def _in_memory_order(arrays):
        # NOTE: a value returned to the caller whose inputs are laid out other than
        # row-major (a channels-last image): the loops run in the inputs' memory order
        # (reads and writes contiguous) and the result keeps that layout, as eager's
        # elementwise ops do (layout.memory_order: TensorIterator's rule), instead of
        # strided reads into a row-major result that ember.graph.replay then copies
        key = ("order",) + tuple([a.strides for a in arrays])
        p = prepared.get(key)
        if p is None:
            order = memory_order(arrays, len(ck.shape)) if fast is not None else None
            p = prepared[key] = False if order is None else (
                order, _prepare(ck, arrays, fast, order), inverse(order))
        if p is False or p[1] is False:
            return None
        order, launch, back = p
        shape, dt = metas[0]
        res = np.empty(tuple(shape[d] for d in order), dt)
        fast(launch.fn_addr, arrays + (res,), launch.shape_addr, launch.strides_addr,
             num_threads() if big else 1)
        return res.transpose(back)
    return run


def _prepare(ck, arrays, fast, order=None):
    """The prepared launch of ``ck`` for these arrays' layout, or False (slow path)."""
    if fast is None or len(arrays) + len(ck.kernel.outputs) > _launch.MAX_ARRAYS:
        return False
    if any(not isinstance(a, np.ndarray) or a.dtype != s.dtype.np
           for a, s in zip(arrays, ck.kernel.inputs)):
        return False
    p = ck.launcher(arrays, order)
    return False if p is None else p
