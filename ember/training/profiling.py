"""``ember train --profile [PATH]``: an :mod:`ember.profiler` trace of a few training steps.

Steps 1-2 are left out (the first pays one-time costs: kernel builds, caches), step 3 is a
warm-up and steps 4-6 are recorded — PyTorch's ``schedule(wait=2, warmup=1, active=3,
repeat=1)``, counted from 0. When they end (or training stops first) the Chrome trace is
written to PATH (open it in https://ui.perfetto.dev or chrome://tracing) and the ops that
took the most self time are printed. Only rank 0 profiles a data-parallel run.
"""
from __future__ import annotations

import os

from .. import profiler

WAIT, WARMUP, ACTIVE = 2, 1, 3


def default_path(checkpoint_path: str) -> str:
    """The trace beside the checkpoint: ``checkpoints/ember-cnn-digits.trace.json``."""
    return os.path.splitext(checkpoint_path)[0] + ".trace.json"


def start(path: str, log) -> profiler.profile:
    """A started profiler that writes ``path`` and logs a table when its window ends."""
    def ready(prof) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        prof.export_chrome_trace(path)
        steps = sorted(e.name for e in prof.events() if e.name.startswith("ProfilerStep#"))
        log(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15).rstrip())
        log(f"profile of {len(steps)} training step(s) written to {path} "
            f"(open it in https://ui.perfetto.dev)")

    prof = profiler.profile(schedule=profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE,
                                                       repeat=1),
                            on_trace_ready=ready, record_shapes=True)
    prof.start()
    return prof
