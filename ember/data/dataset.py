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

    def __len__(self) -> int:
        return len(self.indices)


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
