"""Turning a finished trace into a compiled-function *entry*: graph outputs, write-backs
of state changed in place, new gradients and the template of the returned value.

:class:`Entry` is one captured signature of ``ember.compile``; :func:`finish_capture` fills
it from a :class:`~ember.graph.trace.Tracer` after the traced call.
"""
from __future__ import annotations

from ..autograd.grad_mode import state as _state
from ..func._tree import tree_flatten
from ..ops.layout import in_order, kept_order
from ..tensor import Tensor, _wrap
from .trace import Tracer

__all__ = ["Entry", "Eager", "finish_capture", "lifted"]


class Entry:
    """One captured signature: the program, where its inputs come from, what it writes."""

    __slots__ = ("graph", "program", "arg_slots", "sources", "writes", "grads", "out_spec",
                 "out_leaves", "out_leaves_vars", "n_user", "eager", "reason", "raw_graph",
                 "report", "compile_s", "joint", "diff_inputs", "release", "arg_owner",
                 "guards")


class Eager(Exception):
    """The signature cannot be captured: it runs eagerly (the message says why)."""


def lifted(e: Entry) -> list:
    """``(tensor, label)`` of the objects entry ``e`` reads or writes at every run."""
    out = [(s.obj, s.label) for s in e.sources if s.kind in ("tensor", "grad")]
    out += [(p, f"a parameter's .grad") for p, _, _ in e.grads]
    out += [(obj, "a tensor written in place") for (kind, obj), _ in e.writes
            if kind in ("tensor", "grad")]
    return out


def finish_capture(tr: Tracer, e: Entry, result, arg_slots, flat, params, passes,
                   ran_backward=False) -> None:
    """Turn the tracer's state into graph outputs, write-backs and the output template.

    ``ran_backward``: the function ran a backward pass that frees saved values itself
    (``backward()``, ``autograd.grad``: a training step); its outputs' autograd graphs
    may be spent, so they come back as plain tensors.
    """
    outs = []
    spec, leaf_kind, diff_outs = _returned(tr, result, outs)
    n_user = len(outs)
    writes = _write_backs(tr, flat, arg_slots, outs)
    grads = _new_grads(tr, e, flat, arg_slots, params, outs)
    e.joint = None
    if diff_outs and not ran_backward and not any(i is not None for _, i, _ in grads):
        # outputs need gradients later: trace their backward as a second graph
        from .joint import capture_backward
        diff_in, e.diff_inputs = _diff_inputs(tr, flat, arg_slots)
        outs, e.joint = capture_backward(tr, outs, diff_outs, diff_in, passes)
        grads = []
    e.arg_slots = arg_slots
    e.sources = [src for _, src in tr.sources]
    e.writes = [(t, i) for t, i, _ in writes]
    e.grads = grads
    read = {id(s.obj) for s in e.sources if s.kind == "grad"}
    e.release = [p for p, i, _ in grads if i is not None and id(p) not in read]
    e.out_spec = spec
    e.out_leaves = leaf_kind
    e.out_leaves_vars = outs
    e.n_user = n_user


def _returned(tr: Tracer, result, outs: list):
    """The returned value's tree structure, one ``("tensor", output position, dtype,
    device, differentiable, dim order)`` or ``("static", value)`` per leaf, and the leaves
    that need gradients; appends the returned tensors' vars to ``outs``. The dim order is
    the layout eager gave a dense, not row-major result (a channels-last image): later
    runs return it laid out so (:func:`out_tensor`), as ``torch.compile`` does."""
    leaves, spec = tree_flatten(result)
    leaf_kind, diff_outs = [], []
    for x in leaves:
        if isinstance(x, Tensor):
            diff = x._requires_grad and _state.grad_enabled
            order = kept_order(x._data) if x._device.type != "meta" else None
            leaf_kind.append(("tensor", len(outs), x._dtype, x._device, diff, order))
            if diff:
                diff_outs.append(x)
            outs.append(tr.read(x))
        else:
            leaf_kind.append(("static", x))
    return spec, leaf_kind, diff_outs


def _write_backs(tr: Tracer, flat, arg_slots, outs: list) -> list:
    """``(target, output position, var)`` of the in-place writes into tensors that existed
    before the call (an argument, a ``.grad``, another tensor); appends the vars to
    ``outs``."""
    arg_of = {id(flat[i]._data): i for i in arg_slots}
    writes, seen = [], set()
    for t in tr.written.values():
        root = t._base if t._base is not None else t
        rid = id(root._data)
        if rid in seen or rid in tr.internal:
            continue
        seen.add(rid)
        if rid not in tr.env:
            continue
        v = tr.read(root)
        if rid in arg_of:
            target = ("arg", arg_of[rid])
        else:
            owner = tr.grad_owners.get(rid)
            target = ("grad", owner) if owner is not None and owner.grad is not None and \
                owner.grad._data is root._data else ("tensor", root)
        writes.append((target, len(outs), v))
        outs.append(v)
    return writes


def _new_grads(tr: Tracer, e: Entry, flat, arg_slots, params, outs: list) -> list:
    """``(leaf, output position or None, (dtype, device))`` of the gradients ``backward()``
    made for parameters and other lifted leaves (None: the function cleared it); sets
    ``e.arg_owner`` and appends the gradients' vars to ``outs``."""
    grads = []
    # NOTE: a leaf argument's .grad is read and written through whatever tensor sits in
    # its slot at each call (owner), not the one this capture saw
    e.arg_owner = {id(flat[i]): i for i in arg_slots if flat[i]._requires_grad and
                   flat[i]._grad_fn is None}
    candidates = {id(p): p for p in params}
    candidates.update({id(flat[i]): flat[i] for i in e.arg_owner.values()})
    candidates.update({k: t for k, t in tr.lifted.items() if t._requires_grad})
    had = {id(p) for p in tr.grad_owners.values()}
    for p in candidates.values():
        g = p.grad
        if g is None:
            if id(p) in had:          # the function set it to None (zero_grad)
                grads.append((p, None, None))
        elif id(g._data) in tr.internal and id(g._data) in tr.env:
            grads.append((p, len(outs), (g._dtype, g._device)))
            outs.append(tr.read(g))
    return grads


def _diff_inputs(tr: Tracer, flat, arg_slots):
    """The tensors a compiled backward differentiates with respect to, and where each
    comes from at a call: ``("arg", flat position)`` or ``("src", source position)``."""
    diff_in, where = [], []
    for i in arg_slots:
        if flat[i]._requires_grad:
            diff_in.append(flat[i])
            where.append(("arg", i))
    for k, (_, src) in enumerate(tr.sources):
        if src.kind == "tensor" and src.obj._requires_grad:
            diff_in.append(src.obj)
            where.append(("src", k))
    return diff_in, where


def out_tensor(outs, k) -> Tensor:
    """The tensor returned for out-leaf ``k`` (``("tensor", position, dtype, device, diff,
    order)``) of a run's output arrays ``outs``: laid out as the capturing call's was."""
    a = outs[k[1]]
    if k[5] is not None:
        from ..device import get_backend
        a = in_order(get_backend(k[3]).xp, a, k[5])
    return _wrap(a, k[2], k[3])
