"""``ember train`` as a user runs it: progress bars, resume, bad checkpoints, CLI errors."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

import ember as em
from ember.cli import main
from ember.training import train
from ember.training.errors import CheckpointError, UsageError
from train_helpers import QUIET, train_config, weights


def _same_weights(a, b):
    a, b = weights(a), weights(b)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_progress_bars_do_not_change_the_run(tmp_path):
    pytest.importorskip("tqdm")
    quiet = train(train_config(tmp_path / "a.safetensors"), **QUIET)
    bars = train(train_config(tmp_path / "b.safetensors", progress=True), **QUIET)
    _same_weights(quiet["model"], bars["model"])
    assert quiet["test_loss"] == bars["test_loss"]


@pytest.mark.parametrize("progress", [False, True])
def test_max_steps_then_resume_equals_an_uninterrupted_run(tmp_path, progress):
    if progress:
        pytest.importorskip("tqdm")
    full_cfg = train_config(tmp_path / "full.safetensors", progress=progress)
    full = train(full_cfg, **QUIET)
    spe = full["steps"] // 2
    part = train_config(tmp_path / "part.safetensors", progress=progress, max_steps=spe + 5)
    assert train(part, **QUIET)["steps"] == spe + 5
    em.manual_seed(999)
    resumed_cfg = train_config(tmp_path / "part.safetensors", progress=progress, resume=True)
    resumed = train(resumed_cfg, **QUIET)
    assert resumed["steps"] == full["steps"]
    _same_weights(full["model"], resumed["model"])
    # the split epoch's train loss covers all its steps, not only the resumed ones
    assert resumed_cfg.history == full_cfg.history
    read = [(tmp_path / f"{n}.metrics.jsonl").read_text() for n in ("full", "part")]
    assert read[0] == read[1] and len(read[0].splitlines()) == 2
    assert json.loads(read[0].splitlines()[1])["train_loss"] == full_cfg.history[1]["train_loss"]


def test_resume_with_more_epochs_rebuilds_the_schedule(tmp_path):
    path = tmp_path / "c.safetensors"
    first = train(train_config(path, epochs=2), **QUIET)
    lines = []
    more = train(train_config(path, epochs=3, resume=True), log=lines.append)
    assert more["steps"] == first["steps"] // 2 * 3
    assert any("rebuilt the one-cycle schedule for" in s for s in lines)
    ck = em.load(str(path))
    assert ck["epoch"] == 3 and ck["scheduler"]["total_steps"] == more["steps"]
    with pytest.raises(UsageError, match="has already run 3 epochs.*pass --epochs 3 or more"):
        train(train_config(path, epochs=1, resume=True), **QUIET)


def test_the_learning_rate_does_not_rise_after_the_last_step(tmp_path):
    path = tmp_path / "d.safetensors"
    train(train_config(path, lr=3e-3), **QUIET)
    group = em.load(str(path))["optimizer"]["param_groups"][0]
    assert group["lr"] == pytest.approx(3e-3 / 25 / 1e4, rel=1e-12)   # the schedule's minimum


def test_the_lrs_train_uses_are_pytorchs_one_cycle(tmp_path):
    torch = pytest.importorskip("torch")
    used = []
    cfg = train_config(tmp_path / "e.safetensors", epochs=1)
    orig = em.optim.AdamW.step

    def spy(self, *a, **k):
        used.append(self.param_groups[0]["lr"])
        return orig(self, *a, **k)
    em.optim.AdamW.step = spy
    try:
        steps = train(cfg, **QUIET)["steps"]
    finally:
        em.optim.AdamW.step = orig
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.AdamW([p], lr=cfg.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=steps)
    ref = []
    for _ in range(steps):
        ref.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    np.testing.assert_allclose(used, ref, rtol=1e-12)
    last = em.load(str(tmp_path / "e.safetensors"))["optimizer"]["param_groups"][0]["lr"]
    assert last == pytest.approx(ref[-1], rel=1e-12) and last < ref[-2]


# ------------------------------------------------------------------ bad checkpoints
def _corrupt(ck, what):
    if what == "exp_avg":
        del ck["optimizer"]["state"][0]["exp_avg"]
    elif what == "step":
        ck["optimizer"]["state"][0]["step"] = em.tensor(-5.0)
    elif what == "nan_weight":
        w = ck["model"]["1.weight"].clone()
        w[0, 0] = math.nan
        ck["model"]["1.weight"] = w
    elif what == "nan_lr":
        ck["optimizer"]["param_groups"][0]["lr"] = math.nan
    elif what == "batches":
        ck["loader"]["batches_consumed"] = 10_000
    elif what == "no_optimizer":
        del ck["optimizer"]
    elif what == "scheduler":
        ck["scheduler"] = [1, 2]
    elif what == "sums":
        ck["epoch_loss_sum"] = math.inf
    return ck


@pytest.mark.parametrize("what, match", [
    ("exp_avg", r"'optimizer': AdamW.load_state_dict: state\[0\].*missing 'exp_avg'"),
    ("step", r"'optimizer': .*\['step'\] is -5.0; a step count must be an integer >= 0"),
    ("nan_weight", r"model weight '1.weight' holds NaN"),
    ("nan_lr", r"'optimizer': .*param_groups\[0\]\['lr'\] is nan"),
    ("batches", r"'loader': .*'batches_consumed' is 10000"),
    ("no_optimizer", r"has no 'optimizer' entry"),
    ("scheduler", r"'scheduler' must be a dict"),
    ("sums", r"'epoch_loss_sum'/'epoch_batches' \(inf, 8\) are not a finite sum over the 8"),
])
def test_resume_from_a_bad_checkpoint_is_a_one_line_error(tmp_path, capsys, what, match):
    path = tmp_path / "bad.safetensors"
    train(train_config(path, max_steps=30), **QUIET)
    em.save(_corrupt(em.load(str(path)), what), str(path))
    with pytest.raises(CheckpointError, match=match):
        train(train_config(path, resume=True), **QUIET)
    capsys.readouterr()
    assert main(["train", "--model", "mlp", "--dataset", "spirals", "--epochs", "2",
                 "--batch-size", "32", "--no-progress", "--resume",
                 "--checkpoint", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ember train: error: checkpoint {path}") and err.count("\n") == 1
    assert "Traceback" not in err


def test_a_checkpoint_without_loss_sums_still_resumes(tmp_path):
    path = tmp_path / "old.safetensors"
    train(train_config(path, max_steps=30), **QUIET)
    ck = em.load(str(path))
    del ck["epoch_loss_sum"], ck["epoch_batches"]   # written before the sums were saved
    em.save(ck, str(path))
    assert train(train_config(path, resume=True), **QUIET)["steps"] == 44


def test_resume_with_other_options_is_refused(tmp_path):
    path = tmp_path / "o.safetensors"
    train(train_config(path, max_steps=5), **QUIET)
    with pytest.raises(UsageError, match="written by a run with --batch-size 32, not 16"):
        train(train_config(path, batch_size=16, resume=True), **QUIET)


# ------------------------------------------------------------------ the command line
def _spirals(path, *extra):
    return ["train", "--model", "mlp", "--dataset", "spirals", "--epochs", "1", "--no-progress",
            "--checkpoint", str(path), *extra]


def test_an_existing_checkpoint_is_not_overwritten(tmp_path, capsys):
    path = tmp_path / "run.safetensors"
    assert main(_spirals(path)) == 0
    before = path.read_bytes()
    with pytest.raises(SystemExit) as e:
        main(_spirals(path, "--seed", "1"))
    assert e.value.code == 2 and path.read_bytes() == before
    assert "already holds a checkpoint; pass --resume" in capsys.readouterr().err
    assert main(_spirals(path, "--seed", "1", "--overwrite")) == 0
    assert path.read_bytes() != before


def test_a_user_error_is_an_argparse_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--model", "cnn", "--dataset", "spirals", "--no-progress",
              "--checkpoint", str(tmp_path / "x.safetensors")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert err.startswith("usage: ember train")
    assert "ember train: error: --model cnn needs an image dataset" in err


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for text in ("(default: cnn)", "(default: 64)", "(default: 0.003)", "(default: 0)",
                 "3 for --model gpt"):
        assert text in out


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"ember {em.__version__}"
    try:
        from importlib.metadata import PackageNotFoundError, version
        assert version("ember") == em.__version__
    except PackageNotFoundError:
        pass


# ------------------------------------------------------------------ language models
def test_held_out_text_is_encoded_with_the_training_vocabulary():
    from ember.training.datasets import _text_parts
    text = "abcabcabc " * 20 + "zyx " * 6     # the held-out part has characters of its own
    tr, te, info = _text_parts(text, 8)
    ds, split = info["dataset"], int(len(text) * 0.9)
    assert ds.decode(te[0][0]) == text[split:split + 8]
    assert ds.decode(te[0][1]) == text[split + 1:split + 9]
    assert ds.decode(tr[len(tr) - 1][1]) == text[split - 8:split]   # no overlap
    assert info["vocab"] == len(set(text))


def test_the_zen_of_python_is_not_printed():
    code = ("from ember.training.datasets import load_dataset\n"
            "from ember.training import TrainConfig\n"
            "load_dataset(TrainConfig(model='gpt', dataset='text'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert out == ""


def test_language_models_report_perplexity_and_held_out_loss_falls(tmp_path, capsys):
    assert main(["train", "--model", "gpt", "--dataset", "text", "--no-progress",
                 "--checkpoint", str(tmp_path / "g.safetensors")]) == 0
    out = capsys.readouterr().out
    assert "accuracy" not in out and "perplexity" in out
    assert out.startswith("gpt on text:")
    sample = [s for s in out.splitlines() if s.startswith("sample: ")]
    assert len(sample) == 1 and len(sample[0]) < 200
    rows = [json.loads(s) for s in (tmp_path / "g.metrics.jsonl").read_text().splitlines()]
    losses = [r["test_loss"] for r in rows]
    assert len(rows) == 3 and losses[-1] == min(losses) and losses[-1] < losses[0] - 0.1
    assert rows[-1]["test_ppl"] == pytest.approx(math.exp(losses[-1]))


def test_a_diverged_run_is_an_error_and_writes_no_checkpoint(tmp_path, capsys):
    path = tmp_path / "nan.safetensors"
    assert main(_spirals(path, "--lr", "1e30")) == 1
    err = capsys.readouterr().err
    assert err.startswith("ember train: error: training diverged at step") and "nan" in err
    assert not path.exists()
