"""Recomputation under a memory budget (``ember.compile(step, memory_budget=...)``).

A value computed early and read again much later (an activation the backward reads) holds
its buffer across the gap. Dropping it after its early reads and computing it again just
before its late reads frees that memory for the gap, at the price of running its
producer twice. :func:`fit_budget` chooses what to drop so the planned *activation peak*
(bytes of values that are neither graph inputs nor outputs, alive at once; see
:class:`~ember.graph.memory_plan.MemoryPlan`) fits the budget with little extra compute:

How a dropped value comes back: the first late read recomputes it (and, recursively, the
dropped or dead values it needs) right there, and the copy dies after its last late read.
For a chain of layers whose backward runs in reverse, a *segment* of dropped activations
between two kept *boundaries* is thus recomputed in one piece just before that segment's
backward nodes, lives while they run, and is freed: only the kept boundaries and one
segment are alive at a time.

The candidate drop sets do not depend on the budget (:func:`choices`): the largest cheap
values (elementwise results whose inputs are alive anyway); segmentations whose segments
hold up to ``m`` bytes minus the boundaries kept before them, for ``m`` over a geometric
sweep (segments shrink along the forward, so every segment's recomputation peaks at about
``m``: the √(2N) schedule, ~2√N layers' worth for N layers, one extra forward of compute);
and every-k-th checkpoints. Each is rematerialised and planned by the planner itself;
:func:`_chain` orders them so that a looser budget never takes a choice with a lower total
peak than a tighter one (the measured peak is monotone in the budget), and the budget
takes the cheapest (fewest extra FLOPs) member that fits, or :func:`fit_budget` raises
``MemoryError`` naming the smallest activation peak any choice reaches — the minimum
feasible budget. Random draws, impure ops and graph outputs are never recomputed, so
results are bitwise equal to the unbudgeted graph's.
"""
from __future__ import annotations

import math

from .ir import CONSTANT, Graph, GraphBuilder, Var
from .memory_plan import plan as _plan


def _flops(n) -> float:
    o = n.outs[0] if n.outs else None
    if o is None:
        return 0.0
    if n.op.name in ("matmul", "matmul_t"):
        x = n.inputs[0]
        k = (x.shape[0] if n.params.get("ta") else x.shape[-1]) \
            if x.__class__ is Var and x.ndim else 1
        return 2.0 * o.numel() * k
    if n.op.name in ("linear_act",):
        return 2.0 * o.numel() * n.inputs[0].shape[-1]
    ops = n.params.get("ops") if isinstance(n.params.get("ops"), str) else None
    return float(sum(v.numel() for v in n.outs)) * (ops.count(",") + 1 if ops else 1)


class Candidate:
    __slots__ = ("var", "node", "split", "early_last", "nbytes", "cost", "cheap")


def candidates(graph: Graph) -> list:
    """Values worth dropping: produced by a pure node, read again after a gap."""
    outputs = {v.id for v in graph.outputs}
    uses: dict = {}
    prod: dict = {}
    for i, n in enumerate(graph.nodes):
        for x in n.inputs:
            if x.__class__ is Var:
                uses.setdefault(x.id, []).append(i)
        for o in n.outs:
            prod[o.id] = (i, n)
    out = []
    for vid, (i, n) in prod.items():
        if vid in outputs or n.op is CONSTANT or n.is_random() or \
                not getattr(n.op, "pure", True) or len(n.outs) != 1 or vid not in uses:
            continue
        if any(isinstance(v, Graph) for v in n.params.values()):
            continue                      # control flow: not duplicated
        seq = [i] + sorted(set(uses[vid]))
        gap, at = max((b - a, k) for k, (a, b) in enumerate(zip(seq, seq[1:])))
        if gap < 3 or at == 0:
            # at == 0: nothing reads it before the gap, so dropping it would only move
            # its computation later (and run it twice): a scheduling matter, not remat
            continue
        c = Candidate()
        c.var, c.node = n.outs[0], n
        c.split, c.early_last = seq[at + 1], seq[at]
        c.nbytes = c.var.nbytes()
        c.cost = _flops(n)
        c.cheap = c.cost <= 4 * c.var.numel() and n.op.name not in ("matmul", "matmul_t")
        if c.nbytes:
            out.append(c)
    return out


def rematerialize(graph: Graph, drop: dict) -> tuple:
    """``graph`` with each value in ``drop`` ({var id: Candidate}) recomputed for its late
    reads. Returns ``(new graph, [(recomputed var, Candidate)])``."""
    b = GraphBuilder(graph.name)
    env: dict = {}
    late: dict = {}
    done = []
    prod = {o.id: n for n in graph.nodes for o in n.outs}
    last: dict = {}
    for i, n in enumerate(graph.nodes):
        for x in n.inputs:
            if x.__class__ is Var:
                last[x.id] = i
    keep = {v.id for v in graph.outputs}
    for v in graph.inputs:
        env[v.id] = b.input(v.shape, v.dtype, v.device, v.name)

    def get(x, i):
        """``x`` as read at original schedule position ``i``."""
        if x.__class__ is not Var:
            return x
        c = drop.get(x.id)
        n = prod.get(x.id)
        if c is None:
            # kept: read the original while it lives; a dead one (only the dropped value
            # read it) is recomputed too, unless it is a random draw or impure
            if n is None or last.get(x.id, -1) >= i or x.id in keep or n.is_random() or \
                    not getattr(n.op, "pure", True) or len(n.outs) != 1:
                return env[x.id]
        elif i < c.split and i <= c.early_last:
            return env[x.id]
        r = late.get(x.id)
        if r is None:
            ins = tuple(get(y, i) for y in n.inputs)
            b.loc = n.loc
            r = b.add(n.op, ins, n.params, [(o.shape, o.dtype, o.device) for o in n.outs],
                      n.ct)[0]
            late[x.id] = r
            done.append((r, c if c is not None else _implicit(x, n)))
        return r

    for i, n in enumerate(graph.nodes):
        ins = tuple(get(x, i) for x in n.inputs)
        b.loc = n.loc
        outs = b.add(n.op, ins, n.params, [(o.shape, o.dtype, o.device) for o in n.outs], n.ct)
        for o, no in zip(n.outs, outs):
            env[o.id] = no
    return b.build([env[v.id] for v in graph.outputs]), done


def _implicit(x, n):
    c = Candidate()
    c.var, c.node, c.split, c.early_last = x, n, -1, -1
    c.nbytes, c.cost, c.cheap = x.nbytes(), _flops(n), False
    return c


def activation_peak(graph: Graph, **kw) -> int:
    return _plan(graph, **kw).activation_peak_bytes


class _Choice:
    """One candidate drop set, rematerialised (planned lazily)."""

    __slots__ = ("sel", "graph", "done", "flops", "act", "total", "label")

    def __init__(self, graph, sel, label):
        self.sel, self.label = sel, label
        self.graph, self.done = rematerialize(graph, {c.var.id: c for c in sel})
        self.flops = sum(c.cost for _, c in self.done)
        self.act = self.total = None


def choices(graph: Graph, cands: list, last: dict, ins: set) -> list:
    """Candidate drop sets for ``graph``, independent of the budget (see the module
    docstring): cheap values alone, √N-style segmentations, every-k-th checkpoints."""
    for c in cands:        # cheap: one cheap op on values alive anyway when it reruns
        c.cheap = c.cheap and all(x.__class__ is not Var or x.id in ins or
                                  last.get(x.id, -1) >= c.split for x in c.node.inputs)
    cheap = sorted((c for c in cands if c.cheap), key=lambda c: (-c.nbytes, c.var.id))
    chain = sorted(cands, key=lambda c: c.var.id)   # schedule order (ids grow with it)
    dear = [c for c in chain if not c.cheap]
    sets: dict = {}

    def add(sel, label):
        key = frozenset(c.var.id for c in sel)
        if key and key not in sets:
            sets[key] = (list(sel), label)

    n = 1
    while n < len(cheap):                             # the largest cheap values
        add(cheap[:n], f"{n} cheap")
        n *= 2
    add(cheap, "cheap")
    # every k-th expensive value kept (beyond k ~ 2√N the kept ones save nothing more)
    for k in range(2, min(len(dear), 2 * math.isqrt(len(dear)) + 2) + 1):
        keep = {c.var.id for j, c in enumerate(dear) if j % k == k - 1}
        add(cheap + [c for c in dear if c.var.id not in keep], f"keep every {k}")
    # segmentations: a segment of up to ``m`` bytes (minus the boundaries kept before
    # it) is dropped after the forward and recomputed, in one piece, right before its
    # first backward read; the value that would overflow it is kept as the next boundary.
    # Segments shrink as boundaries accumulate, so every segment's recomputation peaks at
    # about ``m`` bytes of activations (the √(2N) schedule); the tail is never dropped.
    for pool, tag in ((chain, "all"), (dear, "expensive")):
        if not pool:
            continue
        total = sum(c.nbytes for c in pool)
        big = max(c.nbytes for c in pool)
        m = float(big)
        while m < total:
            segs, cur, kept, bounds = [], [], 0, []
            for c in pool:
                if cur and sum(x.nbytes for x in cur) + c.nbytes > m - kept:
                    segs.append(cur)
                    cur = []
                    kept += c.nbytes
                    bounds.append(c)
                else:
                    cur.append(c)
            sel = [c for s in segs for c in s]
            if tag == "expensive":
                sel = cheap + sel
            add(sel, f"segments of {int(m):,} B ({tag})")
            m *= 1.15
    return [v for v in sets.values()]


def _chain(opts: list, base: int, total0: int) -> list:
    """The choices a budget may take, cheapest first.

    Built from the tight end: the choice with the smallest activation peak (then the
    smallest total peak, then the fewest FLOPs), then repeatedly the choice with the
    smallest activation peak among those that cost fewer FLOPs, have a larger activation
    peak and a total peak no lower. Along the chain, FLOPs fall while both peaks rise;
    a budget takes the cheapest member that fits, so a tighter budget takes a member
    further along — never a higher planned (= measured) total peak. Choices whose total
    peak exceeds the unbudgeted graph's are never taken.
    """
    ok = [o for o in opts if o.total <= total0 and o.act < base]
    if not ok:
        return []
    cur = min(ok, key=lambda o: (o.act, o.total, o.flops, o.label))
    out = [cur]
    while True:
        nxt = [o for o in ok if o.flops < cur.flops and o.act > cur.act and
               o.total >= cur.total]
        if not nxt:
            break
        cur = min(nxt, key=lambda o: (o.act, o.total, o.flops, o.label))
        out.append(cur)
    return out[::-1]


def fit_budget(graph: Graph, budget, **plan_kw) -> tuple:
    """Recompute values of ``graph`` until its activation peak is at most ``budget``.

    ``budget``: bytes, or a string ``"40%"`` of the graph's own activation peak. Returns
    ``(graph, info)`` with ``info = {"budget", "unbudgeted", "peak", "recomputed": [...],
    "extra_flops", "choice"}``. Raises ``MemoryError`` (before anything runs) when no
    choice fits, stating the smallest activation peak found (a budget of that many bytes
    fits).
    """
    p0 = _plan(graph, **plan_kw)
    base, total0 = p0.activation_peak_bytes, p0.peak_bytes
    limit = _parse(budget, base)
    info = {"budget": limit, "unbudgeted": base, "peak": base, "recomputed": [],
            "extra_flops": 0.0, "choice": "none"}
    if base <= limit:
        return graph, info
    last: dict = {}
    for i, n in enumerate(graph.nodes):
        for x in n.inputs:
            if x.__class__ is Var:
                last[x.id] = i
    ins = {v.id for v in graph.inputs}
    opts = [_Choice(graph, sel, label)
            for sel, label in choices(graph, candidates(graph), last, ins)]
    for o in opts:
        p = _plan(o.graph, **plan_kw)
        o.act, o.total = p.activation_peak_bytes, p.peak_bytes
    for o in _chain(opts, base, total0):
        if o.act <= limit:
            info.update(peak=o.act, choice=o.label, extra_flops=o.flops,
                        recomputed=_report(graph, o.done))
            return o.graph, info
    best_act = min([base] + [o.act for o in opts if o.total <= total0])
    raise MemoryError(
        f"ember.compile: memory_budget of {limit:,} bytes of activations is infeasible for "
        f"{graph.name}: the smallest activation peak recomputation reaches is {best_act:,} "
        f"bytes (unbudgeted: {base:,}); the minimum feasible budget is {best_act:,} bytes "
        f"({100.0 * best_act / base:.0f}% of the unbudgeted peak)")


def _report(graph: Graph, done) -> list:
    """``[(var, op name, "file:line")]`` of the recomputed values that hold bytes (views
    of recomputed values are left out). A node a pass made (a fused kernel) may carry no
    source line: it is given the line of the nearest producer of its inputs that has one
    (the user line whose ops were fused into it)."""
    prod = {o.id: n for n in graph.nodes for o in n.outs}

    def loc(n, depth=0):
        if n.loc or depth > 8:
            return n.loc
        for x in n.inputs:
            p = prod.get(x.id) if x.__class__ is Var else None
            if p is not None:
                r = loc(p, depth + 1)
                if r:
                    return r
        return None
    return [(c.var, c.node.op.name, loc(c.node)) for _, c in done
            if getattr(c.node.op, "view", False) is not True]


def _parse(budget, base) -> int:
    if isinstance(budget, str):
        s = budget.strip()
        if not s.endswith("%"):
            raise ValueError(f"ember.compile: memory_budget {budget!r}: give bytes (an int) "
                             f"or a percentage string like '40%'")
        try:
            frac = float(s[:-1]) / 100.0
        except ValueError:
            raise ValueError(f"ember.compile: memory_budget {budget!r} is not a percentage "
                             f"like '40%'") from None
        if not 0 < frac:
            raise ValueError(f"ember.compile: memory_budget {budget!r} must be positive")
        return int(base * frac)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0:
        raise ValueError(f"ember.compile: memory_budget must be a positive number of bytes or "
                         f"a percentage string like '40%', got {budget!r}")
    return int(budget)
