"""The reverse-mode engine: walks the recorded graph from the outputs back.

Nodes are processed in decreasing creation order (``seq``), which is a valid
topological order because a node is always created after the nodes of its
inputs. VJP rules are Ember ops, run with grad mode equal to ``create_graph``,
so the backward pass is itself recorded when higher derivatives are wanted.
This is the one place where input gradients are reduced back to the input's
shape (for broadcasting) and cast back to its dtype.

Beside it: ``traverse.py`` (which nodes a pass visits), ``vjp_call.py`` (one node's VJP
call with its saved values and pre-hooks), ``accumulate.py`` (fitting gradients to their
inputs, leaves' ``.grad``, post-accumulate hooks) and ``hooks.py`` (the hook API).
"""
from __future__ import annotations

import operator
import threading

from ..errors import GraphError, ShapeError
from ..tensor import Tensor
from . import accumulate as _acc
from .accumulate import (_fit, _fit_checked, _flush_leaves, _leaf_arrive, _leaf_counts,
                         _to_leaf, register_post_accumulate_grad_hook,  # noqa: F401 - re-exported
                         run_hooks)
from .edges import GradientEdge, resolve
from .graph import Node
from .grad_mode import state, set_grad_enabled
# NOTE: the hook API lives in hooks.py; engine re-exports it for existing imports
from .hooks import _RemovableHandle, register_hook, retain_grad, zero_grads  # noqa: F401
from .traverse import _collect, _prune
from .vjp_call import _FREED, _node_vjp, _vjp1

_SEQ = operator.attrgetter("seq")


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
    passes = _running.__dict__.setdefault("passes", [])
    this = _Pass()
    passes.append(this)
    try:
        return _run(this, roots, grad_roots, retain_graph, create_graph, inputs, allow_unused)
    finally:
        passes.pop()


def _run(this, roots, grad_roots, retain_graph, create_graph, inputs, allow_unused):
    buffers: dict = {}
    root_nodes = []
    external = set()  # storages the caller owns: never stored as a .grad without a copy
    for t, g in zip(roots, grad_roots):
        external.add(id(g._storage))
        if t.__class__ is GradientEdge:      # an output given as (node, output_nr)
            _accumulate(buffers, t.node if t.output_nr == 0 else t, g)
            root_nodes.append(t.node)
            continue
        if t._grad_fn is None:
            this.root_leaves.add(id(t))
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
            if x.__class__ is GradientEdge:
                target_nodes.setdefault(id(x.node), []).append((x.output_nr, i))
            elif x._grad_fn is None:
                target_leaves[id(x)] = i
            else:
                target_nodes.setdefault(id(x._grad_fn), []).append((x._out_nr, i))
        needed = _prune(nodes, target_nodes, target_leaves)
        nodes = [n for n in nodes if id(n) in needed]
        for t in roots:
            if id(t) in target_leaves:
                captured[target_leaves[id(t)]] = buffers.get(("leaf", id(t)))
    nodes.sort(key=_SEQ, reverse=True)   # seq is unique: reverse is exact
    this.nodes, this.target_leaves = nodes, (target_leaves if inputs is not None else None)
    claimed: set = set()
    modes = _running.__dict__.setdefault("modes", [])
    callbacks = _running.__dict__.setdefault("callbacks", [])
    modes.append(inputs is None)
    callbacks.append([])
    # NOTE: VJPs run in the dtypes the forward chose: autocast is off in the backward (a
    # checkpoint's recompute and custom_bwd restore the forward's state themselves).
    autocast, state.autocast = state.autocast, None
    try:
        pending = (_leaf_counts(nodes) if inputs is None and _acc._post_hooks_live
                   else None)
        _run_nodes(nodes, buffers, inputs, target_nodes, target_leaves, needed, captured,
                   retain_graph, create_graph, external, claimed, pending)
        if pending:
            with set_grad_enabled(create_graph):
                _flush_leaves(pending, create_graph, external, claimed)
        if inputs is not None:     # a leaf input's hooks see its whole gradient, once
            with set_grad_enabled(create_graph):
                for x, j in target_leaves.items():
                    leaf = inputs[j]
                    if leaf._hooks and captured.get(j) is not None:
                        captured[j] = run_hooks(leaf, captured[j])
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
                what = (f"shape {tuple(x.shape)}" if x.__class__ is not GradientEdge else
                        f"the GradientEdge of {x.node.name()} output {x.output_nr}")
                raise GraphError(f"One of the differentiated Tensors (input {i}, {what}) "
                                 f"appears to not have been used in the graph. Set "
                                 f"allow_unused=True if this is the desired behavior.")
            if g is not None and not create_graph:
                g = g.detach()
            out.append(g)
        return tuple(out)
    return None


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients of ``tensors`` into the leaves' ``.grad``
    (``torch.autograd.backward``)."""
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
            if g is not None:     # NOTE: run_backward already ran a leaf's hooks
                _to_leaf(x, g, create_graph, {id(gg._storage) for gg in grads}, set(),
                         hooks=x._grad_fn is not None)
        return
    run_backward(roots, grads, retain_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, materialize_grads=False):
    """Gradients of ``outputs`` with respect to ``inputs`` (``torch.autograd.grad``).

    Example:
        >>> x = ember.tensor(3.0, requires_grad=True)
        >>> (dx,) = ember.autograd.grad(x ** 2, x)   # tensor(6.)
    """
    single = isinstance(inputs, (Tensor, GradientEdge))
    outputs = [outputs] if isinstance(outputs, (Tensor, GradientEdge)) else list(outputs)
    inputs = [inputs] if single else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs] * len(outputs) if grad_outputs is None else [grad_outputs]
    if retain_graph is None:
        retain_graph = create_graph
    outputs, inputs = [resolve(x) for x in outputs], [resolve(x) for x in inputs]
    for i, x in enumerate(inputs):
        if x.__class__ is GradientEdge:
            if materialize_grads:
                raise GraphError(f"autograd.grad: materialize_grads needs the shape of input "
                                 f"{i}, which a GradientEdge of a node does not carry")
        elif not isinstance(x, Tensor) or not x._requires_grad:
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
        if t.__class__ is GradientEdge:
            if not isinstance(g, Tensor):
                raise GraphError(f"{what}: an output given as a GradientEdge needs its "
                                 f"gradient in grad_outputs")
            roots.append(t)
            grads.append(g)
            continue
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
#: ``.grad`` (``backward()``) rather than returning the gradients of given inputs
#: (``modes``), its queued callbacks and its :class:`_Pass` (``passes``).
_running = threading.local()


class _Pass:
    """One backward pass in progress: which nodes it runs (PyTorch's graph task), for hooks
    that must know which of their tensors' gradients it will compute."""

    __slots__ = ("nodes", "target_leaves", "root_leaves", "_ids", "_leaves", "__weakref__")

    def __init__(self):
        self.nodes, self.target_leaves, self.root_leaves = (), None, set()
        self._ids = self._leaves = None

    def will_execute(self, t) -> bool:
        """Whether this pass computes the gradient of tensor ``t``
        (``torch._C._will_engine_execute_node`` of its grad_fn or AccumulateGrad)."""
        fn = t._grad_fn
        if fn is not None:
            if self._ids is None:
                self._ids = {id(n) for n in self.nodes}
            return id(fn) in self._ids
        if id(t) in self.root_leaves:
            return True
        if self.target_leaves is not None:      # autograd.grad: only its leaf inputs
            return id(t) in self.target_leaves
        if self._leaves is None:
            self._leaves = {id(e[0]) for n in self.nodes for e in n.next
                            if e is not None and e[0].__class__ is not Node}
        return id(t) in self._leaves


def current_pass():
    """The innermost backward pass running on this thread, or None."""
    passes = getattr(_running, "passes", None)
    return passes[-1] if passes else None


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
                        if pending:
                            _leaf_arrive(pending, target, gi, create_graph, external, claimed)
                        else:
                            _to_leaf(target, gi, create_graph, external, claimed)
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
