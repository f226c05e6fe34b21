"""The device descriptor and the backend interface every device type implements."""
from __future__ import annotations

_backends: dict = {}


class device:
    """Where a tensor lives: ``ember.device("cpu")``, ``ember.device("cuda", 0)``.

    Example:
        >>> ember.device("cuda:1").index
        1
    """

    __slots__ = ("type", "index")
    _cache: dict = {}

    def __new__(cls, type_or_str="cpu", index=None):
        if type_or_str.__class__ is device:
            return type_or_str
        key = (type_or_str, index)
        d = cls._cache.get(key)
        if d is not None:
            return d
        if not isinstance(type_or_str, str):
            raise TypeError(f"device(): expected a string like 'cpu' or 'cuda:0', "
                            f"got {type_or_str!r}")
        t, _, idx = type_or_str.partition(":")
        if idx:
            if index is not None:
                raise ValueError(f"device(): index given twice in {type_or_str!r}")
            index = int(idx)
        if t not in ("cpu", "cuda", "meta"):
            raise ValueError(f"device(): unknown device type {t!r}; valid: 'cpu', 'cuda', "
                             f"'meta'")
        if t == "cuda" and index is None:
            index = 0
        d = object.__new__(cls)
        object.__setattr__(d, "type", t)
        object.__setattr__(d, "index", index)
        cls._cache[key] = d
        return d

    def __setattr__(self, name, value):
        raise AttributeError("ember.device is immutable")

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + (
            f", index={self.index})" if self.index is not None else ")")

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = device(other)
        return (isinstance(other, device) and self.type == other.type
                and (self.index or 0) == (other.index or 0))

    def __hash__(self) -> int:
        return hash((self.type, self.index or 0))

    def __enter__(self):
        """``with ember.device("cuda"):`` — factories called without ``device=`` inside the
        block allocate here (``torch.device`` as a context manager); the previous default
        comes back on exit."""
        from .._torch_globals import set_default_device
        _entered.append(list(_default))
        try:
            set_default_device(self)
        except BaseException:
            _entered.pop()
            raise
        return self

    def __exit__(self, *exc):
        _default[:] = _entered.pop()
        return False

    def __reduce__(self):
        return (device, (str(self),))


_CPU = device("cpu")
_default: list = []    # the device ember.set_default_device chose (empty: the CPU)
_entered: list = []    # the defaults `with device(...)` blocks replaced, innermost last


def default_device() -> device:
    """Where factories put tensors made without ``device=`` (``set_default_device``)."""
    return _default[0] if _default else _CPU


def set_default(dev) -> None:
    """Make ``dev`` (a ``device``, or None for the CPU) the factories' default."""
    _default.clear()
    if dev is not None and dev != _CPU:
        _default.append(dev)


class Stream:
    """An ordered queue of device work. On CPU every operation is synchronous."""

    def __init__(self, dev=None):
        self.device = device(dev or "cpu")

    def synchronize(self) -> None:
        get_backend(self.device).synchronize(self)

    def query(self) -> bool:
        return True

    def wait_event(self, event: "Event") -> None:
        event.synchronize()

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Event:
    """A marker in a stream; on CPU it is complete as soon as it is recorded."""

    def __init__(self, enable_timing: bool = False):
        self.enable_timing = enable_timing
        self._time = None

    def record(self, stream: Stream | None = None) -> None:
        import time
        self._time = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds between this event and ``end``."""
        if self._time is None or end._time is None:
            raise RuntimeError("Event.elapsed_time: both events must be recorded first")
        return (end._time - self._time) * 1e3


class Backend:
    """What a device type provides: ``xp``, an allocator, sync and capabilities.

    Kernels are written once against ``xp``; where behaviour differs a kernel asks
    ``backend.has(capability)`` rather than testing which array module it got.
    """

    type: str = "?"
    xp = None
    capabilities: frozenset = frozenset()

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    def empty(self, shape, np_dtype):
        raise NotImplementedError

    def asarray(self, data, np_dtype=None):
        raise NotImplementedError

    def to_host(self, arr):
        raise NotImplementedError

    def synchronize(self, stream=None) -> None:
        return None

    def memory_stats(self) -> dict:
        return self.allocator.stats()


def register_backend(backend: Backend) -> None:
    _backends[backend.type] = backend


def get_backend(dev) -> Backend:
    t = dev.type if dev.__class__ is device else device(dev).type
    try:
        return _backends[t]
    except KeyError:
        pass
    why = ""
    if t == "cuda":      # NOTE: made on first need, so `import ember` never imports CuPy
        be, why = cuda_backend()
        if be is not None:
            return be
    raise RuntimeError(f"device type {t!r} is not available in this Ember build "
                       f"(available: {sorted(_backends)}); for 'cuda' install CuPy and "
                       f"run on a machine with an NVIDIA GPU" + (f" ({why})" if why else ""))


_cuda_probe: list = []   # [(backend or None, why)] once probed


def cuda_backend():
    """``(backend, "")`` for the ``cuda`` device, made and registered on first call, or
    ``(None, why)``: CuPy missing, no GPU (``EMBER_FAKE_CUDA=1`` gives the CPU stand-in)."""
    if "cuda" in _backends:
        return _backends["cuda"], ""
    if not _cuda_probe:
        from .cuda import make_backend
        _cuda_probe.append(make_backend())
    be, why = _cuda_probe[0]
    if be is not None:
        register_backend(be)
    return be, why


def reset_cuda_backend() -> None:
    """Forget the cuda backend so the next use probes again (tests switch the stand-in
    on and off with ``EMBER_FAKE_CUDA``); tensors already on it keep their data."""
    _backends.pop("cuda", None)
    _cuda_probe.clear()
