"""bench/cuda_layernorm.py (issue 21's layer-norm backward) on the stand-in: the compiled
layer norm's launches and bytes before/after ``fuse_colsum`` (fewer of both after), and
its GPU modes say there is nothing to measure without a GPU."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*argv):
    env = dict(os.environ, EMBER_GRAPH_CACHE="0")
    env.pop("EMBER_FAKE_CUDA", None)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "cuda_layernorm.py"),
                        *argv], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_stand_in_counts_fewer_launches_and_bytes_after():
    out = _run("--n", "64", "--d", "96")
    rows = {k: (int(n), float(mb)) for k, n, mb in re.findall(
        r"^(before|after)\s+launches\s+(\d+)\s+MB\s+([0-9.]+)", out, re.M)}
    assert set(rows) == {"before", "after"}, out
    assert rows["after"][0] < rows["before"][0] and rows["after"][1] < rows["before"][1], out
    assert "partials" in out


def test_gpu_modes_without_a_gpu_measure_nothing(fake_cuda):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "cuda_layernorm", os.path.join(ROOT, "bench", "cuda_layernorm.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for argv in (["--gpu"], ["--gpt"]):
        assert mod.main(argv) == 0
