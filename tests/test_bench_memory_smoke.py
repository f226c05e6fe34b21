"""Smoke test of ``bench/memory.py`` (tiny config, Ember only): every row prints, the
measured activation memory of the checkpointed variants is below plain and the estimate
matches the measurement. No timing is asserted."""
import importlib.util
import re
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "bench" / "memory.py"
_spec = importlib.util.spec_from_file_location("bench_memory", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def test_quick_run(capsys):
    assert bench.main(["--quick", "--no-torch", "--layers", "16", "--width", "64",
                       "--batch", "256"]) == 0
    out = capsys.readouterr().out
    rows = {}
    for line in out.splitlines():
        m = re.match(r"(plain|ckpt 8 seg|ckpt sqrt|selective)\s+([\d.]+)\s+([\d.]+)\s+", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    assert set(rows) == {"plain", "ckpt 8 seg", "ckpt sqrt", "selective"}
    for name, (act, est) in rows.items():
        assert abs(act - est) <= 0.1 * act, name
    assert rows["ckpt 8 seg"][0] < 0.8 * rows["plain"][0]
    assert rows["ckpt sqrt"][0] < 0.8 * rows["plain"][0]
    assert "target:" in out
