"""ember.data: datasets, samplers, collation, DataLoader (incl. workers, resume), transforms."""
import collections
import os

import numpy as np
import pytest

import ember as em
from ember.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset,
                        RandomSampler, SequentialSampler, StackDataset, Subset,
                        SubsetRandomSampler, TensorDataset, WeightedRandomSampler,
                        default_collate, default_convert, get_worker_info, random_split)
from ember.data import transforms as T


def _ds(n=10):
    return TensorDataset(em.arange(n, dtype=em.float32), em.arange(n))


def _labels(loader):
    return [b[1].tolist() for b in loader]


class Noisy(Dataset):
    """Each sample draws from the global generators (to test worker seeding)."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return em.rand(1)[0] + i, float(np.random.rand())


class WorkerEcho(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = get_worker_info()
        return i, (-1 if info is None else info.id), os.getpid()


class Stream(IterableDataset):
    """0..n-1, sharded across workers by id (the documented pattern)."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        k, w = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(k, self.n, w))

    def __len__(self):
        return self.n


# ------------------------------------------------------------------ datasets
def test_tensor_dataset_and_errors():
    ds = _ds(4)
    assert len(ds) == 4 and [int(v) for v in ds[3]] == [3, 3]
    with pytest.raises(ValueError, match="size mismatch"):
        TensorDataset(em.zeros(3), em.zeros(4))


def test_concat_subset_stack():
    a, b = _ds(3), _ds(2)
    c = a + b
    assert isinstance(c, ConcatDataset) and len(c) == 5
    assert [int(c[i][1]) for i in range(5)] == [0, 1, 2, 0, 1] and int(c[-1][1]) == 1
    with pytest.raises(IndexError):
        c[5]
    s = Subset(a, [2, 0])
    assert len(s) == 2 and int(s[0][1]) == 2
    st = StackDataset(x=a, y=[10, 11, 12])
    assert st[1]["y"] == 11 and int(st[1]["x"][1]) == 1


def test_random_split_sizes_and_determinism():
    parts = random_split(range(10), [3, 7], generator=em.Generator().manual_seed(5))
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(parts[0].indices + parts[1].indices) == list(range(10))
    again = random_split(range(10), [3, 7], generator=em.Generator().manual_seed(5))
    assert parts[0].indices == again[0].indices
    assert [len(p) for p in random_split(range(11), [0.5, 0.3, 0.2])] == [6, 3, 2]
    assert [len(p) for p in random_split(range(10), [0.34, 0.33, 0.33])] == [4, 3, 3]
    with pytest.raises(ValueError, match="sum of input lengths"):
        random_split(range(10), [3, 3])


# ------------------------------------------------------------------ samplers
def test_sequential_and_batch_sampler():
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3]
    bs = BatchSampler(range(7), 3, drop_last=False)
    assert list(bs) == [[0, 1, 2], [3, 4, 5], [6]] and len(bs) == 3
    bs = BatchSampler(range(7), 3, drop_last=True)
    assert list(bs) == [[0, 1, 2], [3, 4, 5]] and len(bs) == 2
    with pytest.raises(ValueError):
        BatchSampler(range(3), 0, False)


def test_random_sampler_permutation_statistics_and_seed():
    g = em.Generator().manual_seed(0)
    s = RandomSampler(range(5), generator=g)
    counts = np.zeros((5, 5))
    for _ in range(2000):
        order = list(s)
        assert sorted(order) == [0, 1, 2, 3, 4]
        counts[np.arange(5), order] += 1
    # every value lands in every position ~1/5 of the time
    assert np.abs(counts / 2000 - 0.2).max() < 0.04
    a = list(RandomSampler(range(50), generator=em.Generator().manual_seed(3)))
    b = list(RandomSampler(range(50), generator=em.Generator().manual_seed(3)))
    assert a == b != list(range(50))


def test_random_sampler_replacement_and_num_samples():
    s = RandomSampler(range(3), replacement=True, num_samples=3000,
                      generator=em.Generator().manual_seed(1))
    draws = np.array(list(s))
    assert len(s) == 3000 and np.abs(np.bincount(draws) / 3000 - 1 / 3).max() < 0.04
    s = RandomSampler(range(3), num_samples=7, generator=em.Generator().manual_seed(1))
    out = list(s)
    assert len(out) == 7 and sorted(out[:3]) == [0, 1, 2] and sorted(out[3:6]) == [0, 1, 2]


def test_weighted_and_subset_samplers():
    s = WeightedRandomSampler([1.0, 3.0, 0.0], 4000, generator=em.Generator().manual_seed(2))
    freq = np.bincount(list(s), minlength=3) / 4000
    assert freq[2] == 0 and abs(freq[1] - 0.75) < 0.03
    s = WeightedRandomSampler(em.tensor([1.0, 1.0, 1.0]), 3, replacement=False)
    assert sorted(s) == [0, 1, 2]
    with pytest.raises(ValueError):
        WeightedRandomSampler([1.0, -1.0], 2)
    sub = SubsetRandomSampler([10, 20, 30], generator=em.Generator().manual_seed(0))
    assert sorted(sub) == [10, 20, 30] and len(sub) == 3


def test_random_sampler_without_generator_uses_global_seed():
    em.manual_seed(7)
    a = list(RandomSampler(range(20)))
    em.manual_seed(7)
    assert list(RandomSampler(range(20))) == a


# ------------------------------------------------------------------ collate
def test_default_collate_rules():
    Point = collections.namedtuple("Point", "x y")
    b = default_collate([(em.tensor([1.0, 2.0]), 1, 0.5, "a", True),
                         (em.tensor([3.0, 4.0]), 2, 1.5, "b", False)])
    assert isinstance(b, list) and b[0].shape == (2, 2)
    assert b[1].dtype == em.int64 and b[1].tolist() == [1, 2]
    assert b[2].dtype == em.float64 and b[3] == ["a", "b"] and b[4].dtype == em.bool
    d = default_collate([{"img": np.zeros((2, 3), np.uint8), "p": Point(1, np.float32(2))}] * 3)
    assert d["img"].shape == (3, 2, 3) and d["img"].dtype == em.uint8
    assert isinstance(d["p"], Point) and d["p"].x.tolist() == [1, 1, 1]
    assert d["p"].y.dtype == em.float32
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [1]])
    with pytest.raises(TypeError, match="found object"):
        default_collate([object(), object()])
    c = default_convert({"a": np.arange(3), "b": [np.ones(2)]})
    assert c["a"].dtype == em.int64 and c["b"][0].shape == (2,)


# ------------------------------------------------------------------ DataLoader
def test_batching_drop_last_len():
    dl = DataLoader(_ds(10), batch_size=4)
    assert len(dl) == 3 and _labels(dl) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    dl = DataLoader(_ds(10), batch_size=4, drop_last=True)
    assert len(dl) == 2 and _labels(dl) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    x, y = next(iter(dl))
    assert x.dtype == em.float32 and y.dtype == em.int64
    dl = DataLoader(_ds(3), batch_size=None)
    assert [int(b[1]) for b in dl] == [0, 1, 2]


def test_shuffle_reproducible_and_changes_per_epoch():
    g = em.Generator().manual_seed(0)
    dl = DataLoader(_ds(20), batch_size=5, shuffle=True, generator=g)
    e1, e2 = _labels(dl), _labels(dl)
    assert e1 != e2 and sorted(sum(e1, [])) == list(range(20))
    g.manual_seed(0)
    assert _labels(dl) == e1 and _labels(dl) == e2


def test_custom_collate_sampler_and_errors():
    dl = DataLoader(_ds(4), batch_size=2, collate_fn=lambda b: len(b))
    assert list(dl) == [2, 2]
    dl = DataLoader(_ds(4), sampler=[3, 1], batch_size=1)
    assert _labels(dl) == [[3], [1]]
    dl = DataLoader(_ds(6), batch_sampler=[[0, 5], [2]])
    assert _labels(dl) == [[0, 5], [2]] and len(dl) == 2
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(_ds(4), sampler=[0], shuffle=True)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(_ds(4), batch_sampler=[[0]], batch_size=2)


def test_iterable_dataset_single_process():
    dl = DataLoader(Stream(7), batch_size=3)
    assert [b.tolist() for b in dl] == [[0, 1, 2], [3, 4, 5], [6]] and len(dl) == 3
    with pytest.raises(ValueError):
        DataLoader(Stream(3), shuffle=True)


def test_workers_same_batches_same_order_as_main_process():
    g = em.Generator().manual_seed(11)
    ref = _labels(DataLoader(_ds(23), batch_size=4, shuffle=True, generator=g))
    g.manual_seed(11)
    got = _labels(DataLoader(_ds(23), batch_size=4, shuffle=True, generator=g, num_workers=2))
    assert got == ref
    g.manual_seed(11)
    got = _labels(DataLoader(_ds(23), batch_size=4, shuffle=True, generator=g, num_workers=3,
                             prefetch_factor=1))
    assert got == ref


def test_workers_random_transforms_reproducible():
    def run(workers):
        g = em.Generator().manual_seed(4)
        dl = DataLoader(Noisy(), batch_size=3, generator=g, num_workers=workers)
        return [(b[0].tolist(), b[1].tolist()) for b in dl]

    a = run(2)
    assert a == run(2) and a == run(3)  # per-batch seeding: independent of worker count
    assert len({tuple(x[0]) for x in a}) == 4  # and different per batch


def test_worker_info_and_init_fn():
    def init(worker_id):
        info = get_worker_info()
        assert info.id == worker_id and info.num_workers == 2
        assert isinstance(info.dataset, WorkerEcho)

    g = em.Generator().manual_seed(0)
    dl = DataLoader(WorkerEcho(), batch_size=2, num_workers=2, worker_init_fn=init,
                    generator=g)
    batches = list(dl)
    assert [b[0].tolist() for b in batches] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [b[1].tolist() for b in batches] == [[0, 0], [1, 1], [0, 0], [1, 1]]
    assert os.getpid() not in {p for b in batches for p in b[2].tolist()}
    assert get_worker_info() is None


def test_worker_init_fn_error_and_dataset_error_propagate():
    def bad_init(worker_id):
        raise ValueError("init boom")

    with pytest.raises(ValueError, match="init boom"):
        list(DataLoader(_ds(4), batch_size=2, num_workers=1, worker_init_fn=bad_init))

    class Bad(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i == 2:
                raise KeyError("sample 2 is broken")
            return i

    with pytest.raises(KeyError, match="sample 2 is broken"):
        list(DataLoader(Bad(), batch_size=1, num_workers=2))


def test_dead_worker_is_reported():
    class Dies(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            os._exit(3)

    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(DataLoader(Dies(), num_workers=1))


def test_iterable_dataset_with_workers():
    dl = DataLoader(Stream(10), batch_size=2, num_workers=2)
    got = sorted(sum([b.tolist() for b in dl], []))
    assert got == list(range(10))
    dl = DataLoader(Stream(10), batch_size=2, num_workers=2)
    assert [b.tolist() for b in dl] == [[0, 2], [1, 3], [4, 6], [5, 7], [8], [9]]


def test_persistent_workers_and_spawn_context():
    g = em.Generator().manual_seed(1)
    dl = DataLoader(_ds(9), batch_size=4, shuffle=True, generator=g, num_workers=2,
                    persistent_workers=True)
    e = [_labels(dl), _labels(dl)]
    pids = [w.pid for w in dl._pool.workers]
    e.append(_labels(dl))
    assert [w.pid for w in dl._pool.workers] == pids
    g.manual_seed(1)
    ref = DataLoader(_ds(9), batch_size=4, shuffle=True, generator=g)
    assert e == [_labels(ref) for _ in range(3)]
    dl._shutdown_pool()
    spawn = DataLoader(_ds(6), batch_size=3, num_workers=1, multiprocessing_context="spawn")
    assert _labels(spawn) == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("workers", [0, 2])
def test_state_dict_resume_mid_epoch(workers):
    def make():
        return DataLoader(_ds(17), batch_size=3, shuffle=True,
                          generator=em.Generator().manual_seed(9), num_workers=workers)

    full = make()
    ref = [_labels(full), _labels(full)]
    dl = make()
    _labels(dl)  # epoch 1
    it = iter(dl)
    head = [next(it)[1].tolist() for _ in range(2)]
    sd = dl.state_dict()
    assert sd["epoch"] == 2 and sd["batches_consumed"] == 2 and not sd["exhausted"]
    del it
    resumed = make()
    resumed.load_state_dict(sd)
    assert resumed.state_dict() == sd  # loaded, not iterated yet: same position
    tail = _labels(resumed)
    assert head + tail == ref[1]
    resumed.load_state_dict(sd)  # an explicit generator ends in the same state, too
    _labels(resumed)
    assert resumed.generator.state_dict() == full.generator.state_dict()


def test_resume_with_workers_and_random_transforms_is_exact():
    def make():
        return DataLoader(Noisy(), batch_size=2, shuffle=True, num_workers=2,
                          generator=em.Generator().manual_seed(2))

    ref = [b[0].tolist() for b in make()]
    dl = make()
    it = iter(dl)
    head = [next(it)[0].tolist() for _ in range(3)]
    sd = dl.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(sd)
    assert head + [b[0].tolist() for b in resumed] == ref


def test_worker_error_ends_the_epoch():
    class Bad(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise ZeroDivisionError("bad sample")

    it = iter(DataLoader(Bad(), num_workers=1))
    with pytest.raises(ZeroDivisionError, match="in DataLoader worker process 0"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_state_dict_resume_global_generator_and_iterable():
    em.manual_seed(3)
    dl = DataLoader(_ds(10), batch_size=2, shuffle=True)
    ref = _labels(dl)
    em.manual_seed(3)
    it = iter(dl)
    head = [next(it)[1].tolist()]
    sd, rng = dl.state_dict(), em.get_rng_state()
    em.manual_seed(1234)  # the run "dies"; a fresh process restores both states
    fresh = DataLoader(_ds(10), batch_size=2, shuffle=True)
    fresh.load_state_dict(sd)
    em.set_rng_state(rng)
    assert head + _labels(fresh) == ref
    st = DataLoader(Stream(7), batch_size=2)
    it = iter(st)
    next(it)
    st2 = DataLoader(Stream(7), batch_size=2)
    st2.load_state_dict(st.state_dict())
    assert [b.tolist() for b in st2] == [[2, 3], [4, 5], [6]]


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterator_dropped_unused_changes_nothing(workers):
    def make():
        return DataLoader(_ds(12), batch_size=3, shuffle=True, num_workers=workers,
                          generator=em.Generator().manual_seed(5))
    once = make()
    ref, dl = [_labels(once), _labels(once)], make()
    unused = iter(dl)
    del unused
    assert _labels(dl) == ref[0]
    it = iter(dl)
    head = [next(it)[1].tolist()]
    sd = dl.state_dict()
    fresh = make()
    fresh.load_state_dict(sd)
    unused = iter(fresh)      # must not take up the loaded position
    assert fresh.state_dict() == sd and unused.state_dict() == sd
    del unused
    assert head + _labels(fresh) == ref[1]


def test_a_tqdm_auto_bar_over_the_loader_gives_the_same_batches():
    tqdm = pytest.importorskip("tqdm.auto").tqdm
    def make():
        return DataLoader(_ds(12), batch_size=3, shuffle=True,
                          generator=em.Generator().manual_seed(5))
    ref = _labels(make())
    assert [b[1].tolist() for b in tqdm(make(), disable=False, file=open(os.devnull, "w"))] \
        == ref


class _Unsized(IterableDataset):
    def __iter__(self):
        return iter(range(5))


@pytest.mark.parametrize("edit, match", [
    ({"batches_consumed": 9}, r"'batches_consumed' is 9, but an epoch of this loader has 5"),
    ({"batches_consumed": -1}, r"'batches_consumed' must be an integer >= 0, got -1"),
    ({"epoch": -2}, r"'epoch' must be an integer >= 0, got -2"),
    ({"base_seed": "x"}, r"'base_seed' must be an integer"),
])
def test_load_state_dict_rejects_a_position_it_cannot_continue(edit, match):
    dl = DataLoader(_ds(10), batch_size=2, shuffle=True, generator=em.Generator().manual_seed(0))
    it = iter(dl)
    next(it)
    sd = {**dl.state_dict(), **edit}
    fresh = DataLoader(_ds(10), batch_size=2, shuffle=True,
                       generator=em.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=match):
        fresh.load_state_dict(sd)


def test_resume_past_the_end_of_an_unsized_stream_is_a_value_error_not_stop_iteration():
    dl = DataLoader(_Unsized(), batch_size=2)
    it = iter(dl)
    next(it)
    sd = {**dl.state_dict(), "batches_consumed": 7}
    fresh = DataLoader(_Unsized(), batch_size=2)
    fresh.load_state_dict(sd)
    with pytest.raises(ValueError, match="cannot resume after 7 batches: the dataset yields "
                                         "only 3"):
        next(iter(fresh))


def test_state_dict_round_trips_through_save(tmp_path):
    dl = DataLoader(_ds(10), batch_size=3, shuffle=True, generator=em.Generator().manual_seed(0))
    it = iter(dl)
    next(it)
    em.save({"loader": dl.state_dict()}, tmp_path / "ck.safetensors")
    assert em.load(tmp_path / "ck.safetensors")["loader"] == dl.state_dict()


# ------------------------------------------------------------------ transforms
def test_to_tensor_and_normalize():
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 10
    t = T.ToTensor()(img)
    assert t.shape == (3, 2, 3) and t.dtype == em.float32
    np.testing.assert_array_equal(t.numpy(), img.transpose(2, 0, 1).astype(np.float32) / 255)
    assert T.ToTensor()(np.zeros((4, 5), np.float64)).dtype == em.float64
    with pytest.raises(TypeError):
        T.ToTensor()(em.zeros(3, 3))
    n = T.Normalize([0.5, 0.0, 1.0], [0.5, 2.0, 1.0])(t)
    mean, std = np.array([0.5, 0.0, 1.0])[:, None, None], np.array([0.5, 2.0, 1.0])[:, None, None]
    np.testing.assert_allclose(n.numpy(), (t.numpy() - mean) / std, rtol=1e-6)
    with pytest.raises(ValueError):
        T.Normalize([0.5], [0.0])


def test_random_crop_and_flip():
    x = em.arange(2 * 4 * 4, dtype=em.float32).reshape(2, 4, 4)
    em.manual_seed(0)
    seen = set()
    for _ in range(60):
        c = T.RandomCrop(4, padding=1)(x)
        assert c.shape == (2, 4, 4)
        cn, pn = c.numpy(), np.pad(x.numpy(), ((0, 0), (1, 1), (1, 1)))
        hits = [(i, j) for i in range(3) for j in range(3)
                if np.array_equal(pn[:, i:i + 4, j:j + 4], cn)]
        assert hits
        seen.add(hits[0])
    assert len(seen) == 9  # every offset reachable
    assert T.RandomCrop((2, 3))(x).shape == (2, 2, 3)
    with pytest.raises(ValueError, match="larger"):
        T.RandomCrop(5)(x)
    flips = [bool(np.array_equal(T.RandomHorizontalFlip(0.5)(x).numpy(), x.numpy()[..., ::-1]))
             for _ in range(400)]
    assert 0.4 < np.mean(flips) < 0.6
    np.testing.assert_array_equal(T.RandomHorizontalFlip(1.0)(x).numpy(), x.numpy()[..., ::-1])
    np.testing.assert_array_equal(T.RandomVerticalFlip(1.0)(x).numpy(), x.numpy()[:, ::-1])


def test_compose_lambda_seeded():
    pipe = T.Compose([T.ToTensor(), T.RandomCrop(2, padding=1), T.RandomHorizontalFlip(),
                      T.Lambda(lambda t: t * 2)])
    img = np.random.default_rng(0).integers(0, 255, (3, 3, 1)).astype(np.uint8)
    em.manual_seed(5)
    a = [pipe(img).numpy() for _ in range(5)]
    em.manual_seed(5)
    b = [pipe(img).numpy() for _ in range(5)]
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert "RandomCrop" in repr(pipe)


def test_training_resume_is_bit_exact(tmp_path):
    """Interrupt a tiny SGD run mid-epoch, save everything with ember.save, resume in fresh
    objects: the final parameters are bit-identical to the uninterrupted run."""
    x = em.randn(22, 3, generator=em.Generator().manual_seed(0))
    y = x @ em.tensor([[1.0], [-2.0], [0.5]])

    def setup():
        params = {"w": em.zeros(3, 1, requires_grad=True), "b": em.zeros(1, requires_grad=True)}
        dl = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, num_workers=0)
        return params, dl

    def step(params, xb, yb):
        mask = (em.rand(xb.shape[0], 1) > 0.2).to(em.float32)  # dropout-like global RNG use
        loss = (((xb @ params["w"] + params["b"] - yb) * mask) ** 2).mean()
        loss.backward()
        with em.no_grad():
            for p in params.values():
                p -= 0.1 * p.grad
                p.grad = None

    def train(stop_at=None, resume=None):
        em.manual_seed(42)
        params, dl = setup()
        start, n = 0, 0
        if resume is not None:
            ck = em.load(resume)
            with em.no_grad():
                for k, p in params.items():
                    p.copy_(ck["params"][k])
            dl.load_state_dict(ck["loader"])
            em.set_rng_state(ck["rng"])
            start = ck["epoch"]
        for epoch in range(start, 3):
            for xb, yb in dl:
                step(params, xb, yb)
                n += 1
                if n == stop_at:
                    em.save({"params": params, "loader": dl.state_dict(), "epoch": epoch,
                             "rng": em.get_rng_state()}, tmp_path / "ck.safetensors")
                    return None
        return params

    ref = train()
    assert train(stop_at=8) is None  # epoch 1, batch 2 of 6
    out = train(resume=tmp_path / "ck.safetensors")
    for k in ref:
        assert out[k].tolist() == ref[k].tolist()
