"""Worker processes for ``DataLoader(num_workers > 0)``.

Each worker gets tasks ``(key, base_seed, batch_index, indices)`` on its own index queue
and answers ``(key, pickled result)`` on one shared result queue; the main process
reorders answers by batch index, so batch order never depends on timing. Task ``i`` of
a map-style epoch always goes to worker ``i % num_workers``.

Seeding (reproducible from the loader's generator): a worker first seeds Ember's default
generator, NumPy's global RNG and Python's ``random`` with ``base_seed + worker_id``
(``get_worker_info().seed``, as PyTorch does) and then runs ``worker_init_fn``. Before
each batch it reseeds them from ``(base_seed, batch_index)`` (iterable datasets:
``(base_seed, worker_id, batch count)``), so a batch's random transforms depend only
on the seed and the batch's position: the same for any ``num_workers > 0`` and exact
after a checkpoint resume that skips batches.
"""
from __future__ import annotations

import io
import multiprocessing as mp
import pickle  # NOTE: only for the parent<->worker pipe, which multiprocessing pickles anyway
import queue
import random
import traceback
from dataclasses import dataclass

import numpy as np

from .. import random as _random
from ..tensor import Tensor
from .collate import default_collate, pack
from .dataset import fetch_batch

__all__ = ["WorkerInfo", "get_worker_info"]

_EXHAUSTED = "__ember_iterable_exhausted__"
_worker_info = None


@dataclass(frozen=True)
class WorkerInfo:
    """What :func:`get_worker_info` returns inside a worker process."""

    id: int
    num_workers: int
    seed: int
    dataset: object


def get_worker_info():
    """This worker's :class:`WorkerInfo`, or ``None`` in the main process.

    Example:
        >>> get_worker_info() is None
        True
    """
    return _worker_info


def derive_seed(*words: int) -> int:
    """A well-mixed 64-bit seed from a few non-negative ints."""
    ss = np.random.SeedSequence([int(w) % (1 << 64) for w in words])
    return int(ss.generate_state(1, np.uint64)[0])


def seed_all(seed: int) -> None:
    """Seed Ember's default generator, NumPy's global RNG and Python's ``random``."""
    _random.manual_seed(seed % (1 << 64))
    np.random.seed(seed % (1 << 32))
    random.seed(seed)


class ExceptionWrapper:
    """An exception raised in a worker, re-raised in the main process with its traceback."""

    def __init__(self, exc: BaseException, where: str) -> None:
        self.exc_type = type(exc)
        try:
            pickle.dumps(self.exc_type)
        except Exception:  # noqa: BLE001 - a local class: fall back to RuntimeError
            self.exc_type = RuntimeError
        self.msg = f"Caught {type(exc).__name__} {where}.\nOriginal " + \
            "".join(traceback.format_exception(exc))

    def reraise(self):
        try:
            err = self.exc_type(self.msg)
        except Exception:  # noqa: BLE001 - exception types with odd constructors
            err = RuntimeError(self.msg)
        raise err


def fetch(dataset, indices, auto_collation: bool, collate_fn):
    """Load one batch (map-style): samples at ``indices`` through ``collate_fn``."""
    if auto_collation:
        if collate_fn is default_collate:     # one gather per tensor, no per-sample work
            batch = fetch_batch(dataset, indices)
            if batch is not NotImplemented:
                return batch
        getitems = getattr(dataset, "__getitems__", None)
        data = getitems(indices) if getitems else [dataset[i] for i in indices]
    else:
        data = dataset[indices]
    return collate_fn(data)


def fetch_iterable(it, batch_size, drop_last: bool, collate_fn):
    """Next batch of an iterable dataset's iterator, or :data:`_EXHAUSTED`."""
    if batch_size is None:
        try:
            return collate_fn(next(it))
        except StopIteration:
            return _EXHAUSTED
    data = []
    for item in it:
        data.append(item)
        if len(data) == batch_size:
            break
    if not data or (drop_last and len(data) < batch_size):
        return _EXHAUSTED
    return collate_fn(data)


# ------------------------------------------------------------ spawn payload pickling
def _rebuild_tensor(array, dtype_name, requires_grad):
    from .collate import _Packed, _unpack_one
    p = _Packed.__new__(_Packed)
    p.__setstate__((array, dtype_name, requires_grad))
    return _unpack_one(p)


class _TensorPickler(pickle.Pickler):
    """Pickles Ember tensors as NumPy arrays (tensors refuse plain pickling)."""

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            arr = np.array(obj.detach().cpu().numpy(), order="C")
            return _rebuild_tensor, (arr, obj.dtype.name, bool(obj.requires_grad))
        return NotImplemented


def dumps_with_tensors(obj) -> bytes:
    buf = io.BytesIO()
    _TensorPickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


# -------------------------------------------------------------------- the loop
def _answer(result_q, key, fn):
    try:
        result_q.put((key, pickle.dumps(pack(fn()), protocol=pickle.HIGHEST_PROTOCOL)))
    except Exception as e:  # noqa: BLE001 - every failure goes back to the main process
        where = f"in DataLoader worker process {_worker_info.id}"
        result_q.put((key, pickle.dumps(ExceptionWrapper(e, where))))


def worker_loop(payload, worker_id, num_workers, base_seed, index_q, result_q, done):
    """Body of a worker process (module level so that 'spawn' can import it)."""
    global _worker_info
    if isinstance(payload, bytes):
        payload = pickle.loads(payload)
    dataset, iterable, auto_collation, collate_fn, init_fn, batch_size, drop_last = payload
    seed = (base_seed + worker_id) % (1 << 64)
    seed_all(seed)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    init_error = None
    if init_fn is not None:
        try:
            init_fn(worker_id)
        except Exception as e:  # noqa: BLE001
            init_error = ExceptionWrapper(e, f"in worker_init_fn of DataLoader worker "
                                             f"{worker_id}")
    it, it_token, count = None, None, 0
    # NOTE: answers nobody will read (an abandoned epoch) must not block this process' exit
    result_q.cancel_join_thread()
    while True:
        if done.is_set():
            break
        try:
            task = index_q.get(timeout=0.2)
        except queue.Empty:
            parent = mp.parent_process()
            if parent is not None and not parent.is_alive():
                break  # NOTE: the main process died; don't linger as an orphan
            continue
        if task is None:
            break
        key, epoch_seed, batch_index, indices = task
        if init_error is not None:
            result_q.put((key, pickle.dumps(init_error)))
            continue
        if iterable:
            if it_token != key[0]:
                it, it_token, count = iter(dataset), key[0], 0
            seed_all(derive_seed(epoch_seed, worker_id, count))
            count += 1
            _answer(result_q, key, lambda: fetch_iterable(it, batch_size, drop_last,
                                                          collate_fn))
        else:
            seed_all(derive_seed(epoch_seed, batch_index))
            _answer(result_q, key, lambda: fetch(dataset, indices, auto_collation, collate_fn))


# ------------------------------------------------------------- the main-process side
class WorkerPool:
    """The worker processes and their queues."""

    def __init__(self, loader, base_seed: int) -> None:
        ctx = loader.multiprocessing_context
        if ctx is None or isinstance(ctx, str):
            ctx = mp.get_context(ctx or ("fork" if "fork" in mp.get_all_start_methods()
                                         else "spawn"))
        payload = (loader.dataset, loader._iterable, loader._auto_collation, loader.collate_fn,
                   loader.worker_init_fn, loader.batch_size, loader.drop_last)
        if ctx.get_start_method() != "fork":
            payload = dumps_with_tensors(payload)
        n = loader.num_workers
        self.done = ctx.Event()
        self.result_q = ctx.Queue()
        self.index_qs = [ctx.Queue() for _ in range(n)]
        self.workers = [ctx.Process(target=worker_loop, daemon=True,
                                    args=(payload, i, n, base_seed, self.index_qs[i],
                                          self.result_q, self.done)) for i in range(n)]
        for w in self.workers:
            w.start()
        self.closed = False

    def put(self, worker: int, task) -> None:
        self.index_qs[worker].put(task)

    def get(self, timeout: float):
        waited = 0.0
        while True:
            try:
                return self.result_q.get(timeout=1.0)
            except queue.Empty:
                waited += 1.0
            dead = [w.pid for w in self.workers if not w.is_alive()]
            if dead:
                self.shutdown()
                raise RuntimeError(f"DataLoader worker (pid(s) {dead}) exited unexpectedly")
            if timeout and waited >= timeout:
                self.shutdown()
                raise RuntimeError(f"DataLoader timed out after {timeout} seconds")

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.done.set()
        for q in self.index_qs:
            q.put(None)
        for w in self.workers:
            w.join(timeout=2.0)
            if w.is_alive():
                w.terminate()
        for q in self.index_qs + [self.result_q]:
            q.cancel_join_thread()
            q.close()
        self.workers, self.index_qs = [], []
