"""The reverse-mode engine: walks the recorded graph from the outputs back.

Nodes are processed in decreasing creation order (``seq``), which is a valid
topological order because a node is always created after the nodes of its
inputs. VJP rules are Ember ops, run with grad mode equal to ``create_graph``,
so the backward pass is itself recorded when higher derivatives are wanted.
This is the one place where input gradients are reduced back to the input's
shape (for broadcasting) and cast back to its dtype.
"""
from __future__ import annotations

import operator
import threading

from ..errors import GraphError, ShapeError
from ..tensor import Tensor, _wrap
from .graph import Node, ShapeOnly
from .grad_mode import state, set_grad_enabled
# NOTE: the hook API lives in hooks.py; engine re-exports it for existing imports
from .hooks import _RemovableHandle, register_hook, retain_grad, zero_grads  # noqa: F401

_FREED = object()
_SEQ = operator.attrgetter("seq")


def _collect(roots):
    """All nodes reachable from ``roots`` and the leaves they reach."""
    # NOTE: one dict is both the seen-set and the list, in visiting order (Node hashes by
    # identity: no id() calls)
    seen: dict = {}
    stack = [n for n in roots if n is not None]
    push = stack.append
    pop = stack.pop
    while stack:
        n = pop()
        if n in seen:
            continue
        seen[n] = None
        for e in n.next:
            if e is not None:
                t = e[0]
                if t.__class__ is Node and t not in seen:
                    push(t)
    return list(seen)


def _prune(nodes, target_nodes, target_leaves):
    """Nodes that lie on a path to some target (for ``autograd.grad``)."""
    needed = set()
    for n in sorted(nodes, key=lambda n: n.seq):  # inputs before consumers
        if id(n) in target_nodes:
            needed.add(id(n))
            continue
        for e in n.next:
            if e is None:
                continue
            if e[0].__class__ is not Node:   # a leaf tensor (Tensor or a subclass)
                if id(e[0]) in target_leaves:
                    needed.add(id(n))
                    break
            elif id(e[0]) in needed:
                needed.add(id(n))
                break
    return needed


def _unpack_saved(node, create_graph):
    saved = node.saved
    if saved is _FREED or node.out_saved is _FREED:
        raise GraphError(
            f"Trying to backward through the graph a second time (or directly access saved "
            f"tensors after they have already been freed) in {node.name()}. Saved "
            f"intermediate values of the graph are freed when you call .backward() or "
            f"autograd.grad(). Specify retain_graph=True if you need to backward through the "
            f"graph a second time.")
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


def _accumulate(buf, key, g):
    cur = buf.get(key)
    buf[key] = g if cur is None else cur + g


#: how many backward passes that free the saved values they use (``retain_graph=False``:
#: ``backward()``, ``autograd.grad``) have started. ``ember.compile`` asks whether the traced
#: function ran one: then the autograd graphs of its outputs may be spent, and they come
#: back as plain tensors instead of getting a compiled backward.
freeing_runs = 0


def run_backward(roots, grad_roots, retain_graph: bool, create_graph: bool,
                 inputs=None, allow_unused: bool = False):
    """Core of ``Tensor.backward`` and ``autograd.grad``.

    With ``inputs`` given, returns their gradients (no ``.grad`` is touched);
    otherwise accumulates into the ``.grad`` of every leaf reached.
    """
    global freeing_runs
    if not retain_graph:
        freeing_runs += 1
    buffers: dict = {}
    root_nodes = []
    external = set()  # storages the caller owns: never stored as a .grad without a copy
    for t, g in zip(roots, grad_roots):
        external.add(id(g._storage))
        if t._grad_fn is None:
            if inputs is None:
                _to_leaf(t, g, create_graph, external, set())
                for h in list(t._post_acc_hooks or ()):
                    h(t)
            else:
                buffers[("leaf", id(t))] = g
            continue
        _accumulate(buffers, t._grad_fn if t._out_nr == 0 else (t._grad_fn, t._out_nr), g)
        root_nodes.append(t._grad_fn)
    nodes = _collect(root_nodes)
    captured: dict = {}
    needed: set = set()
    target_nodes, target_leaves = {}, {}
    if inputs is not None:
        for i, x in enumerate(inputs):
            if x._grad_fn is None:
                target_leaves[id(x)] = i
            else:
                target_nodes.setdefault(id(x._grad_fn), []).append((x._out_nr, i))
        needed = _prune(nodes, target_nodes, target_leaves)
        nodes = [n for n in nodes if id(n) in needed]
        for t in roots:
            if id(t) in target_leaves:
                captured[target_leaves[id(t)]] = buffers.get(("leaf", id(t)))
    nodes.sort(key=_SEQ, reverse=True)   # seq is unique: reverse is exact
    claimed: set = set()
    modes = _running.__dict__.setdefault("modes", [])
    callbacks = _running.__dict__.setdefault("callbacks", [])
    modes.append(inputs is None)
    callbacks.append([])
    # NOTE: VJPs run in the dtypes the forward chose: autocast is off in the backward (a
    # checkpoint's recompute and custom_bwd restore the forward's state themselves).
    autocast, state.autocast = state.autocast, None
    try:
        pending = _post_hook_counts(nodes) if inputs is None and _post_hooks_live else None
        _run_nodes(nodes, buffers, inputs, target_nodes, target_leaves, needed, captured,
                   retain_graph, create_graph, external, claimed, pending)
        queued = callbacks[-1]
        while queued:   # a callback may queue another (PyTorch runs those too)
            queued.pop(0)()
    finally:
        state.autocast = autocast
        modes.pop()
        callbacks.pop()
    if inputs is not None:
        out = []
        for i, x in enumerate(inputs):
            g = captured.get(i)
            if g is None and not allow_unused:
                raise GraphError(f"One of the differentiated Tensors (input {i}, shape "
                                 f"{tuple(x.shape)}) appears to not have been used in the "
                                 f"graph. Set allow_unused=True if this is the desired behavior.")
            if g is not None and not create_graph:
                g = g.detach()
            out.append(g)
        return tuple(out)
    return None


def _run_pre_hooks(node, grads, create_graph):
    if node.pre_hooks is not None:
        for k, hooks in node.pre_hooks.items():
            for h in hooks:
                if grads[k] is not None:
                    r = h(grads[k])
                    if r is not None:
                        grads[k] = r
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
    if saved is _FREED or osaved is _FREED:
        return _call_vjp(node, [g], create_graph)   # raises the freed-graph error
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
    vjp = node.op.vjp
    params = node.params
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


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients of ``tensors`` into the leaves' ``.grad`` (``torch.autograd.backward``)."""
    if state.modes and hasattr(state.modes[-1], "on_backward"):   # ember.func.vmap refuses
        state.modes[-1].on_backward()
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    if grad_tensors is None or isinstance(grad_tensors, Tensor):
        grad_tensors = [grad_tensors] * len(tensors) if grad_tensors is None else [grad_tensors]
    if retain_graph is None:
        retain_graph = create_graph
    roots, grads = _roots_and_grads(tensors, grad_tensors, "backward")
    if inputs is not None:
        inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        res = run_backward(roots, grads, retain_graph, create_graph, inputs, allow_unused=True)
        for x, g in zip(inputs, res):
            if g is not None:
                _to_leaf(x, g, create_graph, {id(gg._storage) for gg in grads}, set())
        return
    run_backward(roots, grads, retain_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, materialize_grads=False):
    """Gradients of ``outputs`` with respect to ``inputs`` (``torch.autograd.grad``).

    Example:
        >>> x = ember.tensor(3.0, requires_grad=True)
        >>> (dx,) = ember.autograd.grad(x ** 2, x)   # tensor(6.)
    """
    single = isinstance(inputs, Tensor)
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if single else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs] * len(outputs) if grad_outputs is None else [grad_outputs]
    if retain_graph is None:
        retain_graph = create_graph
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor) or not x._requires_grad:
            raise GraphError(f"autograd.grad: input {i} does not require grad")
    roots, grads = _roots_and_grads(outputs, grad_outputs, "autograd.grad")
    res = run_backward(roots, grads, retain_graph, create_graph, inputs,
                       allow_unused=bool(allow_unused) or materialize_grads)
    if materialize_grads:
        res = tuple(g if g is not None else x.detach().mul(0) for g, x in zip(res, inputs))
    return res


def _roots_and_grads(tensors, grad_tensors, what):
    roots, grads = [], []
    if len(grad_tensors) != len(tensors):
        raise ValueError(f"{what}: got {len(grad_tensors)} gradients for {len(tensors)} outputs")
    for t, g in zip(tensors, grad_tensors):
        if not t._requires_grad:
            raise GraphError("element 0 of tensors does not require grad and does not have a "
                             "grad_fn")
        if g is None:
            if t._dtype.is_complex:
                raise GraphError(f"grad can be implicitly created only for real scalar "
                                 f"outputs; got {t._dtype.name}: pass gradient=")
            if t._data.size != 1:
                raise GraphError(f"grad can be implicitly created only for scalar outputs; "
                                 f"got an output of shape {tuple(t.shape)}: pass gradient=")
            from ..ops.factories import ones_like
            g = ones_like(t)
        elif not isinstance(g, Tensor):
            from ..ops.factories import tensor as _tensor
            g = _tensor(g, dtype=t.dtype)
        if g._data.shape != t._data.shape:
            raise ShapeError(f"{what}: gradient of shape {tuple(g.shape)} does not match the "
                             f"output's shape {tuple(t.shape)}")
        roots.append(t)
        grads.append(g)
    return roots, grads


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


def queue_callback(fn) -> None:
    """Run ``fn()`` when the backward pass running on this thread finishes.

    PyTorch's ``Variable._execution_engine.queue_callback``; raises RuntimeError outside
    a backward pass.
    """
    stack = getattr(_running, "callbacks", None)
    if not stack:
        raise GraphError("queue_callback: no backward pass is running on this thread "
                         "(call it from a gradient hook)")
    stack[-1].append(fn)


#: per thread: for each engine run in progress (innermost last), whether it accumulates into
#: ``.grad`` (``backward()``) rather than returning the gradients of given inputs.
_running = threading.local()


def accumulating() -> bool:
    """Whether the innermost backward pass running on this thread is a ``.backward()``
    (gradients go into leaves' ``.grad``); False outside backward and under ``autograd.grad``.
    A rule that runs its own local backward (``ember.checkpoint``) asks this."""
    modes = getattr(_running, "modes", None)
    return bool(modes) and modes[-1]


def _run_nodes(nodes, buffers, inputs, target_nodes, target_leaves, needed, captured,
               retain_graph, create_graph, external, claimed, pending=None):
    """The node loop of :func:`run_backward`: each node's VJP, in reverse creation order.

    ``buffers`` holds the gradients flowing into nodes, keyed ``node`` for output 0 and
    ``(node, k)`` for output ``k > 0`` (no tuple to build or hash for the usual node).
    """
    st = state.__dict__      # NOTE: the thread's switches: one lookup, then dict reads
    pop = buffers.pop
    get = buffers.get
    with set_grad_enabled(create_graph):
        for node in nodes:
            if (inputs is None and node.nout == 1 and node.pre_hooks is None
                    and node.retain is None and st["profiler"] is None and not st["anomaly"]):
                g = pop(node, None)     # the usual node: one output, no hooks, plain mode
                if g is None:
                    continue
                in_grads = _vjp1(node, g, create_graph)
                g = None     # NOTE: the incoming gradient may die here (see _to_leaf)
            else:
                in_grads = _node_vjp(node, buffers, inputs, target_nodes, target_leaves,
                                     needed, captured, create_graph, st)
                if in_grads is None:
                    continue
            if not retain_graph:
                if node.saved is not None:
                    node.saved = _FREED
                if node.out_saved is not None:
                    node.out_saved = _FREED
                free = getattr(node.op, "free_saved", None)  # custom Function: its ctx
                if free is not None:
                    free()
            anomaly = st["anomaly"]
            i = -1
            for e, gi in zip(node.next, in_grads):
                i += 1
                if e is None or gi is None:
                    continue
                if anomaly:
                    gi = _fit_checked(gi, node, i)
                else:
                    meta = node.in_meta[i]
                    if gi._dtype is not meta[1] or gi._data.shape != meta[0]:
                        gi = _fit(gi, meta, node, i)
                target, k = e
                if target.__class__ is not Node:   # a leaf (Tensor, Parameter...)
                    if inputs is None:
                        _to_leaf(target, gi, create_graph, external, claimed)
                        if pending:
                            _leaf_done(pending, target)
                    elif id(target) in target_leaves:
                        j = target_leaves[id(target)]
                        captured[j] = gi if captured.get(j) is None else captured[j] + gi
                else:
                    key = target if k == 0 else (target, k)
                    cur = get(key)
                    buffers[key] = gi if cur is None else cur + gi
            # NOTE: drop this node's input gradients now, not when the next node's rule
            # returns: that rule may be a whole checkpointed segment (recompute + backward).
            in_grads = gi = None


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
        return prof.call(node.name(), "cpu_op", _call_vjp, node, grads, create_graph, want)
    if st["anomaly"] or want is not None or node.nout != 1:
        return _call_vjp(node, grads, create_graph, want)
    return _vjp1(node, grads[0], create_graph)
