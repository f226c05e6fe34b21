"""Gradient checkpointing: trade compute for memory (Chen et al. 2016; seed 001 §3.5).

``checkpoint(fn, *args)`` runs ``fn`` with gradient recording off, so none of the
values computed inside it are kept; its outputs get one graph node whose backward
re-runs ``fn`` with recording on (the *recompute*) and backpropagates through that
local graph. The design is PyTorch's non-reentrant one, without its traps:

* Inputs that do not require grad, keyword arguments, nested/tuple outputs,
  non-tensor outputs and nested checkpoints all work, and nothing warns.
* Tensors ``fn`` reads without receiving them as arguments (module parameters, closure
  variables) are found while the forward runs: a small dispatch mode
  (:class:`_ForwardMode`) sees every op and notes each operand that requires grad.
  They become inputs of the checkpoint node, so their gradients flow as usual.
* The recompute replays the random generators: the default one and every
  :class:`~ember.random.Generator` that ``fn`` drew from are restored to their state
  at the forward (dropout masks match), then put back where they were.
* ``create_graph=True``: the recompute is connected to the original inputs through
  identity views, so gradients of gradients flow through it.
* Selective checkpointing: ``policy`` says which op outputs the forward keeps
  (``"save_matmul_conv"`` keeps matmul/conv outputs and recomputes the cheap
  elementwise, normalisation and pooling ops after them). The recompute reuses those
  outputs instead of running their ops again (:class:`_RecomputeMode`).

Example:
    >>> h = ember.checkpoint(block, x)            # block's activations are not stored
    >>> y = ember.checkpoint_sequential(model, 8, x)
"""
from __future__ import annotations

import math

from ..errors import GraphError
from ..ops import dispatch as _dispatch
from ..tensor import Tensor, _alias, _wrap
from .grad_mode import state, enable_grad, no_grad
from .graph import EngineOp, Node

__all__ = ["checkpoint", "checkpoint_sequential", "SAVE_MATMUL_CONV"]

#: Ops whose outputs ``policy="save_matmul_conv"`` keeps: the expensive ones (convolutions
#: are im2col + ``matmul`` in Ember, so the matmul output *is* the conv output; ``linear``
#: is eager ``F.linear``'s one-op ``x @ w.T + b``, PyTorch's ``addmm``).
SAVE_MATMUL_CONV = frozenset({"matmul", "einsum", "linear"})

_POLICIES = {"save_matmul_conv": SAVE_MATMUL_CONV}


def tree_flatten(tree):
    from ..func._tree import tree_flatten as flatten   # NOTE: func sits above autograd
    return flatten(tree)


def tree_unflatten(leaves, spec):
    from ..func._tree import tree_unflatten as unflatten
    return unflatten(leaves, spec)


def _resolve_policy(policy):
    """``policy`` as ``(op_name, inputs, params) -> bool``, or None (save nothing)."""
    if policy is None:
        return None
    if isinstance(policy, str):
        if policy not in _POLICIES:
            raise ValueError(f"checkpoint: unknown policy {policy!r}; valid: None, "
                             f"{', '.join(repr(p) for p in _POLICIES)}, a set of op names, or "
                             f"a callable (op_name, inputs, params) -> bool")
        names = _POLICIES[policy]
        return lambda name, inputs, params: name in names
    if isinstance(policy, (set, frozenset, list, tuple)):
        names = frozenset(policy)
        return lambda name, inputs, params: name in names
    if callable(policy):
        return policy
    raise TypeError(f"checkpoint: policy must be None, a policy name, a set of op names or a "
                    f"callable, got {type(policy).__name__}")


class _Mode:
    """A dispatch mode that sits on the stack for a while and passes ops on below.

    Hooks it does not define (``random``, ``on_write``, ``constant``... used by
    ``ember.compile``'s tracer) are looked up on the mode below it, so a checkpoint
    inside a traced function stays transparent to the tracer.
    """

    _below = None

    def __enter__(self):
        self._below = state.modes[-1] if state.modes else None
        state.modes.append(self)
        return self

    def __exit__(self, *exc):
        if state.modes and state.modes[-1] is self:
            state.modes.pop()
        elif self in state.modes:
            state.modes.remove(self)
        return False

    def __getattr__(self, name):
        below = self.__dict__.get("_below")
        if below is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(below, name)

    def _run(self, op, inputs, params):
        """Apply ``op`` with this mode popped (the next mode down, or the dispatcher)."""
        modes = state.modes
        i = modes.index(self)
        modes.pop(i)
        try:
            return _dispatch.apply(op, inputs, params)
        finally:
            modes.insert(i, self)


class _ForwardMode(_Mode):
    """The forward of a checkpoint: finds captured tensors, keeps what the policy asks.

    Runs under ``no_grad``, so no tensor made inside ``fn`` requires grad: any operand
    that does is an input or a tensor ``fn`` captured (a parameter).
    """

    def __init__(self, explicit_ids, policy):
        self.explicit = explicit_ids
        self.captured: dict = {}     # id -> tensor, in first-use order
        self.policy = policy
        self.saved: dict = {}        # op index -> (op name, output tensor)
        self.count = 0
        self.generators: dict = {}   # id -> (Generator, state before fn first drew from it)
        self.made: set = set()       # ids of tensors made inside fn (live ones are unique)
        self.written: dict = {}      # id -> tensor from outside that fn wrote in place

    def process(self, op, inputs, params):
        inputs = _substituted(inputs)
        for x in inputs:
            if x.__class__ is Tensor or isinstance(x, Tensor):
                if x._requires_grad and id(x) not in self.explicit:
                    self.captured.setdefault(id(x), x)
        out = self._run(op, inputs, params)
        self.made.add(id(out))
        i = self.count
        self.count = i + 1
        if self.policy is not None and not op.view and isinstance(out, Tensor) and \
                self.policy(op.name, inputs, params):
            self.saved[i] = (op.name, out)
        return out

    # NOTE: the tracer hooks below are called by factories and in-place ops when a mode is
    # active; each notes what it learns and passes the call on to the mode below, if any.
    def constant(self, t):
        """A factory made ``t`` inside ``fn``."""
        self.made.add(id(t))
        self._pass("constant", t)

    def random(self, t, draw, inputs, what):
        self.made.add(id(t))
        self._pass("random", t, draw, inputs, what)

    def on_write(self, x, r):
        """``fn`` wrote into ``x`` in place: a buffer from outside (BatchNorm's running
        statistics) must get its forward-time value back after each recompute."""
        if id(x) not in self.made:
            self.written.setdefault(id(x), x)
        self._pass("on_write", x, r)

    def on_fill(self, x, value):
        if id(x) not in self.made:
            self.written.setdefault(id(x), x)
        self._pass("on_fill", x, value)

    def _pass(self, hook, *args):
        fn = getattr(self._below, hook, None) if self._below is not None else None
        if fn is not None:
            fn(*args)

    def on_generator(self, gen):
        """``fn`` is about to draw from ``gen``: remember its state the first time."""
        if id(gen) not in self.generators:
            self.generators[id(gen)] = (gen, gen.get_state())


class _RecomputeMode(_Mode):
    """The recompute: swaps captured tensors for their stand-ins, reuses saved outputs."""

    def __init__(self, subst, saved):
        self.subst = subst       # id(original tensor) -> stand-in
        self.saved = saved
        self.count = 0

    def process(self, op, inputs, params):
        subst = self.subst
        if subst:
            inputs = tuple(subst.get(id(x), x) if isinstance(x, Tensor) else x
                           for x in inputs)
        i = self.count
        self.count = i + 1
        hit = self.saved.get(i)
        if hit is None:
            return self._run(op, inputs, params)
        name, value = hit
        if name != op.name:
            raise GraphError(f"checkpoint: the recomputation ran {op.name} where the forward "
                             f"ran {name} (op #{i}); the checkpointed function must run the "
                             f"same ops every time (no data-dependent branches on random "
                             f"values or global state)")
        return _reuse(op, inputs, params, value)

    def on_generator(self, gen):
        """Nothing to note: the generators were put back to their forward-time state."""


def _substituted(inputs):
    """``inputs`` with the stand-ins of every recompute in progress (outermost first).

    A checkpoint nested in another one's recompute must see the outer stand-ins, not
    the tensors they replace, or its node would link to the outer graph.
    """
    for m in state.modes:
        if m.__class__ is _RecomputeMode and m.subst:
            sub = m.subst
            inputs = tuple(sub.get(id(x), x) if isinstance(x, Tensor) else x for x in inputs)
    return inputs


def _reuse(op, inputs, params, value):
    """``value`` (the forward's output of ``op``) recorded as if ``op`` just made it."""
    out = _wrap(value._data, value._dtype, value._device, value._storage, value._base)
    req = any(isinstance(x, Tensor) and x._requires_grad for x in inputs)
    if req and state.grad_enabled and op.differentiable and out._dtype.is_inexact:
        save = op.save
        out._grad_fn = Node(op, params, inputs, save == "inputs" or save == "both",
                            out if save == "output" or save == "both" else None)
        out._requires_grad = True
    return out


class _CheckpointOp(EngineOp):
    """What the engine calls for a checkpoint node: the recompute and its local backward."""

    name = "checkpoint"

    def __init__(self, fn, args, kwargs, inputs, rng, saved, out_spec, written):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.inputs = inputs                       # the node's inputs, in order
        self.versions = [x._storage.version for x in inputs]
        self.rng = rng                             # [(generator, state)]
        self.saved = saved
        self.out_spec = out_spec                   # per output leaf: index among tensors
        self.written = written                     # outside tensors fn writes in place
        self.autocast = state.autocast             # the recompute runs under the same casts
        self.freed = False

    def free_saved(self) -> None:
        """Called by the engine after a backward without ``retain_graph``."""
        self.fn = self.args = self.kwargs = self.inputs = self.saved = self.rng = None
        self.written = None
        self.freed = True

    def vjp(self, g, out, *_inputs, **_params):
        if self.freed:
            raise GraphError(
                "Trying to backward through the graph a second time through a checkpoint "
                "(its inputs were released after the first backward). Specify "
                "retain_graph=True if you need to backward through the graph a second time.")
        grads = g if isinstance(g, list) else [g]
        self._check_versions()
        create = state.grad_enabled        # the engine runs rules under create_graph
        stand_ins = [_stand_in(x, create) for x in self.inputs]
        subst = {id(x): s for x, s in zip(self.inputs, stand_ins) if s is not x}
        outs = self._recompute(subst)
        roots, groots = [], []
        for o, gi in zip(outs, grads):
            if gi is not None and isinstance(o, Tensor) and o._requires_grad:
                roots.append(o)
                groots.append(gi)
        if not roots:
            return [None] * len(self.inputs)
        from .engine import accumulating, run_backward
        if create or not accumulating():
            return run_backward(roots, groots, retain_graph=create, create_graph=create,
                                inputs=stand_ins, allow_unused=True)
        # NOTE: under ``.backward()`` the local backward accumulates straight into the leaves'
        # ``.grad`` (parameters, as eager does op by op) instead of handing every gradient of
        # the segment back at once: holding all of them would cost a copy of the segment's
        # parameters, more than the activations checkpointing saves. Non-leaf inputs have
        # detached leaf stand-ins whose gradients go back to the outer engine.
        run_backward(roots, groots, retain_graph=False, create_graph=False)
        res = []
        for x, st in zip(self.inputs, stand_ins):
            gx = None if st is x else st._grad
            if gx is not None:    # a base-less handle: the outer engine may store it as is
                gx = _wrap(gx._data, gx._dtype, gx._device, gx._storage, None)
            res.append(gx)
        return res

    def _check_versions(self):
        for x, v in zip(self.inputs, self.versions):
            if x._storage.version != v:
                raise GraphError(
                    f"one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: [{x._dtype.name} {list(x._data.shape)}], an "
                    f"input of a checkpoint, is at version {x._storage.version}; expected "
                    f"version {v} instead (checkpoint recomputes from its inputs, so they "
                    f"must not change before backward).")

    def _recompute(self, subst):
        """Re-run ``fn`` with recording on; the tensor outputs, in flattening order."""
        leaves, spec = tree_flatten((self.args, self.kwargs))
        leaves = [subst.get(id(x), x) if isinstance(x, Tensor) else x for x in leaves]
        args, kwargs = tree_unflatten(leaves, spec)
        mode = _RecomputeMode(subst, self.saved) if (subst or self.saved) else None
        keep = [(t, t._data.copy()) for t in self.written]
        autocast, state.autocast = state.autocast, self.autocast
        try:
            with _replay(self.rng), enable_grad():
                if mode is None:
                    out = self.fn(*args, **kwargs)
                else:
                    with mode:
                        out = self.fn(*args, **kwargs)
        finally:
            state.autocast = autocast
            for t, value in keep:    # e.g. running statistics are updated once, not twice
                if t._device.type != "meta":
                    t._data[...] = value
        flat, _ = tree_flatten(out)
        return [flat[k] for k in self.out_spec]


def _stand_in(x: Tensor, create: bool) -> Tensor:
    """What the recompute uses in place of node input ``x``.

    Without ``create_graph`` the local graph must stop at the checkpoint's inputs: a
    leaf can be used as is, anything else is detached. With it, every input is an
    identity view of the original (so second derivatives flow back through ``x``), and
    all of them are views (so the local backward never walks into the outer graph).
    """
    if create:
        from ..ops.movement import expand_p
        with enable_grad():
            return _dispatch.apply(expand_p, (x,), {"shape": tuple(x._data.shape)})
    if x._grad_fn is None:
        return x
    return _alias(x, keep_grad=False).requires_grad_(True)


class _replay:
    """Put generators back to their forward-time state for the recompute, then restore."""

    def __init__(self, rng):
        self.rng = rng or ()

    def __enter__(self):
        self.now = [(g, g.get_state()) for g, _ in self.rng]
        for g, s in self.rng:
            g.set_state(s)

    def __exit__(self, *exc):
        for g, s in self.now:
            g.set_state(s)
        return False


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state: bool = True,
               policy=None, **kwargs):
    """Run ``function(*args, **kwargs)`` without keeping its intermediates for backward.

    Backward recomputes them (one extra forward of ``function``). Gradients are bitwise
    those of the plain call on CPU — through dropout (the random generators are replayed),
    keyword arguments, nested outputs, inputs without ``requires_grad``, parameters
    captured by ``function``, nested checkpoints and ``create_graph=True``.

    Args:
        function: any callable of Ember tensors (a Module, a closure...).
        \\*args, \\**kwargs: its arguments (tensors or anything else).
        use_reentrant: accepted for PyTorch compatibility and ignored: Ember has one
            (non-reentrant) implementation that supports everything.
        preserve_rng_state: replay the generators ``function`` draws from (default True).
        policy: selective checkpointing. None saves nothing; ``"save_matmul_conv"`` keeps
            matmul/conv outputs and recomputes only the cheap ops after them; a set of op
            names; or a callable ``(op_name, inputs, params) -> bool``.

    Example:
        >>> y = ember.checkpoint(lambda x: (x.sin() * w).relu(), x)
        >>> y.sum().backward()        # sin, mul, relu run again here
    """
    del use_reentrant
    if not callable(function):
        raise TypeError(f"checkpoint: expected a callable, got {type(function).__name__}")
    pol = _resolve_policy(policy)
    if not state.grad_enabled or state.fw_levels:
        # NOTE: nothing would be saved (no_grad), or forward-mode tangents must flow through
        # the real ops: run plainly.
        return function(*args, **kwargs)
    leaves, _ = tree_flatten((args, kwargs))
    explicit = [x for x in leaves if isinstance(x, Tensor)]
    if any(hasattr(x, "_phys") for x in explicit):
        # NOTE: batched values inside ember.func.vmap: the node would hold per-example
        # values, invisible to a grad outside the vmap; run plainly (nothing is saved less).
        return function(*args, **kwargs)
    fwd = _ForwardMode({id(x) for x in explicit}, pol)
    from ..random import default_generator
    rng0 = default_generator.get_state() if preserve_rng_state else None
    with no_grad(), fwd:
        out = function(*args, **kwargs)
    inputs = _unique([x for x in explicit if x._requires_grad] + list(fwd.captured.values()))
    flat, spec = tree_flatten(out)
    idx = [k for k, o in enumerate(flat) if isinstance(o, Tensor)]
    if not inputs or not idx:
        return out
    rng = []
    if preserve_rng_state:
        rng = [(default_generator, rng0)] + [
            (g, s) for g, s in fwd.generators.values() if g is not default_generator]
    for k in idx:
        # NOTE: a tensor made outside ``function`` and returned as is (an input, a
        # parameter) becomes a new tensor object: the node's grad_fn must not land on it.
        if id(flat[k]) not in fwd.made:
            flat[k] = _alias(flat[k], keep_grad=False)
    op = _CheckpointOp(function, args, kwargs, inputs, rng, fwd.saved, idx,
                       list(fwd.written.values()))
    node = Node(op, {}, inputs, False, None, nout=len(idx))
    node.name_ = "CheckpointBackward"
    for nr, k in enumerate(idx):
        o = flat[k]
        if o._dtype.is_inexact:
            o._grad_fn, o._out_nr, o._requires_grad = node, nr, True
            if o._base is not None:
                o._view_version = o._storage.version
    return tree_unflatten(flat, spec)


def _unique(tensors):
    seen, out = set(), []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def checkpoint_sequential(functions, segments=None, input=None, use_reentrant=None,
                          preserve_rng_state: bool = True, policy=None):
    """Run a chain of modules/functions in ``segments`` checkpointed pieces.

    Only each segment's input is kept during the forward; a segment's activations exist
    only while its backward runs. ``segments=None`` picks ``round(sqrt(N))`` for N
    functions (Chen et al.: O(sqrt N) memory for one extra forward). The last segment is
    not checkpointed: its activations are needed as soon as backward starts.

    Args:
        functions: an ``nn.Sequential``, or a list/tuple of modules or callables.
        segments: number of pieces (1..N), or None for sqrt(N).
        input: the input of the first function.

    Example:
        >>> y = ember.checkpoint_sequential(model, 8, x)    # model: 64-layer Sequential
    """
    if input is None and isinstance(segments, Tensor):   # checkpoint_sequential(fns, x)
        segments, input = None, segments
    fns = list(functions.children()) if hasattr(functions, "children") and \
        not isinstance(functions, (list, tuple)) else list(functions)
    n = len(fns)
    if n == 0:
        raise ValueError("checkpoint_sequential: got no functions to run")
    for i, f in enumerate(fns):
        if not callable(f):
            raise TypeError(f"checkpoint_sequential: function {i} is a {type(f).__name__}, "
                            f"not callable")
    if segments is None:
        segments = max(1, round(math.sqrt(n)))
    if not isinstance(segments, int) or isinstance(segments, bool) or not 1 <= segments <= n:
        raise ValueError(f"checkpoint_sequential: segments must be an int in [1, {n}] for "
                         f"{n} functions (or None for sqrt(N)), got {segments!r}")
    bounds = [round(i * n / segments) for i in range(segments + 1)]
    x = input
    for s in range(segments):
        piece = fns[bounds[s]:bounds[s + 1]]
        run = _Chain(piece)
        if s < segments - 1:
            x = checkpoint(run, x, preserve_rng_state=preserve_rng_state, policy=policy)
        else:
            x = run(x)
    return x


class _Chain:
    """Functions applied one after another (one checkpoint segment)."""

    def __init__(self, fns):
        self.fns = fns

    def __call__(self, x):
        for f in self.fns:
            x = f(x)
        return x
