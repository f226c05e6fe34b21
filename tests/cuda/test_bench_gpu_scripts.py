"""The GPU benchmark scripts of issue 21's kernels run anywhere: without a GPU (or on the
``EMBER_FAKE_CUDA`` stand-in) they say there is nothing to measure and exit 0."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _main(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench",
                                                                     f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


@pytest.mark.parametrize("name,argv", [("cuda_reduce_optim", ["--quick"]),
                                       ("cuda_ew_sweep", ["--reps", "1"]),
                                       ("cuda_gemm_align", ["--reps", "1"]),
                                       ("cuda_multi", ["--reps", "1"]),
                                       ("cuda_iota", ["--reps", "1"]),
                                       ("cuda_philox", ["--reps", "1"])])
def test_script_without_a_gpu_exits_cleanly(name, argv, fake_cuda, capsys):
    assert _main(name)(argv) == 0
    assert "nothing to measure" in capsys.readouterr().out


def test_gpt2_parameter_shapes_count_124m():
    shapes = _main("cuda_reduce_optim").__globals__["_gpt2_shapes"]()
    n = 0
    for s in shapes:
        k = 1
        for d in s:
            k *= d
        n += k
    assert len(shapes) == 148 and n == 124_439_808      # GPT-2 small, tied lm_head


def test_cuda_host_measures_the_compiled_step_on_the_stand_in():
    """bench/cuda_host.py (issue 21's host time): runs in a process of its own (its
    stand-in patches the kernel loader and cuBLAS call) and prints the compiled and eager
    step's host time with the compiled call's executor steps and launches."""
    import re
    import subprocess
    import sys
    env = dict(os.environ, EMBER_GRAPH_CACHE="0")
    env.pop("EMBER_FAKE_CUDA", None)
    env.pop("EMBER_FAKE_CUDA_STRICT", None)        # NOTE: its own stand-in, no-op kernels
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "cuda_host.py"),
                        "--layers", "1", "--d", "32", "--t", "8", "--vocab", "64",
                        "--reps", "2", "--profile", "--dispatches", "--composites"],
                       capture_output=True, text=True,
                       env=env, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = dict(re.findall(r"^(compiled|eager)\s+host\s+[0-9.]+ ms/call.*launches\s+(\d+)",
                           r.stdout, re.M))
    assert set(rows) == {"compiled", "eager"} and int(rows["compiled"]) > 0, r.stdout
    steps = int(re.search(r"^compiled .*executor steps\s+(\d+)", r.stdout, re.M).group(1))
    assert steps > 50 and "tottime" in r.stdout     # a 1-layer step's graph; cProfile
    # --dispatches: the eager step's ops by name (autocast's linears: one op each, no
    # transposes or bare matmuls of their own)
    ops = re.findall(r"dispatches (\d+) a call: (.*)$", r.stdout, re.M)
    assert len(ops) == 2 and ops[0][0] == "0", r.stdout      # compiled: no dispatch
    eager = dict((k, int(v)) for k, v in re.findall(r"(\w+) (\d+)", ops[1][1]))
    assert eager["linear"] == 4 and eager.get("matmul", 0) <= 3, ops[1]
