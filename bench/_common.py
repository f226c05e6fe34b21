"""Helpers the benchmark scripts share: a timing child process and alternated medians.

Benchmarks import this module by its bare name (``import _common``): run as a script a
benchmark has ``bench/`` on ``sys.path``; one loaded by file path (the smoke tests) puts it
there first.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(code: str, argv: list[str], what: str, env: dict | None = None) -> dict:
    """Runs ``python -c code *argv`` from the repository root and reads its JSON result.

    Args:
        code: the child's Python source; its last line of output is a JSON object.
        argv: the child's arguments (strings).
        what: names the child in the failure message (e.g. ``"ember lstm"``).
        env: the child's environment (default: this process's).

    Returns:
        The JSON object the child printed last.

    Raises:
        SystemExit: the child failed (with the end of its stderr).
    """
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         timeout=600, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{what} child failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def alternated_medians(fns, reps: int) -> list[float]:
    """Median seconds of each callable, the callables alternated within each repetition."""
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]
