"""Graph-level passes. Each is ``Graph -> (Graph, {what: count})`` and never edits its input.

The pipeline is one readable list; :func:`run_pipeline` runs it, verifying the graph
after every pass when ``EMBER_DEBUG`` is set (and printing the IR after each pass at
``EMBER_DEBUG=3``), and returns a report of what each pass changed.
"""
from __future__ import annotations

import os
import time

from .dce import dce

#: name -> pass. Passes register here so pipelines can name them.
PASSES = {"dce": dce}

#: The default pipeline of ``ember.compile``.
DEFAULT_PASSES = ["dce"]


def register(name: str, fn, default_position: int | None = None) -> None:
    """Make ``fn`` available to pipelines as ``name``; optionally add it to the default."""
    PASSES[name] = fn
    if default_position is not None and name not in DEFAULT_PASSES:
        DEFAULT_PASSES.insert(default_position, name)


def debug_level() -> int:
    v = os.environ.get("EMBER_DEBUG", "0")
    try:
        return int(v)
    except ValueError:
        return 1


def run_pipeline(graph, passes, verify: bool | None = None):
    """Run ``passes`` (names or callables) in order; returns ``(graph, report)``."""
    level = debug_level()
    verify = level > 0 if verify is None else verify
    if verify:
        graph.verify()
    report = []
    for p in passes:
        fn = PASSES[p] if isinstance(p, str) else p
        name = p if isinstance(p, str) else getattr(fn, "__name__", "pass")
        t0 = time.perf_counter()
        graph, changed = fn(graph)
        ms = (time.perf_counter() - t0) * 1e3
        if verify:
            graph.verify()
        report.append({"pass": name, "changed": dict(changed), "nodes": len(graph.nodes),
                       "ms": ms})
        if level >= 3:
            print(f"# after {name}: {changed}\n{graph}")
    return graph, report
