"""Compiled functions whose outputs need gradients: a forward graph and a backward graph.

``compiled_model(x).sum().backward()`` must work like eager. When a traced call returns
tensors that require grad and the function itself did not call ``backward()``, the
tracer goes on to trace ``autograd.grad(outputs, inputs, cotangents)`` with the
cotangents as fresh graph inputs. The nodes recorded before that point form the forward
graph, the rest the backward graph; every forward value the backward reads (saved
activations, parameters, inputs) becomes an extra output of the forward graph and an
input of the backward graph, matched by position, so both go through the pass pipeline
independently (AOTAutograd's partition). Before the split, :func:`~.partition.recompute_pointwise`
moves the cheap elementwise chains that made saved values into the backward graph (as
AOTAutograd's min-cut partitioner does): a GELU saves its input only, a layer norm its
input and row statistics, and the backward's fused kernel recomputes the rest. A draw a
GPU graph makes on the device (dropout's mask) is saved as its ``(seed, offset)`` and
drawn again by the backward (:func:`~.passes.philox.redraw_saved`), as PyTorch saves the
Philox state.

At run time one autograd :class:`~ember.autograd.function.Function` node stands for the
whole compiled call: its forward runs the forward program and keeps the saved arrays;
its backward runs the backward program.
"""
from __future__ import annotations

import weakref

from ..autograd.function import Function
from ..autograd.engine import grad as _autograd_grad
from ..tensor import Tensor, _wrap
from .capture import out_tensor
from .executor import Held, Program
from .ir import Graph, Var
from .passes import run_pipeline
from .partition import recompute_pointwise
from .passes.philox import redraw_saved


class Joint:
    """The backward half of a captured call (see the module docstring)."""

    __slots__ = ("bwd_graph", "bwd_program", "n_fwd", "diff_inputs", "diff_outs",
                 "diff_meta", "bwd_report", "hold")


def capture_backward(tr, fwd_outs: list, diff_out_tensors: list, diff_inputs: list,
                     passes) -> tuple:
    """Trace the backward of ``diff_out_tensors`` w.r.t. ``diff_inputs`` (tensors).

    ``fwd_outs``: the forward graph's outputs so far (vars). Returns ``(forward outputs
    including the saved values, Joint)``; the caller fills ``joint.diff_inputs``.
    """
    from ..ops.factories import ones_like
    split = len(tr.b.nodes)
    cot_vars = []
    cots = []
    for i, o in enumerate(diff_out_tensors):
        c = _wrap(ones_like(o.detach())._data, o._dtype, o._device)
        v = tr.b.new_var(o._data.shape, o._dtype, o._device, f"cotangent{i}")
        tr.bind(c, v)
        cot_vars.append(v)
        cots.append(c)
    with tr:
        grads = _autograd_grad(diff_out_tensors, diff_inputs, cots, retain_graph=True,
                               allow_unused=True)
        gvars = [tr.read(g) if g is not None else None for g in grads]
    fwd_nodes, bwd_nodes = tr.b.nodes[:split], tr.b.nodes[split:]
    bwd_nodes, gvars = recompute_pointwise(tr.b, fwd_nodes, bwd_nodes, gvars, fwd_outs)
    fwd_defined = {v.id for v in tr.b.inputs} | {o.id for n in fwd_nodes for o in n.outs}
    saved, seen = [], set()
    for n in bwd_nodes:
        for x in n.inputs:
            if x.__class__ is Var and x.id in fwd_defined and x.id not in seen:
                seen.add(x.id)
                saved.append(x)
    keep = {v.id for v in fwd_outs if v.__class__ is Var}
    for g in gvars:         # a gradient that is a forward value (e.g. an input passed through)
        if g is not None and g.id in fwd_defined:
            keep.add(g.id)
            if g.id not in seen:
                seen.add(g.id)
                saved.append(g)
    if "philox" in passes:      # NOTE: a dropout's mask saved as its (seed, offset)
        fwd_nodes, bwd_nodes, saved = redraw_saved(tr.b, fwd_nodes, bwd_nodes, saved, keep)
    j = Joint()
    j.hold = ()
    j.n_fwd = len(fwd_outs)
    bwd_out = [g for g in gvars if g is not None]
    j.diff_outs = [i for i, g in enumerate(gvars) if g is not None]
    raw = Graph(saved + cot_vars, bwd_nodes, bwd_out, name=tr.b.name + "_backward")
    j.bwd_graph, j.bwd_report = run_pipeline(raw, passes)
    j.bwd_program = Program(j.bwd_graph)
    j.diff_meta = [(o._dtype, o._device) for o in diff_out_tensors]
    tr.b.nodes = fwd_nodes
    return list(fwd_outs) + saved, j


class _CompiledCall(Function):
    """One autograd node for a whole compiled call."""

    @staticmethod
    def forward(ctx, run, *diff_inputs):
        outs, saved, held = run()
        ctx.saved_arrays = saved
        ctx.held = held           # the saved activations stay counted while ctx lives
        ctx.run_backward = run.backward
        return tuple(outs)

    @staticmethod
    def backward(ctx, *cotangents):
        grads = ctx.run_backward(ctx.saved_arrays, cotangents)
        return (None,) + tuple(grads)


class _Run:
    """Callable handed to :class:`_CompiledCall` (keeps the program outputs it made)."""

    __slots__ = ("e", "arrays", "diff_inputs", "outs", "epoch", "consumed", "__weakref__")

    def __init__(self, e, arrays, diff_inputs):
        self.e, self.arrays, self.diff_inputs = e, arrays, diff_inputs
        self.outs = None
        self.epoch = None       # the forward's CUDA-graph replay whose saved values it holds
        self.consumed = False

    def __call__(self):
        e = self.e
        j = e.joint
        prog = e.program
        self.outs = prog.run(self.arrays, hold=j.hold)
        g = prog.cuda_graph
        if g is not None and g.replayed:
            # NOTE: the saved values are the graph's buffers: the next forward replays only
            # once this call's backward ran (or this call is gone) — ember.graph.cuda_graphs
            self.epoch = g.epoch
            g.pending = weakref.ref(self)
        held = Held(prog.alloc, prog.last_held)
        saved = self.outs[j.n_fwd:]
        diff = [out_tensor(self.outs, k) for k in e.out_leaves if k[0] == "tensor" and k[4]]
        return diff, saved, held

    def backward(self, saved, cotangents):
        j = self.e.joint
        if self.epoch is not None and self.e.program.cuda_graph.epoch != self.epoch:
            raise RuntimeError(
                "backward through a compiled call (mode='reduce-overhead') whose saved "
                "values a later call's CUDA graph replay overwrote (a second backward with "
                "retain_graph=True after the next forward); run that backward before the "
                "next call, or compile without mode='reduce-overhead'")
        self.consumed = True
        arrays = list(saved) + [c._data for c in cotangents]
        res = j.bwd_program.run(arrays)
        grads = [None] * len(self.diff_inputs)
        for slot, arr in zip(j.diff_outs, res):
            t = self.diff_inputs[slot]
            grads[slot] = _wrap(arr, t._dtype, t._device)
        return grads


def run_joint(e, arrays, diff_inputs):
    """Run a joint entry: returns the program outputs and the differentiable outputs."""
    run = _Run(e, arrays, diff_inputs)
    diff = _CompiledCall.apply(run, *diff_inputs)
    if isinstance(diff, Tensor):
        diff = (diff,)
    return run.outs, list(diff)


__all__ = ["capture_backward", "run_joint", "Joint"]
