"""``ember.backends.cuda``: CUDA matmul/SDP flags (``torch.backends.cuda``).

``matmul.allow_tf32`` lets cuBLAS GEMMs of float32 run on TF32 tensor cores
(``codegen/cuda_gemm.py``); the flash flag chooses Ember's fused FlashAttention kernels
on a GPU (off: the CuPy attention). The memory-efficient, math and cuDNN flags are
recorded for PyTorch code that sets them: Ember has no such separate kernels, and its
non-flash attention is always available.

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
    """True: every Ember install has its CUDA backend (it runs where CuPy finds a GPU:
    ``ember.cuda.is_available()``), as a CUDA build of PyTorch answers on a CPU-only host."""
    return True


_SDP = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def enable_flash_sdp(enabled: bool) -> None:
    """Use Ember's FlashAttention kernels on a GPU (or not: the CuPy attention)."""
    _SDP["flash"] = bool(enabled)


def enable_mem_efficient_sdp(enabled: bool) -> None:
    """Record the flag (Ember has no separate memory-efficient kernel)."""
    _SDP["mem_efficient"] = bool(enabled)


def enable_math_sdp(enabled: bool) -> None:
    """Record the flag (Ember's CPU attention is always available)."""
    _SDP["math"] = bool(enabled)


def flash_sdp_enabled() -> bool:
    """Whether a GPU's attention may take Ember's FlashAttention kernels."""
    return _SDP["flash"]


def mem_efficient_sdp_enabled() -> bool:
    """The recorded memory-efficient-attention flag."""
    return _SDP["mem_efficient"]


def math_sdp_enabled() -> bool:
    """The recorded math-attention flag."""
    return _SDP["math"]


def enable_cudnn_sdp(enabled: bool) -> None:
    """Record the flag (Ember has no cuDNN attention)."""
    _SDP["cudnn"] = bool(enabled)


def cudnn_sdp_enabled() -> bool:
    """The recorded cuDNN-attention flag."""
    return _SDP["cudnn"]


class sdp_kernel:  # noqa: N801 - torch.backends.cuda.sdp_kernel
    """Set the SDP flags for a block, restoring them after (PyTorch's deprecated
    predecessor of ``ember.nn.attention.sdpa_kernel``).

    Example:
        >>> with ember.backends.cuda.sdp_kernel(enable_flash=False):
        ...     out = F.scaled_dot_product_attention(q, k, v)
    """

    def __init__(self, enable_flash: bool = True, enable_math: bool = True,
                 enable_mem_efficient: bool = True, enable_cudnn: bool = True):
        self._want = {"flash": enable_flash, "math": enable_math,
                      "mem_efficient": enable_mem_efficient, "cudnn": enable_cudnn}

    def __enter__(self):
        self._saved = dict(_SDP)
        _SDP.update({k: bool(v) for k, v in self._want.items()})
        return self

    def __exit__(self, *exc):
        _SDP.update(self._saved)
        return False
