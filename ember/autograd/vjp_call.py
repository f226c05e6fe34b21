"""Calling one node's VJP rule: unpacking (and checking) what the node saved, running the
gradient pre-hooks and ``retain_grad``, and the general path for several outputs, anomaly
mode, the profiler and ``autograd.grad``'s input selection. ``_vjp1`` is the engine's per-node
hot path for the usual node."""
from __future__ import annotations

from ..errors import GraphError
from ..tensor import _wrap
from .graph import ShapeOnly
from .grad_mode import state

_FREED = object()


def _unpack_saved(node, create_graph):
    saved = node.saved
    if saved is _FREED or node.out_saved is _FREED:
        raise GraphError(
            f"Trying to backward through the graph a second time (or directly access saved "
            f"tensors after they have already been freed) in {node.name()}. Saved "
            f"intermediate values of the graph are freed when you call .backward() or "
            f"autograd.grad(). Specify retain_graph=True if you need to backward through the "
            f"graph a second time.")
    if node.packed:              # saved_tensors_hooks: what the unpack hook makes
        from .graph import unpack_node
        return unpack_node(node, create_graph)
    if saved is None:
        inputs = [None if m is None else ShapeOnly(*m) for m in node.in_meta]
    else:
        inputs = saved
        for x, v in zip(saved, node.versions):
            if v is not None and x._storage.version != v:
                raise GraphError(
                    f"one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: [{x._dtype.name} {list(x._data.shape)}], which "
                    f"is input of {node.name()}, is at version {x._storage.version}; expected "
                    f"version {v} instead.")
    out = None
    if node.out_saved is not None:
        data, storage, dt, dev, v, base, fw = node.out_saved
        if storage.version != v:
            raise GraphError(
                f"one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{dt.name} {list(data.shape)}], which is output 0 of "
                f"{node.name()}, is at version {storage.version}; expected version {v} instead.")
        from ..tensor import _wrap
        out = _wrap(data, dt, dev, storage, base)
        if fw:
            out._fw = dict(fw)   # forward-over-reverse: the saved output keeps its tangents
        if create_graph:
            out._grad_fn, out._requires_grad = node, True
    return inputs, out


def _run_pre_hooks(node, grads, create_graph):
    hooks_of = node.pre_hooks
    if hooks_of is not None:
        for k, hooks in hooks_of.items():
            if k.__class__ is str:       # node-level hooks (graph._node_hook)
                continue
            for h in hooks:
                if grads[k] is not None:
                    r = h(grads[k])
                    if r is not None:
                        grads[k] = r
        for h in hooks_of.get("prehook", ()):     # after the tensor hooks, as PyTorch
            r = h(tuple(grads))
            if r is not None:
                grads = _replaced(node, h, list(r), len(grads))
    if node.retain is not None:
        for k, ref in node.retain.items():
            t = ref()
            if t is not None and grads[k] is not None:
                # NOTE: a copy, like PyTorch: the same buffer flows on to the inputs' grads
                g = grads[k] if create_graph else grads[k].detach().clone()
                t._grad = g if t._grad is None else t._grad + g
    return grads


def _call_vjp(node, grads, create_graph, want=None):
    op = node.op
    if node.nout == 1:
        g = grads[0]
        if g is None:
            return [None] * len(node.next)
    else:
        g = grads
    inputs, out = _unpack_saved(node, create_graph)
    if state.anomaly:
        from .anomaly import in_backward
        with in_backward():   # a NaN inside a VJP is blamed on its node, below
            res = _run_rule(op.vjp, node, g, out, inputs, want)
    else:
        res = _run_rule(op.vjp, node, g, out, inputs, want)
    if not isinstance(res, (tuple, list)):
        res = (res,)
    if len(res) != len(node.next):
        raise GraphError(f"{node.name()}: the VJP rule returned {len(res)} gradients for "
                         f"{len(node.next)} inputs")
    if state.anomaly:
        from .anomaly import check_backward
        check_backward(node, res, g if node.nout == 1 else None)
    return res


def _vjp1(node, g, create_graph):
    """``_call_vjp`` for the usual node (one output, no anomaly mode, no input selection),
    with ``_unpack_saved`` and ``_run_rule`` inlined: the engine's per-node hot path."""
    saved = node.saved
    osaved = node.out_saved
    if saved is _FREED or osaved is _FREED or node.packed:
        return _call_vjp(node, [g], create_graph)   # the freed-graph error; packed saves
    if saved is None:
        inputs = [None if m is None else ShapeOnly(*m) for m in node.in_meta]
    else:
        inputs = saved
        for x, v in zip(saved, node.versions):
            if v is not None and x._storage.version != v:
                return _call_vjp(node, [g], create_graph)   # raises the version error
    if osaved is None:
        out = None
    else:
        data, storage, dt, dev, v, base, fw = osaved
        if storage.version != v or fw or create_graph:
            out = _unpack_saved(node, create_graph)[1]
        else:
            out = _wrap(data, dt, dev, storage, base)
    op = node.op
    params = node.params
    if op.eager_vjp is not None and not create_graph:
        # NOTE: the op's raw-array VJP (the same bits as its rules; None: it declined)
        res = op.eager_vjp(node.next, g, out, *inputs, **params)
        if res is not None:
            return res
    vjp = op.vjp
    # NOTE: positional calls for one or two inputs and no params: a call through
    # *args/**kwargs costs ~0.1 us more per rule
    n = -1 if params else len(inputs)
    if vjp.__class__ is tuple:  # one rule per input: compute only the gradients needed
        res = []
        for e, rule in zip(node.next, vjp):
            if e is None or rule is None:
                res.append(None)
            elif n == 2:
                res.append(rule(g, out, inputs[0], inputs[1]))
            else:
                res.append(rule(g, out, *inputs, **params))
        return res
    if n == 1:
        res = vjp(g, out, inputs[0])
    elif n == 2:
        res = vjp(g, out, inputs[0], inputs[1])
    else:
        res = vjp(g, out, *inputs, **params)
    if res.__class__ is not tuple and res.__class__ is not list:
        res = (res,)
    if len(res) != len(node.next):
        raise GraphError(f"{node.name()}: the VJP rule returned {len(res)} gradients for "
                         f"{len(node.next)} inputs")
    return res


def _run_rule(vjp, node, g, out, inputs, want=None):
    if vjp.__class__ is tuple:  # one rule per input: compute only the gradients needed
        res = []
        params = node.params
        for i, e in enumerate(node.next):
            rule = vjp[i]
            res.append(None if e is None or rule is None or (want is not None and not want[i])
                       else rule(g, out, *inputs, **params))
        return res
    return vjp(g, out, *inputs, **node.params)


def _node_vjp(node, buffers, inputs, target_nodes, target_leaves, needed, captured,
              create_graph, st):
    """A node's input gradients on the general path (several outputs, hooks, anomaly mode,
    the profiler, ``autograd.grad``'s input selection); None when the node is skipped."""
    if node.nout == 1:
        grads = [buffers.pop(node, None)]
    else:
        grads = [buffers.pop(node if k == 0 else (node, k), None) for k in range(node.nout)]
    if node.pre_hooks is not None or node.retain is not None:
        grads = _run_pre_hooks(node, grads, create_graph)
    if inputs is not None and id(node) in target_nodes:
        for k, i in target_nodes[id(node)]:
            captured[i] = grads[k]
        if not any(e is not None and (id(e[0]) in needed or id(e[0]) in target_leaves)
                   for e in node.next):
            return None
    if grads[0] is None and (len(grads) == 1 or all(g is None for g in grads)):
        return None
    # NOTE: under autograd.grad, skip the VJPs of inputs that lead to no requested
    # input (a weight's gradient in jacrev with respect to x), as PyTorch does
    want = None if inputs is None else [
        e is not None and (id(e[0]) in needed or id(e[0]) in target_leaves)
        for e in node.next]
    prof = st["profiler"]     # ember.profiler: the VJP as a range named like grad_fn
    if prof is not None:
        res = prof.call(node.name(), "cpu_op", _call_vjp, node, grads, create_graph, want)
    elif st["anomaly"] or want is not None or node.nout != 1:
        res = _call_vjp(node, grads, create_graph, want)
    else:
        res = _vjp1(node, grads[0], create_graph)
    post = node.pre_hooks.get("hook") if node.pre_hooks is not None else None
    if post:
        for h in post:
            r = h(tuple(res), tuple(grads))
            if r is not None:
                res = _replaced(node, h, list(r), len(res))
    return res


def _replaced(node, hook, new: list, n: int) -> list:
    """What a node-level hook returned, checked for one gradient per slot (PyTorch's error)."""
    if len(new) != n:
        name = getattr(hook, "__name__", type(hook).__name__)
        raise GraphError(f"{node.name()}: hook '{name}' has returned an incorrect number of "
                         f"values (got {len(new)}, but expected {n})")
    return new
