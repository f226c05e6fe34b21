"""Which first calls of a compiled function will change their own signature.

A training step's first call usually creates its optimizer's state (Adam's moments, SGD's
momentum buffers): the signature changes (it counts each parameter's state entries), so the
graph traced at that call can never replay and is thrown away (:mod:`ember.graph.compile`).
Tracing it still costs its recording (~0.2 s of W3's ~0.37 s first call). When no earlier
process has recorded the signature as unstable (:func:`ember.graph.warm_start.
known_unstable`: a cold cache), :func:`predicts_unstable` says so from the state itself, and
the call runs under the recording-free tracer instead (same numerics as a traced call).

A wrong guess costs one traced call later, never a result: the signature's second call is
traced as usual (the hint is used once per signature). What a trace finds (a graph break,
``fullgraph=True``'s error, a write to Python state) is then found at the second call, as
after an earlier process's hint (:mod:`ember.graph.warm_start`).

:func:`attention_dtypes` guesses the other thing a cold first call waits for: the attention
kernels' compiler runs (forward ~0.55 s, backward ~1.1 s of ``gcc``), otherwise started only
when the first ``sdpa`` runs, after Ember's GEMM library is built for the first Linear. When
the code the function reaches names ``scaled_dot_product_attention``, ``ember.compile``
starts them at the first call (:func:`prefetch_kernels`), so the three libraries compile
side by side. A wrong guess builds a library nobody loads (background CPU
once; the kernel cache keeps it).
"""
from __future__ import annotations

import types

__all__ = ["creates_state", "predicts_unstable", "attention_dtypes", "prefetch_kernels"]

#: a name in reachable code that means the first call will run the ``sdpa`` kernels
ATTENTION_NAMES = frozenset({"scaled_dot_product_attention"})
_class_names: dict = {}       # class -> the names its methods' code reads


def creates_state(opt) -> bool:
    """Whether ``opt``'s step stores per-parameter state. PyTorch's ``SGD`` without
    momentum keeps none; every other optimizer of ``torch.optim`` (and a user's) may."""
    from ..optim.sgd import SGD
    if isinstance(opt, SGD):
        return any(g.get("momentum", 0) for g in opt.param_groups)
    return True


def predicts_unstable(roots) -> bool:
    """Whether a call may create optimizer state: an optimizer the function reaches
    (``roots``, :func:`ember.graph.discover.discover`) holds a parameter needing a gradient
    without any state yet, and its step stores some."""
    for _, opt in roots.optimizers:
        state = opt.state
        if any(p._requires_grad and not state.get(p) for g in opt.param_groups
               for p in g["params"]) and creates_state(opt):
            return True
    return False


def _code_names(code, out: set) -> set:
    out.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_names(c, out)
    return out


def _names_of_class(cls) -> frozenset:
    """The global/attribute names the methods of ``cls`` (and its bases) read."""
    hit = _class_names.get(cls)
    if hit is None:
        out: set = set()
        for klass in cls.__mro__:
            for v in vars(klass).values():
                code = getattr(getattr(v, "__func__", v), "__code__", None)
                if isinstance(code, types.CodeType):
                    _code_names(code, out)
        hit = _class_names[cls] = frozenset(out)
    return hit


def attention_dtypes(fn, roots) -> list:
    """The suffixes (``"f32"``, ``"f64"``) of the attention kernels a call of ``fn`` will
    likely run: empty unless ``fn``'s code or a method of a module it reaches names
    ``scaled_dot_product_attention``; float64 for float64 parameters, float32 for the
    others (float16/bfloat16 attention computes in float32). CPU parameters only."""
    params = [p for _, p in roots.params if p._device.type == "cpu"]
    if not params:
        return []
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    found = ATTENTION_NAMES & _code_names(code, set()) if code is not None else set()
    for _, m in roots.modules:
        if found:
            break
        found = ATTENTION_NAMES & _names_of_class(type(m))
    if not found:
        return []
    return sorted({"f64" if p._dtype.name == "float64" else "f32" for p in params
                   if p._dtype.is_floating_point})


def prefetch_kernels(fn, roots) -> None:
    """Start building (or loading) the C libraries a first compiled call will wait for, on
    background threads, while it runs: the worker pool, the one-call launcher, the column
    sums, the one-value-per-row loop (cross-entropy's; ~0.6 s of compiler time on an empty
    kernel cache) and, when :func:`attention_dtypes` expects attention, its forward (before
    the column sums) and, on a second thread, its backward (a first training step needs all
    of them, the backward last). Not the bfloat16 GEMM library: ``cast_gemm`` loads it only
    for graphs with a bfloat16 product (~0.7 s of ``gcc`` a float32 graph never needs).
    Ember's GEMM is built by the first product itself, at once."""
    from ..codegen import attention_kernels as att, cache, launch, pool, reduce_kernels
    from .passes.take_rows import _SOURCE as take_rows_source
    first, second = [pool._SOURCE, launch._SOURCE], []
    for s in attention_dtypes(fn, roots):
        first.append(lambda cc, s=s: att.source(cc.mvec, (s,), "fwd"))
        second.append(lambda cc, s=s: att.source(cc.mvec, (s,), "bwd"))
    first += [lambda cc: reduce_kernels.source(), take_rows_source]
    cache.prefetch(first)
    if second:
        cache.prefetch(second, name="attention-backward")
