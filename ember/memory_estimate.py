"""``ember.estimate_memory``: predict the peak memory of a step before running it.

The function runs under an *abstract* dispatch mode (:class:`_AbstractMode`): every op
output is a zero-filled array of the right shape, dtype and strides backed by an
anonymous memory mapping that is never written, so the operating system never commits
its pages — no tensor data is allocated, yet Python code that inspects shapes, strides
or contiguity (``view``, ``contiguous``) behaves as it does eagerly. Each output's
*storage* is counted by a simulated allocator, exactly as the real one counts eager
storages, and it dies when its last reference does. The real autograd engine records and
runs backward on these tensors (saved values keep them alive, gradients accumulate), and
optimizers create their state lazily on them, so eager lifetimes are modelled as they
are, not guessed. In-place ops record their effect but write nothing (``inplace.py``
checks the mode's ``abstract`` flag), so parameters, running statistics and optimizer
state are untouched; ``.grad`` fields and the state of the optimizers the function
refers to are put back afterwards.

The peak is the highest value of (real live bytes + simulated live bytes) at any
allocation, broken down into parameters, gradients, optimizer state, activations
(values made while recording a graph), temporaries (made during backward and the
optimizer step) and other tensors (inputs, anything else alive). A value counts as what
it is once the function returns: backward's copy of a gradient into ``p.grad`` (often
the peak's last allocation) is a gradient, a moment being created is optimizer state.

For a function made by ``ember.compile`` that can report its memory plan
(``compiled.memory_plan(*inputs)``), the plan's peak is used instead.

Example:
    >>> est = ember.estimate_memory(step, x, y)
    >>> est.peak_bytes, est.activations
"""
from __future__ import annotations

import mmap
import sys
import weakref

import numpy as np

from .ops import dispatch as _dispatch
from .autograd.grad_mode import state
from .device import get_backend
from .device.cpu import CountingAllocator
from .storage import Storage
from .tensor import Tensor, _wrap

__all__ = ["estimate_memory", "MemoryEstimate"]

_FIELDS = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "other")


class MemoryEstimate:
    """The predicted peak (``peak_bytes``) and what is alive at that moment.

    Attributes: ``peak_bytes``, ``parameters``, ``gradients``, ``optimizer_state``,
    ``activations``, ``temporaries``, ``other`` (bytes; they sum to ``peak_bytes``),
    ``source`` ("eager trace" or "compiled plan").
    """

    def __init__(self, peak_bytes: int, source: str, **parts):
        self.peak_bytes = int(peak_bytes)
        self.source = source
        for f in _FIELDS:
            setattr(self, f, int(parts.get(f, 0)))

    def as_dict(self) -> dict:
        return {"peak_bytes": self.peak_bytes, **{f: getattr(self, f) for f in _FIELDS}}

    def __repr__(self) -> str:
        rows = [f"MemoryEstimate ({self.source}): peak {self.peak_bytes:,} bytes "
                f"({self.peak_bytes / 2**20:.1f} MiB)"]
        for f in _FIELDS:
            v = getattr(self, f)
            share = 100.0 * v / self.peak_bytes if self.peak_bytes else 0.0
            rows.append(f"  {f.replace('_', ' '):<16} {v:>14,} bytes  {share:5.1f}%")
        return "\n".join(rows)


def _zeros(shape, dtype) -> np.ndarray:
    """A C-contiguous zero array whose pages are mapped but never committed."""
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    buf = mmap.mmap(-1, max(n * dtype.np.itemsize, 1))
    return np.frombuffer(buf, dtype=dtype.np, count=n).reshape(shape)


class _AbstractMode:
    """The dispatch mode of :func:`estimate_memory` (see the module docstring)."""

    abstract = True      # read by in-place ops: record, never write
    #: VJPs that take an eager-only one-dispatch form (``log_softmax``'s) take it here too:
    #: the estimate follows eager's tensors
    eager_vjps = True

    def __init__(self, optimizers):
        self.sim = CountingAllocator()
        self.scratch = CountingAllocator()   # temporaries eager makes as raw arrays
        self.live = weakref.WeakKeyDictionary()   # virtual storage -> "activation" | "temp"
        self.leaves: dict = {}     # id -> (leaf tensor requiring grad, its .grad before)
        self.versions: dict = {}   # id(storage) -> (storage, version before)
        self.optimizers = optimizers
        self.best = -1
        self.at_peak: dict = {}
        self.peak_values: list = []   # (weakref to storage, bytes, field) counted by phase

    # ------------------------------------------------------------ values
    def _new(self, shape, dtype, device) -> Tensor:
        arr = _zeros(tuple(shape), dtype)
        if not state.grad_enabled and _in_raw_update():
            return _wrap(arr, dtype, device, Storage(arr, device, self.scratch))
        st = Storage(arr, device, self.sim)
        self.live[st] = "activation" if state.grad_enabled else "temp"
        return _wrap(arr, dtype, device, st)

    def _virtualize(self, t: Tensor) -> None:
        """A factory made ``t`` for real: move it onto an uncommitted mapping."""
        if t._storage._alloc is self.sim:
            return
        arr = _zeros(t._data.shape, t._dtype)
        st = Storage(arr, t._device, self.sim)
        self.live[st] = "activation" if state.grad_enabled else "temp"
        t._data, t._storage, t._base = arr, st, None
        self._check_peak()

    def _touch(self, x: Tensor) -> None:
        st = x._storage
        if st._alloc is self.sim:
            return
        if id(st) not in self.versions:
            self.versions[id(st)] = (st, st.version)
        if x._requires_grad and x._grad_fn is None and id(x) not in self.leaves:
            self.leaves[id(x)] = (x, x._grad)

    # ------------------------------------------------------------ the dispatch mode
    def process(self, op, inputs, params):
        from .graph.meta import infer
        x0 = None
        for x in inputs:
            if isinstance(x, Tensor):
                self._touch(x)
                if x0 is None:
                    x0 = x
        shape, dtype, _ = infer(op, inputs, params)
        dev = x0._device
        out = None
        if op.view:
            out = self._view(op, inputs, params, x0, dtype)
        if out is None:
            out = self._new(shape, dtype, dev)
        req = any(isinstance(x, Tensor) and x._requires_grad for x in inputs)
        if req and state.grad_enabled and op.differentiable and dtype.is_floating_point:
            _dispatch.record(op, params, inputs, out)
        self._check_peak()
        return out

    def _view(self, op, inputs, params, x0, dtype):
        """The eager view (same storage, real strides), or None when eager would copy."""
        if op.view is not True:     # reshape/as_strided: a view only when strides allow it
            if op.name == "reshape":
                v = x0._data.view()
                try:
                    v.shape = tuple(params["shape"])
                except AttributeError:
                    return None
        arrays = [x._data if isinstance(x, Tensor) else x for x in inputs]
        res = op.kernel_for(x0._device.type)(np, *arrays, **params)
        if not np.shares_memory(res, x0._data) and res.size:
            return None
        base = x0._base if x0._base is not None else x0
        return _wrap(res, dtype, x0._device, x0._storage, base)

    def _check_peak(self) -> None:
        cur = _REAL.current + self.sim.current - self._kept_for_restore()
        if cur > self.best:
            self.best = cur
            self.at_peak = self._parts(cur)

    def _kept_for_restore(self) -> int:
        """Bytes of old ``.grad`` tensors that only the restore list keeps alive now (eager
        frees them when ``zero_grad()`` drops them)."""
        n, seen = 0, set()
        for x, g in self.leaves.values():
            if g is not None and x._grad is not g and id(g._storage) not in seen:
                seen.add(id(g._storage))
                n += g._storage._nbytes
        return n

    def _parts(self, total) -> dict:
        seen: set = set()
        parts = dict.fromkeys(_FIELDS, 0)

        def add(field, t):
            st = t._storage
            if id(st) not in seen:
                seen.add(id(st))
                parts[field] += st._nbytes

        for x, _ in self.leaves.values():
            add("parameters", x)
        for x, _ in self.leaves.values():
            if x._grad is not None:
                add("gradients", x._grad)
        for opt in self.optimizers:
            for s in opt.state.values():
                for v in s.values():
                    if isinstance(v, Tensor):
                        add("optimizer_state", v)
        self.peak_values = []
        for st, phase in list(self.live.items()):
            if id(st) not in seen:
                seen.add(id(st))
                field = "activations" if phase == "activation" else "temporaries"
                parts[field] += st._nbytes
                self.peak_values.append((weakref.ref(st), st._nbytes, field))
        parts["other"] = max(0, total - sum(parts.values()))
        return parts

    def final_parts(self) -> dict:
        """The breakdown at the peak, by what each value *is* once ``fn`` returns: a value
        being made into a gradient (backward's copy for ``p.grad``, an accumulation) or
        into optimizer state at the peak counts as that, not as a temporary."""
        grads = {id(x._grad._storage) for x, _ in self.leaves.values() if x._grad is not None}
        moments = {id(v._storage) for opt in self.optimizers for s in opt.state.values()
                   for v in s.values() if isinstance(v, Tensor)}
        parts = dict(self.at_peak)
        for ref, nbytes, field in self.peak_values:
            st = ref()
            to = None if st is None else "gradients" if id(st) in grads else \
                "optimizer_state" if id(st) in moments else None
            if to is not None:
                parts[field] -= nbytes
                parts[to] += nbytes
        return parts

    # ------------------------------------------------------------ hooks of factories
    def constant(self, t):
        self._virtualize(t)

    def random(self, t, draw, inputs, what):
        self._virtualize(t)

    def on_write(self, x, r):
        pass

    def on_fill(self, x, value):
        pass

    # ------------------------------------------------------------ undo
    def restore(self) -> None:
        for x, g in self.leaves.values():
            x._grad = g
        for st, v in self.versions.values():
            st.version = v


_REAL = get_backend("cpu").allocator
_RAW_CODES: set = set()


def _in_raw_update() -> bool:
    """Whether an in-place update with an eager fast path is running (``Tensor.add_`` and
    the other ufunc in-place methods, the optimizers' ``addcmul_``...). Eagerly, under
    ``no_grad``, those write with ``out=`` and their temporaries are raw arrays that the
    allocator does not count; under this mode they run as Ember ops, whose outputs must
    not be counted either."""
    if not _RAW_CODES:
        from .optim import _ops
        _RAW_CODES.add(Tensor.add_.__code__)
        _RAW_CODES.update(f.__code__ for n, f in vars(_ops).items()
                          if n.endswith("_") and not n.startswith("_") and callable(f))
    f = sys._getframe(3)
    for _ in range(8):
        if f is None:
            return False
        if f.f_code in _RAW_CODES:
            return True
        f = f.f_back
    return False


def _reachable(fn, inputs):
    """``(optimizers, parameters)`` that ``fn`` can reach: itself, its closure, the globals
    it names, the inputs, and their attributes one level down (``self.opt``)."""
    from .nn.module import Module
    from .optim.optimizer import Optimizer
    roots = [fn, getattr(fn, "__self__", None), *inputs]
    code = getattr(fn, "__code__", None)
    if code is not None:
        roots += [c.cell_contents for c in (fn.__closure__ or ()) if _has_contents(c)]
        g = getattr(fn, "__globals__", {})
        roots += [g[n] for n in code.co_names if n in g]
    opts, params, seen = [], {}, set()
    for r in roots:
        objs = [r]
        if hasattr(r, "__dict__") and not isinstance(r, (type, Module)) and not callable(r):
            objs += list(vars(r).values())
        for obj in objs:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, Optimizer):
                opts.append(obj)
                for group in obj.param_groups:
                    for p in group["params"]:
                        params[id(p)] = p
            elif isinstance(obj, Module):
                for p in obj.parameters():
                    params[id(p)] = p
    return opts, list(params.values())


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def estimate_memory(fn, *example_inputs, **kwargs) -> MemoryEstimate:
    """Predict the peak bytes of ``fn(*example_inputs, **kwargs)`` without computing it.

    ``fn`` may contain ``loss.backward()`` and ``optimizer.step()``; their memory
    (gradients, lazily created optimizer state) is part of the estimate, and nothing is
    changed: parameters, ``.grad`` fields and optimizer state are as before the call.
    The estimate counts what ``ember.memory_stats()`` counts (tensor storages, including
    tensors alive before the call), so it compares with the measured ``peak_bytes``.

    Args:
        fn: a function, a Module, or an ``ember.compile`` result.
        \\*example_inputs, \\**kwargs: its arguments (real tensors of the real shapes).

    Returns:
        :class:`MemoryEstimate` with ``peak_bytes`` and its breakdown.

    Example:
        >>> def step(x, y):
        ...     loss = F.cross_entropy(model(x), y); loss.backward(); opt.step()
        ...     opt.zero_grad()
        >>> print(ember.estimate_memory(step, x, y))
    """
    if not callable(fn):
        raise TypeError(f"estimate_memory: expected a callable, got {type(fn).__name__}")
    if getattr(fn, "memory_plan", None) is not None:
        est = _from_plan(fn, example_inputs, kwargs)
        if est is not None:
            return est
        fn = getattr(fn, "fn", fn)   # no plan for these inputs: estimate the eager function
    opts, params = _reachable(fn, example_inputs)
    saved_state = [(o, {p: dict(s) for p, s in o.state.items()}) for o in opts]
    mode = _AbstractMode(opts)
    for p in params:     # NOTE: before fn runs: its zero_grad() may drop them first
        mode.leaves.setdefault(id(p), (p, p._grad))
    state.modes.append(mode)
    try:
        mode._check_peak()
        fn(*example_inputs, **kwargs)
        parts = mode.final_parts()
        peak = mode.best
    finally:
        state.modes.remove(mode)
        mode.restore()
        for o, st in saved_state:
            o.state.clear()
            o.state.update(st)
    return MemoryEstimate(peak, "eager trace", **parts)


def _from_plan(compiled, inputs, kwargs):
    """An estimate from a compiled function's memory plan, or None if it has none.

    The plan's peak assumes its graph inputs are the only live tensors; everything else
    alive now adds to it, except the gradients the compiled step releases before it runs
    (``zero_grad()`` inside the graph). What is alive now splits into parameters,
    gradients and optimizer state (of the modules and optimizers the function reaches)
    and other tensors; what the program holds at its peak into the gradients it makes,
    the activations saved for a compiled backward, and temporaries.
    """
    try:
        entry = compiled._plan_entry(inputs, kwargs)
        plan = compiled.memory_plan(*inputs, **kwargs) if entry.joint else entry.program.plan
    except Exception:  # noqa: BLE001 - no plan (runs eagerly, graph break...): eager trace
        return None
    released = {id(p.grad._storage): p.grad._storage._nbytes
                for p in getattr(entry, "release", ()) if p.grad is not None}
    opts, params = _reachable(getattr(compiled, "fn", compiled), inputs)
    parts = _resident(opts, params, released)
    base = _REAL.current - sum(released.values())
    parts["other"] = base - sum(parts.values())
    held = plan.peak_bytes - plan.input_bytes
    saved = (getattr(plan, "breakdown", {}) or {}).get("saved", 0)
    new_grads = 0 if entry.joint else _grads_at_peak(plan, entry)
    acts = saved if entry.joint or not new_grads else _forward_values_at_peak(plan, entry)
    parts["gradients"] += new_grads
    parts["activations"] = acts
    parts["temporaries"] = held - acts - new_grads
    return MemoryEstimate(base + held, "compiled plan", **parts)


def _resident(opts, params, skip) -> dict:
    """Bytes of the parameters, their gradients and the optimizer state alive now."""
    parts = dict.fromkeys(_FIELDS, 0)
    seen = set(skip)

    def add(field, t):
        if isinstance(t, Tensor) and id(t._storage) not in seen:
            seen.add(id(t._storage))
            parts[field] += t._storage._nbytes

    for p in params:
        add("parameters", p)
    for p in params:
        add("gradients", p.grad)
    for opt in opts:
        for s in opt.state.values():
            for v in s.values():
                add("optimizer_state", v)
    return parts


def _forward_values_at_peak(plan, entry) -> int:
    """Bytes of a training step's activations alive at its peak: the buffers made up to
    the returned loss (a step's graph runs forward, backward, update in that order) that
    are not outputs. Without a returned tensor there is no boundary: 0."""
    graph = plan.graph
    user = {graph.outputs[k[1]].id for k in entry.out_leaves if k[0] == "tensor"}
    made = [i for i, n in enumerate(graph.nodes) for o in n.outs if o.id in user]
    if not made:
        return 0
    return sum(b.nbytes for b in plan.live_at(plan.peak_step) if b.born <= max(made)
               and not any(m in plan.outputs for m in b.members))


def _grads_at_peak(plan, entry) -> int:
    """Bytes of the program's buffers alive at its peak that hold a new ``p.grad``."""
    ids = {plan.graph.outputs[i].id for _, i, _ in entry.grads if i is not None}
    return sum(b.nbytes for b in plan.live_at(plan.peak_step)
               if any(m in ids for m in b.members))
