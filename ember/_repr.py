"""PyTorch-style ``repr``/``str`` for tensors, and ``set_printoptions``.

The layout rules follow PyTorch's ``_tensor_str.py`` so that a PyTorch user reads
familiar output: 4 decimals in fixed notation by default; scientific notation when
the ratio of the largest to the smallest non-zero magnitude exceeds 1000, the
largest exceeds 1e8 or (for non-integral values) the smallest is below 1e-4; floats
that are all integral print as ``1.``; more than ``threshold`` elements are
summarised with ``...``. Formatting reads the host NumPy array directly: printing is
not an op and must never record autograd history.

Example:
    >>> ember.tensor([[1., 2.], [3., 4.]])
    tensor([[1., 2.],
            [3., 4.]])
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from . import dtypes as _dt
from .device import get_backend
from .tensor import Tensor

__all__ = ["set_printoptions", "get_printoptions", "printoptions"]


class _PrintOptions:
    precision = 4
    threshold = 1000
    edgeitems = 3
    linewidth = 80
    sci_mode = None


PRINT_OPTS = _PrintOptions()

_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80),
             "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None) -> None:
    """Set how tensors print (``torch.set_printoptions``).

    Args:
        precision: digits after the decimal point (default 4).
        threshold: element count above which output is summarised (default 1000).
        edgeitems: items shown at each edge of a summarised dimension (default 3).
        linewidth: characters per line (default 80).
        profile: ``"default"``, ``"short"`` or ``"full"`` presets.
        sci_mode: force (True) or forbid (False) scientific notation; None = automatic.

    Example:
        >>> ember.set_printoptions(precision=2)
    """
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: unknown profile {profile!r}; valid: "
                             f"{sorted(_PROFILES)}")
        (PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems,
         PRINT_OPTS.linewidth) = _PROFILES[profile]
    if precision is not None:
        PRINT_OPTS.precision = int(precision)
    if threshold is not None:
        PRINT_OPTS.threshold = threshold
    if edgeitems is not None:
        PRINT_OPTS.edgeitems = int(edgeitems)
    if linewidth is not None:
        PRINT_OPTS.linewidth = int(linewidth)
    PRINT_OPTS.sci_mode = sci_mode


def get_printoptions() -> dict:
    """The current print options as a dict (keys of :func:`set_printoptions`)."""
    return {k: getattr(PRINT_OPTS, k) for k in
            ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")}


@contextlib.contextmanager
def printoptions(**kwargs):
    """Temporarily change print options: ``with ember.printoptions(precision=2): ...``."""
    old = get_printoptions()
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        set_printoptions(**old)


class _Formatter:
    """Chooses one width and notation for all elements of a tensor (PyTorch's rules)."""

    def __init__(self, arr: np.ndarray):
        self.floating = arr.dtype.kind == "f"
        self.int_mode, self.sci_mode, self.max_width = True, False, 1
        p = PRINT_OPTS.precision
        flat = arr.reshape(-1)
        if not self.floating:
            self.max_width = max([len(str(v)) for v in flat.tolist()] + [1])
        else:
            vals = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
            if vals.size:
                absv = np.abs(vals)
                lo, hi = float(absv.min()), float(absv.max())
                self.int_mode = bool(np.all(vals == np.ceil(vals)))
                forced = PRINT_OPTS.sci_mode
                self.sci_mode = (hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4) \
                    if forced is None else bool(forced)
                items = vals.tolist()
                if self.sci_mode:
                    self.max_width = max(len(f"{v:.{p}e}") for v in items)
                elif self.int_mode:
                    self.max_width = max(len(f"{v:.0f}") + 1 for v in items)
                else:
                    self.max_width = max(len(f"{v:.{p}f}") for v in items)

    def format(self, value) -> str:
        p = PRINT_OPTS.precision
        if self.floating:
            if self.sci_mode:
                ret = f"{value:{self.max_width}.{p}e}"
            elif self.int_mode:
                ret = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    ret += "."
            else:
                ret = f"{value:.{p}f}"
        else:
            ret = f"{value}"
        return (self.max_width - len(ret)) * " " + ret


class _ComplexFormatter:
    """PyTorch's complex layout: the real parts and the imaginary parts each get their own
    :class:`_Formatter`; an element prints as ``real`` then the signed ``imag`` + ``j``."""

    def __init__(self, arr: np.ndarray):
        self.re, self.im = _Formatter(arr.real), _Formatter(arr.imag)
        self.max_width = self.re.max_width + self.im.max_width + 1

    def format(self, value) -> str:
        real = self.re.format(value.real)
        imag = (self.im.format(value.imag) + "j").lstrip()
        return real + imag if imag[0] in "+-" else real + "+" + imag


def _formatter(arr: np.ndarray):
    return _ComplexFormatter(arr) if arr.dtype.kind == "c" else _Formatter(arr)


def _summarized(arr: np.ndarray) -> np.ndarray:
    """The elements a summarised print shows (to size the formatter on)."""
    e = PRINT_OPTS.edgeitems
    if arr.ndim == 0:
        return arr
    if arr.ndim == 1:
        return np.concatenate([arr[:e], arr[-e:]]) if arr.shape[0] > 2 * e else arr
    if not e:
        return np.empty((0,) * arr.ndim, arr.dtype)
    rows = list(range(e)) + list(range(len(arr) - e, len(arr))) if arr.shape[0] > 2 * e \
        else range(arr.shape[0])
    return np.stack([_summarized(arr[i]) for i in rows])


def _vector_str(arr, indent, summarize, fmt) -> str:
    element_length = fmt.max_width + 2
    per_line = max(1, int(math.floor((PRINT_OPTS.linewidth - indent) / element_length)))
    e = PRINT_OPTS.edgeitems
    if summarize and not e:
        data = ["..."]
    elif summarize and arr.shape[0] > 2 * e:
        data = ([fmt.format(v) for v in arr[:e].tolist()] + [" ..."]
                + [fmt.format(v) for v in arr[-e:].tolist()])
    else:
        data = [fmt.format(v) for v in arr.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _tensor_str(arr, indent, summarize, fmt) -> str:
    if arr.ndim == 0:
        return fmt.format(arr.item())
    if arr.ndim == 1:
        return _vector_str(arr, indent, summarize, fmt)
    e = PRINT_OPTS.edgeitems
    if summarize and arr.shape[0] > 2 * e:
        slices = ([_tensor_str(arr[i], indent + 1, summarize, fmt) for i in range(e)] + ["..."]
                  + [_tensor_str(arr[i], indent + 1, summarize, fmt)
                     for i in range(len(arr) - e, len(arr))])
    else:
        slices = [_tensor_str(arr[i], indent + 1, summarize, fmt) for i in range(len(arr))]
    return "[" + ("," + "\n" * (arr.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _host(t: Tensor) -> np.ndarray:
    arr = get_backend(t._device).to_host(t._data)
    if t._dtype in (_dt.float16, _dt.bfloat16):
        arr = arr.astype(np.float32)  # NOTE: PyTorch formats half types via .float()
    return arr


def _add_suffixes(tensor_str: str, suffixes, indent: int) -> str:
    parts = [tensor_str]
    last_line_len = len(tensor_str) - tensor_str.rfind("\n") + 1
    for s in suffixes:
        if last_line_len + len(s) + 2 > PRINT_OPTS.linewidth:
            parts.append(",\n" + " " * indent + s)
            last_line_len = indent + len(s)
        else:
            parts.append(", " + s)
            last_line_len += len(s) + 2
    parts.append(")")
    return "".join(parts)


def tensor_repr(self: Tensor) -> str:
    """``tensor([...], dtype=..., requires_grad=True)`` like PyTorch (``Tensor.__repr__``)."""
    prefix, suffixes = "tensor(", []
    indent = len(prefix)
    if self._device.type != "cpu":
        suffixes.append(f"device='{self._device}'")
    default = _dt.get_default_dtype()
    cdefault = _dt.as_dtype(complex)
    if self._device.type == "meta":      # NOTE: no values: PyTorch's "..." with the size
        suffixes.append(f"size={tuple(self._data.shape)}")
        if self._dtype is not default:
            suffixes.append(f"dtype={self._dtype!r}")
        body = "..."
    elif self._data.size == 0:
        if self._data.ndim != 1:
            suffixes.append(f"size={tuple(self._data.shape)}")
        if self._dtype is not default:
            suffixes.append(f"dtype={self._dtype!r}")
        body = "[]"
    else:
        if not PRINT_OPTS.edgeitems:
            suffixes.append(f"size={tuple(self._data.shape)}")
        if self._dtype not in (default, cdefault, _dt.int64, _dt.bool_):
            suffixes.append(f"dtype={self._dtype!r}")
        arr = _host(self)
        summarize = arr.size > PRINT_OPTS.threshold
        fmt = _formatter(_summarized(arr) if summarize else arr)
        body = _tensor_str(arr, indent, summarize, fmt)
    if self._grad_fn is not None:
        suffixes.append(f"grad_fn=<{self._grad_fn.name()}>")
    elif self._requires_grad:
        suffixes.append("requires_grad=True")
    tangent = self._tangent
    if tangent is not None:
        suffixes.append(f"tangent={tensor_repr(tangent)}")
    return _add_suffixes(prefix + body, suffixes, indent)


def _format(self: Tensor, spec: str) -> str:
    if self._data.ndim == 0:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


Tensor.__repr__ = tensor_repr
Tensor.__str__ = tensor_repr
Tensor.__format__ = _format
