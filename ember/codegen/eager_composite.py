"""Composites run eagerly through their compiled form: the compiler's kernels in eager mode.

A layer such as ``F.conv2d``, ``F.max_pool2d``, ``F.layer_norm``, ``F.gelu`` or
``F.cross_entropy`` is a composite of registry primitives (im2col + matmul, windows +
argmax + gather, mean/var/normalise...). Run op by op, each primitive is a full pass over
memory through NumPy. ``ember.compile`` turns the same composite into the C kernels of
:mod:`ember.codegen` (im2col/col2im and max-pool loops, fused row reductions, fused
elementwise chains) for its forward and its backward. :func:`eager_composite` wraps such a
public function so that an eager call runs the *compiled form of the composite itself*:
one :class:`~ember.graph.compile.CompiledFunction` per (function, argument shapes, dtypes,
``requires_grad`` flags, non-tensor arguments), built on the third call with that key
(a shape seen once never pays for a compile). There is no second implementation of the
math: the graph is traced from the composite, so the fast path computes what the
composite computes, in the compiler's kernels.

The composite runs as written (the fast path steps aside) whenever any of these holds:

* a dispatch mode is active (``ember.compile``'s tracer, vmap...): the outer tracer must
  see the primitives, to fuse them with their neighbours;
* forward-mode AD, anomaly detection, saved-tensor hooks (checkpointing) or inference
  mode is on, or autocast is on and the wrapper names no ``autocast`` op (``ember.profiler``
  does not turn it off: a profile shows the compiled kernels that really run);
* a tensor argument is not a CPU tensor of float32/float64 (float16/bfloat16 too for a
  wrapper with an ``autocast`` op; or an int64/int32/bool tensor, such as class targets) —
  or a ``cuda`` one on a GPU whose compiled graphs run generated CUDA kernels
  (``cuda_kernels``: ``fuse_cuda``) — or is of a subclass other than ``nn.Parameter``, or
  an argument is not hashable;
* no C compiler is found, ``EMBER_EAGER_COMPOSITES=0`` is set in the environment or
  :func:`set_enabled` turned the path off;
* every tensor argument has fewer than :data:`MIN_ELEMENTS` elements;
* the key's capture did not compile (a graph break, e.g. a value read into Python), or
  :data:`MAX_KEYS` keys of this function are already cached.

Per call, once a key is compiled: when its compiled call captured one entry that reads
and writes nothing but the call's tensor arguments and returns one tensor (guards only on
the wrapper's own closure, which never changes), the call runs that entry's forward program
directly, under one autograd node whose backward runs the backward program
(:class:`_DirectCall`): the key (shapes, strides, dtypes, ``requires_grad``, the grad mode,
the other arguments) already fixes everything the compiled call's signature and guards
would check, so neither is rebuilt. The programs are the same, so the bits are the compiled
call's. Any other entry goes through the compiled call (two nested nodes). The size
threshold is checked first (:func:`_small`): a small call returns to the composite before
any key is built.

Under autocast, a wrapper made with ``autocast=NAME`` (PyTorch's ATen op: ``layer_norm``,
``cross_entropy``, ``gelu``...) is one op, as in PyTorch: NAME's policy (``ember/amp/op_lists``;
none when NAME is on no list, e.g. GELU keeps its input's dtype) casts the arguments once at
the boundary and the composite runs with autocast off — the same casts and body as the
composite's own ``autocast_entry`` gives op by op, so the same values to float32 rounding.
The casts are traced into the compiled graph (a float16 logits tensor's cast to float32
fuses into the loss's first row kernel; its gradient leaves the backward kernel rounded
to float16), and the key holds the policy; with no policy the key is the plain one.
float16/bfloat16 arguments compute in float32 inside the fused kernels and round once
(PyTorch's kernels do too), where the composite op by op rounds after every op.

Every tensor input is version-checked at backward (the compiled backward may read any of
them): writing one in place between the call and ``backward()`` raises, as PyTorch's native
kernels do for the inputs they save (a composite that saved only intermediates did not).

Gradients: the compiled backward runs when ``backward()`` is called without
``create_graph``. With ``create_graph=True`` (double backward) the node differentiates the
composite itself, recomputed from the saved inputs, so higher-order gradients are the
composite's.
"""
from __future__ import annotations

import functools
import os
import warnings

from ..autograd.function import Function, FunctionCtx
from ..autograd.grad_mode import enable_grad, state
from ..ops.layout import inverse, kept_order
from ..tensor import Tensor, _wrap

#: keys (shapes, dtypes, params) cached per wrapped function; past it the composite runs.
MAX_KEYS = 64
#: elements of the largest tensor argument below which the composite runs as written. The
#: compiled form wins from ~1K elements (a 128-wide layer norm fwd+bwd: 173 vs 358 us), but
#: each key costs a capture and a C compile (20-400 ms); below this size a call saves too
#: little for that, and small programs (tests, toy models) keep NumPy's bits.
MIN_ELEMENTS = 1 << 15
#: calls with one key before it is compiled (the first call of a key runs the composite).
WARMUP = 2
_DTYPE_NAMES = frozenset(("float32", "float64", "int64", "int32", "bool"))
#: what a wrapper with an autocast op also takes (its composite computes them in float32).
_LOWP_NAMES = _DTYPE_NAMES | {"float16", "bfloat16"}
#: tensor classes taken as plain tensors (``nn.Parameter`` registers itself: see
#: :func:`allow_tensor_class`); any other subclass may override behaviour: composite.
_TENSOR_CLASSES = {Tensor}
_conf = {"enabled": os.environ.get("EMBER_EAGER_COMPOSITES", "1") != "0", "cc": None}
#: compiled calls (tests and benchmarks read it).
stats = {"runs": 0, "compiles": 0}


def set_enabled(flag: bool) -> bool:
    """Turn the eager compiled-composite path on or off; returns the previous setting."""
    prev = _conf["enabled"]
    _conf["enabled"] = bool(flag)
    return prev


def is_enabled() -> bool:
    """Whether eager calls of wrapped composites may run their compiled form."""
    return _conf["enabled"]


def allow_tensor_class(cls) -> None:
    """Let tensors of subclass ``cls`` (which changes no behaviour) take the fast path."""
    _TENSOR_CLASSES.add(cls)


def _have_compiler() -> bool:
    cc = _conf["cc"]
    if cc is None:
        from .toolchain import find_compiler
        cc = _conf["cc"] = find_compiler() is not None
    return cc


def _eligible() -> bool:
    """The global switches allow the fast path (autocast: the wrapper's own test)."""
    st = state
    return (_conf["enabled"] and not st.modes and not st.fw_levels and not st.anomaly
            and not st.saved_hooks and not st.inference)


def _freeze(v):
    """A hashable stand-in for a non-tensor argument, or raise TypeError."""
    if isinstance(v, list):
        return ("list",) + tuple(_freeze(x) for x in v)
    if isinstance(v, tuple):
        return ("tuple",) + tuple(_freeze(x) for x in v)
    hash(v)
    return (type(v), v)


def _small(args, kwargs, min_elements) -> bool:
    """Whether every tensor argument has fewer elements than the size threshold (checked
    before the key is built: a small call returns to the composite at once)."""
    limit = MIN_ELEMENTS if min_elements is None else min_elements
    for a in args:
        if isinstance(a, Tensor) and a._data.size >= limit:
            return False
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, Tensor) and a._data.size >= limit:
                return False
    return True


def _key(args, kwargs, names=_DTYPE_NAMES):
    """(tensor arguments, their positions, hashable key) or None when not eligible (the
    caller checked the size threshold first: :func:`_small`); ``names``: the dtypes taken."""
    tensors, slots, parts = [], [], []
    for i, a in enumerate(args + tuple(kwargs[k] for k in sorted(kwargs)) if kwargs else args):
        if isinstance(a, Tensor):
            dev = a._device.type
            if a.__class__ not in _TENSOR_CLASSES or a._dtype.name not in names or (
                    dev != "cpu" and not _gpu_kernels(dev)):
                return None
            d = a._data
            tensors.append(a)
            slots.append(i)
            parts.append((d.shape, d.strides, a._dtype.name, a._requires_grad, dev))
        else:
            try:
                parts.append(_freeze(a))
            except TypeError:
                return None
    return tensors, tuple(slots), (tuple(sorted(kwargs)), tuple(parts), state.grad_enabled)


def _gpu_kernels(dev: str) -> bool:
    """Whether ``dev``'s compiled graphs run generated GPU kernels (``cuda_kernels``: a
    GPU's ``fuse_cuda``), so a composite's compiled form beats its CuPy ops there too."""
    from ..device.base import _backends
    be = _backends.get(dev)
    return be is not None and be.has("cuda_kernels")


class _Entry:
    """One compiled key of a wrapped function."""

    __slots__ = ("cf", "fn", "call", "prog")

    def __init__(self, fn, args, kwargs, slots):
        from ..graph.compile import compile as _compile
        names = sorted(kwargs)
        n_pos = len(args)
        static = list(args) + [kwargs[k] for k in names]
        for s in slots:         # NOTE: every call fills these: the first call's tensors
            static[s] = None    # are not kept alive by the closure (nor guarded)

        def call(*tensors):
            vals = list(static)
            for s, t in zip(slots, tensors):
                vals[s] = t
            return fn(*vals[:n_pos], **dict(zip(names, vals[n_pos:])))
        call.__name__ = getattr(fn, "__name__", "composite")
        self.fn = fn
        self.call = call
        self.cf = _compile(call, fullgraph=True)
        self.prog = None    # the compiled call's captured entry, once it may run directly


class _NotOneTensor(Exception):
    """The composite returned something other than one tensor (e.g. values and indices)."""


class _CompositeCall(Function):
    """The autograd node of a compiled composite call (see the module docstring)."""

    @staticmethod
    def forward(ctx, entry, *tensors):
        leaves = [_leaf(t) for t in tensors]
        with enable_grad():
            out = entry.cf(*leaves)
        if not isinstance(out, Tensor):
            raise _NotOneTensor(type(out).__name__)
        ctx.save_for_backward(*tensors)     # version checks, and a double backward
        ctx.entry, ctx.leaves, ctx.out = entry, leaves, out
        # NOTE: the engine frees a node's saved values after a backward without
        # retain_graph (ctx._release); the compiled call's saved activations go with them,
        # not when the graph itself is dropped (a training loop keeps the last loss alive).
        ctx._release = functools.partial(_release, ctx)
        res = _leaf(out)    # NOTE: not out.detach(): its _base would keep out's graph alive
        res._requires_grad = False
        return res

    @staticmethod
    def backward(ctx, g):
        from ..autograd.engine import grad as _grad
        inputs = ctx.saved_tensors      # NOTE: raises if an input was written in place since,
        want = [lf._requires_grad for lf in ctx.leaves]   # or after a freeing backward
        if state.grad_enabled:
            return (None,) + _composite_grads(ctx.entry, inputs, want, g)
        else:
            diff = [lf for lf, w in zip(ctx.leaves, want) if w]
            grads = iter(_grad(ctx.out, diff, g, retain_graph=True, allow_unused=True))
        return (None,) + tuple(next(grads) if w else None for w in want)


def _release(ctx) -> None:
    FunctionCtx._release(ctx)
    ctx.out = ctx.leaves = None


def _leaf(t):
    """``t`` detached, as a tensor of its own: not a view of ``t`` (the compiled call's
    guards would pin ``t``'s identity through ``_base``), same storage, same flag."""
    lf = _wrap(t._data, t._dtype, t._device, t._storage, None)
    lf._requires_grad = t._requires_grad
    return lf


def _run(entry, tensors):
    e = entry.prog
    if e is not None:
        # NOTE: straight to the programs: the key fixed everything the compiled call's
        # signature and guards would check (see _direct)
        out = _DirectCall.apply(e, entry, *tensors) if e.joint is not None else \
            _OUT[0](e.program.run([tensors[i]._data for i in e.arg_slots]), e.out_leaves[0])
        stats["runs"] += 1
        return out
    if state.grad_enabled and any(t._requires_grad for t in tensors):
        out = _CompositeCall.apply(entry, *tensors)
    else:
        out = entry.cf(*[_leaf(t) for t in tensors])
    if isinstance(out, Tensor):
        stats["runs"] += 1
    return out


_HELD: list = []     # ember.graph.executor.Held (the graph layer is imported lazily)
_OUT: list = []      # ember.graph.capture.out_tensor
_CLOSURE = frozenset(("fn", "n_pos", "names", "slots", "static"))


def _direct(entry):
    """The compiled call's one captured entry when a call may run its programs directly:
    one tensor out (a tree spec of ``None`` is a leaf: ``ember.func._tree.LEAF``), no state read or written beyond the arguments, guards only on the
    closure of ``entry.call`` (constant); else None (calls go through the compiled call)."""
    cache = entry.cf._cache
    if len(cache) != 1:
        return None
    e = next(iter(cache.values()))
    if e.eager or e.sources or e.writes or e.grads or e.release or e.program is None or \
            len(e.out_leaves) != 1 or e.out_leaves[0][0] != "tensor" or e.out_spec is not None:
        return None
    if e.joint is None and e.out_leaves[0][4]:
        return None
    if e.joint is not None and (not e.out_leaves[0][4] or len(e.joint.diff_meta) != 1 or
                                any(kind != "arg" for kind, _ in e.diff_inputs)):
        return None
    cells = {id(c) for c in entry.call.__closure__ or ()}
    for path, _, _ in e.guards.leaves if e.guards is not None else ():
        head = path[0]
        if head[1] is entry.call and len(path) == 1:
            continue
        if id(head[1]) not in cells or head[2] not in _CLOSURE or \
                len(path) > (3 if head[2] in ("static", "names") else 2):
            return None
    return e


class _DirectCall(Function):
    """One autograd node for a compiled composite call with a backward program: the
    forward program runs in ``forward``, the backward program in ``backward``."""

    @staticmethod
    def forward(ctx, e, entry, *tensors):
        j = e.joint
        prog = e.program
        outs = prog.run([tensors[i]._data for i in e.arg_slots], hold=j.hold)
        ctx.held = _HELD[0](prog.alloc, prog.last_held)   # saved activations stay counted
        ctx.saved_arrays = outs[j.n_fwd:]
        ctx.save_for_backward(*tensors)     # version checks, and a double backward
        ctx.e, ctx.entry = e, entry
        ctx._release = functools.partial(_release_direct, ctx)
        return _OUT[0](outs, e.out_leaves[0])

    @staticmethod
    def backward(ctx, g):
        inputs = ctx.saved_tensors      # NOTE: raises if an input was written in place since
        e = ctx.e
        if state.grad_enabled:
            return (None, None) + _composite_grads(ctx.entry, inputs,
                                                   [t._requires_grad for t in inputs], g)
        j = e.joint
        res = j.bwd_program.run(list(ctx.saved_arrays) + [g._data])
        grads = [None] * len(inputs)
        for slot, arr in zip(j.diff_outs, res):
            i = e.diff_inputs[slot][1]
            if inputs[i]._requires_grad:
                grads[i] = _wrap(arr, inputs[i]._dtype, inputs[i]._device)
        return (None, None) + tuple(grads)


def _release_direct(ctx) -> None:
    FunctionCtx._release(ctx)
    ctx.saved_arrays = ctx.held = None


def _composite_grads(entry, inputs, want, g) -> tuple:
    """create_graph: differentiate the composite itself, recomputed from the original
    inputs, so the gradient carries their history (double backward)."""
    from ..autograd.engine import grad as _grad
    out = entry.call(*inputs)
    diff = [x for x, w in zip(inputs, want) if w]
    grads = iter(_grad(out, diff, g, create_graph=True, allow_unused=True))
    return tuple(next(grads) if w else None for w in want)


def _build(fn, args, kwargs, slots):
    """A compiled entry, or False when the capture did not give one graph."""
    # NOTE: a GPU's graphs need NVRTC, not a C compiler (its kernels are CUDA text)
    gpu = any(isinstance(a, Tensor) and a._device.type != "cpu"
              for a in args + tuple(kwargs.values()))
    if not (gpu or _have_compiler()):
        return False
    if not _HELD:
        from ..graph.capture import out_tensor
        from ..graph.executor import Held
        _HELD.append(Held)
        _OUT.append(out_tensor)
    stats["compiles"] += 1
    return _Entry(fn, args, kwargs, slots)


def eager_composite(fn, when=None, min_elements=None, autocast=None, check=None,
                    pointwise=False):
    """Wrap public composite ``fn`` so eager calls run its compiled form (module docstring).

    ``when(*args, **kwargs)``, if given, must also be true for a call to take the fast
    path (``F.silu(x, inplace=True)`` writes its input: it runs as written).
    ``check(*args, **kwargs)``, if given, runs before the fast path and raises for values
    the composite would refuse but its compiled form cannot see (class-index targets out of
    range: a GPU's kernels read them unchecked).
    ``min_elements`` (the wrapper's attribute of that name) replaces :data:`MIN_ELEMENTS`
    for ``fn``: a one-primitive function such as ``F.relu`` only pays for a compiled call on
    large inputs. ``autocast``, PyTorch's name of the op ``fn`` is (``"layer_norm"``), lets
    calls inside an autocast region take the fast path too, under that op's policy applied
    once at the boundary; such a wrapper also takes float16/bfloat16 tensors.
    ``pointwise``: ``fn`` maps its first argument element by element (``F.gelu``): a
    channels-last (dense, not row-major) input is run as the row-major view of its memory
    and the result seen back in its layout (as the eager ops' would be), not compiled anew
    for its strides; other composites whose result is not row-major run as written
    (:func:`_first`).

    The wrapper keeps ``fn``'s name, signature and docstring; results agree with ``fn``'s to
    the compiled kernels' rounding (tested per function in ``tests/eager/``).

    Example:
        >>> gelu = eager_composite(_gelu_composite, autocast="gelu")   # F.gelu's wrapping
    """
    cache: dict = {}
    seen: dict = {}
    names = _DTYPE_NAMES if autocast is None else _LOWP_NAMES

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # NOTE: the size test first, inlined for positional calls (F.relu(x),
        # F.cross_entropy(x, y)): a small call returns to the composite after a few
        # attribute reads (~0.3 us) instead of two calls (~1 us on W1's calls)
        if kwargs:
            if _small(args, kwargs, wrapper.min_elements):
                return fn(*args, **kwargs)
        else:
            limit = wrapper.min_elements
            if limit is None:
                limit = MIN_ELEMENTS
            for a in args:
                if isinstance(a, Tensor) and a._data.size >= limit:
                    break
            else:
                return fn(*args)
        if not _eligible() or (autocast is None and state.autocast is not None) or (
                when is not None and not when(*args, **kwargs)):
            return fn(*args, **kwargs)
        if pointwise and args and isinstance(x := args[0], Tensor) and \
                not x._data.flags.c_contiguous and (order := kept_order(x._data)):
            return wrapper(x.permute(order), *args[1:], **kwargs).permute(inverse(order))
        found = _key(args, kwargs, names)
        if found is None:
            return fn(*args, **kwargs)
        if check is not None:
            check(*args, **kwargs)
        tensors, slots, key = found
        table = state.autocast
        policy = None if table is None else table.get(autocast)
        if policy is not None and _casts(policy, tensors):
            if any(p[1] == "banned" for p in policy):
                return fn(*args, **kwargs)      # raises the op's own error
            key += (policy,)
        else:
            policy = None   # nothing to cast: the plain key (and graph) serves the call
        entry = cache.get(key)
        if entry is None:
            n = seen[key] = seen.get(key, 0) + 1
            if n <= WARMUP or len(cache) >= MAX_KEYS:
                return fn(*args, **kwargs)
            body = fn if policy is None else _with_policy(fn, autocast, policy)
            entry = cache[key] = _build(body, args, kwargs, slots)
            if entry is not False:
                out = _amp_off(table, _first, cache, key, entry, tensors)
                return fn(*args, **kwargs) if out is _RETIRED else out
        if entry is False:
            return fn(*args, **kwargs)
        return _amp_off(table, _run, entry, tensors)

    wrapper.__wrapped_composite__ = fn
    wrapper._eager_cache = cache
    wrapper.min_elements = min_elements
    wrapper.autocast_op = autocast
    return wrapper


_LOWP_DTYPES = frozenset(("float16", "bfloat16"))


def _casts(policy, tensors) -> bool:
    """Whether autocast ``policy`` (a ``state.autocast`` row) may cast one of ``tensors``:
    "fp32" only casts float16/bfloat16 ones, "lower" float32 ones (or the other low dtype);
    "promote" and "banned" are taken as casting."""
    for dev, pol, lower in policy:
        for t in tensors:
            if t._device.type != dev:
                continue
            name = t._dtype.name
            if pol == "fp32":
                if name in _LOWP_DTYPES:
                    return True
            elif pol != "lower" or name == "float32" or (name in _LOWP_DTYPES and
                                                          name != lower.name):
                return True
    return False


def _with_policy(fn, name, policy):
    """``fn`` behind autocast op ``name``'s casts (``policy``: its ``state.autocast`` row),
    run with autocast off: what the compiled graph of an autocast call traces."""
    from ..amp.autocast_mode import cast_inputs

    def cast_then_run(*args, **kwargs):
        args, kwargs = cast_inputs(name, policy, args, kwargs)
        return fn(*args, **kwargs)
    cast_then_run.__name__ = getattr(fn, "__name__", "composite")
    return cast_then_run


def _amp_off(table, run, *args):
    """``run(*args)`` with autocast off (``table``: the region's, restored after): a
    compiled call's graph was traced, and its casts taken, outside autocast."""
    if table is None:
        return run(*args)
    state.autocast = None
    try:
        return run(*args)
    finally:
        state.autocast = table


#: what :func:`_first` returns when the key's capture failed (the caller runs the composite).
_RETIRED = object()


def _first(cache, key, entry, tensors):
    """The capturing call of ``entry``: a graph break (a warning from ``ember.compile``, or
    an error) retires the key to the composite (:data:`_RETIRED`)."""
    from ..graph.trace import GraphBreak
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        try:
            out = _run(entry, tensors)
        except (GraphBreak, UserWarning, _NotOneTensor):
            cache[key] = False
            return _RETIRED
    if not isinstance(out, Tensor) or kept_order(out._data) is not None:
        # NOTE: a result laid out other than row-major (gelu of a channels-last image):
        # the composite's eager ops keep that layout in memory order, where the compiled
        # call would read its input strided, write row-major and copy into the layout
        cache[key] = False
    else:
        entry.prog = _direct(entry)
    return out
