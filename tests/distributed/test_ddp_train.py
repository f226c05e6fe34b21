"""``ember train --nproc 2``: data-parallel training, rank 0's checkpoint, restart after a
rank is killed (``--max-restarts 1``) ending bit-exactly where an uninterrupted run ends,
and the 2-process checkpoint resumed by one process."""
import os
import sys

import numpy as np
from mpi_helper import ROOT, mpiexec_or_skip, run

import ember

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ["--model", "mlp", "--dataset", "spirals", "--epochs", "3", "--batch-size", "64",
        "--no-progress"]


def ember_train(*extra, env=None):
    mpiexec_or_skip()
    return run([sys.executable, "-m", "ember", "train", *ARGS, *extra], timeout=300, env=env)


def weights(path):
    return {k: v.numpy() for k, v in ember.load(path)["model"].items()}


def test_nproc2_restart_after_kill_is_bit_exact_and_resumes_on_one_process(tmp_path):
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    first = ember_train("--nproc", "2", "--checkpoint", a)
    assert first.rc == 0, str(first)
    assert first.out.count("epoch   3") == 1          # rank 0 alone logs
    # 720 samples / 64 = 11 steps per epoch: rank 1 dies after step 16 (in epoch 2), the
    # job restarts from the end-of-epoch-1 checkpoint
    env = {"PYTHONPATH": os.pathsep.join([os.path.join(HERE, "_kill_hook"), str(ROOT),
                                          os.environ.get("PYTHONPATH", "")]),
           "EMBER_TEST_KILL_AT": "16", "EMBER_TEST_KILL_RANK": "1"}
    killed = ember_train("--nproc", "2", "--max-restarts", "1", "--checkpoint", b, env=env)
    assert killed.rc == 0, str(killed)
    assert "rank 1" in killed.out and "restarting" in killed.out
    assert "resumed from" in killed.out
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys() and not any(k.startswith("module.") for k in wa)
    for k in wa:
        assert np.array_equal(wa[k], wb[k]), k
    one = ember_train("--resume", "--epochs", "4", "--checkpoint", a)
    assert one.rc == 0, str(one)
    assert "epoch   4" in one.out


def test_ddp_example_zero_matches_plain_on_two_processes(tmp_path):
    """examples/ddp_train.py: ZeRO-1 (--zero) and plain Adam train the same replicas."""
    example = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "ddp_train.py")
    outs = {}
    for flag in ([], ["--zero"]):
        ck = str(tmp_path / f"ck{len(flag)}.safetensors")
        mpiexec_or_skip()
        res = run([sys.executable, "-m", "ember", "run", "--nproc", "2", example, "--epochs",
                   "2", "--checkpoint", ck, *flag], timeout=300)
        assert res.rc == 0, str(res)
        assert "epoch 2: loss" in res.out and "(2 process(es))" in res.out
        outs[len(flag)] = ember.load(ck)
    for k, v in outs[0]["model"].items():
        assert np.array_equal(v.numpy(), outs[1]["model"][k].numpy()), k
    plain, zero = outs[0]["optimizer"]["state"], outs[1]["optimizer"]["state"]
    assert sorted(plain, key=str) == sorted(zero, key=str)   # consolidated: every param
