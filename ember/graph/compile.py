"""``ember.compile``: capture a Python function into graphs, optimise them, run them.

The first call for each *signature* traces the function (see :mod:`ember.graph.trace`) —
the traced call runs for real and returns eager results — then the graph goes through
the pass pipeline and is lowered to a :class:`~ember.graph.executor.Program`. Later calls
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

from ..autograd import engine as _engine
from ..autograd.grad_mode import state as _state
from ..errors import GraphError
from ..func._tree import tree_flatten, tree_unflatten
from ..tensor import Tensor, _wrap
from .executor import Program
from .explain import Explanation
from .passes import run_pipeline, DEFAULT_PASSES
from .guards import capture_guards, reach
from .trace import Tracer

__all__ = ["compile", "CompiledFunction"]

CACHE_LIMIT = 8


def compile(fn=None, *, fullgraph: bool = False, dynamic: bool = False, passes=None,
            parallel: bool = False, name: str | None = None, memory_budget=None):
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
                                 parallel=parallel, name=name, memory_budget=memory_budget)
    cf = CompiledFunction(fn, fullgraph=fullgraph, dynamic=dynamic, passes=passes,
                          parallel=parallel, name=name, memory_budget=memory_budget)
    if cf.module is not None:     # a Module: an OptimizedModule, like torch.compile's
        from .optimized_module import OptimizedModule
        return OptimizedModule(fn, cf)
    return cf


class CaptureInfo(NamedTuple):
    """What :meth:`CompiledFunction.last_capture` returns."""
    graph: object
    arg_slots: list
    sources: list
    outputs: list


class _Entry:
    """One captured signature: the program, where its inputs come from, what it writes."""

    __slots__ = ("graph", "program", "arg_slots", "sources", "writes", "grads", "out_spec",
                 "out_leaves", "out_leaves_vars", "n_user", "eager", "reason", "raw_graph",
                 "report", "compile_s", "joint", "diff_inputs", "release", "arg_owner",
                 "guards")


class CompiledFunction:
    """What :func:`compile` returns: call it like ``fn``; ``explain()`` tells what happened."""

    def __init__(self, fn, *, fullgraph=False, dynamic=False, passes=None, parallel=False,
                 name=None, memory_budget=None):
        from ..nn.module import Module
        self.module = fn if isinstance(fn, Module) else None
        self.fn = fn
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.passes = DEFAULT_PASSES if passes is None else list(passes)
        self.parallel = parallel
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
        self.log = Explanation(self.name)
        functools.update_wrapper(self, fn, updated=()) if not self.module else None

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        if _state.modes:
            # NOTE: inside another capture (a compiled step calling a compiled model) or
            # any dispatch mode: run fn itself so the mode sees its ops (torch inlines too)
            return self.fn(*args, **kwargs)
        if self._roots is None:
            self._roots = _discover(self.fn, args, kwargs)
        flat, spec = tree_flatten((args, kwargs))
        sig = self._signature(flat, spec)
        key = tuple(sig.items())
        e = self._cache.get(key)
        if e is None:
            self._roots = _discover(self.fn, args, kwargs)   # state may have appeared
            sig = self._signature(flat, spec)
            key = tuple(sig.items())
            e = self._cache.get(key)
            if e is None:
                return self._capture(sig, key, flat, spec, args, kwargs)
        if e.eager:
            return self.fn(*args, **kwargs)
        if not e.guards.check(flat):
            return self._retrace(e, key, flat, spec, args, kwargs)
        return _run(e, flat)

    def _retrace(self, e, key, flat, spec, args, kwargs):
        """A guard failed (a tensor or value ``fn`` read was replaced): capture again."""
        why = e.guards.failure(flat)
        del self._cache[key]
        self._roots = _discover(self.fn, args, kwargs)
        sig = self._signature(flat, spec)
        return self._capture(sig, tuple(sig.items()), flat, spec, args, kwargs, why)

    def _signature(self, flat, spec) -> dict:
        sig = {"grad_enabled": _state.grad_enabled, "structure": repr(spec)}
        if _state.autocast is not None:   # the graph holds the casts autocast chose
            from ..amp.autocast_mode import signature_key
            sig["autocast"] = signature_key()
        for i, x in enumerate(flat):
            if isinstance(x, Tensor):
                sig[f"arg{i}"] = (f"{x._dtype.name}[{', '.join(map(str, x._data.shape))}] "
                                  f"{x._device}" + (" requires_grad" if x._requires_grad
                                                     else ""))
            elif isinstance(x, (bool, int, float, str, type(None))):
                sig[f"arg{i}"] = repr(x)
            else:
                sig[f"arg{i}"] = f"{type(x).__name__}@{id(x):x}"
        if self._grad_keys:      # a leaf argument's .grad: like a parameter's (see below)
            for i, x in enumerate(flat):
                if isinstance(x, Tensor) and x._requires_grad and x._grad_fn is None:
                    sig[f"arg{i}.grad"] = _grad_key(x)
        r = self._roots
        for label, m in r.modules:
            sig[f"{label}.training"] = m.training
        for label, p in (r.params if self._grad_keys else ()):
            sig[f"{label}.grad"] = _grad_key(p)
        for label, opt in r.optimizers:
            for gi, g in enumerate(opt.param_groups):
                hp = tuple((k, v) for k, v in sorted(g.items()) if k not in ("params", "lr"))
                sig[f"{label}.param_groups[{gi}]"] = repr(hp)
                sig[f"{label}.state[{gi}]"] = tuple(len(opt.state.get(p, ())) if p in opt.state
                                                    else 0 for p in g["params"])
        return sig

    # ------------------------------------------------------------------ tracing
    def _capture(self, sig, key, flat, spec, args, kwargs, why=None):
        t0 = time.perf_counter()
        if self._last_sig is not None:
            diff = {k: (self._last_sig.get(k), v) for k, v in sig.items()
                    if self._last_sig.get(k) != v}
            diff.update({k: (v, None) for k, v in self._last_sig.items() if k not in sig})
            diff.update(why or {})          # a failed guard
            diff.update({f"{p} (written by the traced call)": (a, b)
                         for p, a, b in self._wrote_python.get(key, ())[:4]})
            shape_only = all(k.startswith("arg") for k in diff)
            if not (self.dynamic and shape_only):
                self._recompiles += 1
            self.log.recompile(diff)
        self._last_sig = sig
        if self._recompiles > CACHE_LIMIT:
            self.log.note(f"more than {CACHE_LIMIT} recompiles: running eagerly from now on")
            warnings.warn(f"ember.compile({self.name}): recompiled more than {CACHE_LIMIT} "
                          f"times; running eagerly (see explain())", stacklevel=3)
            e = _Entry()
            e.eager, e.reason = True, "recompile limit"
            self._cache[key] = e
            return self.fn(*args, **kwargs)
        r = self._roots
        arg_leaves = _arg_leaves(flat)
        grad_owners = {id(p.grad._data): p for p in [p for _, p in r.params] + arg_leaves
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
        walk = reach(self.fn, flat)
        before = walk.snapshot(flat)
        calls = _engine.freeing_runs
        with tr:
            result = self.fn(*args, **kwargs)
        ran_backward = _engine.freeing_runs != calls
        e = _Entry()
        e.eager = False
        if tr.broken is not None:
            reason, where = tr.broken
            self.log.graph_break(reason, where)
            warnings.warn(f"ember.compile({self.name}): graph break at {where}: {reason}; "
                          f"this function runs eagerly for this signature", stacklevel=2)
            e.eager, e.reason = True, f"graph break at {where}: {reason}"
            self._cache[key] = e
            return result
        wrote = walk.writes(before, flat)
        if wrote:
            return self._wrote_state(e, key, wrote, result)
        try:
            _finish_capture(tr, e, result, arg_slots, flat, [p for _, p in r.params],
                            self.passes, ran_backward)
        except _Eager as why:
            e.eager, e.reason = True, str(why)
            self.log.note(f"signature runs eagerly: {why}")
            self._cache[key] = e
            return result
        raw = tr.b.build(e.out_leaves_vars)
        e.raw_graph = raw
        graph, report = run_pipeline(raw, self.passes)
        if self.memory_budget is not None:
            graph = self._fit_budget(e, graph, report)
        e.graph, e.report = graph, report
        e.program = _program(e, graph, self.parallel)
        e.compile_s = time.perf_counter() - t0
        if not ran_backward and not _touches_grads(e):
            self._grad_keys = False       # .grad fields are none of this graph's business
            # NOTE: dropped from the signature taken before the call, not one taken now:
            # state the call created (optimizer moments) must still make it unstable
            sig = {k: v for k, v in sig.items() if not k.endswith(".grad")}
            key = tuple(sig.items())
            self._last_sig = sig
        self._captured = e                # memory_plan's, also when not cached
        after = self._signature(flat, spec)
        stable = _stable(sig, after, _set_grad_keys(e, r, flat))
        e.guards, unguarded = capture_guards(self.fn, flat, _lifted(e))
        self.log.capture(sig, raw, graph, report, e.compile_s, tr.randoms, stable,
                         len(e.guards))
        if unguarded:
            self.log.note(f"unguarded graph inputs (read from the same object at every run: no "
                          f"path from {self.name} reaches them, so a replacement would go "
                          f"unnoticed; fine for tensors made during the call): "
                          f"{', '.join(unguarded[:8])}")
        if stable:
            self._cache[key] = e
        return result

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
        graph, info = fit_budget(graph, self.memory_budget, **_plan_kw(e, graph))
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
        return _entry_plan(self._plan_entry(args, kwargs))

    def _plan_entry(self, args, kwargs) -> _Entry:
        """The captured entry :meth:`memory_plan` reports (see there)."""
        if args or kwargs:
            flat, spec = tree_flatten((args, kwargs))
            self._roots = _discover(self.fn, args, kwargs)
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
        try:
            with side_effects_undone(self.fn, args, kwargs, self._roots):
                self._capture(sig, tuple(sig.items()), flat, spec, args, kwargs)
        finally:
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
                                memory_budget=self.memory_budget)


class _Eager(Exception):
    pass


def _lifted(e: _Entry) -> list:
    """``(tensor, label)`` of the objects entry ``e`` reads or writes at every run."""
    out = [(s.obj, s.label) for s in e.sources if s.kind in ("tensor", "grad")]
    out += [(p, f"a parameter's .grad") for p, _, _ in e.grads]
    out += [(obj, "a tensor written in place") for (kind, obj), _ in e.writes
            if kind in ("tensor", "grad")]
    return out


def _touches_grads(e: _Entry) -> bool:
    """Whether the captured graph reads or writes any ``.grad`` field."""
    return bool(e.grads) or any(s.kind == "grad" for s in e.sources) or any(
        t[0] == "grad" for t, _ in e.writes)


def _set_grad_keys(e: _Entry, r, flat) -> set:
    """The signature keys of the ``.grad`` fields the graph sets (anew or to None)."""
    owners = {id(p) for p, _, _ in e.grads}
    keys = {f"{label}.grad" for label, p in r.params if id(p) in owners}
    return keys | {f"arg{i}.grad" for i, x in enumerate(flat) if id(x) in owners}


def _stable(before: dict, after: dict, replayed: set) -> bool:
    """Whether a call with signature ``before`` can be replayed by its graph: it left the
    signature as it found it, up to the ``.grad`` fields the graph itself sets each run
    (``backward()`` filling a None gradient, ``zero_grad()`` clearing one)."""
    return before.keys() == after.keys() and all(
        after[k] == v for k, v in before.items() if k not in replayed)


def _grad_key(p: Tensor) -> str:
    """What a signature records of ``p.grad``: None, or its dtype and shape."""
    g = p.grad
    return "None" if g is None else f"{g._dtype.name}[{', '.join(map(str, g._data.shape))}]"


def _arg_leaves(flat) -> list:
    """The tensor arguments whose ``.grad`` a ``backward()`` in the function may fill."""
    return [x for x in flat if isinstance(x, Tensor) and x._requires_grad and x._grad_fn is None]


def _finish_capture(tr: Tracer, e: _Entry, result, arg_slots, flat, params, passes,
                    ran_backward=False) -> None:
    """Turn the tracer's state into graph outputs, write-backs and the output template.

    ``ran_backward``: the function ran a backward pass that frees saved values itself
    (``backward()``, ``autograd.grad``: a training step); its outputs' autograd graphs
    may be spent, so they come back as plain tensors.
    """
    leaves, spec = tree_flatten(result)
    outs, leaf_kind, diff_outs = [], [], []
    needs_history = False
    for x in leaves:
        if isinstance(x, Tensor):
            diff = x._requires_grad and _state.grad_enabled
            needs_history |= diff
            leaf_kind.append(("tensor", len(outs), x._dtype, x._device, diff))
            if diff:
                diff_outs.append(x)
            outs.append(tr.read(x))
        else:
            leaf_kind.append(("static", x))
    n_user = len(outs)
    # in-place writes into tensors that existed before the call: write back
    arg_of = {id(flat[i]._data): i for i in arg_slots}
    writes, seen = [], set()
    for aid, t in tr.written.items():
        root = t._base if t._base is not None else t
        rid = id(root._data)
        if rid in seen or rid in tr.internal:
            continue
        seen.add(rid)
        if rid not in tr.env:
            continue
        v = tr.read(root)
        if rid in arg_of:
            target = ("arg", arg_of[rid])
        else:
            owner = tr.grad_owners.get(rid)
            target = ("grad", owner) if owner is not None and owner.grad is not None and \
                owner.grad._data is root._data else ("tensor", root)
        writes.append((target, len(outs), v))
        outs.append(v)
    # gradients backward() made for parameters (and any lifted leaf)
    grads = []
    # NOTE: a leaf argument's .grad is read and written through whatever tensor sits in
    # its slot at each call (_owner), not the one this capture saw
    e.arg_owner = {id(flat[i]): i for i in arg_slots if flat[i]._requires_grad and
                   flat[i]._grad_fn is None}
    candidates = {id(p): p for p in params}
    candidates.update({id(flat[i]): flat[i] for i in e.arg_owner.values()})
    candidates.update({k: t for k, t in tr.lifted.items() if t._requires_grad})
    had = {id(p) for p in tr.grad_owners.values()}
    for p in candidates.values():
        g = p.grad
        if g is None:
            if id(p) in had:          # the function set it to None (zero_grad)
                grads.append((p, None, None))
        elif id(g._data) in tr.internal and id(g._data) in tr.env:
            grads.append((p, len(outs), (g._dtype, g._device)))
            outs.append(tr.read(g))
    e.joint = None
    if needs_history and not ran_backward and not any(i is not None for _, i, _ in grads):
        # outputs need gradients later: trace their backward as a second graph
        from .joint import capture_backward
        diff_in, e.diff_inputs = [], []
        for i in arg_slots:
            if flat[i]._requires_grad:
                diff_in.append(flat[i])
                e.diff_inputs.append(("arg", i))
        for k, (_, src) in enumerate(tr.sources):
            if src.kind == "tensor" and src.obj._requires_grad:
                diff_in.append(src.obj)
                e.diff_inputs.append(("src", k))
        outs, e.joint = capture_backward(tr, outs, diff_outs, diff_in, passes)
        grads = []
    e.arg_slots = arg_slots
    e.sources = [src for _, src in tr.sources]
    e.writes = [(t, i) for t, i, _ in writes]
    e.grads = grads
    read = {id(s.obj) for s in e.sources if s.kind == "grad"}
    e.release = [p for p, i, _ in grads if i is not None and id(p) not in read]
    e.out_spec = spec
    e.out_leaves = leaf_kind
    e.out_leaves_vars = outs
    e.n_user = n_user


def _plan_kw(e: _Entry, graph) -> dict:
    """What the planner needs to know about entry ``e``'s graph beyond the graph itself:
    inputs the allocator does not count (a learning rate read from Python is not a
    tensor) and the state written back after each run (see :func:`_donations`)."""
    n = len(e.arg_slots)
    return {"uncounted": [graph.inputs[n + k].id for k, s in enumerate(e.sources)
                          if s.kind == "call"],
            "donate": _donations(e)}


def _donations(e: _Entry) -> list:
    """``(output position, input position)`` of the state ``e`` writes back into the very
    tensor it read (a gradient accumulated, a parameter or optimizer moment updated): the
    program may compute it straight into that tensor's array, as eager's in-place update
    would, instead of into a new buffer copied back. Call arguments are left out (one
    array may be passed twice)."""
    n = len(e.arg_slots)
    out = []
    for (kind, obj), i in e.writes:
        for k, s in enumerate(e.sources):
            if (kind == "grad" and s.kind == "grad" or kind == "tensor" and
                    s.kind == "tensor") and s.obj is obj:
                out.append((i, n + k))
                break
    return out


def _program(e: _Entry, graph, parallel) -> Program:
    """The forward program of entry ``e``."""
    kw = _plan_kw(e, graph)
    if e.joint is None:
        return Program(graph, parallel=parallel, **kw)
    saved = [v.id for v in graph.outputs[e.joint.n_fwd:]]
    prog = Program(graph, parallel=parallel, saved=saved, **kw)
    e.joint.hold = prog.hold_ids(saved)
    return prog


def _entry_plan(e: _Entry):
    if e.joint is None:
        return e.program.plan
    from .memory_plan import JointPlan
    return JointPlan(e.program.plan, e.joint.bwd_program.plan, e.joint.n_fwd)


def _run(e: _Entry, flat):
    # gradients the graph makes anew (zero_grad ran inside it) are released before it
    # runs, as eager's zero_grad would: the old and new ones never coexist
    ao = e.arg_owner
    for p in e.release:
        _owner(ao, p, flat).grad = None
    arrays = [flat[i]._data for i in e.arg_slots]
    arrays += [_grad_array(s, ao, flat) if ao and s.kind == "grad" else s.read()
               for s in e.sources]
    diff = None
    if e.joint is not None:
        from .joint import run_joint
        ins = [flat[i] if kind == "arg" else e.sources[i].obj for kind, i in e.diff_inputs]
        outs, diff = run_joint(e, arrays, ins)
        diff = iter(diff)
    else:
        outs = e.program.run(arrays)
    for target, i in e.writes:
        kind, obj = target
        dst = flat[obj] if kind == "arg" else (_owner(ao, obj, flat).grad if kind == "grad"
                                               else obj)
        if outs[i] is not dst._data:        # not already computed in place (_donations)
            dst._data[...] = outs[i]
        dst._storage.version += 1
    for p, i, meta in e.grads:
        p = _owner(ao, p, flat)
        if i is None:
            p.grad = None
        else:
            p.grad = _wrap(outs[i], meta[0], meta[1])
    leaves = []
    for k in e.out_leaves:
        if k[0] == "tensor":
            leaves.append(next(diff) if diff is not None and k[4] else
                          _wrap(outs[k[1]], k[2], k[3]))
        else:
            leaves.append(k[1])
    return tree_unflatten(leaves, e.out_spec)


def _owner(arg_owner: dict, p: Tensor, flat) -> Tensor:
    """``p``, or this call's tensor in the argument slot ``p`` had when it was captured."""
    i = arg_owner.get(id(p)) if arg_owner else None
    return p if i is None else flat[i]


def _grad_array(s, arg_owner: dict, flat):
    """The array a ``grad`` source reads at this call (an argument's: this call's)."""
    i = arg_owner.get(id(s.obj))
    if i is None:
        return s.read()
    g = flat[i].grad
    if g is None:
        raise GraphError(f"compiled graph reads {s.label} but it is None now")
    return g._data


# ---------------------------------------------------------------------- discovery
class _Roots:
    def __init__(self):
        self.modules, self.params, self.optimizers = [], [], []
        self.labels: dict = {}


def _discover(fn, args, kwargs) -> _Roots:
    """The modules and optimizers ``fn`` can reach: its self, closure, globals, arguments."""
    from ..nn.module import Module
    from ..optim.optimizer import Optimizer
    found = []
    f = fn
    if isinstance(fn, Module):
        found.append(("model", fn))
        f = None
    elif hasattr(fn, "__self__") and hasattr(fn, "__func__"):
        found.append(("self", fn.__self__))
        f = fn.__func__
    if f is not None and hasattr(f, "__code__"):
        code = f.__code__
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                found.append((name, cell.cell_contents))
            except ValueError:
                pass
        g = getattr(f, "__globals__", {})
        names = set(code.co_names)
        for c in code.co_consts:
            if hasattr(c, "co_names"):
                names.update(c.co_names)
        for name in sorted(names):
            if name in g:
                found.append((name, g[name]))
    for i, a in enumerate(args):
        found.append((f"arg{i}", a))
    for k, a in kwargs.items():
        found.append((k, a))
    r = _Roots()
    seen = {id(x) for x in tree_flatten((args, kwargs))[0] if isinstance(x, Tensor)}

    def visit(label, obj, depth):
        if id(obj) in seen or obj is None:
            return
        if isinstance(obj, Tensor):
            # NOTE: a leaf needing grad that fn reaches other than as an argument (a global,
            # a closure cell): backward() accumulates into its .grad as into a parameter's
            if obj._requires_grad and obj._grad_fn is None:
                seen.add(id(obj))
                r.params.append((label, obj))
                r.labels.setdefault(id(obj), label)
        elif isinstance(obj, Module):
            seen.add(id(obj))
            for name, m in obj.named_modules():
                r.modules.append((f"{label}.{name}" if name else label, m))
            for name, p in obj.named_parameters():
                r.params.append((f"{label}.{name}", p))
                r.labels.setdefault(id(p), f"{label}.{name}")
            for name, b in obj.named_buffers():
                r.labels.setdefault(id(b), f"{label}.{name}")
        elif isinstance(obj, Optimizer):
            seen.add(id(obj))
            r.optimizers.append((label, obj))
            known = {id(p) for _, p in r.params}
            for gi, g in enumerate(obj.param_groups):
                for pi, p in enumerate(g["params"]):
                    if id(p) not in known:
                        r.params.append((f"{label}.param_groups[{gi}][{pi}]", p))
                        r.labels.setdefault(id(p), f"{label}.param_groups[{gi}][{pi}]")
                    for k, v in obj.state.get(p, {}).items():
                        if isinstance(v, Tensor):
                            r.labels.setdefault(id(v), f"{label}.state[{r.labels[id(p)]}].{k}")
        elif hasattr(obj, "optimizer") and depth < 2 and not isinstance(obj, type):
            visit(label + ".optimizer", getattr(obj, "optimizer"), depth + 1)
        elif isinstance(obj, (list, tuple)) and depth < 2:
            seen.add(id(obj))
            for i, x in enumerate(obj):
                visit(f"{label}[{i}]", x, depth + 1)
        elif isinstance(obj, dict) and depth < 2 and len(obj) < 64:
            seen.add(id(obj))
            for k, x in obj.items():
                visit(f"{label}[{k!r}]", x, depth + 1)
        elif depth < 1 and hasattr(obj, "__dict__") and not isinstance(obj, type) and \
                not callable(obj) and type(obj).__module__ != "builtins":
            seen.add(id(obj))
            for k, x in list(vars(obj).items())[:64]:
                visit(f"{label}.{k}", x, depth + 1)

    for label, obj in found:
        visit(label, obj, 0)
    # de-duplicate parameters shared between modules / optimizers
    uniq, ids = [], set()
    for label, p in r.params:
        if id(p) not in ids:
            ids.add(id(p))
            uniq.append((label, p))
    r.params = uniq
    return r
