"""``ember.utils.checkpoint.checkpoint`` — where PyTorch users look for it.

The implementation lives in :mod:`ember.autograd.checkpoint`.
"""
from ..autograd.checkpoint import SAVE_MATMUL_CONV, checkpoint, checkpoint_sequential

__all__ = ["checkpoint", "checkpoint_sequential", "SAVE_MATMUL_CONV"]
