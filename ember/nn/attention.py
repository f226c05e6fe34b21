"""``torch.nn.attention``: choosing the kernels of ``scaled_dot_product_attention``.

:func:`sdpa_kernel` enables the listed :class:`SDPBackend` s for a block and disables the
others (``ember.backends.cuda``'s flags, restored on exit). In Ember only the flash flag
selects anything: on a GPU, ``FLASH_ATTENTION`` is its fused FlashAttention kernels and,
without it, attention runs the CuPy composite; ``MATH``, ``EFFICIENT_ATTENTION`` and
``CUDNN_ATTENTION`` are recorded (Ember has no separate such kernels; its non-flash
attention is always available), and the CPU always runs its own fused kernel.

Example:
    >>> from ember.nn.attention import SDPBackend, sdpa_kernel
    >>> with sdpa_kernel(SDPBackend.MATH):          # no flash kernels inside
    ...     out = ember.nn.functional.scaled_dot_product_attention(q, k, v)
"""
from __future__ import annotations

import contextlib
import enum

from ..backends import cuda as _flags

__all__ = ["SDPBackend", "sdpa_kernel", "WARN_FOR_UNFUSED_KERNELS"]

#: PyTorch warns when a fused kernel cannot run; Ember's fallbacks are silent.
WARN_FOR_UNFUSED_KERNELS = False


class SDPBackend(enum.IntEnum):
    """The attention backends PyTorch names (values as PyTorch's)."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_FLAG = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash",
         SDPBackend.EFFICIENT_ATTENTION: "mem_efficient",
         SDPBackend.CUDNN_ATTENTION: "cudnn"}


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority: bool = False):
    """Enable only ``backends`` (one :class:`SDPBackend` or a list) inside the block.
    ``set_priority`` is accepted for PyTorch's signature: Ember has one kernel per case,
    so there is no order to choose."""
    chosen = [backends] if isinstance(backends, SDPBackend) else list(backends)
    for b in chosen:
        if not isinstance(b, SDPBackend):
            raise TypeError(f"sdpa_kernel: expected SDPBackend values, got {b!r} "
                            f"({type(b).__name__})")
    before = dict(_flags._SDP)
    try:
        for b, name in _FLAG.items():
            _flags._SDP[name] = b in chosen
        yield
    finally:
        _flags._SDP.update(before)
