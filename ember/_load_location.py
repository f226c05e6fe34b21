"""``ember.load``'s ``map_location``: where each loaded tensor goes (PyTorch's rules).

``ember.save`` records a non-CPU tensor's location tag (``"cuda:0"``) in the metadata;
``load`` gives every tensor, first made on the CPU, to the *placer* built here from
``map_location``: None restores the saved location, a str/device sends everything
there, a dict maps saved locations to new ones, a callable decides per tensor.
"""
from __future__ import annotations

from .device import device as _device
from .tensor import Tensor


class Misplaced(Exception):
    """Carries an error raised while placing a tensor out of the file parser's handlers
    (which would otherwise report it as a malformed file)."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def placer(map_location):
    """``(cpu tensor, saved location) -> tensor`` for ``map_location``.

    Raises:
        TypeError: ``map_location`` is none of None, str, device, dict, callable.
    """
    place = _placer(map_location)

    def guarded(t, loc):
        try:
            return place(t, loc)
        except Exception as e:   # noqa: BLE001 - re-raised as is by ember.load
            raise Misplaced(e) from None
    return guarded


def _placer(map_location):
    """The unguarded placer of :func:`placer`."""
    if map_location is None:
        return _restore
    if isinstance(map_location, (str, _device)):
        dev = _device(map_location)
        return lambda t, loc: _restore(t, str(dev))
    if isinstance(map_location, dict):
        table = {str(k): str(_device(v)) for k, v in map_location.items()}
        return lambda t, loc: _restore(t, table.get(loc, loc))
    if callable(map_location):
        def place(t, loc):
            r = map_location(t, loc)
            if r is None:
                return _restore(t, loc)
            if not isinstance(r, Tensor):
                raise TypeError(f"ember.load: map_location({loc!r}) returned a "
                                f"{type(r).__name__}; it must return a tensor or None")
            return r
        return place
    raise TypeError(f"ember.load: map_location must be None, a str, an ember.device, a dict "
                    f"or a callable, got {type(map_location).__name__}")


def _restore(t, loc: str):
    """``t`` (on the CPU) moved to the location tag ``loc`` ("cpu", "cuda:1"...)."""
    dev = _device(loc)
    if dev.type == "cpu":
        return t
    from .device.base import cuda_backend
    if dev.type == "cuda" and cuda_backend()[0] is None:
        raise RuntimeError(f"ember.load: attempting to deserialize a tensor on {loc} but "
                           f"ember.cuda.is_available() is False ({cuda_backend()[1]}); on a "
                           f"CPU-only machine pass map_location='cpu' (or a dict such as "
                           f"{{{loc!r}: 'cpu'}})")
    return t.to(dev)
