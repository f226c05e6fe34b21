"""Autograd hooks DistributedDataParallel builds on: post-accumulate-grad and queue_callback."""
import pytest

import ember
from ember.autograd.engine import queue_callback
from ember.errors import GraphError


def test_post_accumulate_hook_runs_once_after_all_contributions():
    w = ember.randn(3, requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.clone()))
    ((w * w).sum() + (w * 2).sum() + w.sum()).backward()   # three edges into w
    assert len(seen) == 1
    assert (seen[0] - (2 * w.detach() + 3)).abs().max().item() < 1e-6


def test_post_accumulate_hook_sees_accumulated_grad_and_can_be_removed():
    w = ember.ones(2, requires_grad=True)
    seen = []
    h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    (w * 3).sum().backward()
    (w * 3).sum().backward()
    assert seen == [[3.0, 3.0], [6.0, 6.0]]
    h.remove()
    (w * 3).sum().backward()
    assert len(seen) == 2


def test_post_accumulate_hook_not_run_under_autograd_grad():
    w = ember.ones(2, requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(1))
    ember.autograd.grad((w * w).sum(), w)
    assert seen == []


def test_post_accumulate_hook_rejects_non_leaf():
    w = ember.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)


def test_queue_callback_runs_at_end_of_backward():
    a = ember.ones(2, requires_grad=True)
    b = ember.ones(2, requires_grad=True)
    order = []

    def hook(t):
        order.append("a")
        queue_callback(lambda: order.append(("end", b.grad is not None)))

    a.register_post_accumulate_grad_hook(hook)
    (a * 2 + b * 3).sum().backward()
    assert order == ["a", ("end", True)]   # after every leaf's gradient, b's included
    with pytest.raises(GraphError, match="no backward pass"):
        queue_callback(lambda: None)


def test_distributed_wrappers_need_a_process_group():
    import ember.distributed as dist
    from ember.data import DistributedSampler
    from ember.distributed.optim import ZeroRedundancyOptimizer
    from ember.nn.parallel import DistributedDataParallel

    if dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedDataParallel(ember.nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="num_replicas= and rank="):
        DistributedSampler(range(3))
    with pytest.raises(RuntimeError, match="init_process_group"):
        ZeroRedundancyOptimizer(ember.nn.Linear(2, 2).parameters(), ember.optim.SGD, lr=0.1)


def test_bucket_assignment_reverse_order_first_bucket_small():
    from ember.nn.parallel._buckets import assign_buckets
    params = [ember.zeros(256 * 1024), ember.zeros(10), ember.zeros(256 * 1024),
              ember.zeros(10, dtype=ember.float64)]   # 1 MiB, 40 B, 1 MiB, 80 B
    # reverse order; dtypes never share a bucket; the first bucket closes at 1 MiB; open
    # buckets follow in the order they were opened (about when backward fills them)
    assert assign_buckets(params, cap_bytes=25 * 2**20) == [[2], [3], [1, 0]]
    assert assign_buckets(params, cap_bytes=1, first_cap_bytes=1) == [[3], [2], [1], [0]]
    # after the first backward: the order gradients became ready
    assert assign_buckets(params, cap_bytes=25 * 2**20, order=[0, 1, 2, 3]) == \
        [[0], [1, 2], [3]]


def test_default_bucket_cap_keeps_several_buckets_for_small_models():
    from ember.nn.parallel._buckets import FIRST_BUCKET_BYTES, assign_buckets, default_cap_bytes
    # W3's gradient bytes (3.4 MB): PyTorch's 25 MiB cap gives 1 MiB + one bucket with the
    # rest (ready only when backward ends); Ember's default caps at a quarter of the total
    params = [ember.zeros(54_000) for _ in range(16)]   # 16 x 216 kB
    assert len(assign_buckets(params, 25 * 2**20)) == 2
    cap = default_cap_bytes(params)
    assert cap == FIRST_BUCKET_BYTES and len(assign_buckets(params, cap)) == 4
    big = [ember.zeros(25 * 2**20)]                       # 100 MiB: PyTorch's 25 MiB
    assert default_cap_bytes(big) == 25 * 2**20
    mid = [ember.zeros(4 * 2**20)]                        # 16 MiB: 4 MiB buckets
    assert default_cap_bytes(mid) == 4 * 2**20


def test_train_loader_splits_the_global_batch_and_rejects_uneven_splits():
    from ember.data import TensorDataset
    from ember.training import distributed as dist_train
    from ember.training.errors import UsageError

    ds = TensorDataset(ember.arange(20))
    shards = [dist_train.make_loader(ds, 8, 0, None, r, 2) for r in range(2)]
    for s in shards:
        dist_train.set_epoch(s, 3)
    batches = [[b[0].tolist() for b in s] for s in shards]
    assert [len(b) for b in batches[0]] == [4, 4]        # global batch 8 = 2 ranks x 4
    seen = sum(batches[0], []) + sum(batches[1], [])
    assert len(set(seen)) == len(seen) == 16             # disjoint shards, drop_last
    with pytest.raises(UsageError, match="--batch-size 9 .* divisible by --nproc 2"):
        dist_train.make_loader(ds, 9, 0, None, 0, 2)
    with pytest.raises(UsageError, match="--nproc"):
        dist_train.init(0)
