"""``bench/compiled_jax.py`` (issue 19 item 7): one short round runs each library in its own
process and prints a row with both columns; the JAX child checks its first losses against
Ember's before it times anything."""
import importlib.util
import sys
from pathlib import Path

import pytest


def _load():
    path = Path(__file__).resolve().parents[1] / "bench" / "compiled_jax.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("bench_compiled_jax", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_compiled_jax_bench_one_round(capsys):
    pytest.importorskip("jax")
    mod = _load()
    assert mod.main(["--clock", "cpu1", "--rounds", "1", "--seconds", "0.05"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("W1 MLP SGD"))
    assert row.count(" ms") == 2 and row.rstrip().split()[-2].endswith("x"), out
    assert "EMBER_ADAPTIVE_THREADS" in out
