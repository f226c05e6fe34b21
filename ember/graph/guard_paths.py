"""Paths to the Python state a compiled function reads, and reading their leaves.

A guard leaf (:mod:`.guards`) is a *path* from a root object or argument to a value, plus a
*kind* saying how it is compared: ``"id"`` (identity), ``"value"`` (type and equality),
``"len"`` or ``"array"`` (a small NumPy array's contents, against a copy). This module
evaluates paths, labels them for ``explain()`` and compares leaves; the walk that finds
them is :mod:`.guards`.
"""
from __future__ import annotations

import numpy as np

from ..device.base import device as _device
from ..dtypes import DType
from ..storage import Storage
from ..tensor import Tensor

_MAX_ITEMS = 256        # containers longer than this are guarded by length only
_VALUE = (bool, int, float, complex, str, bytes, type(None), DType, _device, np.generic)
_MODULE_STORES = ("_parameters", "_buffers", "_modules")


def _is_value(x) -> bool:
    if isinstance(x, _VALUE):
        return True
    return type(x) in (tuple, frozenset) and len(x) <= _MAX_ITEMS and all(map(_is_value, x))


# ---------------------------------------------------------------------- paths
# A path is a tuple of steps: a root ("obj", obj, label) or ("arg", i, label), then
# ("attr", name), ("item", key) or ("cell", None).

def _label(path) -> str:
    s = path[0][2]
    steps = path[1:]
    i = 0
    while i < len(steps):
        kind, k = steps[i]
        if kind == "attr" and k in _MODULE_STORES and i + 1 < len(steps) and \
                steps[i + 1][0] == "item":
            s += f".{steps[i + 1][1]}"
            i += 2
            continue
        if kind == "attr":
            s += f".{k}"
        elif kind == "item" and not s:          # a global: the globals dict has no label
            s = k
        elif kind == "item":
            s += f"[{k!r}]" if isinstance(k, (str, int)) else f"[<{type(k).__name__}>]"
        i += 1
    return s


def _eval(path, flat):
    root = path[0]
    v = root[1] if root[0] == "obj" else flat[root[1]]
    for kind, k in path[1:]:
        if kind == "attr":
            v = getattr(v, k)
        elif kind == "item":
            v = v[k]
        else:
            v = v.cell_contents
    return v


def _step_key(step):
    kind, k = step[0], step[1]
    if kind == "obj":
        return ("obj", id(k))
    if kind == "item" and type(k) not in (str, int, bool):
        return ("item", id(k))
    return (kind, type(k), k)


def describe(x) -> str:
    """A short description of a guarded object for ``explain()``."""
    if isinstance(x, Tensor):
        return (f"{type(x).__name__} {x._dtype.name}[{', '.join(map(str, x._data.shape))}] "
                f"@{id(x):x}")
    if isinstance(x, Storage):
        return f"storage of {x._nbytes} bytes @{id(x):x}"
    if isinstance(x, np.ndarray):
        return f"ndarray {x.dtype}{list(x.shape)} {np.array2string(x, threshold=6)}"[:80]
    if _is_value(x):
        r = repr(x)
        return r if len(r) < 60 else r[:57] + "..."
    return f"{type(x).__name__} @{id(x):x}"


_MISSING = object()


def _read_leaf(path, kind, flat):
    try:
        v = _eval(path, flat)
    except Exception:       # noqa: BLE001 — any failing lookup means "not there"
        return _MISSING
    if kind == "array":
        return np.array(v, copy=True) if isinstance(v, np.ndarray) else v
    return len(v) if kind == "len" else v


def _same_array(v, c) -> bool:
    """Whether ``v`` is still an array holding what the copy ``c`` holds."""
    if type(v) is not np.ndarray or v.shape != c.shape or v.dtype != c.dtype:
        return False
    return bool(np.array_equal(v, c, equal_nan=c.dtype.kind in "fc"))


def _same(kind, old, new) -> bool:
    if old is _MISSING or new is _MISSING:
        return old is new
    if kind == "array":
        return _same_array(new, old)
    if kind == "value":
        return old is new or (type(old) is type(new) and bool(old == new))
    return old is new if kind == "id" else old == new


def _show(kind, v) -> str:
    if v is _MISSING:
        return "<missing>"
    return f"len {v}" if kind == "len" else describe(v)
