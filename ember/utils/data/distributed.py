"""``ember.utils.data.distributed``: ``DistributedSampler`` at PyTorch's import path.

The same class as :class:`ember.data.distributed.DistributedSampler`.
"""
from ...data.distributed import DistributedSampler  # noqa: F401

__all__ = ["DistributedSampler"]
