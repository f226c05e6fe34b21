"""The main job: ``ember train`` trains, checkpoints and resumes bit-exactly."""
import numpy as np
import pytest

import ember as em
from ember.cli import main
from ember.training import TrainConfig, train


def _cfg(tmp_path, **kw):
    base = dict(model="mlp", dataset="spirals", epochs=3, batch_size=32, progress=False,
                checkpoint=str(tmp_path / "ck-{model}-{dataset}.safetensors"))
    base.update(kw)
    return TrainConfig(**base)


def _params(model):
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def test_interrupted_and_resumed_run_is_bit_identical(tmp_path):
    full = train(_cfg(tmp_path / "a"), log=lambda *a: None)
    steps = full["steps"]
    assert steps > 20
    # stop mid-epoch 2, then resume from the checkpoint in a fresh "process" state
    part = train(_cfg(tmp_path / "b", max_steps=steps // 2 + 3), log=lambda *a: None)
    assert part["steps"] == steps // 2 + 3
    em.manual_seed(12345)          # a resumed run must not depend on the RNG state it starts in
    resumed = train(_cfg(tmp_path / "b", resume=True), log=lambda *a: None)
    assert resumed["steps"] == steps
    a, b = _params(full["model"]), _params(resumed["model"])
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert resumed["test_acc"] == full["test_acc"]


def test_spirals_mlp_learns(tmp_path):
    r = train(_cfg(tmp_path, epochs=20), log=lambda *a: None)
    assert r["test_acc"] > 0.9


def test_cli_trains_and_reports(tmp_path, capsys):
    assert main(["train", "--model", "mlp", "--dataset", "spirals", "--epochs", "2",
                 "--no-progress", "--checkpoint", str(tmp_path / "c.safetensors")]) == 0
    out = capsys.readouterr().out
    assert "held-out accuracy" in out and (tmp_path / "c.safetensors").exists()


def test_gpt_on_text_runs_and_samples(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("hello ember. " * 40)
    assert main(["train", "--model", "gpt", "--dataset", "text", "--text-file", str(text),
                 "--epochs", "1", "--block-size", "16", "--no-progress",
                 "--checkpoint", str(tmp_path / "g.safetensors")]) == 0
    assert "sample:" in capsys.readouterr().out


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(_cfg(tmp_path, resume=True), log=lambda *a: None)


def test_digits_mlp_reaches_the_bar(tmp_path):
    pytest.importorskip("sklearn")
    r = train(TrainConfig(model="mlp", dataset="digits", epochs=15, progress=False,
                          checkpoint=str(tmp_path / "d.safetensors")), log=lambda *a: None)
    assert r["test_acc"] >= 0.97
