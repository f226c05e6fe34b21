"""DistributedDataParallel, no_sync and ZeRO-1 in a real 2-process MPI job.

All checks run in ONE ``mpiexec -n 2`` job (``_ddp_worker.py``) to keep the suite fast;
each test below asserts one of its results. References (single process, float32 and
float64, 20 steps):

* per-shard: one process averaging the losses of per-rank forwards (BatchNorm
  normalises each shard with its own statistics, as a DDP rank does) — DDP must equal
  it EXACTLY in float32 and float64: with 2 ranks the all-reduce adds two pre-halved
  gradients, which is the same sum backward forms.
* concatenated batch (W1 MLP, 784-512-512-10): the whole batch in one forward — GEMMs
  sum in another order, so <= 1e-6 relative in float32 and <= 1e-12 in float64.
"""
import json
import os
import sys

import pytest
from mpi_helper import mpiexec_or_skip, run

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "out.json"
    res = run([mpiexec_or_skip(), "-n", 2, sys.executable, os.path.join(HERE, "_ddp_worker.py"),
               out], timeout=300)
    assert res.rc == 0, str(res)
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", ["mlp_float32", "mlp_float64", "cnn_float32", "cnn_float64"])
def test_ddp_equals_per_shard_training_exactly(results, name):
    assert results["world"] == 2
    assert results[f"{name}_vs_per_shard_exact"] is True


def test_ddp_mlp_equals_concatenated_batch(results):
    assert results["mlp_float32_vs_concat_rel"] <= 1e-6
    assert results["mlp_float64_vs_concat_rel"] <= 1e-12


def test_replicas_agree_and_state_dict_keys(results):
    assert results["replicas_agree"] is True
    assert results["state_dict_keys"] == ["module.0.bias", "module.0.weight"]


def test_no_sync_accumulation_equals_larger_batch(results):
    assert results["no_sync_rel"] <= 1e-12   # float64


def test_zero1_equals_ddp_and_shards_state(results):
    assert results["zero_equals_ddp_rank0"] is True
    assert results["zero_equals_ddp_rank1"] is True
    shares = results["zero_state_shares"]   # each rank's state / a replicated optimizer's
    assert sum(shares) == pytest.approx(1.0, abs=1e-12) and max(shares) < 0.61
    assert results["zero_consolidated_matches_plain"] is True
    assert results["zero_reload_bytes_rank0"] is True and results["zero_reload_bytes_rank1"]


def test_find_unused_parameters(results):
    assert results["unused_b_grad_averaged"] is True
    assert results["unused_everywhere_grad_none"] is True
    assert results["strict_unused_raises"] is True


@pytest.mark.parametrize("kind", ["mlp", "cnn", "zero"])
def test_compiled_ddp_step_captures_collectives_as_nodes(results, kind):
    # ember.compile records each bucket's all-reduce (and the BatchNorm CNN's buffer
    # broadcasts, ZeRO-1's parameter broadcasts) as graph nodes that call MPI at every
    # replay: no graph break, the graph is replayed, the replicas stay identical and match
    # eager DDP (fused kernels round differently from eager ones: <= 1e-6, not exact)
    assert results[f"compiled_{kind}_graph_break"] is False
    assert results[f"compiled_{kind}_captures"] <= 2
    all_reduces, broadcasts = results[f"compiled_{kind}_collective_nodes"]
    assert all_reduces >= 1 and results[f"compiled_{kind}_waits"] == all_reduces
    # cnn: BatchNorm's running mean, var and batches seen; zero: one per owner rank
    assert broadcasts == {"mlp": 0, "cnn": 3, "zero": 2}[kind]
    assert results[f"compiled_{kind}_replicas_agree"] is True
    assert results[f"compiled_{kind}_vs_eager_rel_rank0"] <= 1e-6
    assert results[f"compiled_{kind}_vs_eager_rel_rank1"] <= 1e-6


def test_compiled_ddp_find_unused_parameters_graph_breaks(results):
    # the usage-map all-reduce is not capturable: fullgraph=True raises (without it, the
    # step runs eagerly)
    assert results["fullgraph_raises"] is True


def test_backward_that_raised_midway_does_not_break_the_next(results):
    assert results["failed_backward_raised"] is True
    assert results["after_failed_backward_grads_agree"] is True


def test_compiled_ddp_waits_after_the_remaining_backward(results):
    # each bucket's all-reduce is a start node (when the bucket is full) and a wait node
    # at the end of backward: fc1's weight gradient (a matmul) is computed between the
    # first bucket's start and its wait, so the communication overlaps it, and a poll
    # node after fc1's gradients Tests the request (MPI progresses only inside MPI calls)
    # (a product reading a transposed operand is a ``matmul_t`` node: the same GEMM)
    between = ["matmul" if name == "matmul_t" else name
               for name in results["compiled_between_first_start_and_wait"]]
    assert "matmul" in between, between
    polls = [i for i, name in enumerate(between) if name == "all_reduce_poll"]
    assert polls and polls[-1] > between.index("matmul"), between


def test_ddp_launches_a_bucket_before_backward_ends_after_rebuild(results):
    # iteration 1: reverse registration order puts `early` (ready last) in bucket 0, so
    # nothing can launch before the end of backward; the buckets are then rebuilt in the
    # order gradients became ready and iteration 2 launches bucket 0 mid-backward
    assert results["ddp_first_launch_before_backward_end"] == [False, True]
    # (which of late's two gradients is ready first depends on its backward node: a
    # linear primitive's or matmul + add's; a 1 MiB weight fills the first bucket alone)
    rebuilt = [name for bucket in results["ddp_rebuilt_buckets"] for name in bucket]
    assert sorted(rebuilt) == ["early.bias", "early.weight", "late.bias", "late.weight"]
    assert [n.split(".")[0] for n in rebuilt] == ["late", "late", "early", "early"], rebuilt
    assert all(n.startswith("late.") for n in results["ddp_rebuilt_buckets"][0])
    assert results["ddp_rebuilt_grads_vs_mean_rel_rank0"] <= 1e-6
    assert results["ddp_rebuilt_grads_vs_mean_rel_rank1"] <= 1e-6
