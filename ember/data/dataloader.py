"""``DataLoader``: batches from a dataset, in order, optionally loaded by worker processes.

Randomness and resume. Each ``iter(loader)`` starts an epoch: it draws a ``base_seed``
from the loader's ``generator`` (default: Ember's default generator), then the sampler
draws its epoch seed (see :mod:`ember.data.sampler`). Same generator seed → same batches
in the same order, with or without workers. ``loader.state_dict()`` records the epoch in
progress (its seeds, how many batches were consumed) and the generators' current states;
``loader.load_state_dict(sd)`` makes the next ``iter(loader)`` continue that epoch at the
next batch (map-style datasets skip indices without loading them; iterable datasets are
re-read and the consumed batches dropped). Save it with ``ember.save`` next to the model,
optimizer and ``ember.get_rng_state()``::

    ckpt = {"model": model.state_dict(), "loader": loader.state_dict(), "epoch": epoch,
            "rng": ember.get_rng_state()}
    ...
    loader.load_state_dict(ckpt["loader"]); ember.set_rng_state(ckpt["rng"])
    for epoch in range(ckpt["epoch"], epochs):
        for x, y in loader:   # the first pass finishes the interrupted epoch
            ...

An iterator starts its epoch (draws the seeds, or takes up a loaded position) at its first
``next()``, not when ``iter(loader)`` makes it: an iterator made and dropped unused changes
nothing (``tqdm.auto.tqdm(loader)`` makes one before the one it iterates), so a loop gives
the same batches with or without a progress bar. (PyTorch draws its seed in ``iter()``.)

Example:
    >>> ds = TensorDataset(ember.arange(5.0))
    >>> [b[0].tolist() for b in DataLoader(ds, batch_size=2)]
    [[0.0, 1.0], [2.0, 3.0], [4.0]]
"""
from __future__ import annotations

import pickle  # NOTE: only to decode worker answers (see _worker.py); never for files

from .. import random as _random
from . import _worker
from .collate import default_collate, default_convert, unpack
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader"]


def _check_pin_device(dev: str) -> str:
    """``pin_memory_device``: ``""`` or a CUDA device name (ValueError otherwise)."""
    if dev in ("", None):
        return ""
    from ..device import device as _device
    try:
        ok = _device(dev).type == "cuda"
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"DataLoader: pin_memory_device={dev!r} is not a CUDA device; valid: "
                         f"'' (default), 'cuda' or 'cuda:N'")
    return str(dev)


class _InfiniteNone(Sampler):
    """Index sampler of iterable datasets: the indices are never used."""

    def __iter__(self):
        while True:
            yield None


class DataLoader:
    """Iterate over ``dataset`` in batches (``torch.utils.data.DataLoader``).

    Args:
        dataset: map-style (``__getitem__``/``__len__``) or an :class:`IterableDataset`.
        batch_size: samples per batch; ``None`` disables batching (``collate_fn`` then
            defaults to :func:`default_convert`).
        shuffle: reshuffle each epoch (a :class:`RandomSampler` over ``generator``).
        sampler, batch_sampler: custom index order / index batches.
        num_workers: worker processes (0: load in the main process).
        collate_fn: merges a list of samples into a batch (:func:`default_collate`).
        drop_last: drop the last incomplete batch.
        generator: an ``ember.Generator`` for the shuffle order and worker seeds.
        worker_init_fn: called with the worker id in each worker after seeding.
        prefetch_factor: batches loaded in advance per worker (default 2).
        persistent_workers: keep the worker processes alive between epochs.
        multiprocessing_context: ``"fork"``/``"spawn"``/... (default: fork where available).
        timeout: seconds to wait for a batch from the workers (0: no limit).
        pin_memory: copy every tensor of each batch into page-locked host memory
            (``Tensor.pin_memory``), so ``x.to("cuda", non_blocking=True)`` is asynchronous.
        pin_memory_device: ``""`` or a CUDA device (``"cuda"``, ``"cuda:1"``), the device
            the pinned memory is for; Ember's pinned memory serves every CUDA device.

    Example:
        >>> g = ember.Generator().manual_seed(0)
        >>> dl = DataLoader(TensorDataset(ember.arange(6)), batch_size=4, shuffle=True,
        ...                 generator=g, drop_last=True)
        >>> len(dl), len(next(iter(dl))[0])
        (1, 4)
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None,
                 persistent_workers: bool = False, pin_memory_device: str = "") -> None:
        if num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be >= 0, got {num_workers}")
        if prefetch_factor is not None and num_workers == 0:
            raise ValueError("DataLoader: prefetch_factor is only used with num_workers > 0")
        if persistent_workers and num_workers == 0:
            raise ValueError("DataLoader: persistent_workers needs num_workers > 0")
        iterable = isinstance(dataset, IterableDataset)
        if iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader: an IterableDataset takes no shuffle, sampler or "
                             "batch_sampler (it defines its own order)")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None
                                          or drop_last):
            raise ValueError("DataLoader: batch_sampler option is mutually exclusive with "
                             "batch_size, shuffle, sampler, and drop_last")
        if batch_size is None and drop_last:
            raise ValueError("DataLoader: batch_size=None (no batching) is mutually exclusive "
                             "with drop_last")
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle \
                else SequentialSampler(dataset)
        if batch_sampler is None and batch_size is not None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self._iterable = iterable
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.num_workers, self.timeout, self.worker_init_fn = num_workers, timeout, worker_init_fn
        self.collate_fn = collate_fn or (default_collate if self._auto_collation
                                         else default_convert)
        self.generator, self.pin_memory = generator, pin_memory
        self.pin_memory_device = _check_pin_device(pin_memory_device)
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers else prefetch_factor
        self.persistent_workers = persistent_workers
        self.multiprocessing_context = multiprocessing_context
        self._epoch, self._resume = 0, None
        self._progress, self._pool = None, None

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None or (self._iterable and
                                                  self.batch_size is not None)

    @property
    def _index_sampler(self):
        if self._iterable:
            return _InfiniteNone()
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)  # TypeError when the stream has no length, like torch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self._index_sampler)

    def __iter__(self):
        # NOTE: the epoch starts at the iterator's first next(), so an iterator made and
        # dropped unused (tqdm.auto makes one) draws nothing and keeps a loaded position
        return _SingleProcessIter(self) if self.num_workers == 0 else _MultiProcessIter(self)

    # ------------------------------------------------------------------- resume
    def state_dict(self) -> dict:
        """Position for exact resume: epoch, batches consumed, seeds, generator states."""
        if self._resume is not None:  # loaded but not iterated yet: still that position
            return {**self._resume["state"], "generator": _gen_state(self.generator)}
        if self._progress is not None:
            return self._progress.state_dict(self)
        return {"epoch": self._epoch, "batches_consumed": 0, "exhausted": True,
                "base_seed": None, "sampler": {}, "generator": _gen_state(self.generator)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; the next ``iter(self)`` continues the saved epoch."""
        missing = {"epoch", "batches_consumed", "exhausted", "base_seed"} - set(state)
        if missing:
            raise KeyError(f"DataLoader.load_state_dict: missing keys {sorted(missing)}")
        if state.get("generator") is not None and self.generator is not None:
            self.generator.set_state(state["generator"])
        _check_position(self, state)
        self._epoch = int(state["epoch"])
        self._progress = None
        if state["exhausted"]:
            self._resume = None
            return
        if hasattr(self._index_sampler, "load_state_dict"):
            self._index_sampler.load_state_dict(state.get("sampler") or {})
        self._resume = {"base_seed": int(state["base_seed"]),
                        "batches": int(state["batches_consumed"]), "state": dict(state)}

    def _shutdown_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __del__(self) -> None:
        try:
            self._shutdown_pool()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_position(loader: DataLoader, state: dict) -> None:
    """Reject a resume position this loader cannot continue (before anything changes)."""
    where = "DataLoader.load_state_dict"
    if not _is_int(state["epoch"]) or state["epoch"] < 0:
        raise ValueError(f"{where}: 'epoch' must be an integer >= 0, got {state['epoch']!r}")
    if state["exhausted"]:
        return
    n, seed = state["batches_consumed"], state["base_seed"]
    if not _is_int(n) or n < 0:
        raise ValueError(f"{where}: 'batches_consumed' must be an integer >= 0, got {n!r}")
    if not _is_int(seed) or not 0 <= seed < 1 << 63:
        raise ValueError(f"{where}: 'base_seed' must be an integer in [0, 2**63), got {seed!r}")
    try:
        total = len(loader)
    except TypeError:   # NOTE: a stream without a length: checked while skipping
        return
    if n > total:
        raise ValueError(f"{where}: 'batches_consumed' is {n}, but an epoch of this loader has "
                         f"{total} batches (a state saved with another dataset or batch size?)")


def _gen_state(g):
    return None if g is None else g.state_dict()


class _Progress:
    """Where an epoch stands (shared by an iterator and its loader)."""

    def __init__(self, epoch: int, base_seed: int) -> None:
        self.epoch, self.base_seed, self.consumed, self.exhausted = epoch, base_seed, 0, False

    def state_dict(self, loader: DataLoader) -> dict:
        sd = getattr(loader._index_sampler, "state_dict", None)
        return {"epoch": self.epoch, "batches_consumed": self.consumed,
                "exhausted": self.exhausted, "base_seed": self.base_seed,
                "sampler": sd() if sd and not loader._iterable else {},
                "generator": _gen_state(loader.generator)}


class _BaseIter:
    def __init__(self, loader: DataLoader) -> None:
        self._loader, self._started = loader, False

    def _start(self) -> None:
        """Begin the epoch (or take up the loaded position): draw the seeds, skip."""
        ld = self._loader
        resume, ld._resume = ld._resume, None
        ld._epoch += 0 if resume is not None else 1
        if resume is None:
            base_seed = int(_random._gen(ld.generator).integers(0, 1 << 63))
        else:
            base_seed = resume["base_seed"]
        self._base_seed, self._progress = base_seed, _Progress(ld._epoch, base_seed)
        ld._progress = self._progress  # NOTE: not the iterator: no loader<->iterator cycle
        self._sampler_iter = iter(ld._index_sampler)
        self._started = True
        self._begin(resume)

    def _begin(self, resume) -> None:
        raise NotImplementedError

    @property
    def _consumed(self) -> int:
        return self._progress.consumed

    @_consumed.setter
    def _consumed(self, n: int) -> None:
        self._progress.consumed = n

    @property
    def _exhausted(self) -> bool:
        return self._progress.exhausted

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def state_dict(self) -> dict:
        """See :meth:`DataLoader.state_dict`."""
        if not self._started:   # NOTE: loading this state makes the next iterator start here
            return self._loader.state_dict()
        return self._progress.state_dict(self._loader)

    def _skip(self, n: int) -> None:
        """Resume: pass over ``n`` already-consumed batches."""
        if self._loader._iterable:
            for i in range(n):
                try:
                    next(self)
                except StopIteration:
                    raise ValueError(f"DataLoader: cannot resume after {n} batches: the "
                                     f"dataset yields only {i} this epoch") from None
        else:
            for i in range(n):
                try:
                    next(self._sampler_iter)
                except StopIteration:
                    raise ValueError(f"DataLoader: cannot resume after {n} batches: the "
                                     f"sampler has only {i} this epoch") from None
            self._consumed = n

    def _finish(self):
        self._progress.exhausted = True
        raise StopIteration


class _SingleProcessIter(_BaseIter):
    def _begin(self, resume) -> None:
        if self._loader._iterable:
            self._data_iter = iter(self._loader.dataset)
        if resume is not None:
            self._skip(resume["batches"])

    def __next__(self):
        ld = self._loader
        if not self._started:
            self._start()
        if self._exhausted:
            raise StopIteration
        if ld._iterable:
            batch = _worker.fetch_iterable(self._data_iter, ld.batch_size, ld.drop_last,
                                           ld.collate_fn)
            if isinstance(batch, str) and batch == _worker._EXHAUSTED:
                self._finish()
        else:
            try:
                indices = next(self._sampler_iter)
            except StopIteration:
                self._finish()
            batch = _worker.fetch(ld.dataset, indices, ld._auto_collation, ld.collate_fn)
        self._consumed += 1
        if ld.pin_memory:
            from ._pin import pin_batch
            batch = pin_batch(batch)
        return batch


class _MultiProcessIter(_BaseIter):
    """Keeps ``prefetch_factor * num_workers`` tasks in flight and yields in task order."""

    _token = 0

    def _begin(self, resume) -> None:
        loader = self._loader
        _MultiProcessIter._token += 1
        self._key0 = (id(loader), _MultiProcessIter._token)
        if not loader.persistent_workers:
            self._pool = _worker.WorkerPool(loader, self._base_seed)
        else:  # NOTE: workers keep their first seeding; batches still use this epoch's seed
            if loader._pool is None or loader._pool.closed:
                loader._pool = _worker.WorkerPool(loader, self._base_seed)
            self._pool = loader._pool
        self._results, self._next_task, self._next_out = {}, 0, 0
        self._active = list(range(loader.num_workers))
        self._rr, self._sampler_done = 0, False
        if resume is not None and not loader._iterable:
            self._skip(resume["batches"])
            self._next_task = self._next_out = resume["batches"]
        for _ in range(loader.prefetch_factor * loader.num_workers):
            self._send()
        if resume is not None and loader._iterable:
            self._skip(resume["batches"])

    def _send(self) -> None:
        if self._sampler_done or not self._active:
            return
        try:
            indices = next(self._sampler_iter)
        except StopIteration:
            self._sampler_done = True
            return
        i = self._next_task
        if self._loader._iterable:
            worker = self._active[self._rr % len(self._active)]
            self._rr += 1
        else:
            worker = i % self._loader.num_workers
        self._pool.put(worker, ((self._key0, i, worker), self._base_seed, i, indices))
        self._next_task += 1

    def __next__(self):
        if not self._started:
            self._start()
        while True:
            if self._exhausted or self._next_out == self._next_task:
                self._shutdown()
                self._finish()
            key = self._next_out
            while key not in self._results:
                (k0, i, worker), data = self._pool.get(self._loader.timeout)
                if k0 == self._key0:  # NOTE: other keys are stale answers of an old epoch
                    self._results[i] = (worker, data)
            worker, data = self._results.pop(key)
            self._next_out += 1
            out = pickle.loads(data)
            if isinstance(out, _worker.ExceptionWrapper):
                self._shutdown()
                self._next_task = self._next_out  # NOTE: the epoch ends with the error
                out.reraise()
            if isinstance(out, str) and out == _worker._EXHAUSTED:
                if worker in self._active:
                    self._active.remove(worker)
                self._send()
                continue
            self._send()
            self._consumed += 1
            if self._loader.pin_memory:
                from ._pin import pin_batch
                return pin_batch(unpack(out))
            return unpack(out)

    def _shutdown(self) -> None:
        if not self._loader.persistent_workers:
            self._pool.shutdown()

    def __del__(self) -> None:
        try:
            if self._started and not self._exhausted:
                self._shutdown()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass
