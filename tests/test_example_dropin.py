"""examples/pytorch_dropin.py: the PyTorch program runs on Ember (packed LSTM, DataLoader
with collate_fn, LazyLinear, LBFGS with strong Wolfe) and, where PyTorch is installed,
follows PyTorch's loss curve from the same start."""
import numpy as np
import pytest

from _examples import load_example


def _load():
    return load_example("pytorch_dropin")


def test_runs_on_ember_and_learns(capsys):
    curves = _load().main(["--steps", "3"])
    loss = curves["ember"]
    assert loss[-1] < 0.5 * loss[0] and all(np.isfinite(loss))
    assert "ember" in capsys.readouterr().out


def test_follows_pytorch():
    pytest.importorskip("torch")
    curves = _load().main(["--backend", "both", "--steps", "3"])
    np.testing.assert_allclose(curves["ember"], curves["torch"], rtol=1e-8)
