"""``torch.nn.modules.batchnorm``'s names; the classes live in :mod:`.normalization`.

``isinstance(m, nn.modules.batchnorm._BatchNorm)`` (a common test for "is a batch norm
layer", e.g. to exclude its parameters from weight decay) works as in PyTorch.
"""
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNorm,  # noqa: F401
                            _NormBase)

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]
