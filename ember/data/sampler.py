"""Samplers: iterables of dataset indices (``torch.utils.data.Sampler`` and friends).

Random samplers draw ONE 63-bit seed per epoch from their ``generator`` (or, without
one, from Ember's default generator) and shuffle with a private PCG64 stream seeded by
it. That seed is the whole randomness of an epoch, so :meth:`state_dict` can record it
and :meth:`load_state_dict` can replay the interrupted epoch exactly (the DataLoader
then skips the batches already consumed) — this is what exact checkpoint resume uses.

Example:
    >>> g = ember.Generator().manual_seed(0)
    >>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
    [[0, 1], [2, 3], [4]]
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from .. import random as _random

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler"]


class Sampler:
    """Base class: subclasses define ``__iter__`` (indices) and usually ``__len__``."""

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """State needed to replay the current epoch (empty for deterministic samplers)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; the next ``iter()`` replays the saved epoch."""


class SequentialSampler(Sampler):
    """Indices ``0 .. len(data_source) - 1`` in order."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class _EpochSeeded(Sampler):
    """One seed per epoch from ``generator`` (or the default generator); replayable."""

    generator = None
    _epoch_seed = None
    _replay = None

    def _epoch_rng(self) -> np.random.Generator:
        if self._replay is not None:
            seed, self._replay = self._replay, None
        else:
            seed = int(_random._gen(self.generator).integers(0, 1 << 63))
        self._epoch_seed = seed
        return np.random.Generator(np.random.PCG64(seed))

    def state_dict(self) -> dict:
        """``{"epoch_seed": seed of the epoch in progress, "generator": its state}``."""
        gen = None if self.generator is None else self.generator.state_dict()
        return {"epoch_seed": self._epoch_seed, "generator": gen}

    def load_state_dict(self, state: dict) -> None:
        if state.get("generator") is not None and self.generator is not None:
            self.generator.set_state(state["generator"])
        self._replay = state.get("epoch_seed")
        self._epoch_seed = self._replay


class RandomSampler(_EpochSeeded):
    """Random order (a permutation, or ``num_samples`` draws with ``replacement=True``).

    Example:
        >>> g = ember.Generator().manual_seed(1)
        >>> sorted(RandomSampler(range(4), generator=g))
        [0, 1, 2, 3]
    """

    def __init__(self, data_source, replacement: bool = False, num_samples=None,
                 generator=None) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement should be a bool, got {replacement!r}")
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise ValueError(f"RandomSampler: num_samples should be a positive integer, got "
                             f"{num_samples!r}")
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, rng = len(self.data_source), self._epoch_rng()
        if self.replacement:
            return iter(rng.integers(0, n, self.num_samples).tolist())
        full, rest = divmod(self.num_samples, n) if n else (0, 0)
        idx = [rng.permutation(n) for _ in range(full)] + [rng.permutation(n)[:rest]]
        return iter(np.concatenate(idx).tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(_EpochSeeded):
    """The given ``indices`` in random order, without replacement."""

    def __init__(self, indices: Sequence[int], generator=None) -> None:
        self.indices, self.generator = indices, generator

    def __iter__(self) -> Iterator[int]:
        perm = self._epoch_rng().permutation(len(self.indices))
        return iter([self.indices[i] for i in perm.tolist()])

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(_EpochSeeded):
    """``num_samples`` indices drawn with probability proportional to ``weights``.

    Example:
        >>> s = WeightedRandomSampler([0.0, 1.0], 3)
        >>> list(s)
        [1, 1, 1]
    """

    def __init__(self, weights, num_samples: int, replacement: bool = True,
                 generator=None) -> None:
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"WeightedRandomSampler: num_samples should be a positive "
                             f"integer, got {num_samples!r}")
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") else weights,
                       dtype=np.float64)
        if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("WeightedRandomSampler: weights must be a 1-D sequence of "
                             "non-negative finite numbers with a positive sum")
        if not replacement and num_samples > int((w > 0).sum()):
            raise ValueError(f"WeightedRandomSampler: cannot draw {num_samples} samples "
                             f"without replacement from {int((w > 0).sum())} non-zero weights")
        self.weights, self.num_samples = w, num_samples
        self.replacement, self.generator = replacement, generator

    def __iter__(self) -> Iterator[int]:
        p = self.weights / self.weights.sum()
        rng = self._epoch_rng()
        return iter(rng.choice(len(p), self.num_samples, replace=self.replacement, p=p).tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of ``batch_size``.

    Example:
        >>> list(BatchSampler(range(5), 2, drop_last=True))
        [[0, 1], [2, 3]]
    """

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"BatchSampler: batch_size should be a positive integer, got "
                             f"{batch_size!r}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"BatchSampler: drop_last should be a bool, got {drop_last!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list]:
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def state_dict(self) -> dict:
        sd = getattr(self.sampler, "state_dict", None)
        return {"sampler": sd()} if sd else {}

    def load_state_dict(self, state: dict) -> None:
        if "sampler" in state and hasattr(self.sampler, "load_state_dict"):
            self.sampler.load_state_dict(state["sampler"])
