"""``compiled.explain()``: a structured, printable account of what ``ember.compile`` did.

Example output::

    ember.compile(step): 1 graph, 1 recompile, 0 graph breaks
    capture #1  (compile 41.2 ms; 212 nodes traced -> 151 after passes; 1 random op; 53 guards)
      signature: arg0=float32[64, 784] cpu, arg1=int64[64] cpu, model.training=True, ...
      passes: dce removed 12 nodes; cse merged 9 nodes; fold folded 3 nodes; ...
    recompile #1: model.training: True -> False
    recompile #2: guard model.fc.weight: Parameter float32[10, 784] @7f.. -> Parameter ...

A recompile's reasons are signature keys or guards (:mod:`ember.graph.guards`: a tensor,
value or container the graph read from Python changed since the capture).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Capture:
    signature: dict
    nodes_traced: int
    nodes_after: int
    passes: list            # [{"pass": name, "changed": {...}, "nodes": n, "ms": t}]
    compile_s: float
    randoms: int
    cached: bool
    graph: object = None
    raw_graph: object = None
    guards: int = 0         # Python facts checked before each call (see ember.graph.guards)

    def __str__(self) -> str:
        sig = ", ".join(f"{k}={v}" for k, v in self.signature.items())
        lines = [f"  ({self.compile_s * 1e3:.1f} ms; {self.nodes_traced} nodes traced -> "
                 f"{self.nodes_after} after passes; {self.randoms} random ops; "
                 f"{self.guards} guards"
                 + ("" if self.cached else "; state changed during the call (first optimizer "
                    "step?), so it is traced again next call") + ")",
                 f"  signature: {sig}"]
        for p in self.passes:
            what = ", ".join(f"{k} {v}" for k, v in p["changed"].items() if v) or "no change"
            lines.append(f"  pass {p['pass']:<12} {what}  ({p['nodes']} nodes, "
                         f"{p['ms']:.1f} ms)")
        return "\n".join(lines)


@dataclass
class Explanation:
    """Every capture, recompile (with the signature diff) and graph break of one function."""

    name: str
    captures: list = field(default_factory=list)
    recompiles: list = field(default_factory=list)   # [{signature key or guard: (old, new)}]
    breaks: list = field(default_factory=list)       # [(reason, "file:line")]
    notes: list = field(default_factory=list)
    recomputed: list = field(default_factory=list)   # [(var, op name, "file:line")]
    remat_reports: list = field(default_factory=list)

    def remat(self, text: str, recomputed) -> None:
        """What a ``memory_budget`` made :mod:`ember.graph.remat` recompute."""
        self.remat_reports.append(text)
        self.recomputed.extend(recomputed)

    def capture(self, sig, raw, graph, report, compile_s, randoms, cached, guards=0) -> None:
        self.captures.append(Capture(dict(sig), len(raw.nodes), len(graph.nodes), report,
                                     compile_s, randoms, cached, graph, raw, guards))

    def recompile(self, diff: dict) -> None:
        self.recompiles.append(diff)

    def graph_break(self, reason: str, where: str) -> None:
        self.breaks.append((reason, where))

    def note(self, text: str) -> None:
        self.notes.append(text)

    @property
    def compile_time(self) -> float:
        return sum(c.compile_s for c in self.captures)

    def pass_totals(self) -> dict:
        """``{pass name: {what: total count}}`` over all captures."""
        out: dict = {}
        for c in self.captures:
            for p in c.passes:
                d = out.setdefault(p["pass"], {})
                for k, v in p["changed"].items():
                    d[k] = d.get(k, 0) + v
        return out

    def __str__(self) -> str:
        lines = [f"ember.compile({self.name}): {len(self.captures)} graph(s) captured, "
                 f"{len(self.recompiles)} recompile(s), {len(self.breaks)} graph break(s), "
                 f"compile time {self.compile_time * 1e3:.1f} ms"]
        for i, c in enumerate(self.captures, 1):
            lines.append(f"capture #{i}")
            lines.append(str(c))
        for i, d in enumerate(self.recompiles, 1):
            what = "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in d.items())
            lines.append(f"recompile #{i}: {what}")
        for reason, where in self.breaks:
            lines.append(f"graph break at {where}: {reason}")
        lines.extend(self.remat_reports)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    __repr__ = __str__
