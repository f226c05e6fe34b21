"""``ember.backends.cuda``: CUDA matmul/SDP flags (``torch.backends.cuda``), kept but unused.

Example:
    >>> ember.backends.cuda.matmul.allow_tf32 = True
"""
from __future__ import annotations


class _MatmulFlags:
    """``backends.cuda.matmul``: settable precision flags with PyTorch's defaults."""

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    def __repr__(self) -> str:
        return f"_MatmulFlags({vars(self)})"


matmul = _MatmulFlags()


def is_built() -> bool:
    """False: this Ember has no CUDA backend."""
    return False


_SDP = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def enable_flash_sdp(enabled: bool) -> None:
    """Record the flag (no CUDA attention kernels to select)."""
    _SDP["flash"] = bool(enabled)


def enable_mem_efficient_sdp(enabled: bool) -> None:
    """Record the flag (no CUDA attention kernels to select)."""
    _SDP["mem_efficient"] = bool(enabled)


def enable_math_sdp(enabled: bool) -> None:
    """Record the flag (Ember's CPU attention is always available)."""
    _SDP["math"] = bool(enabled)


def flash_sdp_enabled() -> bool:
    """The recorded flash-attention flag."""
    return _SDP["flash"]


def mem_efficient_sdp_enabled() -> bool:
    """The recorded memory-efficient-attention flag."""
    return _SDP["mem_efficient"]


def math_sdp_enabled() -> bool:
    """The recorded math-attention flag."""
    return _SDP["math"]
