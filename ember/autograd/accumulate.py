"""Where a VJP's gradients land: fitted to their input's shape and dtype, accumulated into
leaves' ``.grad``, and the post-accumulate-grad hooks that run once a leaf has all of its
gradient."""
from __future__ import annotations

from ..errors import GraphError, ShapeError
from ..tensor import Tensor
from .graph import Node
from .hooks import _RemovableHandle


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


def _post_hook_counts(nodes):
    """{id(leaf): [leaf, edges left]} for the leaves with post-accumulate-grad hooks."""
    pending: dict = {}
    for n in nodes:
        for e in n.next:
            if e is not None and e[0].__class__ is not Node and e[0]._post_acc_hooks:
                pending.setdefault(id(e[0]), [e[0], 0])[1] += 1
    return pending


def _leaf_done(pending, t):
    """Count one gradient into leaf ``t``; run its post-accumulate hooks after the last."""
    entry = pending.get(id(t))
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] == 0:
        del pending[id(t)]
        for h in list(t._post_acc_hooks):
            h(t)


def _to_leaf(t, g, create_graph, external, claimed):
    if t._hooks:
        for h in t._hooks:
            r = h(g)
            if r is not None:
                g = r
    if t._grad is None:
        sid = id(g._storage)
        if not create_graph and (sid in external or sid in claimed or g._base is not None):
            # NOTE: never alias a caller's tensor or another leaf's grad. A gradient view
            # is copied too (keeping its base by reference count instead was tried: it
            # saved ~3 weight copies per W1 step, within noise, and made the eager peak
            # differ from what ember.estimate_memory models)
            g = g.detach().clone()
        elif not create_graph:
            g = g.detach()
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


#: whether any post-accumulate-grad hook was ever registered (skips the edge count if not)
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
