"""A cheap way to call a generated kernel on NumPy arrays: one ctypes call, no per-array work.

Getting an array's data pointer through ``a.ctypes.data`` costs about 1.7 us per array,
more than a small fused kernel runs. ``ember_launch`` (a few lines of C, compiled once
into the kernel cache) takes the kernel's function pointer and a Python *tuple* of the
arrays (inputs then outputs) and reads each array's data pointer from the objects
themselves: a tuple's items start ``tuple.__basicsize__`` bytes in, a NumPy array's
``data`` field follows its object header. Those offsets are the CPython/NumPy ABI; they
are checked once against ``a.ctypes.data`` at start-up and, if anything disagrees (an
unusual build), :func:`launcher` returns None and callers keep the ordinary path.

The caller must keep every array in the tuple alive and of the layout it prepared the
kernel for (the fused graph nodes key their prepared layouts by the arrays' strides).
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import cache
from .toolchain import find_compiler

_SOURCE = r"""
#include <stdint.h>
typedef void (*ember_kfn)(char **, const int64_t *, const int64_t *, int64_t);

/* ptrs[i] = data pointer of tuple item i; then run the kernel. */
void ember_launch(void *fn, char *tuple, const int64_t *shape, const int64_t *st,
                  int64_t nthreads, int64_t n, int64_t items_off, int64_t data_off) {
    char *ptrs[64];
    char **items = (char **)(tuple + items_off);
    for (int64_t i = 0; i < n && i < 64; i++) ptrs[i] = *(char **)(items[i] + data_off);
    ((ember_kfn)fn)(ptrs, shape, st, nthreads);
}

/* The data pointer of tuple item i (the start-up check). */
void *ember_data_ptr(char *tuple, int64_t i, int64_t items_off, int64_t data_off) {
    char **items = (char **)(tuple + items_off);
    return *(char **)(items[i] + data_off);
}
"""

#: most arrays one launch passes (the C side's pointer table).
MAX_ARRAYS = 64
ITEMS_OFF = tuple.__basicsize__
DATA_OFF = object.__basicsize__
_state: dict = {}


def launcher():
    """``launch(fn_address, arrays_tuple, shape, strides, nthreads)``, or None when the fast
    path is unavailable here (no compiler, or the object layout check failed)."""
    if "fn" in _state:
        return _state["fn"]
    _state["fn"] = None
    cc = find_compiler()
    if cc is None:
        return None
    try:
        lib = cache.load(_SOURCE, cc)
    except Exception:  # noqa: BLE001 - the ordinary path still works
        return None
    probe = lib.ember_data_ptr
    probe.argtypes = [ctypes.py_object, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    probe.restype = ctypes.c_void_p
    arrays = (np.empty(3, np.float32), np.empty((2, 3), np.int64)[:, 1:],
              np.float64(1.0) + np.empty(0))
    for i, a in enumerate(arrays):
        if probe(arrays, i, ITEMS_OFF, DATA_OFF) != (a.ctypes.data or None):
            return None
    fn = lib.ember_launch
    fn.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    fn.restype = None

    def launch(kfn, arrays, shape, strides, nthreads):
        fn(kfn, arrays, shape, strides, nthreads, len(arrays), ITEMS_OFF, DATA_OFF)
    _state["fn"] = launch
    _state["raw"] = fn
    return launch


def raw():
    """The ctypes function itself (callers that pass the offsets themselves), or None."""
    launcher()
    return _state.get("raw")


_INT64S: dict = {}          # values -> (their int64 array, that array's address)


def int64_address(values: tuple) -> int:
    """Address of an int64 array holding ``values`` (a kernel's shape or geometry), kept
    alive here: ``a.ctypes.data`` costs ~2 us a call, so it is read once per ``values``
    (at most 256 kept)."""
    try:
        return _INT64S[values][1]
    except KeyError:
        if len(_INT64S) >= 256:
            _INT64S.clear()
        a = np.array(values, np.int64)
        _INT64S[values] = (a, a.ctypes.data)
        return _INT64S[values][1]
