"""DataLoader's fast path over TensorDataset (and Subset/StackDataset of it): one gather per
tensor per batch, the same batches as per-sample fetching + default_collate, and custom
collate_fn / __getitems__ / subclasses keep PyTorch's behaviour."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.data import (BatchSampler, DataLoader, SequentialSampler, StackDataset, Subset,
                        TensorDataset, default_collate)
from ember.profiler import profile

N = 23


def _ds():
    rng = np.random.default_rng(0)
    x = ember.from_numpy(rng.standard_normal((N, 4)).astype(np.float32))
    y = ember.from_numpy(rng.integers(0, 5, N))
    return TensorDataset(x, y)


def _slow(batch):
    return default_collate(batch)      # not `default_collate` itself: per-sample path


def _same(a, b):
    """Equal nested batches: same container types, tensors equal in dtype, shape, values."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _both(ds, **kw):
    runs = []
    for collate in (None, _slow):
        if "generator" in kw:
            kw["generator"] = ember.Generator().manual_seed(3)
        runs.append(list(DataLoader(ds, collate_fn=collate, **kw)))
    return runs


@pytest.mark.parametrize("kw", [dict(batch_size=5), dict(batch_size=5, drop_last=True),
                                dict(batch_size=4, shuffle=True, generator=None),
                                dict(batch_size=3, sampler=list(reversed(range(N)))),
                                dict(batch_sampler=[[0, -1, 5], [22, 2], []][:2]),
                                dict(batch_size=6, num_workers=2)])
def test_fast_path_gives_the_per_sample_batches(kw):
    fast, slow = _both(_ds(), **kw)
    _same(fast, slow)
    assert isinstance(fast[0], list) and len(fast[0]) == 2


def test_subset_stack_and_one_dim_tensors():
    ds = _ds()
    sub = Subset(ds, [3, 1, 4, 1, 5, 9, 2, 6])
    _same(*_both(sub, batch_size=3))
    sub2 = Subset(ds, list(range(8, 16)))
    _same(*_both(StackDataset(sub2, sub), batch_size=4))
    _same(*_both(StackDataset(a=sub2, b=sub), batch_size=4))
    _same(*_both(TensorDataset(ember.arange(7.0)), batch_size=3))


def test_one_gather_per_tensor_per_batch():
    ds = _ds()
    with profile() as prof:
        batches = list(DataLoader(ds, batch_size=8))
    counts = {e.key: e.count for e in prof.key_averages()}
    assert len(batches) == 3
    # one gather (index_select's primitive) per tensor per batch, nothing per sample
    assert counts == {"index": 2 * 3}, counts


def test_custom_collate_gets_the_list_of_samples_like_pytorch():
    seen = []
    loader = DataLoader(_ds(), batch_size=4, collate_fn=lambda b: seen.append(b) or len(b))
    assert next(iter(loader)) == 4
    batch = seen[0]
    assert type(batch) is list and len(batch) == 4
    assert type(batch[0]) is tuple and batch[0][0].shape == (4,) and batch[0][1].shape == ()
    torch = pytest.importorskip("torch")
    tseen = []
    tds = torch.utils.data.TensorDataset(torch.zeros(N, 4), torch.zeros(N, dtype=torch.long))
    next(iter(torch.utils.data.DataLoader(tds, batch_size=4,
                                          collate_fn=lambda b: tseen.append(b) or 0)))
    assert type(tseen[0]) is list and type(tseen[0][0]) is tuple
    assert [tuple(t.shape) for t in tseen[0][0]] == [tuple(t.shape) for t in batch[0]]


def test_user_getitems_and_getitem_overrides_are_honoured():
    calls = []

    class Batched(ember.data.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            raise AssertionError("__getitems__ should be used")

        def __getitems__(self, indices):
            calls.append(list(indices))
            return [(ember.tensor(float(i)),) for i in indices]

    out = list(DataLoader(Batched(), batch_size=4))
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert out[2][0].tolist() == [8.0, 9.0]

    class Doubled(TensorDataset):
        def __getitem__(self, i):
            return tuple(t[i] * 2 for t in self.tensors)

    ds = Doubled(ember.arange(6.0))
    assert next(iter(DataLoader(ds, batch_size=3)))[0].tolist() == [0.0, 2.0, 4.0]


def test_out_of_range_index_names_the_dataset():
    with pytest.raises(IndexError, match="TensorDataset: index 23 is out of range .* 23"):
        list(DataLoader(_ds(), batch_sampler=[[0, N]]))
    seq = BatchSampler(SequentialSampler(range(N)), 10, drop_last=False)
    assert [len(b[0]) for b in DataLoader(_ds(), batch_sampler=seq)] == [10, 10, 3]
