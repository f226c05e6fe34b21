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

# The recurrent language model of bench/rnn.py and bench/contention.py, as child source: it
# expects ``lib`` (ember or torch), ``nn``, ``F`` and ``Cell`` (nn.LSTM/GRU/RNN) and defines
# ``model``, ``opt``, ``x``, ``y`` and ``step()`` (one Adam training step).
RNN_LM = """V, E, H, B, T = 64, 64, 128, 32, 32
class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.rnn = Cell(E, H, num_layers=2, batch_first=True)
        self.out = nn.Linear(H, V)
    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        return self.out(h)
model = LM()
opt = lib.optim.Adam(model.parameters(), lr=1e-3)
x = lib.randint(0, V, (B, T)); y = lib.randint(0, V, (B, T))
def step():
    opt.zero_grad()
    loss = F.cross_entropy(model(x).reshape(B * T, V), y.reshape(B * T))
    loss.backward()
    opt.step()
"""


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


def load_bench(name: str):
    """The benchmark module ``bench/<name>.py`` loaded by file path (``cuda.py``'s name would
    shadow the ``cuda`` package CuPy imports if imported by name)."""
    import importlib.util
    path = os.path.join(ROOT, "bench", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"ember_bench_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
