"""The memory planner: which buffer every value of a scheduled graph lives in, and the peak.

A graph's node order is its schedule. The planner walks it once and decides, per value:

* ``alias``   — a view of an input's buffer (registry ``view=True``; ``reshape`` and
  ``as_strided`` of a C-contiguous value): no bytes of its own;
* ``inplace`` — an elementwise single-ufunc node (or a :class:`~ember.graph.ir.GraphOp`
  with ``accepts_out = "inplace"``) writes into an input that dies at this node, is made by
  this graph, is C-contiguous, has the output's size and dtype, and that no view still
  reads: no new bytes. Written-back state (``donate``) may also be a graph input, and a
  multi-output GraphOp with ``accepts_outs = "inplace"`` writes each such output there;
* ``reuse``   — a node whose kernel takes ``out=`` (those ufuncs, 2-D ``matmul``, GraphOps
  with ``accepts_out``) writes into a dead buffer of the same size class (same byte
  count) instead of allocating — only when holding that buffer until then never raises
  the peak;
* ``fresh``   — everything else allocates one new buffer of the value's bytes.

A buffer (an *alias group*: the value that allocated it, its views, the values written
into it) is released after the last use of any member; graph outputs are never released.

**What the peak means.** The allocator (``ember.memory_stats()``) counts tensor storages
and, during a compiled call, every buffer the executor allocates. ``peak_bytes`` is the
highest allocator count the call reaches when the graph's inputs (parameters, optimizer
state, the batch) are the only tensors alive: input bytes + the most bytes the program
holds at once (intermediates, outputs made so far, and — in a forward/backward pair —
the activations saved for backward). With other tensors alive, the measured peak is
higher by exactly their bytes. Constants folded into the program and kernels' internal
temporaries are not tensors and are not counted (by either side).
"""
from __future__ import annotations

import numpy as np

from .ir import CONSTANT, Graph, Var

#: elementwise primitives whose kernel is one ufunc: they can write into ``out=``.
UFUNCS = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide",
          "neg": "negative", "exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh",
          "abs": "absolute", "maximum": "maximum", "minimum": "minimum", "sin": "sin",
          "cos": "cos"}

#: registry ops whose kernel may hand back an input (or a view of one) without saying so
#: (``np.einsum`` returns views for pure transpositions, basic indexing views, ...).
OPAQUE_OPS = {"index", "einsum", "flip"}

#: graph-only ops known to return new memory (GraphOps may also set ``fresh_out = True``).
FRESH_GRAPH_OPS = {"linear_act", "fused", "fused_reduce"}

FRESH, ALIAS, INPLACE, REUSE, CONST, INPUT = "fresh", "alias", "inplace", "reuse", "const", \
    "input"


def makes_fresh(op) -> bool:
    """Whether ``op``'s outputs are always new memory, never an input handed back."""
    if hasattr(op, "run"):
        return op.name in FRESH_GRAPH_OPS or bool(getattr(op, "fresh_out", False))
    return not op.view and op.name not in OPAQUE_OPS


def out_mode(node) -> str | None:
    """How ``node`` can take an output buffer: ``"inplace"`` (may be one of its inputs),
    ``"out"`` (a separate buffer), or None (its kernel allocates)."""
    op = node.op
    if len(node.outs) != 1:
        return None
    o = node.outs[0]
    if op.name in UFUNCS and not hasattr(op, "run"):
        if node.ct is not None and node.ct is not o.dtype:
            return None
        # the ufunc writes out in the compute dtype: every array input must already have it
        # (no cast of a bool into a float output), which is what writing in place needs
        if any(x.__class__ is Var and x.dtype is not o.dtype for x in node.inputs):
            return None
        return "inplace"
    if op.name == "matmul" and not hasattr(op, "run"):
        x, y = node.inputs
        if x.__class__ is Var and y.__class__ is Var and x.ndim == 2 and y.ndim == 2 and \
                x.dtype is o.dtype and y.dtype is o.dtype and node.ct in (None, o.dtype):
            return "out"
        return None
    mode = getattr(op, "accepts_out", None)
    return mode if mode in ("inplace", "out") else None


class Buffer:
    """One planned allocation: ``nbytes``, who made it, where, and when it dies."""

    __slots__ = ("root", "nbytes", "born", "dies", "members", "var", "op", "loc", "unsafe")

    def __init__(self, root, nbytes, born, var, op, loc):
        self.root, self.nbytes, self.born, self.dies = root, nbytes, born, born
        self.members = [root]
        self.var, self.op, self.loc = var, op, loc
        self.unsafe = False

    def __repr__(self):
        return f"<Buffer %{self.root} {self.nbytes} B [{self.born}, {self.dies}]>"


class MemoryPlan:
    """The plan of one graph (see the module docstring).

    ``kind[vid]``, ``group[vid]`` (the buffer a value lives in, by root var id),
    ``buffers`` ({root: :class:`Buffer`}), ``timeline`` (bytes the program holds right
    after each node's outputs exist), ``peak_bytes``, ``input_bytes``, ``peak_step``, and
    ``breakdown`` (what is alive at the peak: inputs, outputs, intermediates, saved).
    """

    def __init__(self, graph: Graph, kind, group, src, buffers, timeline, input_bytes,
                 outputs, saved):
        self.graph = graph
        self.kind, self.group, self.src = kind, group, src
        self.buffers = buffers
        self.timeline = timeline
        self.input_bytes = input_bytes
        self.outputs = outputs
        self.saved = saved
        held = max(timeline) if timeline else 0
        self.peak_step = timeline.index(held) if timeline else -1
        self.program_peak_bytes = held
        self.peak_bytes = input_bytes + held
        self.breakdown = self._breakdown()

    def live_at(self, step: int) -> list:
        """The buffers alive right after node ``step`` made its outputs."""
        return [b for b in self.buffers.values() if b.born <= step <= b.dies]

    def _breakdown(self) -> dict:
        out = {"inputs": self.input_bytes, "outputs": 0, "saved": 0, "intermediates": 0}
        if self.peak_step < 0:
            return out
        for b in self.live_at(self.peak_step):
            if any(m in self.outputs for m in b.members):
                key = "saved" if all(m in self.saved for m in b.members
                                     if m in self.outputs) else "outputs"
            else:
                key = "intermediates"
            out[key] += b.nbytes
        return out

    @property
    def activation_peak_bytes(self) -> int:
        """The most bytes of intermediate values (neither inputs nor outputs) alive at once."""
        best = 0
        cur = [0] * (len(self.timeline) + 1)
        for b in self.buffers.values():
            if b.dies >= len(self.timeline) or any(m in self.outputs for m in b.members):
                continue
            for t in range(b.born, b.dies + 1):
                cur[t] += b.nbytes
        best = max(cur) if cur else 0
        return best

    @property
    def donated(self) -> set:
        """Output var ids computed straight into a graph input's array (written-back
        state: no new buffer, no copy back)."""
        ins = {v.id for v in self.graph.inputs}
        return {v.id for v in self.graph.outputs if self.kind.get(v.id) == INPLACE and
                self.src.get(v.id) in ins}

    @property
    def reused(self) -> int:
        return sum(1 for k in self.kind.values() if k in (INPLACE, REUSE))

    def largest(self, n: int = 10) -> list:
        return sorted(self.buffers.values(), key=lambda b: -b.nbytes)[:n]

    def table(self, n: int = 10) -> str:
        """The ``n`` largest buffers: bytes, type, creating op, live range, source line."""
        rows = [f"{'bytes':>12}  {'value':<24} {'op':<16} {'live':<12} source"]
        for b in self.largest(n):
            rows.append(f"{b.nbytes:>12,}  {'%' + str(b.root) + ': ' + b.var.type_str():<24} "
                        f"{b.op:<16} {f'[{b.born}, {b.dies}]':<12} {b.loc or '-'}")
        return "\n".join(rows)

    def __str__(self) -> str:
        bd = ", ".join(f"{k} {v:,}" for k, v in self.breakdown.items())
        return (f"memory plan of {self.graph.name}: peak {self.peak_bytes:,} bytes at node "
                f"{self.peak_step} ({bd}); {len(self.buffers)} buffers, {self.reused} values "
                f"written into a dead buffer\n" + self.table())

    __repr__ = __str__


def _nbytes(v) -> int:
    return v.numel() * v.dtype.itemsize


def plan(graph: Graph, *, reuse: bool = True, uncounted=(), saved=(), pinned=(),
         donate=()) -> MemoryPlan:
    """Plan ``graph``'s buffers over its node order (see the module docstring).

    ``uncounted``: input var ids the allocator does not count (a learning rate read from
    Python). ``saved``: output var ids that are activations saved for backward (reported
    separately). ``pinned``: var ids whose buffers must outlive the graph like outputs.
    ``donate``: ``(output position, input position)`` pairs — the caller writes that
    output back into that input's tensor after the run (an in-place update of state: a
    gradient accumulated, a parameter or optimizer moment updated), so the output may be
    computed straight into the input's buffer (kind ``inplace``, no new bytes) when its
    node can write in place and nothing reads the input (or a view of it) afterwards.
    """
    nodes = graph.nodes
    outputs = {v.id for v in graph.outputs} | set(pinned)
    last: dict = {}
    for i, n in enumerate(nodes):
        for x in n.inputs:
            if x.__class__ is Var:
                last[x.id] = i
    donors: dict = {}           # output var id -> the input var id it may be written into
    for oi, ii in donate:
        o, x = graph.outputs[oi], graph.inputs[ii]
        if o.shape == x.shape and o.dtype is x.dtype and o.id not in donors and \
                x.id not in donors.values() and x.id not in outputs and \
                sum(1 for v in graph.outputs if v.id == o.id) == 1:
            donors[o.id] = x.id
    in_root: dict = {}          # view of a graph input -> that input
    kind, group, src, strides = {}, {}, {}, {}
    contig = _Contig(strides)
    buffers: dict = {}
    inputs = set()
    ucount = set(uncounted)
    input_bytes = 0
    for v in graph.inputs:
        kind[v.id], group[v.id], strides[v.id] = INPUT, None, _c_strides(v)
        inputs.add(v.id)
        if v.id not in ucount:
            input_bytes += _nbytes(v)
    end = len(nodes)
    # values an op with unknown aliasing reads or makes: never written into (one of them
    # may be the very array another value holds)
    unsafe = set()
    for n in nodes:
        if n.op is not CONSTANT and (not makes_fresh(n.op) and n.op.view is not True):
            unsafe.update(x.id for x in n.inputs if x.__class__ is Var)
            unsafe.update(o.id for o in n.outs)

    def dies(b):
        return end if any(m in outputs for m in b.members) else b.dies

    for i, n in enumerate(nodes):
        op = n.op
        if op is CONSTANT:
            for o in n.outs:
                kind[o.id], group[o.id], strides[o.id] = CONST, None, _c_strides(o)
            continue
        view = getattr(op, "view", False)
        x0 = n.inputs[0] if n.inputs and n.inputs[0].__class__ is Var else None
        vs = _view_strides(n, x0, strides) if x0 is not None and view else None
        if vs is not None:
            o = n.outs[0]
            kind[o.id], group[o.id], strides[o.id] = ALIAS, group.get(x0.id), vs
            if x0.id in inputs or x0.id in in_root:
                in_root[o.id] = in_root.get(x0.id, x0.id)
            if group[o.id] is not None:
                buffers[group[o.id]].members.append(o.id)
                if o.id in unsafe:
                    buffers[group[o.id]].unsafe = True
            continue
        mode = out_mode(n) if reuse else None
        if mode == "inplace" and n.outs[0].id in donors and \
                _donatable(n, i, donors[n.outs[0].id], last, in_root, unsafe, strides):
            o, x = n.outs[0], donors[n.outs[0].id]
            kind[o.id], group[o.id], src[o.id], strides[o.id] = INPLACE, None, x, strides[x]
            continue
        if reuse and len(n.outs) > 1 and getattr(op, "accepts_outs", None) == "inplace":
            # a multi-output kernel (Adam's fused update) writes each written-back output
            # into its state's array, under the single-output rule (``_donatable``)
            for o in n.outs:
                x = donors.get(o.id)
                if x is not None and _donatable(n, i, x, last, in_root, unsafe, strides):
                    kind[o.id], group[o.id], src[o.id] = INPLACE, None, x
                    strides[o.id] = strides[x]
        if mode == "inplace":
            o = n.outs[0]
            for x in n.inputs:
                if x.__class__ is not Var or kind.get(x.id) not in (FRESH, INPLACE, REUSE) or \
                        group.get(x.id) is None or not contig.get(x.id) or x.shape != o.shape or x.dtype is not o.dtype \
                        or sum(1 for y in n.inputs if y.__class__ is Var and y.id == x.id) != 1:
                    continue
                b = buffers[group[x.id]]
                if b.unsafe:
                    continue
                # every member of x's buffer must be dead after this node (nobody views it)
                if any(m in outputs or last.get(m, -1) > i or (last.get(m, -1) == i and
                       m != x.id) for m in b.members):
                    continue
                kind[o.id], group[o.id], src[o.id] = INPLACE, b.root, x.id
                strides[o.id] = strides[x.id]
                b.members.append(o.id)
                break
            if o.id in kind:
                continue
        for o in n.outs:
            if o.id in kind:
                continue            # written into a donated input above
            kind[o.id], group[o.id] = FRESH, o.id
            strides[o.id] = _fresh_strides(n, o, strides)
            buffers[o.id] = Buffer(o.id, _nbytes(o), i, o, op.name, n.loc)
            buffers[o.id].unsafe = o.id in unsafe
    for b in buffers.values():
        b.dies = max([b.born] + [last.get(m, -1) for m in b.members])
        b.dies = dies(b)
    timeline = _timeline(buffers, end)
    if reuse:
        _assign_reuse(nodes, kind, group, src, contig, buffers, timeline, outputs, end)
        timeline = _timeline(buffers, end)
    return MemoryPlan(graph, kind, group, src, buffers, timeline, input_bytes, outputs,
                      set(saved))


def _donatable(n, i, x, last, in_root, unsafe, strides) -> bool:
    """Whether node ``n`` (at ``i``) may write its output into graph input ``x``: ``x`` is
    one of its inputs (exactly once), C-contiguous, and neither ``x`` nor any view of it
    is read after this node (nor by this node through a view)."""
    if x in unsafe or not strides[x][1] or last.get(x, -1) != i or \
            sum(1 for y in n.inputs if y.__class__ is Var and y.id == x) != 1:
        return False
    return not any(r == x and (last.get(v, -1) >= i or v in unsafe)
                   for v, r in in_root.items())


class _Contig:
    """``contig.get(vid)``: whether the planned layout of a value is C-contiguous."""

    def __init__(self, strides):
        self.strides = strides
        self.shapes: dict = {}

    def get(self, vid, default=False):
        st = self.strides.get(vid)
        return default if st is None else st[1]


def _c_strides(v):
    """``(strides, is C-contiguous)`` of a new C-ordered array of ``v``'s type."""
    st, acc = [], v.dtype.itemsize
    for d in reversed(v.shape):
        st.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(st)), True


def _fake(x, strides):
    """A zero-memory array with ``x``'s shape and planned strides (never read)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, x.dtype.np), x.shape, strides[x.id][0])


def _is_c(a) -> bool:
    return a.flags.c_contiguous


def _view_strides(n, x, strides):
    """Planned ``(strides, contiguous)`` when view op ``n`` returns a view of ``x``, else None."""
    if strides.get(x.id) is None or len(n.outs) != 1:
        return None
    name = n.op.name
    o = n.outs[0]
    try:
        f = _fake(x, strides)
        if name == "reshape":
            r = f.reshape(o.shape, copy=False)
        elif name == "as_strided":
            if not strides[x.id][1]:
                return None          # its kernel makes a compact copy first
            return _c_strides(o)[0], False
        elif n.op.view is True:
            r = n.op.kernel_for("cpu")(np, f, **n.params)
        else:
            return None
    except (ValueError, TypeError, AttributeError):
        return None
    if r.shape != o.shape:
        return None
    return tuple(r.strides), _is_c(r)


def _fresh_strides(n, o, strides):
    """Layout of a new array: NumPy ufuncs (and ``clone``) follow their input's axis order."""
    name = n.op.name
    if (n.op.elementwise and name != "contiguous" and not hasattr(n.op, "run")):
        for x in n.inputs:
            if x.__class__ is Var and x.shape == o.shape and strides.get(x.id) is not None \
                    and not strides[x.id][1]:
                order = sorted(range(len(o.shape)), key=lambda a: -abs(strides[x.id][0][a]))
                st, acc = [0] * len(o.shape), o.dtype.itemsize
                for a in reversed(order):
                    st[a] = acc
                    acc *= max(o.shape[a], 1)
                return tuple(st), tuple(st) == _c_strides(o)[0]
    return _c_strides(o)


def _timeline(buffers, end) -> list:
    """Bytes held right after each node made its outputs (before it frees dead inputs)."""
    delta = [0] * (end + 2)
    for b in buffers.values():
        delta[b.born] += b.nbytes
        if b.dies < end:
            delta[b.dies + 1] -= b.nbytes
    out, cur = [], 0
    for t in range(end):
        cur += delta[t]
        out.append(cur)
    return out


def _assign_reuse(nodes, kind, group, src, contig, buffers, timeline, outputs, end) -> None:
    """Let ``out=``-capable fresh nodes write into a dead buffer of the same byte count.

    Greedy in schedule order; a dead buffer is held from its death to the reuse only when
    that never lifts the timeline above its peak (so reuse saves allocations, never memory
    headroom).
    """
    if not timeline:
        return
    peak = max(timeline)
    held = list(timeline)
    dead: dict = {}             # nbytes -> [buffers dead by now, not yet reused]
    by_death: dict = {}
    for b in buffers.values():
        if b.dies < end and b.var.device.type == "cpu":
            by_death.setdefault(b.dies, []).append(b)
    for i, n in enumerate(nodes):
        for b in by_death.get(i - 1, ()):
            if buffers.get(b.root) is b and b.dies == i - 1:   # not merged into another
                dead.setdefault(b.nbytes, []).append(b)
        if len(n.outs) != 1 or out_mode(n) is None:
            continue
        o = n.outs[0]
        if kind.get(o.id) != FRESH or o.id in outputs:
            continue
        cands = dead.get(buffers[o.id].nbytes)
        if not cands:
            continue
        b = cands[-1]
        if b.unsafe or buffers[o.id].unsafe:
            continue
        if b.dies + 1 <= i - 1 and max(held[b.dies + 1:i]) + b.nbytes > peak:
            continue
        cands.pop()
        for t in range(b.dies + 1, i):
            held[t] += b.nbytes
        nb = buffers.pop(o.id)
        kind[o.id], group[o.id], src[o.id] = REUSE, b.root, b.root
        contig.strides[o.id] = _c_strides(o)
        b.members.extend(m for m in nb.members)
        for m in nb.members:
            group[m] = b.root
        b.dies = nb.dies
        if b.dies < end:
            by_death.setdefault(b.dies, []).append(b)


class JointPlan:
    """The plan of a compiled forward whose backward is a second program.

    The forward's outputs (the user's results and the activations saved for backward)
    stay alive into the backward, whose own inputs (the cotangents) and buffers come on top:
    ``peak_bytes = max(forward peak, forward inputs + forward outputs + cotangents +
    backward program peak)``.
    """

    def __init__(self, fwd: MemoryPlan, bwd: MemoryPlan, n_fwd: int):
        self.forward, self.backward = fwd, bwd
        saved_vars = fwd.graph.outputs[n_fwd:]
        n_saved = len(saved_vars)
        fwd_out = fwd.timeline[-1] if fwd.timeline else 0
        cots = sum(_nbytes(v) for v in bwd.graph.inputs[n_saved:])
        self.between_bytes = fwd.input_bytes + fwd_out
        bwd_peak = self.between_bytes + cots + bwd.program_peak_bytes
        self.peak_bytes = max(fwd.peak_bytes, bwd_peak)
        self.peak_in = "forward" if fwd.peak_bytes >= bwd_peak else "backward"
        saved_ids = {v.id for v in saved_vars}
        saved_bytes = sum(b.nbytes for b in fwd.buffers.values()
                          if b.dies >= len(fwd.timeline) and
                          all(m in saved_ids for m in b.members if m in fwd.outputs))
        self.saved_bytes = saved_bytes
        self.breakdown = {"inputs": fwd.input_bytes, "outputs": fwd_out - saved_bytes,
                          "saved": saved_bytes,
                          "intermediates": (fwd.breakdown["intermediates"]
                                            if self.peak_in == "forward" else
                                            bwd.program_peak_bytes + cots)}
        self.input_bytes = fwd.input_bytes

    @property
    def activation_peak_bytes(self) -> int:
        return max(self.forward.activation_peak_bytes + self.saved_bytes,
                   self.saved_bytes + self.backward.activation_peak_bytes)

    def table(self, n: int = 10) -> str:
        return "forward:\n" + self.forward.table(n) + "\nbackward:\n" + self.backward.table(n)

    def __str__(self) -> str:
        bd = ", ".join(f"{k} {v:,}" for k, v in self.breakdown.items())
        return (f"memory plan (forward + backward): peak {self.peak_bytes:,} bytes in the "
                f"{self.peak_in} ({bd})\n" + self.table())

    __repr__ = __str__
