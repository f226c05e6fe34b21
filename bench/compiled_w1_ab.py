"""In-process A/B of the compiled W1 MLP SGD step's graph-side changes (issue 19 item 7).

Four compiled copies of ``bench/train.py``'s W1 step in one process, one thread, pinned to
one core, timed in alternating rounds of 10 steps (CPU time), medians over rounds:

* A: the default pipeline without ``feature_major``/``count_true``, ``matmul_t`` on NumPy;
* B: A with ``matmul_t`` making eager's float32 matmul call (Ember's sgemm where picked);
* C: B + ``feature_major``;
* D: C + ``count_true`` (= the default pipeline).

Run:
    .venv/bin/python bench/compiled_w1_ab.py --rounds 40
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class _NoSgemm:
    @staticmethod
    def matmul(a, b, out=None):
        return None


def _build(ember, wl, passes):
    import numpy as np
    from compile import train_step
    ember.manual_seed(0)
    model, opt = wl.build(ember, **wl.size)
    xa, ya = wl.data(np.random.default_rng(0), **wl.size)
    x, y = ember.tensor(xa), ember.tensor(ya)
    return ember.compile(train_step(ember, model, opt), fullgraph=True, passes=passes), x, y


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args(argv)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.environ.setdefault("EMBER_GRAPH_CACHE", "0")
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
    import ember
    from ember.graph.passes import DEFAULT_PASSES
    from train import WORKLOADS
    import ember.graph.passes.matmul_t  # noqa: F401
    mt = sys.modules["ember.graph.passes.matmul_t"]
    ember.set_num_threads(1)
    base = [p for p in DEFAULT_PASSES if p not in ("feature_major", "count_true")]
    fm = [p for p in DEFAULT_PASSES if p != "count_true"]
    configs = {"A before, matmul_t numpy": (base, False), "B + matmul_t sgemm": (base, True),
               "C + feature_major": (fm, True), "D + count_true (default)":
               (list(DEFAULT_PASSES), True)}
    real = mt.sgemm
    wl = WORKLOADS["W1 MLP SGD"]
    built = {k: _build(ember, wl, p) for k, (p, _) in configs.items()}
    res = {k: [] for k in configs}
    for r in range(args.rounds + 1):
        for k, (cs, x, y) in built.items():
            mt.sgemm = real if configs[k][1] else _NoSgemm
            t0 = time.process_time()
            for _ in range(10):
                cs(x, y)
            if r:                                     # round 0 warms up (and captures)
                res[k].append((time.process_time() - t0) / 10)
    mt.sgemm = real
    print(f"load average {os.getloadavg()[0]:.1f}; {args.rounds} rounds")
    for k, v in res.items():
        print(f"{k:28s} {statistics.median(v) * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
