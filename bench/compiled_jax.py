"""Compiled training steps, each library in its own process: ``ember.compile`` vs ``jax.jit``.

Issue 19 item 7. The workloads of ``bench/train.py`` (same model, data, weights and
optimizer; the JAX step is ``bench/jax_peer.py``'s, whose first losses are checked against
Ember's), one (library, workload) per fresh process — one library's thread pools never
spin while the other is timed — the processes alternating for ``--rounds`` rounds. The
table reports the median over rounds of each process's median step time, and the load
average before each round.

Two clocks (``--clock``):

* ``wall`` (default): wall time per step with each library's default threads;
* ``cpu1``: CPU time per step (``time.process_time``) with one thread: every child is
  pinned to one core before anything starts its threads (XLA sizes its pool by the
  schedulable cores; Ember also gets ``set_num_threads(1)``). On a loaded machine this
  compares the work per step.

Set ``EMBER_ADAPTIVE_THREADS=0`` to keep Ember's BLAS threads at the asked count under load
(``ember/_contention.py``); the header says which policy ran. ``--before DIR`` adds a column
for another checkout of Ember (``git archive <rev> ember bench | tar -x -C DIR``).

Run:
    EMBER_ADAPTIVE_THREADS=0 .venv/bin/python bench/compiled_jax.py --clock cpu1
    EMBER_ADAPTIVE_THREADS=0 .venv/bin/python bench/compiled_jax.py --before /tmp/w1-before
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import os, statistics, sys, time
root, lib_name, wl_name, secs, clock = sys.argv[1:6]
if clock == "cpu1":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
sys.path.insert(0, root + "/bench"); sys.path.insert(0, root)
import ember
import numpy as np
from train import WORKLOADS, numpy_state
wl = WORKLOADS[wl_name]
ember.manual_seed(0)
model, opt = wl.build(ember, **wl.size)
xa, ya = wl.data(np.random.default_rng(0), **wl.size)
x, y = ember.tensor(xa), ember.tensor(ya)
F = ember.nn.functional
def _step(x, y):
    opt.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss.detach()
if lib_name == "jax":
    import jax_peer
    step, first, _ = jax_peer.train_step(wl, dict(wl.size), numpy_state(model), opt, xa, ya)
    ref = [float(_step(x, y)) for _ in range(2)]
    if not all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(first, ref)):
        raise SystemExit(f"jax losses {first} != ember's {ref}")
else:
    if clock == "cpu1":
        ember.set_num_threads(1)
    cs = ember.compile(_step, fullgraph=True)
    step = lambda: cs(x, y)
now = time.process_time if clock == "cpu1" else time.perf_counter
for _ in range(10):
    step()
ts, end = [], now() + float(secs)
while now() < end or len(ts) < 10:
    t0 = now()
    step()
    ts.append(now() - t0)
print(statistics.median(ts))
"""


def _time(root, lib, wl, secs, clock):
    r = subprocess.run([sys.executable, "-c", _CHILD, str(root), lib, wl, str(secs), clock],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"  {lib} {wl} ({root}) failed: {r.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return float(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clock", choices=("wall", "cpu1"), default="wall")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per process")
    ap.add_argument("--before", default=None, help="another Ember checkout to time too")
    ap.add_argument("--only", default="W1 MLP SGD", help="workloads whose name contains this")
    args = ap.parse_args(argv)
    from train import WORKLOADS
    cols = [("ember", ROOT), ("jax", ROOT)]
    names = ["ember.compile", "jax.jit"]
    if args.before:
        cols.insert(0, ("ember", Path(args.before)))
        names.insert(0, "ember (before)")
    policy = os.environ.get("EMBER_ADAPTIVE_THREADS", "1 (default)")
    print(f"clock: {args.clock}; EMBER_ADAPTIVE_THREADS={policy}; median over {args.rounds} "
          f"rounds of per-process medians ({args.seconds} s each)")
    print(f"{'workload':<14}" + "".join(f"{n:>16}" for n in names) + f"{'ember/jax':>11}"
          + "   load average before each round")
    for wl in WORKLOADS:
        if args.only.lower() not in wl.lower():
            continue
        samples, loads = [[] for _ in cols], []
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for k, (lib, root) in enumerate(cols):
                t = _time(root, lib, wl, args.seconds, args.clock)
                if t is not None:
                    samples[k].append(t)
        med = [statistics.median(s) if s else None for s in samples]
        ratio = med[-2] / med[-1] if med[-2] and med[-1] else float("nan")
        print(f"{wl:<14}" + "".join(f"{m * 1e3:13.2f} ms" if m else f"{'-':>16}" for m in med)
              + f"{ratio:>10.2f}x   " + " ".join(f"{v:.1f}" for v in loads))
        for n, s in zip(names, samples):
            print(f"    {n}: " + " ".join(f"{v * 1e3:.2f}" for v in s))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    sys.exit(main())
