"""examples/pytorch_dropin.py: the PyTorch program runs on Ember (packed LSTM, DataLoader
with collate_fn, LazyLinear, LBFGS with strong Wolfe) and, where PyTorch is installed,
follows PyTorch's loss curve from the same start."""
import importlib.util
import os

import numpy as np
import pytest

PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                    "pytorch_dropin.py")


def _load():
    spec = importlib.util.spec_from_file_location("ember_example_pytorch_dropin", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runs_on_ember_and_learns(capsys):
    curves = _load().main(["--steps", "3"])
    loss = curves["ember"]
    assert loss[-1] < 0.5 * loss[0] and all(np.isfinite(loss))
    assert "ember" in capsys.readouterr().out


def test_follows_pytorch():
    pytest.importorskip("torch")
    curves = _load().main(["--backend", "both", "--steps", "3"])
    np.testing.assert_allclose(curves["ember"], curves["torch"], rtol=1e-8)
