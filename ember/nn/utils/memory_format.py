"""``ember.nn.utils.memory_format``: lay convolution weights out in a memory format
(``torch.nn.utils.convert_conv2d_weight_memory_format``)."""
from __future__ import annotations

__all__ = ["convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format"]


def _convert(module, memory_format, kinds):
    from ...autograd.grad_mode import no_grad
    for m in module.modules():
        if isinstance(m, kinds):
            with no_grad():
                m.weight.data = m.weight.detach().contiguous(memory_format=memory_format)
    return module


def convert_conv2d_weight_memory_format(module, memory_format):
    """Lay every ``Conv2d``/``ConvTranspose2d`` weight in ``module`` out in
    ``memory_format`` (e.g. ``ember.channels_last``); returns ``module``.

    Example:
        >>> net = convert_conv2d_weight_memory_format(net, ember.channels_last)
    """
    from ..modules.conv import Conv2d, ConvTranspose2d
    return _convert(module, memory_format, (Conv2d, ConvTranspose2d))


def convert_conv3d_weight_memory_format(module, memory_format):
    """As :func:`convert_conv2d_weight_memory_format`, for ``Conv3d``/``ConvTranspose3d``."""
    from ..modules.conv import Conv3d, ConvTranspose3d
    return _convert(module, memory_format, (Conv3d, ConvTranspose3d))
