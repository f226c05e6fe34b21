"""Padding modules (``torch.nn.modules.padding``): ``ZeroPad``, ``ConstantPad``,
``ReflectionPad``, ``ReplicationPad`` and ``CircularPad``, each in 1, 2 and 3 dims.

All call :func:`ember.nn.functional.pad`; ``padding`` is an int (same on every side) or a
tuple ``(left, right[, top, bottom[, front, back]])``, last dim first.
"""
from __future__ import annotations

from ...errors import ShapeError
from ..module import Module

__all__ = [f'{kind}Pad{n}d' for kind in ('Zero', 'Constant', 'Reflection', 'Replication',
                                         'Circular') for n in (1, 2, 3)]


def _pairs(padding, nd: int, name: str) -> tuple:
    if isinstance(padding, int):
        return (padding,) * (2 * nd)
    padding = tuple(padding)
    if len(padding) != 2 * nd or not all(isinstance(p, int) for p in padding):
        raise ValueError(f"{name}: padding must be an int or a tuple of {2 * nd} ints, got "
                         f"{padding!r}")
    return padding


class _PadNd(Module):
    """Shared body: ``F.pad(input, self.padding, self._mode, value)``."""
    _nd = 1
    _mode = "constant"

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding = _pairs(padding, self._nd, type(self).__name__)
        self.value = value

    def _check_input_dim(self, input):
        nd = getattr(input, "ndim", 0)
        if nd not in (self._nd + 1, self._nd + 2):
            raise ShapeError(f"{type(self).__name__}: expected {self._nd + 1}D or "
                             f"{self._nd + 2}D input, got shape "
                             f"{tuple(getattr(input, 'shape', ()))}")

    def forward(self, input):
        from ..functional import pad
        if self._mode == "constant":
            return pad(input, self.padding, "constant", self.value)
        self._check_input_dim(input)
        return pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        if self._mode == "constant":
            return f"padding={self.padding}, value={self.value}"
        return f"padding={self.padding}"


def _constant(nd):
    class ConstantPad(_PadNd):
        _nd = nd

        def __init__(self, padding, value: float):
            super().__init__(padding, value)
    return ConstantPad


def _zero(nd):
    class ZeroPad(_PadNd):
        _nd = nd

        def __init__(self, padding):
            super().__init__(padding, 0.0)

        def extra_repr(self) -> str:
            return f"padding={self.padding}"
    return ZeroPad


def _moded(nd, mode):
    class Pad(_PadNd):
        _nd, _mode = nd, mode

        def __init__(self, padding):
            super().__init__(padding)
    return Pad


_DOC = {'Zero': "Pad with zeros", 'Constant': "Pad with a constant ``value``",
        'Reflection': "Pad by reflecting the input at its border (border not repeated)",
        'Replication': "Pad by repeating the border element",
        'Circular': "Pad by wrapping around (periodic)"}


_MODE = {'Reflection': 'reflect', 'Replication': 'replicate', 'Circular': 'circular'}


def _make(kind, nd):
    maker = {'Zero': _zero, 'Constant': _constant}.get(kind)
    cls = maker(nd) if maker else _moded(nd, _MODE[kind])
    cls.__name__ = cls.__qualname__ = f"{kind}Pad{nd}d"
    cls.__module__ = __name__
    args = "1, 0.5" if kind == 'Constant' else "1"
    shape = ", ".join(["1"] + ["2"] * nd)
    out = ", ".join(["1"] + ["4"] * nd)
    cls.__doc__ = (f"{_DOC[kind]} on the last {nd} dim{'s' if nd > 1 else ''}.\n\n"
                   f"    Example:\n"
                   f"        >>> ember.nn.{cls.__name__}({args})(ember.ones({shape})).shape\n"
                   f"        ember.Size([{out}])\n")
    return cls


for _kind in ('Zero', 'Constant', 'Reflection', 'Replication', 'Circular'):
    for _nd in (1, 2, 3):
        globals()[f'{_kind}Pad{_nd}d'] = _make(_kind, _nd)
del _kind, _nd
