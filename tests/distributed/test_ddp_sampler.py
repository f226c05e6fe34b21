"""DistributedSampler: PyTorch's index structure (pad from the start, rank::world striding)."""
import math

import pytest

import ember
from ember.data import DataLoader, DistributedSampler, TensorDataset


def _reference(order, world, rank, drop_last):
    """torch.utils.data.DistributedSampler.__iter__ written out on a given global order."""
    n = len(order)
    num = math.ceil((n - world) / world) if drop_last and n % world else math.ceil(n / world)
    total = num * world
    idx = list(order)
    if drop_last:
        idx = idx[:total]
    else:
        pad = total - n
        idx += (idx * math.ceil(pad / n))[:pad] if pad > len(idx) else idx[:pad]
    return idx[rank:total:world]


@pytest.mark.parametrize("n,world", [(10, 2), (11, 2), (7, 3), (2, 5), (1, 4), (12, 4)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_unshuffled_matches_reference(n, world, drop_last):
    for rank in range(world):
        s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False,
                               drop_last=drop_last)
        got = list(s)
        assert got == _reference(range(n), world, rank, drop_last)
        assert len(s) == len(got)


def test_shuffled_ranks_share_one_permutation_seeded_by_seed_plus_epoch():
    n, world = 23, 3
    samplers = [DistributedSampler(range(n), world, r, shuffle=True, seed=5) for r in range(world)]
    for epoch in (0, 1):
        for s in samplers:
            s.set_epoch(epoch)
        perm = ember.randperm(n, generator=ember.Generator().manual_seed(5 + epoch)).tolist()
        parts = [list(s) for s in samplers]
        for r, part in enumerate(parts):
            assert part == _reference(perm, world, r, False)
        assert set(sum(parts, [])) == set(range(n))
    s = samplers[0]
    s.set_epoch(0)
    e0 = list(s)
    s.set_epoch(1)
    assert list(s) != e0   # a new order each epoch


def test_drop_last_gives_disjoint_slices():
    parts = [list(DistributedSampler(range(11), 2, r, drop_last=True)) for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == 5
    assert not set(parts[0]) & set(parts[1])


def test_state_dict_round_trip_and_loader():
    ds = TensorDataset(ember.arange(10))
    s = DistributedSampler(ds, num_replicas=2, rank=1, seed=3)
    s.set_epoch(4)
    t = DistributedSampler(ds, num_replicas=2, rank=1, seed=3)
    t.load_state_dict(s.state_dict())
    assert list(t) == list(s)
    batches = [b[0].tolist() for b in DataLoader(ds, batch_size=2, sampler=s)]
    assert sum(batches, []) == list(s)


def test_errors():
    with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval "
                                         r"\[0, 1\]"):
        DistributedSampler(range(4), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="num_replicas"):
        DistributedSampler(range(4), num_replicas=0, rank=0)


def test_matches_torch_unshuffled():
    torch_data = pytest.importorskip("torch.utils.data")
    for n, world, drop in [(10, 3, False), (10, 3, True), (3, 4, False)]:
        for r in range(world):
            ref = list(torch_data.DistributedSampler(range(n), world, r, shuffle=False,
                                                     drop_last=drop))
            assert list(DistributedSampler(range(n), world, r, shuffle=False,
                                           drop_last=drop)) == ref
