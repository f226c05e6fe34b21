"""Data loading (``torch.utils.data``): datasets, samplers, collation, the DataLoader.

Example:
    >>> from ember.data import DataLoader, TensorDataset
    >>> ds = TensorDataset(ember.randn(10, 3), ember.arange(10))
    >>> x, y = next(iter(DataLoader(ds, batch_size=4, shuffle=True)))
    >>> tuple(x.shape), tuple(y.shape)
    ((4, 3), (4,))
"""
from . import transforms  # noqa: F401
from ._worker import WorkerInfo, get_worker_info
from .collate import default_collate, default_convert
from .dataloader import DataLoader
from .distributed import DistributedSampler
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset,
                      Subset, TensorDataset, random_split)
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler, WeightedRandomSampler)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset",
           "Subset", "StackDataset", "random_split", "Sampler", "SequentialSampler",
           "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler",
           "DistributedSampler", "DataLoader", "default_collate", "default_convert", "get_worker_info", "WorkerInfo",
           "transforms"]
