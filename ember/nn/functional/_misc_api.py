"""Smaller ``torch.nn.functional`` names: ``conv_tbc`` (time-batch-channel convolution),
the ``grid_sample`` mode tables and ``assert_int_or_pair``."""
from __future__ import annotations

from ...errors import ShapeError
from ...ops.dispatch import autocast_entry

__all__ = ["conv_tbc", "GRID_SAMPLE_INTERPOLATION_MODES", "GRID_SAMPLE_PADDING_MODES",
           "assert_int_or_pair"]

#: ``grid_sample``'s ``mode`` names and their ATen codes (PyTorch's table).
GRID_SAMPLE_INTERPOLATION_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
#: ``grid_sample``'s ``padding_mode`` names and their ATen codes (PyTorch's table).
GRID_SAMPLE_PADDING_MODES = {"zeros": 0, "border": 1, "reflection": 2}


def assert_int_or_pair(arg, arg_name: str, message: str) -> None:
    """Raise ``AssertionError(message.format(arg_name))`` unless ``arg`` is an int or has
    two elements (PyTorch's helper)."""
    if not (isinstance(arg, int) or len(arg) == 2):
        raise AssertionError(message.format(arg_name))


@autocast_entry("conv_tbc")
def conv_tbc(input, weight, bias, pad: int = 0):
    """1-D convolution of time-major input (``F.conv_tbc``).

    Args:
        input: ``(T, B, C_in)``.
        weight: ``(K, C_in, C_out)``.
        bias: ``(C_out,)``.
        pad: zero padding on both ends of the time axis.

    Returns:
        ``(T + 2 * pad - K + 1, B, C_out)``.

    Example:
        >>> F.conv_tbc(ember.ones(5, 2, 3), ember.ones(2, 3, 4), ember.zeros(4)).shape
        ember.Size([4, 2, 4])
    """
    from . import conv1d
    if input.ndim != 3 or weight.ndim != 3 or bias.ndim != 1:
        raise ShapeError(f"conv_tbc: expected input (T, B, C_in), weight (K, C_in, C_out) "
                         f"and bias (C_out,), got shapes {tuple(input.shape)}, "
                         f"{tuple(weight.shape)}, {tuple(bias.shape)}")
    if input.shape[2] != weight.shape[1] or bias.shape[0] != weight.shape[2]:
        raise ShapeError(f"conv_tbc: channel mismatch: input {tuple(input.shape)}, weight "
                         f"{tuple(weight.shape)}, bias {tuple(bias.shape)} (need input.shape[2]"
                         f" == weight.shape[1] and bias.shape[0] == weight.shape[2])")
    out = conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=int(pad))
    return out.permute(2, 0, 1)
