"""``torch.utils.dlpack``: tensors to and from DLPack without copies.

Example:
    >>> import numpy as np
    >>> t = ember.utils.dlpack.from_dlpack(np.arange(3.0))     # shares NumPy's memory
    >>> cap = ember.utils.dlpack.to_dlpack(t)                  # a PyCapsule for other libraries
"""
from __future__ import annotations

import enum

from .._torch_toplevel_more import to_dlpack
from ..ops.factories import from_dlpack

__all__ = ["DLDeviceType", "from_dlpack", "to_dlpack"]


class DLDeviceType(enum.IntEnum):
    """DLPack's device types (``__dlpack_device__()[0]``), with PyTorch's member names."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
