"""``bench/eager_steps.py`` runs and prints its table (a smoke run: times not meaningful)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_eager_steps_bench_smoke():
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "eager_steps.py"), "--only",
                        "chain", "--rounds", "1", "--seconds", "0.05", "--clock", "cpu1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    row = [ln for ln in r.stdout.splitlines() if ln.startswith("chain")]
    assert len(row) == 1 and row[0].rstrip().endswith("x") and "nan" not in row[0], r.stdout
