"""A captured entry's program: lowering it with its memory-plan hints, its plan, and
running it (reading the inputs, writing state back, rebuilding the returned value).
"""
from __future__ import annotations

from ..errors import GraphError
from ..func._tree import tree_unflatten
from ..tensor import Tensor, _wrap
from .capture import Entry, out_tensor
from .executor import Program

__all__ = ["plan_kw", "donations", "program", "entry_plan", "run"]


def plan_kw(e: Entry, graph) -> dict:
    """What the planner needs to know about entry ``e``'s graph beyond the graph itself:
    inputs the allocator does not count (a learning rate read from Python is not a
    tensor) and the state written back after each run (see :func:`donations`)."""
    n = len(e.arg_slots)
    return {"uncounted": [graph.inputs[n + k].id for k, s in enumerate(e.sources)
                          if s.kind == "call"],
            "donate": donations(e)}


def donations(e: Entry) -> list:
    """``(output position, input position)`` of the state ``e`` writes back into the very
    tensor it read (a gradient accumulated, a parameter or optimizer moment updated): the
    program may compute it straight into that tensor's array, as eager's in-place update
    would, instead of into a new buffer copied back. Call arguments are left out (one
    array may be passed twice)."""
    n = len(e.arg_slots)
    out = []
    for (kind, obj), i in e.writes:
        for k, s in enumerate(e.sources):
            if (kind == "grad" and s.kind == "grad" or kind == "tensor" and
                    s.kind == "tensor") and s.obj is obj:
                out.append((i, n + k))
                break
    return out


def program(e: Entry, graph, parallel, graphs=None) -> Program:
    """The forward program of entry ``e``. ``graphs``: replay it as a CUDA graph on a
    cuda device (:mod:`.cuda_graphs`; a callable taking the note that says why not)."""
    kw = plan_kw(e, graph)
    if e.joint is None:
        prog = Program(graph, parallel=parallel, **kw)
        if graphs is not None:
            from .cuda_graphs import attach
            attach(prog, [k[1] for k in e.out_leaves if k[0] == "tensor"], graphs,
                   n_args=len(e.arg_slots))
        return prog
    saved = [v.id for v in graph.outputs[e.joint.n_fwd:]]
    prog = Program(graph, parallel=parallel, saved=saved, **kw)
    if graphs is not None:
        # NOTE: the forward's saved values stay in its graph for the backward graph; the
        # gradients the backward hands to autograd are copied (accumulated in place later)
        from .cuda_graphs import attach
        fwd = attach(prog, [k[1] for k in e.out_leaves if k[0] == "tensor"], graphs,
                     n_args=len(e.arg_slots))
        if fwd is not None:
            bp = e.joint.bwd_program
            attach(bp, range(len(bp.output_ids)), graphs, after=fwd)
    e.joint.hold = prog.hold_ids(saved)
    return prog


def entry_plan(e: Entry):
    if e.joint is None:
        return e.program.plan
    from .memory_plan import JointPlan
    return JointPlan(e.program.plan, e.joint.bwd_program.plan, e.joint.n_fwd)


def run(e: Entry, flat):
    # gradients the graph makes anew (zero_grad ran inside it) are released before it
    # runs, as eager's zero_grad would: the old and new ones never coexist
    ao = e.arg_owner
    for p in e.release:
        owner(ao, p, flat).grad = None
    arrays = [flat[i]._data for i in e.arg_slots]
    arrays += [grad_array(s, ao, flat) if ao and s.kind == "grad" else s.read()
               for s in e.sources]
    diff = None
    if e.joint is not None:
        from .joint import run_joint
        ins = [flat[i] if kind == "arg" else e.sources[i].obj for kind, i in e.diff_inputs]
        outs, diff = run_joint(e, arrays, ins)
        diff = iter(diff)
    else:
        outs = e.program.run(arrays)
    for target, i in e.writes:
        kind, obj = target
        dst = flat[obj] if kind == "arg" else (owner(ao, obj, flat).grad if kind == "grad"
                                               else obj)
        if outs[i] is not dst._data and dst._device.type != "meta":   # donations computed
            dst._data[...] = outs[i]        # in place already; a meta tensor holds no data
        dst._storage.version += 1
    for p, i, meta in e.grads:
        p = owner(ao, p, flat)
        if i is None:
            p.grad = None
        else:
            p.grad = _wrap(outs[i], meta[0], meta[1])
    leaves = []
    for k in e.out_leaves:
        if k[0] == "tensor":
            leaves.append(next(diff) if diff is not None and k[4] else out_tensor(outs, k))
        else:
            leaves.append(k[1])
    return tree_unflatten(leaves, e.out_spec)


def owner(arg_owner: dict, p: Tensor, flat) -> Tensor:
    """``p``, or this call's tensor in the argument slot ``p`` had when it was captured."""
    i = arg_owner.get(id(p)) if arg_owner else None
    return p if i is None else flat[i]


def grad_array(s, arg_owner: dict, flat):
    """The array a ``grad`` source reads at this call (an argument's: this call's)."""
    i = arg_owner.get(id(s.obj))
    if i is None:
        return s.read()
    g = flat[i].grad
    if g is None:
        raise GraphError(f"compiled graph reads {s.label} but it is None now")
    return g._data
