"""Datasets (``torch.utils.data.Dataset`` and friends) and :func:`random_split`.

A map-style dataset has ``__getitem__(i)`` and ``__len__``; an iterable-style one has
``__iter__`` (streams; shard them in workers with :func:`get_worker_info`).

Example:
    >>> ds = TensorDataset(ember.arange(4), ember.arange(4) * 10)
    >>> [int(v) for v in ds[2]]
    [2, 20]
"""
from __future__ import annotations

import bisect
import math
from typing import Sequence

import numpy as np

from .. import random as _random
from ..ops.factories import from_numpy
from ..tensor import Tensor

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset",
           "Subset", "StackDataset", "random_split"]


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__`` and ``__len__``."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A stream of samples: subclasses define ``__iter__``."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are ``(t[i] for t in tensors)``; all tensors share their first dimension.

    Example:
        >>> len(TensorDataset(ember.zeros(5, 2), ember.zeros(5)))
        5
    """

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset: needs at least one tensor")
        sizes = [t.shape[0] if t.ndim else None for t in tensors]
        if None in sizes or any(s != sizes[0] for s in sizes):
            shapes = [tuple(t.shape) for t in tensors]
            raise ValueError(f"TensorDataset: size mismatch between tensors, shapes {shapes}; "
                             f"all tensors need the same size in dim 0")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def _fetch_batch(self, indices) -> list:
        """``default_collate([self[i] for i in indices])``, built with one ``index_select``
        per tensor instead of one indexing op per sample and a stack (the DataLoader's fast
        path when ``collate_fn`` is the default)."""
        idx = _index_array(indices, len(self), "TensorDataset")
        return [t.index_select(0, idx) for t in self.tensors]


class StackDataset(Dataset):
    """Zips datasets of equal length: ``StackDataset(a, b)[i] == (a[i], b[i])``, or a dict
    with keyword datasets."""

    def __init__(self, *args, **kwargs) -> None:
        if bool(args) == bool(kwargs):
            raise ValueError("StackDataset: pass datasets either positionally or by keyword")
        self.datasets = args or kwargs
        lens = {len(d) for d in (args or kwargs.values())}
        if len(lens) != 1:
            raise ValueError(f"StackDataset: size mismatch between datasets: {sorted(lens)}")
        self._length = lens.pop()

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def _fetch_batch(self, indices):
        """The collated batch from each dataset's batched fetch (NotImplemented when one
        has none)."""
        ds = self.datasets.values() if isinstance(self.datasets, dict) else self.datasets
        parts = [fetch_batch(d, indices) for d in ds]
        if any(p is NotImplemented for p in parts):
            return NotImplemented
        return dict(zip(self.datasets, parts)) if isinstance(self.datasets, dict) else parts

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset):
    """The concatenation of map-style datasets."""

    def __init__(self, datasets) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset (use "
                                "ChainDataset)")
        self.cumulative_sizes = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        n = len(self)
        if idx < 0:
            idx += n
        if not 0 <= idx < n:
            raise IndexError(f"ConcatDataset: index {idx} out of range for length {n}")
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        return self.datasets[d][idx - (self.cumulative_sizes[d - 1] if d else 0)]


class ChainDataset(IterableDataset):
    """Chains iterable datasets one after another."""

    def __init__(self, datasets) -> None:
        self.datasets = list(datasets)

    def __iter__(self):
        for d in self.datasets:
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return [self.dataset[self.indices[i]] for i in idx]
        return self.dataset[self.indices[idx]]

    def _fetch_batch(self, indices):
        return fetch_batch(self.dataset, [self.indices[i] for i in indices])

    def __len__(self) -> int:
        return len(self.indices)


def fetch_batch(dataset, indices):
    """``default_collate([dataset[i] for i in indices])`` computed by the dataset in one
    batched call (``TensorDataset``, and ``Subset``/``StackDataset`` over such datasets),
    or ``NotImplemented`` when it has none — also when a subclass overrides ``__getitem__``
    or defines ``__getitems__`` (their samples then come from the user's code)."""
    cls = type(dataset)
    if cls.__getitem__ not in _BATCHED or getattr(cls, "__getitems__", None) is not None:
        return NotImplemented
    return dataset._fetch_batch(indices)


def _index_array(indices, n: int, who: str) -> Tensor:
    """``indices`` (ints, possibly negative) as an int64 index tensor, range-checked."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = int(idx[(idx < -n) | (idx >= n)][0])
        raise IndexError(f"{who}: index {bad} is out of range for a dataset of length {n}")
    if idx.size and idx.min() < 0:
        idx = np.where(idx < 0, idx + n, idx)
    return from_numpy(idx)


#: the ``__getitem__`` s whose samples ``_fetch_batch`` reproduces in one call
_BATCHED = {TensorDataset.__getitem__, Subset.__getitem__, StackDataset.__getitem__}


def _split_lengths(n: int, lengths) -> list[int]:
    lengths = list(lengths)
    if lengths and all(isinstance(x, float) for x in lengths) and \
            math.isclose(sum(lengths), 1.0) and sum(lengths) <= 1 + 1e-9:
        if any(not 0 <= f <= 1 for f in lengths):
            raise ValueError(f"random_split: fractions must be in [0, 1], got {lengths}")
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):  # NOTE: torch's rule: leftovers round-robin
            sizes[i % len(sizes)] += 1
        return sizes
    if any(not isinstance(x, int) or x < 0 for x in lengths):
        raise ValueError(f"random_split: lengths must be non-negative ints or fractions "
                         f"summing to 1, got {lengths}")
    if sum(lengths) != n:
        raise ValueError(f"random_split: sum of input lengths ({sum(lengths)}) does not equal "
                         f"the length of the input dataset ({n})")
    return lengths


def random_split(dataset, lengths, generator=None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random :class:`Subset` s.

    Args:
        lengths: sizes (ints summing to ``len(dataset)``) or fractions summing to 1
            (leftover items go round-robin to the first subsets, like PyTorch).
        generator: an ``ember.Generator`` (default: Ember's default generator).

    Example:
        >>> a, b = random_split(range(10), [0.8, 0.2], ember.Generator().manual_seed(0))
        >>> len(a), len(b)
        (8, 2)
    """
    sizes = _split_lengths(len(dataset), lengths)
    perm = _random.randperm(sum(sizes), generator=generator).tolist()
    offsets = np.cumsum([0] + sizes).tolist()
    return [Subset(dataset, perm[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
