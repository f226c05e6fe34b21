"""Where an eager training step's time goes: ``ember.profiler``'s table of a bench workload.

Builds a workload of ``bench/train.py`` (W1 MLP, W2 CNN, W3 GPT) as ``bench/compile.py``
does, runs ``--warmup`` steps, then profiles ``--steps`` steps (one ``ProfilerStep#N``
range each) and prints the ops by self CPU time — the table issue 19 asks for before and
after the eager work. ``--trace PATH`` also writes the Chrome trace.

Run:
    .venv/bin/python bench/profile_eager.py --workload W2 [--steps 3] [--rows 25] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import sys

import ember  # NOTE: before NumPy (ember/_blas_env.py)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile import build, train_step  # noqa: E402
from train import WORKLOADS  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="W2", help="W1 | W2 | W3 (a prefix of a name)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--sort", default="self_cpu_time_total")
    ap.add_argument("--trace", help="write the Chrome trace here too")
    ap.add_argument("--threads", type=int, default=None,
                    help="ember.set_num_threads(N) first (1: the --clock cpu1 setting)")
    args = ap.parse_args(argv)
    if args.threads:
        ember.set_num_threads(args.threads)
    name = next(n for n in WORKLOADS if n.startswith(args.workload))
    model, opt, x, y = build(WORKLOADS[name], ember)
    step = train_step(ember, model, opt)
    for _ in range(args.warmup):
        step(x, y)
    sched = ember.profiler.schedule(wait=0, warmup=0, active=args.steps, repeat=1)
    with ember.profiler.profile(schedule=sched, record_shapes=True) as prof:
        for _ in range(args.steps):
            step(x, y)
            prof.step()
    steps = [e for e in prof.events() if e.name.startswith("ProfilerStep#")]
    mean = sum(e.cpu_time_total for e in steps) / len(steps) / 1e3
    print(f"{name}, eager, {len(steps)} profiled steps, {mean:.1f} ms per step (profiled), "
          f"{ember.get_num_threads()} threads")
    print(prof.key_averages().table(sort_by=args.sort, row_limit=args.rows))
    if args.trace:
        print("trace:", prof.export_chrome_trace(args.trace))


if __name__ == "__main__":
    main()
