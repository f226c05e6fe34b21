"""Eager training steps, each library in its own process: Ember vs PyTorch on W1-W3.

The workloads of ``bench/train.py`` (same models, data and optimizers). Each (library,
workload) runs in a fresh process — thread pools of one library never spin while the other
is timed (issue 19, item 4) — and the processes alternate for ``--rounds`` rounds; the
table reports the median over rounds of each process's median step time, and the 100-op
autograd chain of ``bench/eager.py`` beside them.

Two clocks (``--clock``):

* ``wall`` (default): wall time per step with the libraries' default threads;
* ``cpu1``: CPU time per step (``time.process_time``) with one thread in both libraries
  (``set_num_threads(1)``). On a shared, loaded machine wall times swing by 10x between
  rounds; single-thread CPU time still compares the work each library does per step.

``--fused`` builds the optimizers with ``fused=True`` in both libraries. ``--before DIR``
adds a column for another checkout of Ember (``git archive <rev> ember
bench | tar -x -C DIR``), timed the same way, for before/after tables.

Run:
    .venv/bin/python bench/eager_steps.py                      # wall clock, 3 rounds
    .venv/bin/python bench/eager_steps.py --clock cpu1 --before /tmp/ember-before
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("W1 MLP SGD", "W1 MLP Adam", "W2 CNN SGD", "W3 GPT AdamW", "chain")

_CHILD = r"""
import statistics, sys, time
root, lib_name, wl_name, secs, clock, fused = sys.argv[1:7]
sys.path.insert(0, root + "/bench"); sys.path.insert(0, root)
import ember
if lib_name == "torch":
    import torch as lib
else:
    lib = ember
if clock == "cpu1":
    lib.set_num_threads(1)
    now = time.process_time
else:
    now = time.perf_counter
if wl_name == "chain":
    import eager
    step = eager.chain(lib)
else:
    import numpy as np
    from train import WORKLOADS, make_step
    wl = WORKLOADS[wl_name]
    lib.manual_seed(0)
    model, opt = wl.build(lib, **wl.size)
    if fused == "1":        # the same optimizer with fused=True (both libraries have it)
        import inspect
        ok = inspect.signature(type(opt).__init__).parameters
        kw = {k: v for k, v in opt.defaults.items() if k in ok and k not in ("foreach", "fused")}
        opt = type(opt)(model.parameters(), **kw, fused=True)
    x, y = wl.data(np.random.default_rng(0), **wl.size)
    step = make_step(lib, model, opt, lib.tensor(x), lib.tensor(y))
for _ in range(5):
    step()
ts, end = [], now() + float(secs)
while now() < end or len(ts) < 5:
    t0 = now()
    step()
    ts.append(now() - t0)
print(statistics.median(ts))
"""


def _time(root, lib, wl, secs, clock, fused=False):
    r = subprocess.run([sys.executable, "-c", _CHILD, str(root), lib, wl, str(secs), clock,
                        "1" if fused else "0"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"  {lib} {wl} ({root}) failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return float(r.stdout.strip().splitlines()[-1])


def _fmt(s):
    if s is None:
        return f"{'-':>12}"
    return f"{s * 1e3:9.2f} ms" if s >= 1e-3 else f"{s * 1e6:9.1f} us"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clock", choices=("wall", "cpu1"), default="wall")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per process")
    ap.add_argument("--before", default=None, help="another Ember checkout to time too")
    ap.add_argument("--only", default="", help="workloads whose name contains this")
    ap.add_argument("--fused", action="store_true",
                    help="optimizers with fused=True in both libraries (W1-W3)")
    args = ap.parse_args(argv)
    cols = [("ember", ROOT), ("torch", ROOT)]
    if args.before:
        cols.insert(0, ("ember", Path(args.before)))
    names = ["ember (before)", "ember", "torch"] if args.before else ["ember", "torch"]
    print(f"clock: {args.clock}; median over {args.rounds} rounds of per-process medians"
          + ("; optimizers fused=True" if args.fused else ""))
    print(f"{'workload':<14}" + "".join(f"{n:>16}" for n in names) + f"{'ember/torch':>13}")
    for wl in WORKLOADS:
        if args.only.lower() not in wl.lower():
            continue
        samples = [[] for _ in cols]
        for _ in range(args.rounds):
            for k, (lib, root) in enumerate(cols):
                t = _time(root, lib, wl, args.seconds, args.clock, args.fused)
                if t is not None:
                    samples[k].append(t)
        med = [statistics.median(s) if s else None for s in samples]
        ratio = med[-2] / med[-1] if med[-2] and med[-1] else float("nan")
        print(f"{wl:<14}" + "".join(f"{_fmt(m):>16}" for m in med) + f"{ratio:>12.2f}x")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
