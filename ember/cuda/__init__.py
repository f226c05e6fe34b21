"""``ember.cuda``: what ``torch.cuda`` answers on a machine without a CUDA device.

Ember has no CUDA backend yet, so every query answers truthfully "no GPU": programs that
branch on ``ember.cuda.is_available()`` take their CPU path, seeding calls are harmless
no-ops, and anything that would need a device (``synchronize``, ``get_device_name``...)
raises :class:`NoCUDADeviceError`. The CUDA backend replaces this module wholesale.

Example:
    >>> dev = "cuda" if ember.cuda.is_available() else "cpu"
    >>> dev
    'cpu'
"""
from __future__ import annotations

__all__ = ["NoCUDADeviceError", "is_available", "device_count", "current_device",
           "is_initialized", "init", "manual_seed", "manual_seed_all", "seed", "seed_all",
           "is_bf16_supported", "synchronize", "get_device_name", "get_device_capability",
           "get_device_properties", "set_device", "empty_cache", "memory_allocated",
           "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "get_rng_state_all", "set_rng_state_all",
           "get_rng_state", "set_rng_state"]


class NoCUDADeviceError(RuntimeError):
    """Raised by calls that need a CUDA device (this build has no CUDA backend)."""


def _no_device(op: str):
    raise NoCUDADeviceError(
        f"ember.cuda.{op}(): no CUDA device is present (Ember has no CUDA backend in this "
        f"build; ember.cuda.is_available() is False). Valid: run on device 'cpu'.")


def is_available() -> bool:
    """False: no CUDA device can be used (``torch.cuda.is_available``)."""
    return False


def device_count() -> int:
    """0: the number of usable CUDA devices (``torch.cuda.device_count``)."""
    return 0


def is_initialized() -> bool:
    """False: CUDA was never initialised (``torch.cuda.is_initialized``)."""
    return False


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: there is no CUDA device to run bfloat16 on."""
    return False


def manual_seed(seed) -> None:
    """No-op (PyTorch too ignores it without CUDA): CUDA generators do not exist here."""
    int(seed)  # NOTE: still reject a seed that is not an integer, as PyTorch does


def manual_seed_all(seed) -> None:
    """No-op: seeds every CUDA device's generator, and there are none."""
    int(seed)


def seed() -> None:
    """No-op: there is no CUDA generator to seed."""


def seed_all() -> None:
    """No-op: there are no CUDA generators to seed."""


def get_rng_state_all() -> list:
    """The RNG states of every CUDA device: an empty list (there are none)."""
    return []


def set_rng_state_all(new_states) -> None:
    """Restore every CUDA device's RNG state: nothing to restore without devices."""


def get_rng_state(device="cuda"):
    """Raise: there is no CUDA device whose generator state could be read."""
    _no_device("get_rng_state")


def set_rng_state(new_state, device="cuda") -> None:
    """Raise: there is no CUDA device whose generator state could be set."""
    _no_device("set_rng_state")


def empty_cache() -> None:
    """No-op: no CUDA memory is cached."""


def memory_allocated(device=None) -> int:
    """0 bytes: no CUDA memory is allocated."""
    return 0


max_memory_allocated = memory_reserved = max_memory_reserved = memory_allocated


def reset_peak_memory_stats(device=None) -> None:
    """No-op: there are no CUDA memory statistics."""


def init() -> None:
    """Raise: CUDA cannot be initialised without a device."""
    _no_device("init")


def current_device() -> int:
    """Raise: there is no current CUDA device."""
    _no_device("current_device")


def set_device(device) -> None:
    """Raise: there is no CUDA device to select."""
    _no_device("set_device")


def synchronize(device=None) -> None:
    """Raise: there is no CUDA device to wait for."""
    _no_device("synchronize")


def get_device_name(device=None) -> str:
    """Raise: there is no CUDA device to name."""
    _no_device("get_device_name")


def get_device_capability(device=None) -> tuple:
    """Raise: there is no CUDA device."""
    _no_device("get_device_capability")


def get_device_properties(device=None):
    """Raise: there is no CUDA device."""
    _no_device("get_device_properties")
