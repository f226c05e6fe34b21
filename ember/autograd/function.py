"""Custom differentiable operations: ``ember.autograd.Function`` (PyTorch's API).

Subclass :class:`Function` with static ``forward(ctx, *args)`` and
``backward(ctx, *grad_outputs)`` (and optionally ``jvp(ctx, *tangents)``), then call
``MyFn.apply(*args)``. ``forward`` runs with gradient recording and forward-mode AD
off; its outputs get one graph :class:`~ember.autograd.graph.Node` whose ``op`` is a
small adapter (:class:`_FunctionOp`) that the engine calls like any primitive's VJP.
``backward`` runs under the engine's grad mode, so a backward written in Ember ops is
itself differentiable (``create_graph=True``).

Example:
    >>> class Square(ember.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x * x
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         (x,) = ctx.saved_tensors
    ...         return 2 * x * g
    >>> y = Square.apply(ember.tensor(3.0, requires_grad=True))   # y.grad_fn: SquareBackward
"""
from __future__ import annotations

import functools
import weakref

from ..errors import GraphError
from ..tensor import Tensor, _alias, _wrap
from .grad_mode import state
from .graph import EngineOp, Node, Packed

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The ``ctx`` handed to ``forward``/``backward``; holds arbitrary attributes too."""

    def __init__(self):
        self._to_save = None          # what save_for_backward got, until apply() packs it
        self._saved = None            # [("t", tensor, version) | ("out", data+k, version)]
        self._freed = False
        self._node = None
        self._dirty = ()
        self._non_diff = ()
        self.materialize_grads = True
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors) -> None:
        """Keep ``tensors`` (inputs, outputs or None) for ``backward``/``jvp``."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save tensors or None, got "
                                f"{type(t).__name__}")
        self._to_save = tensors

    def save_for_forward(self, *tensors) -> None:
        """Keep ``tensors`` for ``jvp`` (same storage as :meth:`save_for_backward`)."""
        self.save_for_backward(*tensors)

    def mark_dirty(self, *tensors) -> None:
        """Declare inputs that ``forward`` modified in place (they must be returned)."""
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        """Declare outputs that are not differentiable (e.g. indices)."""
        self._non_diff = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """If False, ``backward`` may get None (not zeros) for outputs without gradient."""
        self.materialize_grads = bool(value)

    @property
    def saved_tensors(self) -> tuple:
        """The saved tensors, checked against in-place writes since they were saved."""
        if self._freed:
            raise GraphError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Saved intermediate values of the "
                "graph are freed when you call .backward() or autograd.grad(). Specify "
                "retain_graph=True if you need to backward through the graph a second time.")
        if self._saved is None:     # inside forward, or nothing saved
            return tuple(self._to_save or ())
        return tuple(self._unpack(entry) for entry in self._saved)

    saved_variables = saved_tensors

    def _unpack(self, entry):
        if entry is None:
            return None
        kind, obj, version = entry
        if kind == "packed":              # version: the output index, or None (an input)
            node = self._node() if self._node is not None and version is not None else None
            return obj.get(node, version or 0, state.grad_enabled)
        if kind == "out":
            data, storage, dt, dev, base, k = obj
            t = _wrap(data, dt, dev, storage, base)
            node = self._node() if self._node is not None else None
            if node is not None and state.grad_enabled:   # create_graph: keep its history
                t._grad_fn, t._out_nr, t._requires_grad = node, k, True
        else:
            t = obj
        if t._storage.version != version:
            what = "an output" if kind == "out" else "an input or intermediate"
            raise GraphError(
                f"one of the variables needed for gradient computation has been modified by "
                f"an inplace operation: [{t._dtype.name} {list(t._data.shape)}], which is "
                f"{what} saved by {self._name()}, is at version {t._storage.version}; "
                f"expected version {version} instead.")
        return t

    def _name(self) -> str:
        node = self._node() if self._node is not None else None
        return node.name() if node is not None else "a custom Function"

    def _release(self) -> None:
        self._saved = None
        self._to_save = None
        self._freed = True


class _FunctionOp(EngineOp):
    """Adapter making a Function application look like a registry op to the engine."""

    def __init__(self, cls, ctx, in_is_tensor, out_meta):
        self.name = cls.__name__
        self.cls = cls
        self.ctx = ctx
        self.in_is_tensor = in_is_tensor   # per forward arg: is it a Tensor
        self.out_meta = out_meta           # per output: (shape, dtype, device) or None

    def free_saved(self) -> None:
        """Called by the engine after a backward without ``retain_graph``."""
        self.ctx._release()

    def vjp(self, g, out, *inputs, **params):
        grads = list(g) if isinstance(g, list) else [g]
        ctx = self.ctx
        if ctx.materialize_grads:
            from ..ops.factories import zeros
            grads = [zeros(m[0], dtype=m[1], device=m[2]) if gi is None and m is not None
                     else gi for gi, m in zip(grads, self.out_meta)]
        res = _backward_fn(self.cls)(ctx, *grads)
        return self._check_grads(res)

    def _check_grads(self, res):
        if not isinstance(res, tuple):
            res = (res,)
        n = len(self.in_is_tensor)
        name = self.name + "Backward"
        if len(res) < n or any(r is not None for r in res[n:]):
            raise GraphError(f"function {name} returned an incorrect number of gradients "
                             f"(expected {n}, got {len(res)})")
        res = res[:n]
        for i, (r, is_t) in enumerate(zip(res, self.in_is_tensor)):
            if r is None:
                continue
            if not is_t:
                raise GraphError(f"function {name} returned a gradient different than None at "
                                 f"position {i}, but the corresponding forward input was not "
                                 f"a Tensor")
            if not isinstance(r, Tensor):
                raise GraphError(f"function {name} returned a {type(r).__name__} as gradient "
                                 f"{i}; expected a Tensor or None")
        return res

    def jvp(self, tangents):
        ctx = self.ctx
        if self.cls.jvp is Function.jvp:
            raise NotImplementedError(
                f"{self.name}: you must implement the jvp function for custom "
                f"autograd.Function to use it with forward mode AD")
        res = self.cls.jvp(ctx, *tangents)
        return res if isinstance(res, tuple) else (res,)


def _backward_fn(cls):
    if cls.backward is Function.backward and cls.vjp is not Function.vjp:
        return cls.vjp
    return cls.backward


class Function:
    """Base class of custom differentiable operations (``torch.autograd.Function``).

    Override ``forward`` and ``backward`` as static methods; call with ``apply``.
    Alternatively override ``forward(*args)`` without ``ctx`` plus
    ``setup_context(ctx, inputs, output)``.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not overridden")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    @staticmethod
    def vjp(ctx, *grad_outputs):
        raise NotImplementedError("vjp is not overridden")

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run ``forward`` and record one graph node for ``backward``."""
        ctx = FunctionCtx()
        if state.modes and hasattr(state.modes[-1], "check_function"):   # ember.func.vmap
            state.modes[-1].check_function(cls, args)
        grad_on = state.grad_enabled
        ctx.needs_input_grad = tuple(grad_on and isinstance(a, Tensor) and a._requires_grad
                                     for a in args)
        outputs = _run_forward(cls, ctx, args, kwargs)
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        outs = _fix_outputs(cls, ctx, args, outs)
        record = any(ctx.needs_input_grad)
        levels = _tangent_levels(args)
        if record or levels:
            op = _FunctionOp(cls, ctx, tuple(isinstance(a, Tensor) for a in args),
                             [(o._data.shape, o._dtype, o._device) if isinstance(o, Tensor)
                              else None for o in outs])
            if record:
                _record(op, ctx, args, outs)
            _pack_saved(ctx, outs)
            if levels:
                _push_tangents(op, args, outs, levels)
        else:
            _pack_saved(ctx, outs)
        ctx._dirty = ctx._non_diff = ()   # NOTE: they hold outputs: drop them (no cycle)
        return outs[0] if single else outs


def _run_forward(cls, ctx, args, kwargs):
    prev = (state.grad_enabled, state.fw_levels)
    # NOTE: forward sits below autograd: its ops record no graph and push no tangents.
    state.grad_enabled, state.fw_levels = False, []
    try:
        if cls.setup_context is not Function.setup_context:
            out = cls.forward(*args, **kwargs)
            state.grad_enabled, state.fw_levels = prev
            cls.setup_context(ctx, args, out)
            return out
        return cls.forward(ctx, *args, **kwargs)
    finally:
        state.grad_enabled, state.fw_levels = prev


def _fix_outputs(cls, ctx, args, outs):
    """Outputs returned as-is from the inputs become aliases, unless marked dirty."""
    dirty = {id(t) for t in ctx._dirty}
    in_ids = {id(a) for a in args if isinstance(a, Tensor)}
    fixed = []
    for o in outs:
        if isinstance(o, Tensor) and id(o) in in_ids and id(o) not in dirty:
            o = _alias(o, keep_grad=False)
        elif isinstance(o, Tensor) and id(o) in dirty and state.grad_enabled and \
                o._requires_grad and o._grad_fn is None:
            raise GraphError(f"{cls.__name__}: a leaf Variable that requires grad has been "
                             f"used in an in-place operation (mark_dirty)")
        fixed.append(o)
    for t in ctx._dirty:
        if not any(t is o for o in fixed):
            raise GraphError(f"{cls.__name__}: a tensor passed to mark_dirty() must be "
                             f"returned as an output of forward")
    return tuple(fixed)


def _record(op, ctx, args, outs):
    node = Node(op, {}, args, False, None, nout=len(outs))
    node.name_ = op.name + "Backward"
    ctx._node = weakref.ref(node)   # NOTE: node -> op -> ctx already; no cycle back
    non_diff = {id(t) for t in ctx._non_diff}
    for k, o in enumerate(outs):
        if not isinstance(o, Tensor):
            continue
        if o._dtype.is_inexact and id(o) not in non_diff:
            o._grad_fn, o._out_nr, o._requires_grad = node, k, True
        elif o._grad_fn is not None or o._requires_grad:
            o._grad_fn, o._requires_grad = None, False


def _pack_saved(ctx, outs):
    """Saved outputs are kept as data (no tensor->node->ctx->tensor cycle)."""
    if not ctx._to_save:
        ctx._saved = []
        return
    packed = []
    hooks = state.saved_hooks[-1] if state.saved_hooks else None
    for t in ctx._to_save:
        if t is None:
            packed.append(None)
            continue
        k = next((k for k, o in enumerate(outs) if o is t), None)
        if hooks is not None:             # saved_tensors_hooks: keep what pack returns
            own = k is not None and ctx._node is not None
            packed.append(("packed", Packed(t, *hooks, not own), k if own else None))
        elif k is None or ctx._node is None:
            packed.append(("t", t, t._storage.version))
        else:
            packed.append(("out", (t._data, t._storage, t._dtype, t._device, t._base, k),
                           t._storage.version))
    ctx._saved = packed
    ctx._to_save = None


def _tangent_levels(args):
    if not state.fw_levels:
        return ()
    levels = set()
    for a in args:
        fw = getattr(a, "_fw", None)
        if fw:
            levels.update(fw)
    return sorted(levels)


def _push_tangents(op, args, outs, levels):
    from ..ops.factories import zeros_like
    for level in levels:
        tans = []
        for a in args:
            fw = getattr(a, "_fw", None)
            t = fw.get(level) if fw else None
            if t is None and isinstance(a, Tensor) and a._dtype.is_inexact and \
                    op.ctx.materialize_grads:
                t = zeros_like(a)
            tans.append(t)
        res = op.jvp(tans)
        if len(res) != len(outs):
            raise GraphError(f"{op.name}.jvp returned {len(res)} tangents for {len(outs)} "
                             f"outputs")
        for o, t in zip(outs, res):
            if t is None or not isinstance(o, Tensor) or not o._dtype.is_inexact:
                continue
            if o._fw is None:
                o._fw = {}
            o._fw[level] = t.to(o._dtype) if t._dtype is not o._dtype else t


def once_differentiable(fn):
    """Decorate ``backward`` so that it runs without recording a graph (no double backward)."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        from .grad_mode import no_grad
        with no_grad():
            return fn(ctx, *args)
    return wrapper
