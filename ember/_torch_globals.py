"""Top-level settings and constants PyTorch programs use (``torch.pi``,
``torch.use_deterministic_algorithms``, ``torch.set_float32_matmul_precision``,
``torch.get_default_device``...), answered truthfully for Ember.

Ember's CPU kernels are deterministic already (no atomics, fixed reduction orders), so
requesting determinism is recorded and changes nothing; float32 matmuls always run in
full float32 ("highest"), and any other precision is recorded only.

Example:
    >>> ember.use_deterministic_algorithms(True)
    >>> ember.are_deterministic_algorithms_enabled()
    True
"""
from __future__ import annotations

import math

from .autograd import anomaly as _anomaly
from .device import device as _device
from .nn.functional import (celu, cosine_similarity, hardshrink,  # noqa: F401 - torch.<name>
                            pairwise_distance, pixel_shuffle, pixel_unshuffle, prelu, selu,
                            threshold)
from .tensor import Tensor

__all__ = ["pi", "e", "inf", "nan", "newaxis", "use_deterministic_algorithms",
           "are_deterministic_algorithms_enabled", "is_deterministic_algorithms_warn_only_enabled",
           "set_deterministic_debug_mode", "get_deterministic_debug_mode",
           "set_float32_matmul_precision", "get_float32_matmul_precision",
           "get_default_device", "set_default_device", "set_warn_always",
           "is_warn_always_enabled", "typename", "layout", "strided", "is_inference",
           "get_device", "is_anomaly_enabled", "set_anomaly_enabled", "selu", "celu",
           "threshold", "hardshrink", "prelu", "cosine_similarity", "pairwise_distance",
           "pixel_shuffle", "pixel_unshuffle", "memory_format", "contiguous_format",
           "preserve_format", "legacy_contiguous_format", "channels_last", "channels_last_3d",
           "set_default_tensor_type",
           "can_cast", "set_flush_denormal", "frombuffer"]

pi, e, inf, nan = math.pi, math.e, math.inf, math.nan
newaxis = None

_STATE = {"deterministic": False, "warn_only": False, "matmul_precision": "highest",
          "warn_always": False}
_PRECISIONS = ("highest", "high", "medium")


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Record the request; Ember's kernels are deterministic whatever it says."""
    _STATE["deterministic"], _STATE["warn_only"] = bool(mode), bool(warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    """What :func:`use_deterministic_algorithms` last set."""
    return _STATE["deterministic"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """The ``warn_only`` flag :func:`use_deterministic_algorithms` last set."""
    return _STATE["warn_only"]


def set_deterministic_debug_mode(debug_mode) -> None:
    """0/"default", 1/"warn", 2/"error": as :func:`use_deterministic_algorithms` would set."""
    names = {"default": 0, "warn": 1, "error": 2}
    mode = names.get(debug_mode, debug_mode)
    if mode not in (0, 1, 2):
        raise ValueError(f"set_deterministic_debug_mode(): invalid mode {debug_mode!r}; valid "
                         f"are 0/'default', 1/'warn', 2/'error'")
    use_deterministic_algorithms(mode > 0, warn_only=mode == 1)


def get_deterministic_debug_mode() -> int:
    """0, 1 (warn only) or 2 (deterministic)."""
    if not _STATE["deterministic"]:
        return 0
    return 1 if _STATE["warn_only"] else 2


def set_float32_matmul_precision(precision: str) -> None:
    """Record "highest", "high" or "medium"; Ember's float32 matmuls are always full float32."""
    if precision not in _PRECISIONS:
        raise ValueError(f"set_float32_matmul_precision(): invalid precision {precision!r}; "
                         f"valid are {_PRECISIONS}")
    _STATE["matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    """The precision :func:`set_float32_matmul_precision` last recorded ("highest")."""
    return _STATE["matmul_precision"]


def get_default_device():
    """The device factories use when none is given (``torch.get_default_device``): the
    CPU unless :func:`set_default_device` chose another.

    Example:
        >>> ember.get_default_device()
        device(type='cpu')
    """
    from .device.base import default_device
    return default_device()


def set_default_device(device) -> None:
    """Make factories (``zeros``, ``tensor``, ``rand``, ``nn`` layers' parameters...) called
    without ``device=`` allocate on ``device`` (``torch.set_default_device``); None or
    ``"cpu"`` restores the CPU. Ops on existing tensors are unaffected. ``"cuda"`` means
    the current CUDA device's index at this call (``cuda:0`` by default).

    Unlike PyTorch, which fails at the first factory call, an unavailable device is
    refused here, naming why.

    Raises:
        RuntimeError: ``device`` is a CUDA device this process cannot use.

    Example:
        >>> ember.set_default_device("cuda")     # needs a GPU or EMBER_FAKE_CUDA=1
        >>> ember.zeros(2).device
        device(type='cuda', index=0)
        >>> ember.set_default_device(None)
    """
    from .device.base import cuda_backend, set_default
    if device is None:
        return set_default(None)
    d = _device("cuda", device) if isinstance(device, int) else _device(device)
    if d.type == "cuda":
        be, why = cuda_backend()
        if be is None:
            raise RuntimeError(f"set_default_device({device!r}): no CUDA device is available "
                               f"({why}); valid here: the CPU ('cpu' or None)")
        idx = be.current_index if isinstance(device, str) and ":" not in device else d.index
        d = _device("cuda", be.check_index(idx, "set_default_device"))
    set_default(d)


def set_warn_always(b: bool) -> None:
    """Record whether once-only warnings should always be shown."""
    _STATE["warn_always"] = bool(b)


def is_warn_always_enabled() -> bool:
    """What :func:`set_warn_always` last set."""
    return _STATE["warn_always"]


def typename(obj) -> str:
    """The legacy type name of a tensor (``'ember.FloatTensor'``), else the Python type's."""
    from .tensor import Tensor
    if isinstance(obj, Tensor):
        return obj.type()
    t = type(obj)
    return t.__qualname__ if t.__module__ in ("builtins", "__builtin__") else \
        f"{t.__module__}.{t.__qualname__}"


class layout:
    """A tensor memory layout (``torch.layout``); Ember tensors are all :data:`strided`."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"ember.{self.name}"


strided = layout("strided")


class memory_format:
    """A memory format (``torch.memory_format``): :data:`contiguous_format` (row-major),
    :data:`preserve_format` (keep the layout), :data:`channels_last` /
    :data:`channels_last_3d` (NHWC / NDHWC memory order under an NCHW / NCDHW shape: a real
    strided layout, ``is_contiguous(memory_format=channels_last)`` tells). Ember's kernels
    take any strides; which layout a result gets may differ from PyTorch's (values do not)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"ember.{self.name}"


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
legacy_contiguous_format = contiguous_format
Tensor.layout = property(lambda self: strided)


def is_inference(input) -> bool:
    """Whether ``input`` was made under ``inference_mode`` (``torch.is_inference``)."""
    return input.is_inference()


def get_device(input) -> int:
    """-1 for a CPU tensor, else its device index (``torch.get_device``)."""
    return input.get_device()


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection is on (``torch.is_anomaly_enabled``)."""
    return _anomaly.is_anomaly_enabled()


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """Turn anomaly detection on or off (``torch.set_anomaly_enabled``); NaN and Inf are
    always checked when on."""
    _anomaly.set_detect_anomaly(enabled)


def set_default_tensor_type(t) -> None:
    """Deprecated PyTorch call: sets the default float dtype from a legacy type
    (``ember.DoubleTensor`` or ``"torch.DoubleTensor"``); CPU only."""
    from . import dtypes as _dt
    from .ops.tensor_api import _LEGACY
    name = t if isinstance(t, str) else getattr(t, "__name__", repr(t))
    key = name.rsplit(".", 1)[-1]
    if key not in _LEGACY or "cuda" in name:
        raise TypeError(f"set_default_tensor_type(): expected a CPU floating point tensor type "
                        f"such as 'torch.DoubleTensor', got {name!r}")
    _dt.set_default_dtype(_LEGACY[key])


def can_cast(from_, to) -> bool:
    """Whether PyTorch's casting rules allow ``from_`` -> ``to`` in type promotion: not to a
    lower category (float -> int, int -> bool) (``torch.can_cast``)."""
    from . import dtypes as _dt
    return _dt.as_dtype(from_).category <= _dt.as_dtype(to).category


def set_flush_denormal(mode: bool) -> bool:
    """False: Ember does not switch the CPU's flush-to-zero mode (PyTorch returns False
    where it is unsupported), so denormals keep IEEE semantics."""
    return False


def frombuffer(buffer, *, dtype, count: int = -1, offset: int = 0, requires_grad=False):
    """A 1-D tensor sharing memory with a Python buffer (``torch.frombuffer``)."""
    import numpy as np

    from . import dtypes as _dt
    from .ops.factories import from_numpy
    arr = np.frombuffer(buffer, dtype=_dt.as_dtype(dtype).np, count=count, offset=offset)
    t = from_numpy(arr)
    return t.requires_grad_(requires_grad) if requires_grad else t
