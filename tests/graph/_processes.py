"""Running a script in two new processes one after the other (a cache's writer, then its
reader), as the graph-cache tests do."""
import json
import os
import subprocess
import sys

from ember.graph import disk_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_twice(code: str, env: dict) -> list:
    """The JSON each of two processes running ``code`` prints last. ``code`` reports
    ``"env"``, a hash of :func:`disk_cache.environment`: when Ember's files changed in
    between (a live working tree), the pair runs again (three tries)."""
    for _ in range(3):
        disk_cache.clear()
        runs = []
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=env, cwd=ROOT, timeout=300)
            assert r.returncode == 0, r.stderr[-2000:]
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        if runs[0]["env"] == runs[1]["env"]:
            break
    assert runs[0]["env"] == runs[1]["env"], "Ember's source kept changing during the test"
    return runs
