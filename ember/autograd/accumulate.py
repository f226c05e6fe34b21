"""Where a VJP's gradients land: fitted to their input's shape and dtype, accumulated into
leaves' ``.grad``, and the post-accumulate-grad hooks that run once a leaf has all of its
gradient."""
from __future__ import annotations

import sys

from ..errors import GraphError, ShapeError
from ..tensor import Tensor
from .graph import Node
from .hooks import _RemovableHandle

_refs = sys.getrefcount


def _fit(g, meta, node, i):
    """Reduce a gradient to its input's shape and cast it to its dtype."""
    shape, dt, _ = meta
    if g._data.shape != shape:
        from ..ops.reduce import sum_to
        try:
            g = sum_to(g, shape)
        except Exception:
            raise ShapeError(f"{node.name()} returned a gradient of shape "
                             f"{tuple(g._data.shape)} for input {i} of shape {shape}") from None
    if g._dtype is not dt:
        if g._dtype.is_complex and not dt.is_complex:
            g = g.real   # NOTE: PyTorch's handle_r_to_c: a real input keeps the real part
        g = g.to(dt)
    return g


def _fit_checked(g, node, i):
    """``_fit`` in anomaly mode: a NaN/Inf that reducing or casting a VJP's gradient
    produces (a float16 ``sum_to`` overflowing) is the node's, not a forward op's."""
    from .anomaly import check_backward, in_backward
    with in_backward():
        out = _fit(g, node.in_meta[i], node, i)
    if out is not g:
        check_backward(node, [out], g)
    return out


def _leaf_counts(nodes):
    """``{id(leaf): [leaf, edges left, gradient so far]}`` for the leaves with tensor hooks or
    post-accumulate-grad hooks among the edges of ``nodes`` (the engine's ``pending``)."""
    pending: dict = {}
    for n in nodes:
        for e in n.next:
            if e is not None and e[0].__class__ is not Node and (
                    e[0]._hooks or e[0]._post_acc_hooks):
                pending.setdefault(id(e[0]), [e[0], 0, None])[1] += 1
    return pending


def _leaf_arrive(pending, t, g, create_graph, external, claimed) -> None:
    """One gradient ``g`` reaches leaf ``t``. A leaf with tensor hooks gets its gradient
    summed over every edge first, so its hooks run once on the whole of it, as PyTorch's
    ``AccumulateGrad`` does; its post-accumulate hooks run after the last contribution."""
    entry = pending.get(id(t)) if pending else None
    if entry is None:
        _to_leaf(t, g, create_graph, external, claimed)
        return
    if t._hooks:
        entry[2] = g if entry[2] is None else entry[2] + g
    else:      # NOTE: post hooks only: accumulate as it comes (the hook-free path's bits)
        _to_leaf(t, g, create_graph, external, claimed)
        entry[2] = True
    entry[1] -= 1
    if entry[1] == 0:
        _leaf_finish(pending, entry, create_graph, external, claimed)


def _leaf_finish(pending, entry, create_graph, external, claimed) -> None:
    t, _, g = entry
    del pending[id(t)]
    if g is not True:
        _to_leaf(t, g, create_graph, external, claimed)
    for h in list(t._post_acc_hooks or ()):
        h(t)


def _flush_leaves(pending, create_graph, external, claimed) -> None:
    """After the node loop: finish the leaves whose counted edges did not all carry a
    gradient (a rule returned None for one), so none of what arrived is lost."""
    for entry in list(pending.values()):
        if entry[2] is not None:
            _leaf_finish(pending, entry, create_graph, external, claimed)


def run_hooks(t, g):
    """``g`` through leaf ``t``'s tensor hooks (each may return a replacement)."""
    for h in t._hooks:
        r = h(g)
        if r is not None:
            g = r
    return g


def _stolen(g, t):
    """The tensor to keep as ``t.grad`` for the gradient view ``g`` without a copy, or None.

    PyTorch's ``AccumulateGrad`` steals an incoming gradient that no one else references
    and that obeys the gradient layout contract. Ember does the same for a view that is
    its base again (a Linear weight's ``((g.mT @ x).mT).mT``: same dtype, shape and
    strides, so it spans the whole buffer and keeping it keeps no extra memory alive) and
    has the parameter's strides (:func:`_layout_ok`: ``.grad`` strides match the
    parameter's, as PyTorch keeps them for dense parameters), when the leaf has no tensor
    hooks (a hook may have kept ``g``) and the buffer is referenced by ``g`` and its base
    alone (no other tensor, saved value or hook-held gradient is a view of it). The base
    is kept, so ``.grad`` is then exactly what a fresh non-view gradient gives. Other
    views are copied. (A fresh non-view gradient is kept as it always was, in any layout.)
    """
    base = g._base
    if base._base is not None or t._hooks or g._dtype is not base._dtype:
        return None
    ga, ba = g._data, base._data
    if ga.shape != ba.shape or ga.strides != ba.strides or not _layout_ok(ga, t._data):
        return None
    # NOTE: the storage is referred to by g._storage and base._storage, the base by g._base
    # and the local ``base``; getrefcount's argument adds one to each
    if _refs(g._storage) == 3 and _refs(base) == 3:
        return base
    return None


def _layout_ok(ga, ta) -> bool:
    """PyTorch's gradient layout contract (``obeys_layout_contract``) for array ``ga`` as
    the gradient of a parameter over ``ta``: the parameter's strides (a dim of size 1 may
    differ, but not be 0) when the parameter is non-overlapping and dense, C order
    otherwise."""
    gs, ts = ga.strides, ta.strides
    if gs == ts and (ta.flags.c_contiguous or ta.flags.f_contiguous):
        return 0 not in gs or ga.size == 0
    if not _dense(ta):
        return ga.flags.c_contiguous
    for n, a, b in zip(ga.shape, gs, ts):
        if (a == 0) if n == 1 else (a != b):
            return False
    return True


def _dense(a) -> bool:
    """Whether array ``a`` is non-overlapping and dense (a permutation of C order)."""
    if a.flags.c_contiguous or a.flags.f_contiguous or a.size == 0:
        return True
    expected = a.itemsize
    for s, n in sorted((abs(s), n) for s, n in zip(a.strides, a.shape) if n != 1):
        if s != expected:
            return False
        expected *= n
    return True


def _to_leaf(t, g, create_graph, external, claimed, hooks: bool = True):
    if t._hooks and hooks:
        g = run_hooks(t, g)
    if t._grad is None:
        sid = id(g._storage)
        if create_graph:
            pass
        elif sid in external or sid in claimed:
            # NOTE: never alias a caller's tensor or another leaf's grad
            g = g.detach().clone()
        elif g._base is None:
            g = g.detach()
        else:   # a view: kept only when nothing else can see its buffer
            kept = _stolen(g, t)
            g = g.detach().clone() if kept is None else kept.detach()
        claimed.add(id(g._storage))
        t._grad = g
    elif create_graph or t._grad._requires_grad:
        t._grad = t._grad + g
    elif id(t._grad._storage) in claimed:
        # NOTE: this backward stored the leaf's first gradient without a copy, and that
        # buffer may still be on its way to other nodes (add's VJP hands one g to both
        # inputs): accumulating into it in place would change their gradient too
        t._grad = t._grad + g.detach()
    else:
        t._grad.add_(g.detach())


#: whether any post-accumulate-grad hook or leaf tensor hook was ever registered (the
#: engine skips the edge count if not)
_post_hooks_live = False


def register_post_accumulate_grad_hook(t: Tensor, fn):
    """Register ``fn(t) -> None`` to run once ``t.grad`` holds all of a backward's gradient.

    Like ``torch.Tensor.register_post_accumulate_grad_hook``: leaves only; it runs after the
    last contribution of the current ``backward()`` was accumulated (not under
    ``autograd.grad``). DistributedDataParallel launches its bucket all-reduces from it.
    """
    global _post_hooks_live
    if t._grad_fn is not None:
        raise GraphError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    if not t._requires_grad:
        raise GraphError("cannot register a hook on a tensor that doesn't require gradient")
    if t._post_acc_hooks is None:
        t._post_acc_hooks = []
    t._post_acc_hooks.append(fn)
    _post_hooks_live = True
    return _RemovableHandle(t._post_acc_hooks, fn)
