"""One-thread CPU time of W1-W3 training steps under bf16 autocast (issue 16), Ember's
compiled step (``ember``; ``ember-eager`` its eager step) against PyTorch CPU eager
autocast, each run in its own process, interleaved.

The machine is shared, so wall-clock times with two threads swing 2-3x between rounds;
this measures ``time.process_time`` per step with one thread everywhere
(``ember.set_num_threads(1)``, ``OPENBLAS_NUM_THREADS=1``, ``torch.set_num_threads(1)``)
and prints each run's median step. ``_amp_step`` is bench/amp.py's.

Run:
    .venv/bin/python bench/amp_steps.py [--rounds 3] [--workloads W1,W2,W3] [--modes bf16,fp32]
        [--libs ember,ember-eager,torch]
    .venv/bin/python bench/amp_steps.py --one "W1 MLP SGD" ember bf16 100   # one run
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = {"W1 MLP SGD": 100, "W2 CNN SGD": 30, "W3 GPT AdamW": 14}


def one(name: str, lib: str, mode: str, steps: int) -> None:
    """Runs ``steps`` steps of ``name`` in this process and prints the median step."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import ember
    import amp
    import train as tb
    ember.set_num_threads(1)
    if lib == "torch":
        import torch
        torch.set_num_threads(1)
        mod = torch
    else:
        mod = ember
    amp.time.perf_counter = time.process_time    # per-step CPU time, not wall clock
    s, _, loss = amp._amp_step(mod, tb.WORKLOADS[name], mode, steps, False,
                               compiled=lib == "ember")        # "ember-eager": eager
    print(f"{name:13s} {lib:11s} {mode:5s} {s * 1e3:8.2f} ms  loss {loss:.4f}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--one", nargs=4, metavar=("WORKLOAD", "LIB", "MODE", "STEPS"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workloads", default="W1,W2,W3")
    p.add_argument("--modes", default="bf16")
    p.add_argument("--libs", default="ember,torch", help="ember (compiled), ember-eager, torch")
    a = p.parse_args(argv)
    if a.one:
        one(a.one[0], a.one[1], a.one[2], int(a.one[3]))
        return 0
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    names = [n for n in STEPS if n.split()[0] in a.workloads.split(",")]
    print(f"# one-thread CPU time per step, medians; load average {os.getloadavg()[0]:.1f}")
    for name in names:
        for _ in range(a.rounds):
            for mode in a.modes.split(","):
                for lib in a.libs.split(","):
                    if lib == "torch" and mode not in ("fp32", "bf16"):
                        continue
                    subprocess.run([sys.executable, __file__, "--one", name, lib, mode,
                                    str(STEPS[name])], env=env, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
