"""Slowdown under CPU contention: Ember vs PyTorch, each timed in its own process, alone and
with a competing busy process (``python -c "while True: pass"``) on the machine.

Each (library, workload) child process builds its model, warms up, then times ``--steps``
training steps; the parent runs the children alternately (ember alone, torch alone, ember
contended, torch contended, ...) ``--rounds`` times and reports medians. The busy process
is started before and ended after each contended child (one per round; by its pid).

Workloads (same shapes in both libraries):
  lstm: 2-layer nn.LSTM language model, vocab 64, embedding 64, hidden 128, batch 32,
        32 steps, cross-entropy, Adam;
  mlp:  784-512-512-10 MLP, batch 128, ReLU, cross-entropy, SGD (BLAS-bound).

Libraries: ``ember`` (as installed: BLAS threads adapt to the load, ``ember/_contention.py``),
``ember-fixed`` (``EMBER_ADAPTIVE_THREADS=0``: the asked threads always, as before), ``torch``.
Each row also gives the process CPU seconds per step: threads spinning while they wait show
up there.

Run:
    .venv/bin/python bench/contention.py [--workloads lstm mlp] [--rounds 3] [--steps 20]

A machine shared with other users is not quiet when "alone": alternate, take medians, and
say so with the numbers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import textwrap
import time

from _common import RNN_LM, run_child

_CHILD = r"""
import json, statistics, sys, time
lib_name, workload, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if lib_name.startswith("ember"):
    import ember as lib
else:
    import torch as lib
nn, F = lib.nn, lib.nn.functional
lib.manual_seed(0)
if workload == "lstm":
    Cell = nn.LSTM
""" + textwrap.indent(RNN_LM, "    ") + r"""else:
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    opt = lib.optim.SGD(model.parameters(), lr=0.01)
    x = lib.randn(128, 784); y = lib.randint(0, 10, (128,))
    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
for _ in range(3):
    step()
import os
ts, cpu = [], []
for _ in range(steps):
    c0, t0 = os.times(), time.perf_counter()
    step()
    t1, c1 = time.perf_counter(), os.times()
    ts.append(t1 - t0)
    cpu.append(c1.user + c1.system - c0.user - c0.system)
print(json.dumps({"median": statistics.median(ts), "cpu": sum(cpu) / steps,
                  "threads": lib.get_num_threads()}))
"""


def _busy() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _child(lib: str, workload: str, steps: int, contended: bool) -> dict:
    busy = _busy() if contended else None
    try:
        if busy is not None:
            time.sleep(0.2)      # let the busy loop get scheduled
        env = dict(os.environ)
        if lib == "ember-fixed":      # Ember with the adaptive BLAS thread policy off
            env["EMBER_ADAPTIVE_THREADS"] = "0"
        return run_child(_CHILD, [lib, workload, str(steps)], f"{lib} {workload}", env=env)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["lstm", "mlp"], choices=["lstm", "mlp"])
    ap.add_argument("--libs", nargs="+", default=["ember", "ember-fixed", "torch"],
                    choices=["ember", "ember-fixed", "torch"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
          f"medians of {args.rounds} alternated runs x {args.steps} steps")
    print(f"{'workload':<10}{'library':<13}{'alone':>11}{'contended':>11}{'slowdown':>10}"
          f"{'CPU s/step alone':>18}{'contended':>11}")
    for w in args.workloads:
        res = {(lib, c): [] for lib in args.libs for c in (False, True)}
        for _ in range(args.rounds):
            for c in (False, True):
                for lib in args.libs:
                    res[(lib, c)].append(_child(lib, w, args.steps, c))
        for lib in args.libs:
            a, b = (statistics.median(r["median"] for r in res[(lib, c)]) for c in (False, True))
            ca, cb = (statistics.median(r["cpu"] for r in res[(lib, c)]) for c in (False, True))
            print(f"{w:<10}{lib:<13}{a * 1e3:9.2f}ms{b * 1e3:9.2f}ms{b / a:9.2f}x"
                  f"{ca:17.3f}s{cb:10.3f}s")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
