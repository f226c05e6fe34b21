"""``ember.cuda``: ``torch.cuda``'s API over Ember's ``cuda`` device.

The ``cuda`` backend (``ember/device/cuda.py``) is made on first need: CuPy with an NVIDIA
GPU, or the CPU stand-in under ``EMBER_FAKE_CUDA=1`` (NumPy arrays in their own memory
space, so device semantics are testable without a GPU; ``EMBER_FAKE_CUDA_STRICT=1`` makes
its arrays refuse what CuPy's refuse: ``ember/device/cuda_strict.py``). Without either
every query answers truthfully "no GPU": ``is_available()`` is False, seeding calls are
harmless no-ops, and anything that needs a device (``synchronize``,
``get_device_name``...) raises :class:`NoCUDADeviceError`.

Random draws for ``cuda`` tensors come from one generator per device
(``ember.random.cuda_generator``; PCG64 on the host, the samples copied to the device), so
``ember.cuda.manual_seed`` leaves the CPU's stream alone, as in PyTorch; the values differ
from PyTorch's Philox streams.

Example:
    >>> dev = "cuda" if ember.cuda.is_available() else "cpu"
"""
from __future__ import annotations

from ..device.base import device as _device
from . import amp  # noqa: F401 - ember.cuda.amp (torch.cuda.amp)
from . import nvtx  # noqa: F401 - ember.cuda.nvtx (torch.cuda.nvtx)
from ._memory import (OutOfMemoryError, empty_cache, get_per_process_memory_fraction,
                      max_memory_allocated, max_memory_cached, max_memory_reserved,
                      mem_get_info, memory_allocated, memory_cached, memory_reserved,
                      memory_stats, memory_summary, reset_max_memory_allocated,
                      reset_max_memory_cached, reset_peak_memory_stats,
                      set_per_process_memory_fraction)
from ._state import NoCUDADeviceError, backend_or_none, need
from ._streams import Event, Stream, StreamContext, current_stream, default_stream, stream
from .graphs import (CUDAGraph, graph, graph_pool_handle, is_current_stream_capturing,
                     make_graphed_callables)

__all__ = ["NoCUDADeviceError", "OutOfMemoryError", "is_available", "device_count",
           "current_device", "is_initialized", "init", "manual_seed", "manual_seed_all",
           "seed", "seed_all", "initial_seed", "is_bf16_supported", "synchronize",
           "get_device_name", "get_device_capability", "get_device_properties", "set_device",
           "device", "empty_cache", "memory_allocated", "max_memory_allocated",
           "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
           "reset_max_memory_allocated", "memory_stats", "memory_summary", "mem_get_info",
           "amp", "nvtx", "device_of", "ipc_collect", "is_tf32_supported",
           "set_per_process_memory_fraction", "get_per_process_memory_fraction",
           "memory_cached", "max_memory_cached", "reset_max_memory_cached",
           "get_rng_state_all", "set_rng_state_all", "get_rng_state", "set_rng_state",
           "Stream", "Event", "StreamContext", "stream", "current_stream", "default_stream",
           "CUDAGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
           "make_graphed_callables"]


def is_available() -> bool:
    """Whether a CUDA device can be used (``torch.cuda.is_available``)."""
    return backend_or_none() is not None


def device_count() -> int:
    """The number of usable CUDA devices (0 without a GPU or the stand-in)."""
    be = backend_or_none()
    return 0 if be is None else be.device_count()


def is_initialized() -> bool:
    """Whether the CUDA backend has been made (``torch.cuda.is_initialized``)."""
    return backend_or_none(probe=False) is not None


def init() -> None:
    """Make the CUDA backend now (it is otherwise made on first use)."""
    need("init")


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether Ember computes bfloat16 on the current device: compute capability 8.0 or
    newer and a backend with bfloat16 arrays (CuPy >= 14 with ml_dtypes, or the stand-in)."""
    be = backend_or_none()
    return be is not None and be.has("bfloat16") and get_device_capability() >= (8, 0)


def is_tf32_supported() -> bool:
    """Whether the current device has TF32 tensor cores (compute capability 8.0 or newer):
    ``ember.backends.cuda.matmul.allow_tf32`` then takes effect."""
    return backend_or_none() is not None and get_device_capability() >= (8, 0)


def current_device() -> int:
    """The index of the current CUDA device."""
    return need("current_device").current_index


def set_device(device) -> None:
    """Make ``device`` (an index, ``"cuda:1"`` or an ``ember.device``) the current device."""
    be = need("set_device")
    idx = _index(device)
    if idx is None or idx < 0:    # NOTE: PyTorch ignores negative indices here
        return
    be.current_index = be.check_index(idx, "set_device")
    be.runtime.set_device(be.current_index)


def _index(device) -> int | None:
    if device is None or isinstance(device, int):
        return device
    d = _device(device)
    if d.type != "cuda":
        raise ValueError(f"ember.cuda: expected a cuda device, got {d}")
    return d.index


class device:
    """Context manager selecting the current CUDA device (``torch.cuda.device``)."""

    def __init__(self, device):
        self.idx = _index(device)
        self.prev = None

    def __enter__(self):
        if self.idx is not None and self.idx >= 0:
            self.prev = current_device()
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.prev is not None:
            set_device(self.prev)
        return False


class device_of(device):
    """Context manager making ``obj``'s device current (``torch.cuda.device_of``); a no-op
    for a CPU tensor."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.is_cuda else -1)


def ipc_collect() -> None:
    """A no-op: Ember shares no CUDA memory between processes through IPC handles
    (``torch.cuda.ipc_collect`` frees those)."""


def synchronize(device=None) -> None:
    """Wait for all work queued on ``device`` (default: the current one)."""
    be = need("synchronize")
    be.runtime.synchronize(be.check_index(_index(device), "synchronize"))


def get_device_properties(device=None):
    """Name, compute capability, memory and multiprocessor count of a device."""
    be = need("get_device_properties")
    props = be.runtime.properties(be.check_index(_index(device), "get_device_properties"))
    return _Properties(**props)


class _Properties:
    def __init__(self, name, major, minor, total_memory, multi_processor_count):
        self.name, self.major, self.minor = name, major, minor
        self.total_memory, self.multi_processor_count = total_memory, multi_processor_count

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory >> 20}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def get_device_name(device=None) -> str:
    """The device's name."""
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple:
    """The device's compute capability ``(major, minor)``."""
    p = get_device_properties(device)
    return (p.major, p.minor)


# ---------------------------------------------------------------------------- random
def _gen(device=None):
    from ..random import cuda_generator
    be = need("generator")
    return cuda_generator(be.check_index(_index(device), "generator"))


def manual_seed(seed) -> None:
    """Seed the current CUDA device's generator (a no-op without a device, as in PyTorch).

    Draws for ``cuda`` tensors come from their device's generator (made on the host, then
    copied); ``ember.manual_seed`` seeds every device's generator too.
    """
    seed = int(seed)   # NOTE: still reject a seed that is not an integer, as PyTorch does
    if backend_or_none() is not None:
        _gen().manual_seed(seed)


def manual_seed_all(seed) -> None:
    """Seed every CUDA device's generator."""
    seed = int(seed)
    if backend_or_none() is not None:
        for i in range(device_count()):
            _gen(i).manual_seed(seed)


def seed() -> None:
    """Seed the current device's generator from OS entropy (no-op without a device)."""
    if backend_or_none() is not None:
        _gen().seed()


def seed_all() -> None:
    """Seed every device's generator from OS entropy."""
    if backend_or_none() is not None:
        for i in range(device_count()):
            _gen(i).seed()


def initial_seed() -> int:
    """The seed of the current device's generator."""
    return _gen().initial_seed()


def get_rng_state(device="cuda"):
    """A device's generator state, as a uint8 tensor."""
    return _gen(device).get_state()


def set_rng_state(new_state, device="cuda") -> None:
    """Restore a device's generator state (from :func:`get_rng_state`)."""
    _gen(device).set_state(new_state)


def get_rng_state_all() -> list:
    """One state per CUDA device (an empty list without devices)."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    """Restore every device's state from :func:`get_rng_state_all`."""
    states = list(new_states)
    if states and backend_or_none() is not None:
        for i, st in enumerate(states):
            set_rng_state(st, i)
