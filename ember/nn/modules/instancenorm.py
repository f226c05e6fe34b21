"""``torch.nn.modules.instancenorm``'s names; the classes live in :mod:`.normalization`."""
from .normalization import InstanceNorm1d, InstanceNorm2d, _InstanceNorm  # noqa: F401

__all__ = ["InstanceNorm1d", "InstanceNorm2d"]
