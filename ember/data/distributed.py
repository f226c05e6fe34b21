"""``DistributedSampler``: each process of a data-parallel job reads its own slice of a dataset.

The index sequence follows ``torch.utils.data.DistributedSampler`` step by step: a
permutation of ``range(len(dataset))`` drawn from a generator seeded with
``seed + epoch`` (or the identity without shuffling), padded by repeating indices from
its start (or truncated with ``drop_last``) to a multiple of ``num_replicas``, then
strided ``indices[rank::num_replicas]``. Every rank draws the same permutation, so the
ranks' slices are disjoint and together cover the dataset. The permutation comes from
Ember's generator, so the indices differ from PyTorch's for the same seed; the structure
is the same.

Example:
    >>> s = DistributedSampler(range(5), num_replicas=2, rank=1, shuffle=False)
    >>> list(s)   # padded to 6 indices: [0, 1, 2, 3, 4, 0], rank 1 takes 1, 3, 0
    [1, 3, 0]
"""
from __future__ import annotations

import math
from typing import Iterator

from .sampler import Sampler

__all__ = ["DistributedSampler"]


def _world(num_replicas, rank):
    if num_replicas is not None and rank is not None:
        return num_replicas, rank
    from .. import distributed as dist   # NOTE: late import: data sits below distributed
    if not dist.is_initialized():
        raise RuntimeError("DistributedSampler: pass num_replicas= and rank=, or call "
                           "ember.distributed.init_process_group() first")
    return (dist.get_world_size() if num_replicas is None else num_replicas,
            dist.get_rank() if rank is None else rank)


class DistributedSampler(Sampler):
    """Restricts loading to this rank's share of ``dataset`` (PyTorch's semantics).

    Args:
        dataset: anything with ``len()``.
        num_replicas: number of processes (default: the process group's world size).
        rank: this process's rank (default: the process group's rank).
        shuffle: draw a new permutation each epoch (seeded with ``seed + epoch``).
        seed: shared by all ranks; they must agree on it.
        drop_last: drop the tail so every rank gets ``len(dataset) // num_replicas``
            samples; otherwise pad by repeating indices from the start.

    Call :meth:`set_epoch` before each epoch, or every epoch reuses the same order.
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        num_replicas, rank = _world(num_replicas, rank)
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas should be a positive integer, "
                             f"got {num_replicas!r}")
        if not isinstance(rank, int) or rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.epoch = 0
        n = len(dataset)
        if self.drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def _global_indices(self) -> list:
        n = len(self.dataset)
        if self.shuffle:
            from ..random import Generator, randperm
            g = Generator().manual_seed(self.seed + self.epoch)
            indices = randperm(n, generator=g).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad <= len(indices):
                indices += indices[:pad]
            else:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[:self.total_size]
        return indices

    def __iter__(self) -> Iterator[int]:
        indices = self._global_indices()
        if len(indices) != self.total_size:   # an empty dataset cannot be padded
            raise ValueError(f"DistributedSampler: cannot pad {len(self.dataset)} samples to "
                             f"{self.total_size} for {self.num_replicas} replicas")
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next ``iter()``: with ``shuffle`` it changes the order."""
        self.epoch = int(epoch)

    def state_dict(self) -> dict:
        """``{"epoch": ...}``: the order of an epoch depends only on seed and epoch."""
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict) -> None:
        if "epoch" in state:
            self.epoch = int(state["epoch"])
