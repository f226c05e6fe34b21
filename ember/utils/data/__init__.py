"""``ember.utils.data``: PyTorch's import path for :mod:`ember.data` (``torch.utils.data``).

The same objects, not copies: ``ember.utils.data.DataLoader is ember.data.DataLoader``, so
``from torch.utils.data import DataLoader, Dataset`` works with ``import ember as torch``.
The submodules PyTorch programs import from (``dataloader``, ``dataset``, ``sampler``,
``distributed``) are the corresponding :mod:`ember.data` modules.

Example:
    >>> from ember.utils.data import DataLoader, TensorDataset
    >>> DataLoader is ember.data.DataLoader
    True
"""
import sys as _sys

from ...data import *  # noqa: F401,F403
from ...data import __all__ as _data_all
from ...data import dataloader, dataset, sampler  # noqa: F401
from . import distributed  # noqa: F401

# NOTE: PyTorch programs also import from the submodules
# (``from torch.utils.data.dataloader import default_collate``); alias them to ember.data's.
for _name, _mod in (("dataloader", dataloader), ("dataset", dataset), ("sampler", sampler)):
    _sys.modules.setdefault(f"{__name__}.{_name}", _mod)

__all__ = list(_data_all) + ["distributed"]
