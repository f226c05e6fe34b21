"""Smoke test of ``bench/train.py``: one Ember-only training step of every workload at tiny sizes.

No timing is asserted; the step must give a finite loss and change every parameter.
"""
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import ember

_PATH = Path(__file__).resolve().parents[1] / "bench" / "train.py"
_spec = importlib.util.spec_from_file_location("bench_train", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench   # NOTE: dataclasses look their module up there
_spec.loader.exec_module(bench)


_CASES = [(name, {}) for name in bench.WORKLOADS if not name.startswith("W3")] + [
    (name, {"attn": attn}) for name in bench.WORKLOADS if name.startswith("W3")
    for attn in ("sdpa", "mha")]


@pytest.mark.parametrize("name,extra", _CASES, ids=[f"{n} {e}" for n, e in _CASES])
def test_one_tiny_step(name, extra):
    step, model = bench.setup(bench.WORKLOADS[name], ember, tiny=True, **extra)
    before = {k: p.detach().numpy().copy() for k, p in model.named_parameters()}
    assert before
    loss = step()
    assert loss.ndim == 0 and math.isfinite(loss.item())
    for k, p in model.named_parameters():
        assert not np.array_equal(p.detach().numpy(), before[k]), f"{name}: {k} did not change"


def test_loss_check_rejects_mismatch():
    steps = {"ember": lambda: ember.tensor(1.0), "torch": lambda: ember.tensor(1.1)}
    with pytest.raises(SystemExit, match="disagree"):
        bench.check_losses("W0", steps)


def test_compile_bench_quick_run(capsys):
    """``bench/compile.py --quick`` runs every workload (losses of all variants checked)."""
    path = Path(__file__).resolve().parents[1] / "bench" / "compile.py"
    spec = importlib.util.spec_from_file_location("bench_compile", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--no-torch-compile"]) == 0
    out = capsys.readouterr().out
    for name in bench.WORKLOADS:
        assert name in out
    assert "nodes traced" in out


def test_compile_bench_w4_quick_runs_gelu_through_ember_compile(capsys):
    """bench/compile.py's W4 (GELU through ``ember.compile``) in quick mode: it runs, the
    compiled forward+backward is one fused kernel when a C compiler exists."""
    path = Path(__file__).resolve().parents[1] / "bench" / "compile.py"
    spec = importlib.util.spec_from_file_location("bench_compile", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(mod)
    assert mod.main(["--only", "W4", "--quick", "--no-torch-compile"]) == 0
    out = capsys.readouterr().out
    assert "W4 GELU-tanh" in out and "| forward+backward |" in out
    from ember.codegen import available
    if available():
        assert "graph: ['fused']" in out


def test_func_bench_quick_run(capsys):
    """``bench/func.py --quick``: every variant's result is checked against Ember's loop
    before timing (a disagreement exits), and all three tables print."""
    path = Path(__file__).resolve().parents[1] / "bench" / "func.py"
    spec = importlib.util.spec_from_file_location("bench_func", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--no-torch", "--no-jax", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for title in ("per-sample gradients", "jacrev of a", "ensemble forward"):
        assert title in out
    assert "ember row loop (before) / ember jacrev (vmap)" in out


def test_numerics_bench_quick_run(capsys):
    """``bench/numerics.py --quick``: every linalg case runs in every library present, forward
    and backward, and the ratios are printed."""
    path = Path(__file__).resolve().parents[1] / "bench" / "numerics.py"
    spec = importlib.util.spec_from_file_location("bench_numerics", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    results = mod.main(["--quick", "--reps", "1", "--only", "linalg", "--threads", "0"])
    fwd, bwd = results["linalg"]
    assert {name.split()[0] for name, _, _ in fwd} == {"solve", "cholesky", "svd", "eigh"}
    assert all(t["ember"] >= 0 and ratio > 0 for _, t, ratio in fwd)
    assert {name.split()[0] for name, _, _ in bwd} == {"cholesky", "solve", "eigh"}
    assert "np/ember" in capsys.readouterr().out


def test_distributions_bench_quick_run(capsys):
    """``bench/distributions.py --quick``: every case runs in Ember and PyTorch."""
    pytest.importorskip("torch")
    path = Path(__file__).resolve().parents[1] / "bench" / "distributions.py"
    spec = importlib.util.spec_from_file_location("bench_distributions", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.main(["--quick"])
    assert {name.split()[0] for name, _, _ in rows} >= {"Gamma.sample", "Normal.log_prob",
                                                       "Gamma.rsample+backward"}
    assert all(te > 0 and tt > 0 for _, te, tt in rows)
    assert "torch/ember" in capsys.readouterr().out


def test_meta_device_bench_quick_run(capsys):
    """``bench/meta_device.py --quick``: the GPT stack builds and runs fwd/bwd on meta in
    Ember and PyTorch (shapes asserted inside), and on the CPU."""
    pytest.importorskip("torch")
    path = Path(__file__).resolve().parents[1] / "bench" / "meta_device.py"
    spec = importlib.util.spec_from_file_location("bench_meta_device", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "build + fwd/bwd on meta" in out and "Python heap peak" in out
