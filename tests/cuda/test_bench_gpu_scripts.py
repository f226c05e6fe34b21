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
                                       ("cuda_gemm_align", ["--reps", "1"])])
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
