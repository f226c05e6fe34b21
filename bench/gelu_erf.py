"""F.gelu (exact, erf form) forward and forward+backward, one thread, CPU time: Ember vs PyTorch.

Each (library, round) runs in a fresh process and the processes alternate; the table
reports the median over rounds of each process's median time per call. ``--before DIR``
adds a column for another copy of Ember (a directory holding its ``ember`` package), for
before/after tables of a kernel change (issue 19: float32 erf evaluated in float32).

Run:
    .venv/bin/python bench/gelu_erf.py --rounds 5
    .venv/bin/python bench/gelu_erf.py --before /tmp/ember-before
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_child  # noqa: E402

_CHILD = r"""
import json, statistics, sys, time
root, lib_name, shape, secs = sys.argv[1:5]
sys.path.insert(0, root)
import numpy as np
if lib_name == "torch":
    import torch as lib
    import torch.nn.functional as F
else:
    import ember as lib
    import ember.nn.functional as F
lib.set_num_threads(1)
shape = tuple(int(s) for s in shape.split(","))
a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
x = lib.tensor(a, requires_grad=True)
g = lib.tensor(np.ones(shape, np.float32))

def fwd():
    with lib.no_grad():
        F.gelu(x)

def fwd_bwd():
    x.grad = None
    F.gelu(x).backward(g)

out = {}
for name, fn in (("forward", fwd), ("forward+backward", fwd_bwd)):
    for _ in range(5):
        fn()
    times, t_end = [], time.perf_counter() + float(secs)
    while time.perf_counter() < t_end or len(times) < 20:
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    out[name] = statistics.median(times)
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="16,64,512")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--before", help="directory holding another ember package")
    args = ap.parse_args()
    root = str(Path(__file__).resolve().parents[1])
    libs = [("ember", root, "ember")] + ([("before", args.before, "ember")] if args.before
                                         else []) + [("torch", root, "torch")]
    res = {name: [] for name, _, _ in libs}
    for _ in range(args.rounds):
        for name, where, lib in libs:
            res[name].append(run_child(_CHILD, [where, lib, args.shape, str(args.seconds)],
                                       f"{name} gelu"))
    print(f"F.gelu {args.shape} float32, one thread, CPU ms/call, median of {args.rounds}")
    print(f"{'':18}" + "".join(f"{n:>10}" for n in res))
    for what in ("forward", "forward+backward"):
        row = [statistics.median(r[what] for r in res[n]) * 1e3 for n in res]
        print(f"{what:18}" + "".join(f"{v:10.3f}" for v in row))


if __name__ == "__main__":
    main()
