"""``ember train --amp {bf16,fp16}``: autocast forward, GradScaler steps, checkpointed scale."""
import numpy as np
import pytest

import ember as em
from ember import nn
from ember.cli import main
from ember.training import train
from ember.training.errors import UsageError
from ember.training.precision import Precision
from train_helpers import QUIET, train_config, weights


def test_fp16_resume_restores_the_loss_scaler(tmp_path):
    full = train(train_config(tmp_path / "full.safetensors", amp="fp16"), **QUIET)
    half = full["steps"] // 2 + 3
    train(train_config(tmp_path / "part.safetensors", amp="fp16", max_steps=half), **QUIET)
    part = em.load(str(tmp_path / "part.safetensors"))
    assert part["config"]["amp"] == "fp16"
    assert part["grad_scaler"]["_growth_tracker"] == half   # no overflow on spirals
    em.manual_seed(123)
    resumed = train(train_config(tmp_path / "part.safetensors", amp="fp16", resume=True), **QUIET)
    a, b = weights(full["model"]), weights(resumed["model"])
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    ends = [em.load(str(tmp_path / f"{n}.safetensors"))["grad_scaler"] for n in ("full",
                                                                                  "part")]
    assert ends[0] == ends[1] and ends[0]["_growth_tracker"] == full["steps"]


def test_resume_with_another_amp_is_refused(tmp_path):
    train(train_config(tmp_path / "c.safetensors", amp="bf16", max_steps=2), **QUIET)
    with pytest.raises(UsageError, match="--amp bf16, not None"):
        train(train_config(tmp_path / "c.safetensors", resume=True), **QUIET)


def test_bf16_runs_the_forward_in_bfloat16_and_changes_the_run(tmp_path):
    prec = Precision("bf16")
    lin = nn.Linear(4, 3)
    with prec.autocast():
        assert lin(em.randn(2, 4)).dtype == em.bfloat16
    f32 = train(train_config(tmp_path / "a.safetensors", max_steps=3), **QUIET)
    bf16 = train(train_config(tmp_path / "b.safetensors", max_steps=3, amp="bf16"), **QUIET)
    a, b = weights(f32["model"]), weights(bf16["model"])
    assert all(b[k].dtype == np.float32 for k in b)        # float32 master weights
    assert any(not np.array_equal(a[k], b[k]) for k in a)  # the forward did change
    assert all(np.abs(a[k] - b[k]).max() < 0.05 for k in a)


def test_fp16_step_with_an_overflow_is_skipped():
    prec = Precision("fp16")
    w = nn.Parameter(em.ones(3))
    opt = em.optim.AdamW([w], lr=0.1)
    with prec.autocast():
        loss = (w * em.tensor([1.0, float("inf"), 2.0])).sum()
    assert prec.backward_step(loss, opt) is False
    assert w.detach().numpy().tolist() == [1.0, 1.0, 1.0] and not opt.state
    assert prec.state_dict()["scale"] == 2.0**15


def test_cli_amp_flag(tmp_path, capsys):
    ck = tmp_path / "cli.safetensors"
    assert main(["train", "--model", "mlp", "--dataset", "spirals", "--amp", "fp16",
                 "--max-steps", "2", "--no-progress", "--checkpoint", str(ck)]) == 0
    saved = em.load(str(ck))
    assert saved["config"]["amp"] == "fp16" and saved["grad_scaler"]["scale"] == 2.0**16
    with pytest.raises(SystemExit) as e:
        main(["train", "--amp", "fp32"])
    assert e.value.code == 2 and "invalid choice: 'fp32'" in capsys.readouterr().err
