"""``ember train --profile``: a Chrome trace of training steps 4-6 and a printed table,
without changing the run."""
from __future__ import annotations

import json

import numpy as np

import ember
from ember.cli import main


def _train(tmp_path, name, *extra):
    ck = tmp_path / f"{name}.safetensors"
    assert main(["train", "--model", "mlp", "--dataset", "digits", "--no-progress",
                 "--max-steps", "7", "--checkpoint", str(ck), *extra]) == 0
    return ck


def test_profile_writes_a_trace_of_three_steps_and_changes_nothing(tmp_path, capsys):
    trace = tmp_path / "out" / "t.json"
    profiled = _train(tmp_path, "a", "--profile", str(trace))
    out = capsys.readouterr().out
    assert f"profile of 3 training step(s) written to {trace}" in out
    assert "Self CPU time total:" in out and "LinearBackward" in out  # F.linear's node
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    names = {e["name"] for e in events}
    assert {"ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"} <= names
    assert not {"ProfilerStep#2", "ProfilerStep#6"} & names
    assert {"linear", "matmul", "LinearBackward", "log_softmax"} <= names
    plain = _train(tmp_path, "b")
    a, b = ember.load(str(profiled)), ember.load(str(plain))
    for k in a["model"]:
        np.testing.assert_array_equal(a["model"][k].numpy(), b["model"][k].numpy())


def test_profile_default_path_is_beside_the_checkpoint(tmp_path, capsys):
    ck = _train(tmp_path, "c", "--profile")
    trace = tmp_path / "c.trace.json"
    assert trace.exists() and str(trace) in capsys.readouterr().out
