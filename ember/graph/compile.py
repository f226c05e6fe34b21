"""``ember.compile``: capture a Python function into graphs, optimise them, run them.

The first call for each *signature* traces the function (see :mod:`ember.graph.trace`) —
the traced call runs for real and returns eager results — then the graph goes through
the pass pipeline (or its result comes from the on-disk graph cache,
:mod:`ember.graph.disk_cache`, keyed by the traced graph) and is lowered to a
:class:`~ember.graph.executor.Program`. In a new process a signature an earlier process
compiled is bound from its *warm-start* record instead (:mod:`ember.graph.warm_start`: no
trace; the program runs from that first call, like ``torch.compile``'s). A traced call that changed the signature (a first
optimizer step creating its state) is never replayed, so its graph is not optimised. Later calls
with the same signature run the program: graph inputs are read from the call's tensors
and from the state the function touched (parameters, gradients, optimizer state, learning
rates); changed state is written back.

The signature holds what the graph was specialised on: each tensor argument's shape,
dtype, device and ``requires_grad``; Python scalar arguments by value; the grad mode; and
for the modules and optimizers the function can reach (its arguments, closure, globals):
each module's ``training`` flag, which parameters have a ``.grad``, the optimizer's
hyper-parameters (the learning rate excepted: it is a graph input, so schedulers never
cause a recompile) and which parameters have optimizer state. A change retraces, and
``explain()`` shows the difference.

Each captured graph also carries *guards* (:mod:`ember.graph.guards`) on what it read
from Python beyond its arguments: the identity of the tensors it reached through globals,
closures, attributes and optimizer state, the Python scalars it may have folded in, the
length of containers and hook lists. They are checked before every compiled call (a few
microseconds); a failure retraces and ``explain()`` names the path (``guard G['w']: ...``).
A traced call that writes Python state (``state["n"] += 1``) is traced once more; a second
write makes the signature run eagerly (a graph break), as does an op whose output size
depends on values (``nonzero``, boolean masks): never a stale answer.
"""
from __future__ import annotations

import functools
import time
from typing import NamedTuple
import warnings
import weakref

from ..autograd import engine as _engine
from ..autograd.grad_mode import state as _state
from ..errors import GraphError
from ..func._tree import tree_flatten
from ..tensor import Tensor
from . import disk_cache, warm_start
from .capture import Entry, finish_capture, lifted
from .discover import discover
from .explain import Explanation
from .first_call import predicts_unstable, prefetch_kernels
from .guards import capture_guards, reach
from .passes import run_pipeline, DEFAULT_PASSES
from .replay import entry_plan, plan_kw, program, run
from .signature import (arg_leaves, set_grad_keys, signature, signature_diff, stable,
                        touches_grads)
from .trace import Tracer

__all__ = ["compile", "CompiledFunction"]

CACHE_LIMIT = 8


def compile(fn=None, *, fullgraph: bool = False, dynamic: bool = False, passes=None,
            parallel: bool = False, name: str | None = None, memory_budget=None,
            mode: str | None = None):
    """Compile ``fn`` (a function or a Module) into cached, optimised graphs.

    A Module comes back as an :class:`~ember.graph.optimized_module.OptimizedModule`
    (PyTorch's type of the same name): an ``nn.Module`` wrapping the original as
    ``_orig_mod`` whose ``forward`` is the compiled call.

    Args:
        fullgraph: raise :class:`~ember.graph.trace.GraphBreak` (naming the file and line)
            instead of running part of ``fn`` eagerly when it reads a traced value in Python.
        dynamic: Ember specialises every graph to its input shapes; with ``dynamic=True``
            a shape change retraces without counting towards the recompile limit.
        passes: the pass pipeline (names or ``Graph -> (Graph, stats)`` callables);
            default :data:`ember.graph.passes.DEFAULT_PASSES`. ``[]`` runs none.
        parallel: run independent nodes concurrently on a thread pool.
        mode: PyTorch's modes. ``None``/``"default"``/``"max-autotune-no-cudagraphs"``:
            each call runs the program's steps from Python. ``"reduce-overhead"`` and
            ``"max-autotune"``: a program on a ``cuda`` device is replayed as one CUDA
            graph from its third call (:mod:`ember.graph.cuda_graphs`: batches copied
            into the graph's inputs, the returned tensors copied out; new ``.grad``
            tensors are the graph's buffers, overwritten by the next call, as in
            PyTorch). CPU programs run as in the default mode. Ember tunes no kernels
            per mode: ``max-autotune`` differs from ``reduce-overhead`` in name only.
        memory_budget: a bound on the step's *activation memory*: the planned peak above
            what the step holds anyway — its inputs (parameters, the batch, optimizer
            state, existing gradients) and its outputs (new gradients, the loss) — i.e.
            the most bytes of intermediate values alive at once (``memory_plan().
            activation_peak_bytes``), like PyTorch's ``activation_memory_budget``. An int
            is bytes; ``"40%"`` is that fraction of the unbudgeted plan's activation peak.
            The compiler drops values after their forward reads and recomputes them right
            before their backward reads (:mod:`ember.graph.remat`: √N-style segments,
            every-k-th checkpoints, cheap values), taking the choice with the fewest extra
            FLOPs whose planned activation peak fits. So the measured allocator peak of a
            call is at most inputs + outputs + budget (the plan predicts it exactly), a
            tighter budget never measures higher, and results are bitwise those of the
            unbudgeted graph (random draws are never recomputed). If no choice fits,
            ``MemoryError`` is raised when the signature is compiled (after its first,
            traced call, before the compiled program runs), naming the minimum feasible
            budget; ``explain()`` lists the recomputed values with the source lines that
            created them. Not yet supported for a compiled forward whose backward is a
            separate graph (``ember.compile(model)``): ``NotImplementedError``.

    A function that calls ``backward()`` itself (a training step) may return the loss as
    is: it comes back as a plain tensor. One that returns tensors needing gradients
    (``ember.compile(model)``) gets a compiled backward too: its outputs carry one autograd
    node whose backward runs a second, separately optimised graph.

    Example:
        >>> @ember.compile
        ... def step(x, y):
        ...     opt.zero_grad()
        ...     loss = F.cross_entropy(model(x), y)
        ...     loss.backward()
        ...     opt.step()
        ...     return loss.detach()
    """
    if fn is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic, passes=passes,
                                 parallel=parallel, name=name, memory_budget=memory_budget,
                                 mode=mode)
    cf = CompiledFunction(fn, fullgraph=fullgraph, dynamic=dynamic, passes=passes,
                          parallel=parallel, name=name, memory_budget=memory_budget, mode=mode)
    if cf.module is not None:     # a Module: an OptimizedModule, like torch.compile's
        from .optimized_module import OptimizedModule
        return OptimizedModule(fn, cf)
    return cf


def _on_meta(flat, module) -> bool:
    """Whether a call's tensors (or the compiled module's parameters) are ``meta`` tensors."""
    for x in flat:
        if isinstance(x, Tensor) and x._device.type == "meta":
            return True
    return module is not None and any(p._device.type == "meta" for p in module.parameters())


#: every live CompiledFunction (``ember.compiler.reset`` forgets their graphs)
_LIVE: "weakref.WeakSet" = weakref.WeakSet()


def reset_all() -> None:
    """Forget the graphs of every live compiled function (``torch.compiler.reset``)."""
    for cf in list(_LIVE):
        cf._reset()


#: ``mode`` values (PyTorch's).
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"ember.compile: unknown mode {mode!r}; valid modes: "
                         f"{', '.join(repr(m) for m in MODES[1:])} (or None)")
    return mode


class CaptureInfo(NamedTuple):
    """What :meth:`CompiledFunction.last_capture` returns."""
    graph: object
    arg_slots: list
    sources: list
    outputs: list


class CompiledFunction:
    """What :func:`compile` returns: call it like ``fn``; ``explain()`` tells what happened."""

    def __init__(self, fn, *, fullgraph=False, dynamic=False, passes=None, parallel=False,
                 name=None, memory_budget=None, mode=None):
        from ..nn.module import Module
        self.module = fn if isinstance(fn, Module) else None
        self.fn = fn
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.passes = DEFAULT_PASSES if passes is None else list(passes)
        self.parallel = parallel
        self.mode = _check_mode(mode)
        self.memory_budget = memory_budget
        if memory_budget is not None:
            from .remat import _parse
            _parse(memory_budget, 1)          # a bad budget fails here, not at the call
        self.name = name or getattr(fn, "__name__", type(fn).__name__)
        self._cache: dict = {}
        self._roots = None
        self._last_sig = None
        self._recompiles = 0
        self._grad_keys = True    # False once a capture showed fn never touches .grad
        self._wrote_python = {}   # signature -> [(path, old, new)] its traced call wrote
        self._planning = False    # memory_plan() capturing: lower even an unstable graph
        self._graph_key = None    # the graph cache's key of the last graph lowered
        self._hinted: set = set()  # signatures run untraced once (warm_start.known_unstable)
        self._sig0 = None         # the signature of the capture in progress, before the call
        self.log = Explanation(self.name)
        functools.update_wrapper(self, fn, updated=()) if not self.module else None
        _LIVE.add(self)

    def _reset(self) -> None:
        """Forget every signature's graph, as if never called (``ember.compiler.reset``)."""
        self._cache.clear()
        self._last_sig = self._sig0 = self._graph_key = None
        self._recompiles = 0
        self._grad_keys = True
        self._wrote_python, self._hinted = {}, set()
        self.log = Explanation(self.name)

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        if _state.modes:
            # NOTE: inside another capture (a compiled step calling a compiled model) or
            # any dispatch mode: run fn itself so the mode sees its ops (torch inlines too)
            return self.fn(*args, **kwargs)
        if self._roots is None:
            self._roots = discover(self.fn, args, kwargs)
        flat, spec = tree_flatten((args, kwargs))
        sig = self._signature(flat, spec)
        key = tuple(sig.items())
        e = self._cache.get(key)
        if e is None:
            self._roots = discover(self.fn, args, kwargs)   # state may have appeared
            sig = self._signature(flat, spec)
            key = tuple(sig.items())
            e = self._cache.get(key)
            if e is None:
                return self._capture(sig, key, flat, spec, args, kwargs)
        if e.eager:
            return self.fn(*args, **kwargs)
        if not e.guards.check(flat):
            return self._retrace(e, key, flat, spec, args, kwargs)
        return run(e, flat)

    def _retrace(self, e, key, flat, spec, args, kwargs):
        """A guard failed (a tensor or value ``fn`` read was replaced): capture again."""
        why = e.guards.failure(flat)
        del self._cache[key]
        self._roots = discover(self.fn, args, kwargs)
        sig = self._signature(flat, spec)
        return self._capture(sig, tuple(sig.items()), flat, spec, args, kwargs, why)

    def _graphs_note(self):
        """``program``'s CUDA-graph argument: None (plain programs), or where a program
        that stays plain says why (``explain()``)."""
        from .cuda_graphs import MODES as _GRAPH_MODES
        return self.log.note if self.mode in _GRAPH_MODES else None

    def _signature(self, flat, spec) -> dict:
        """This call's signature (:func:`ember.graph.signature.signature`)."""
        return signature(flat, spec, self._roots, self._grad_keys)

    # ------------------------------------------------------------------ tracing
    def _capture(self, sig, key, flat, spec, args, kwargs, why=None):
        """Trace ``fn`` for signature ``sig`` (the call runs for real), compile the graph
        and cache it; returns the call's result. ``why``: the guard that failed."""
        t0 = time.perf_counter()
        if _on_meta(flat, self.module):
            # NOTE: meta tensors carry shapes only: nothing to compile or to gain
            self.log.note("meta tensors: the function runs eagerly (shapes and dtypes only)")
            e = Entry()
            e.eager, e.reason = True, "meta tensors"
            self._cache[key] = e
            return self.fn(*args, **kwargs)
        self._count_recompile(sig, key, why)
        if self._recompiles > CACHE_LIMIT:
            self.log.note(f"more than {CACHE_LIMIT} recompiles: running eagerly from now on")
            warnings.warn(f"ember.compile({self.name}): recompiled more than {CACHE_LIMIT} "
                          f"times; running eagerly (see explain())", stacklevel=3)
            e = Entry()
            e.eager, e.reason = True, "recompile limit"
            self._cache[key] = e
            return self.fn(*args, **kwargs)
        warm = self.memory_budget is None and not self._planning and warm_start.enabled()
        hint = None
        if warm and key not in self._hinted:
            if warm_start.known_unstable(self, sig):
                hint = "an earlier process found that it changes its signature"
            elif predicts_unstable(self._roots):
                hint = "it may create optimizer state (first_call.py)"
        if hint:
            self._hinted.add(key)         # NOTE: once: a wrong hint costs one traced call
            self.log.note(f"ran untraced: {hint} (a first optimizer step), so its graph "
                          f"would never run")
            prefetch_kernels(self.fn, self._roots)
            with warm_start.Untraced(self.name):
                return self.fn(*args, **kwargs)
        e = warm_start.start(self, sig, flat) if warm else None
        if e is not None:
            return run(e, flat)
        prefetch_kernels(self.fn, self._roots)
        tr, arg_slots = self._tracer(flat)
        walk = reach(self.fn, flat)
        before = walk.snapshot(flat)
        calls = _engine.freeing_runs
        with tr:
            result = self.fn(*args, **kwargs)
        ran_backward = _engine.freeing_runs != calls
        e = Entry()
        e.eager = False
        if tr.broken is not None:
            reason, where = tr.broken
            self.log.graph_break(reason, where)
            if self._signature(flat, spec) != sig:
                # NOTE: the call changed its own signature (a first optimizer step made its
                # state): this signature never comes back, so no warning; the next is traced
                self.log.note(f"the graph break at {where} was in a call that changed its "
                              f"own signature (a first optimizer step): the next call is "
                              f"traced again")
            else:
                warnings.warn(f"ember.compile({self.name}): graph break at {where}: "
                              f"{reason}; this function runs eagerly for this signature",
                              stacklevel=2)
            e.eager, e.reason = True, f"graph break at {where}: {reason}"
            self._cache[key] = e
            return result
        wrote = walk.writes(before, flat)
        if wrote:
            return self._wrote_state(e, key, wrote, result)
        finish_capture(tr, e, result, arg_slots, flat, [p for _, p in self._roots.params],
                       self.passes, ran_backward)
        self._sig0 = sig                  # (a warm-start record is keyed by it)
        sig, replayable = self._settle(e, sig, flat, spec, ran_backward)
        if replayable or self._planning or self.memory_budget is not None:
            self._lower(e, tr)
        else:
            # NOTE: the call changed the signature (a first optimizer step creating state):
            # this graph is never run, so it is not optimised (nor its kernels compiled)
            e.raw_graph = e.graph = tr.b.build(e.out_leaves_vars)
            e.report, e.program = [], None
            if warm:
                warm_start.note_unstable(self, self._sig0)
        e.compile_s = time.perf_counter() - t0
        self._store(e, sig, flat, tr, replayable)
        return result

    def _count_recompile(self, sig, key, why):
        """Log what changed since the previous capture; count it unless ``dynamic`` and
        only argument shapes changed."""
        if self._last_sig is not None:
            diff = signature_diff(self._last_sig, sig, why, self._wrote_python.get(key, ()))
            shape_only = all(k.startswith("arg") for k in diff)
            if not (self.dynamic and shape_only):
                self._recompiles += 1
            self.log.recompile(diff)
        self._last_sig = sig

    def _tracer(self, flat):
        """A tracer labelling what ``fn`` reaches, with the tensor arguments bound as the
        graph's first inputs; and those arguments' positions in ``flat``."""
        r = self._roots
        leaves = arg_leaves(flat)
        grad_owners = {id(p.grad._data): p for p in [p for _, p in r.params] + leaves
                       if p.grad is not None}
        labels = dict(r.labels)
        labels.update({id(x): f"arg{i}" for i, x in enumerate(flat) if isinstance(x, Tensor)})
        tr = Tracer(self.name, self.fullgraph, grad_owners, labels)
        arg_slots = []
        for i, x in enumerate(flat):
            if isinstance(x, Tensor):
                v = tr.b.input(x._data.shape, x._dtype, x._device, f"arg{i}")
                tr.bind(x, v)
                arg_slots.append(i)
        return tr, arg_slots

    def _lower(self, e: Entry, tr: Tracer) -> None:
        """Build entry ``e``'s graph, run the passes (and the budget) or load their result
        from the graph cache (:mod:`ember.graph.disk_cache`), make its program."""
        e.raw_graph = tr.b.build(e.out_leaves_vars)
        key = self._graph_key = None
        if self.memory_budget is None and disk_cache.enabled():
            t0 = time.perf_counter()
            key = self._graph_key = disk_cache.key_for(e.raw_graph, self.passes, self.parallel)
            hit = disk_cache.lookup(key) if key is not None else None
            if hit is not None:
                e.graph, e.report = hit["graph"], hit["report"] + [{
                    "pass": "graph cache", "changed": {"loaded": 1},
                    "nodes": len(hit["graph"].nodes), "ms": (time.perf_counter() - t0) * 1e3}]
                e.program = program(e, e.graph, self.parallel, self._graphs_note())
                return
        graph, report = run_pipeline(e.raw_graph, self.passes)
        if self.memory_budget is not None:
            graph = self._fit_budget(e, graph, report)
        if key is not None and not disk_cache.store(key, {"graph": graph, "report": report}):
            self._graph_key = None
        e.graph, e.report = graph, report
        e.program = program(e, graph, self.parallel, self._graphs_note())

    def _settle(self, e: Entry, sig, flat, spec, ran_backward: bool) -> tuple:
        """``(signature, replayable)`` of a finished capture: its signature (without the
        ``.grad`` keys once a graph showed they don't matter) and whether the call left it
        as it found it, so the graph can replay later calls."""
        if not ran_backward and not touches_grads(e):
            self._grad_keys = False       # .grad fields are none of this graph's business
            # NOTE: dropped from the signature taken before the call, not one taken now:
            # state the call created (optimizer moments) must still make it unstable
            sig = {k: v for k, v in sig.items() if not k.endswith(".grad")}
            self._last_sig = sig
        after = self._signature(flat, spec)
        return sig, stable(sig, after, set_grad_keys(e, self._roots, flat))

    def _store(self, e: Entry, sig, flat, tr: Tracer, replayable: bool) -> None:
        """Guard entry ``e``, log it and cache it under ``sig`` if ``replayable``."""
        self._captured = e                # memory_plan's, also when not cached
        e.guards, unguarded = None, ()
        if replayable:                    # NOTE: an entry never replayed needs no guards
            r = reach(self.fn, flat)
            desc = warm_start.describe_for(self._graph_key, r, flat)
            e.guards, unguarded = capture_guards(self.fn, flat, lifted(e), r=r)
            if desc is not None and not unguarded:
                warm_start.save(self, e, self._sig0, flat, r, desc, self._graph_key)
        self.log.capture(sig, e.raw_graph, e.graph, e.report, e.compile_s, tr.randoms,
                         replayable, len(e.guards or ()))
        if unguarded:
            self.log.note(f"unguarded graph inputs (read from the same object at every run: no "
                          f"path from {self.name} reaches them, so a replacement would go "
                          f"unnoticed; fine for tensors made during the call): "
                          f"{', '.join(unguarded[:8])}")
        if replayable:
            self._cache[tuple(sig.items())] = e

    def _wrote_state(self, e, key, wrote, result):
        """The traced call wrote Python state (``state["n"] += 1``), which running the graph
        would not do. Traced once more (a first call may set state up once); a second write
        is a graph break: this signature runs ``fn`` itself from now on."""
        what = "; ".join(f"{p}: {a} -> {b}" for p, a, b in wrote[:4]) + (
            f" (+{len(wrote) - 4} more)" if len(wrote) > 4 else "")
        if key not in self._wrote_python:
            self._wrote_python[key] = wrote
            self.log.note(f"the traced call wrote Python state ({what}); traced again at the "
                          f"next call")
            return result
        code = getattr(getattr(self.fn, "__func__", self.fn), "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code else self.name
        reason = f"the function writes Python state ({what}), which its graph can't replay"
        self.log.graph_break(reason, where)
        if self.fullgraph:
            from .trace import GraphBreak
            raise GraphBreak(reason, where)
        warnings.warn(f"ember.compile({self.name}): graph break at {where}: {reason}; "
                      f"this function runs eagerly for this signature", stacklevel=3)
        e.eager, e.reason = True, f"graph break at {where}: {reason}"
        self._cache[key] = e
        return result

    def _fit_budget(self, e, graph, report):
        """Recompute activations so the planned activation peak fits ``memory_budget``."""
        from .remat import fit_budget
        if e.joint is not None:
            raise NotImplementedError(f"ember.compile({self.name}): memory_budget applies to "
                                      f"functions that run their own backward (training steps) "
                                      f"for now, not to a compiled forward/backward pair")
        t0 = time.perf_counter()
        graph, info = fit_budget(graph, self.memory_budget, **plan_kw(e, graph))
        rec = info["recomputed"]
        report.append({"pass": "remat", "changed": {"recomputed": len(rec)},
                       "nodes": len(graph.nodes), "ms": (time.perf_counter() - t0) * 1e3})
        lines = [f"memory_budget {info['budget']:,} bytes: activation peak "
                 f"{info['unbudgeted']:,} -> {info['peak']:,} bytes, {len(rec)} value(s) "
                 f"recomputed (+{info['extra_flops']:.3g} FLOPs)"]
        lines += [f"  recomputed %{v.id}: {v.type_str()} = {op}(...)  created at {loc or '?'}"
                  for v, op, loc in rec]
        self.log.remat("\n".join(lines), rec)
        return graph

    # ------------------------------------------------------------------ reporting
    def memory_plan(self, *args, **kwargs):
        """The memory plan of a signature, computed before its graph ever runs.

        With arguments: the plan for that call's signature as things stand (a fresh step's
        first call, say); a signature never called is captured first, with its effects
        undone (:mod:`ember.graph.sandbox`: parameters, gradients, optimizer state and
        random generators are as before). Without: the most recent signature's plan.
        Returns a :class:`~ember.graph.memory_plan.MemoryPlan` (``JointPlan`` for a compiled
        forward whose backward is compiled too): ``peak_bytes``, ``breakdown``, ``table()``.
        """
        return entry_plan(self._plan_entry(args, kwargs))

    def _plan_entry(self, args, kwargs) -> Entry:
        """The captured entry :meth:`memory_plan` reports (see there)."""
        if args or kwargs:
            flat, spec = tree_flatten((args, kwargs))
            self._roots = discover(self.fn, args, kwargs)
            sig = self._signature(flat, spec)
            e = self._cache.get(tuple(sig.items())) or self._plan_capture(sig, flat, spec,
                                                                          args, kwargs)
        else:
            entries = [x for x in self._cache.values() if not x.eager]
            if not entries:
                raise GraphError(f"ember.compile({self.name}).memory_plan(): nothing captured "
                                 f"yet; pass example arguments")
            e = entries[-1]
        if e.eager:
            raise GraphError(f"ember.compile({self.name}): this signature runs eagerly "
                             f"({e.reason}); it has no memory plan")
        return e

    def _plan_capture(self, sig, flat, spec, args, kwargs):
        """Capture ``sig`` for its plan alone: effects undone; not cached (the signature
        changed while capturing) means not a call, so not a recompile either."""
        from .sandbox import side_effects_undone
        last, recompiles, self._captured = self._last_sig, self._recompiles, None
        self.log.note("memory_plan(): capturing a new signature for its plan; its effects "
                      "are undone")
        self._planning = True
        try:
            with side_effects_undone(self.fn, args, kwargs, self._roots):
                self._capture(sig, tuple(sig.items()), flat, spec, args, kwargs)
        finally:
            self._planning = False
            e, self._captured = self._captured, None
            if e is None or all(x is not e for x in self._cache.values()):
                self._last_sig, self._recompiles = last, recompiles
        return e or self._cache[tuple(sig.items())]      # None: it runs eagerly

    def explain(self) -> Explanation:
        """What was captured, recompiled, broken and optimised (printable)."""
        return self.log

    def graphs(self) -> list:
        """The optimised graphs, one per cached signature."""
        return [e.graph for e in self._cache.values() if not e.eager]

    def raw_graphs(self) -> list:
        """The graphs as traced, before the passes, one per cached signature."""
        return [e.raw_graph for e in self._cache.values() if not e.eager]

    def last_capture(self) -> "CaptureInfo":
        """The most recent cached signature's graph and where its inputs come from.

        ``graph`` (optimised), ``arg_slots`` (positions, in the flattened ``(args, kwargs)``,
        of the tensor arguments that are the graph's first inputs), ``sources`` (one
        :class:`~ember.graph.trace.Source` per remaining input: a parameter, buffer,
        gradient or learning rate) and ``outputs`` (the vars of the returned tensors).
        """
        entries = list(self._cache.values())
        if not entries:
            raise GraphError(f"ember.compile({self.name}): nothing captured yet "
                             f"({self.explain()})")
        e = entries[-1]
        if e.eager:
            raise GraphError(f"ember.compile({self.name}): the last signature runs eagerly: "
                             f"{e.reason}")
        outs = [e.graph.outputs[k[1]] for k in e.out_leaves if k[0] == "tensor"]
        return CaptureInfo(e.graph, list(e.arg_slots), list(e.sources), outs)

    @property
    def graph(self):
        """The optimised graph of the most recent capture."""
        gs = self.graphs()
        if not gs:
            raise GraphError(f"ember.compile({self.name}): nothing captured yet (call it "
                             f"first, or see explain())")
        return gs[-1]

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def __deepcopy__(self, memo):
        """A copy (``copy.deepcopy`` of a model after ``model.compile()``) compiles its
        copied function afresh: captured programs hold raw kernel pointers."""
        import copy
        return CompiledFunction(copy.deepcopy(self.fn, memo), fullgraph=self.fullgraph,
                                dynamic=self.dynamic, passes=self.passes,
                                parallel=self.parallel, name=self.name,
                                memory_budget=self.memory_budget, mode=self.mode)

