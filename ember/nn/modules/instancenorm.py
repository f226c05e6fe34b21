"""``torch.nn.modules.instancenorm``'s names; InstanceNorm1d/2d live in :mod:`.normalization`."""
from .normalization import InstanceNorm1d, InstanceNorm2d, _InstanceNorm  # noqa: F401

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


class InstanceNorm3d(_InstanceNorm):
    """Instance norm over (N, C, D, H, W) or (C, D, H, W) input."""
    _dims = (4, 5)
