"""Where the compiled W1 MLP SGD step's time goes, node by node, with and without passes.

Two compiled copies of ``bench/train.py``'s W1 step in one process (one thread, pinned to
one core): the default pipeline and the default pipeline without the passes named by
``--drop`` (default ``gemm_epilogue``). Their steps alternate; every executor step is
timed on its own (``time.perf_counter_ns`` around the executor's ``_exec``), and the table
shows each node's median per copy, the sum of the medians and the median whole step (wall
time, so run it on a quiet machine: ``uptime``). Issue 19.

Run:
    .venv/bin/python bench/compiled_w1_nodes.py --steps 150
    .venv/bin/python bench/compiled_w1_nodes.py --drop gemm_epilogue,feature_major
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _build(ember, wl, passes):
    import numpy as np
    from compile import train_step
    ember.manual_seed(0)
    model, opt = wl.build(ember, **wl.size)
    xa, ya = wl.data(np.random.default_rng(0), **wl.size)
    x, y = ember.tensor(xa), ember.tensor(ya)
    f = ember.compile(train_step(ember, model, opt), fullgraph=True, passes=passes)
    for _ in range(5):
        f(x, y)
    return f, x, y


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--drop", default="gemm_epilogue", help="passes the second copy omits")
    args = ap.parse_args(argv)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.environ.setdefault("EMBER_GRAPH_CACHE", "0")
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
    import ember
    import ember.graph.executor as ex
    from ember.graph.passes import DEFAULT_PASSES
    from train import WORKLOADS
    ember.set_num_threads(1)
    wl = WORKLOADS["W1 MLP SGD"]
    drop = args.drop.split(",")
    copies = {"default": _build(ember, wl, list(DEFAULT_PASSES)),
              f"without {args.drop}": _build(ember, wl, [p for p in DEFAULT_PASSES
                                                          if p not in drop])}
    times: dict = {}
    cur = [None]
    run = ex._exec

    def timed(s, *a, **k):
        t0 = time.perf_counter_ns()
        r = run(s, *a, **k)
        times.setdefault((cur[0], id(s)), [s, []])[1].append(time.perf_counter_ns() - t0)
        return r
    steps = {k: [] for k in copies}
    ex._exec = timed
    try:
        for i in range(args.steps):
            for k in (list(copies) if i % 2 else list(copies)[::-1]):
                f, x, y = copies[k]
                cur[0] = k
                t0 = time.perf_counter()
                f(x, y)
                steps[k].append(time.perf_counter() - t0)
    finally:
        ex._exec = run
    print(f"load average {os.getloadavg()[0]:.1f}; {args.steps} steps each, wall us")
    for k in copies:
        total = 0.0
        print(f"== {k}")
        for (kk, _), (s, ts) in times.items():
            if kk == k:
                m = statistics.median(ts) / 1e3
                total += m
                print(f"  {s.name:14s} {str(s.outs):18s} {m:8.1f}")
        print(f"  sum of node medians {total:.1f} us; median step "
              f"{statistics.median(steps[k]) * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
