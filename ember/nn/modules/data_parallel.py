"""``DataParallel`` (``torch.nn.DataParallel``): single-process multi-device replication.

Ember has one compute device per process (CPU, or one GPU), so like PyTorch's
``DataParallel`` with no or one device it runs the wrapped module directly; for real
data parallelism use :class:`~ember.nn.parallel.DistributedDataParallel` (what PyTorch
recommends too). The wrapper keeps PyTorch's attributes (``module``, ``device_ids``,
``output_device``, ``dim``) and ``state_dict`` keys (prefixed ``module.``).
"""
from __future__ import annotations

from ..module import Module

__all__ = ["DataParallel"]


class DataParallel(Module):
    """Wrap ``module``; ``forward`` calls it on the inputs (one device: no scatter/gather).

    Args:
        module: the module to run.
        device_ids: devices to use; at most one is supported (default: none on CPU).
        output_device: where outputs go (default ``device_ids[0]``).
        dim: the batch dimension inputs would be scattered on.

    Example:
        >>> model = ember.nn.DataParallel(ember.nn.Linear(3, 2))
        >>> model(ember.ones(4, 3)).shape
        ember.Size([4, 2])
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        from ... import cuda
        self.module = module
        self.dim = dim
        if device_ids is None:
            device_ids = [0] if cuda.is_available() else []
        self.device_ids = [getattr(d, "index", d) for d in device_ids]
        if len(self.device_ids) > 1:
            raise ValueError(f"DataParallel: Ember runs one device per process; got "
                             f"device_ids={self.device_ids}. Use DistributedDataParallel "
                             f"(one process per device) instead.")
        self.output_device = (self.device_ids[0] if output_device is None and self.device_ids
                              else output_device)

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
