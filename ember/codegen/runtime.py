"""Compiled kernels as Python callables over NumPy arrays.

``compile(kernel)`` returns a :class:`CompiledKernel` when a C compiler exists and a
:class:`NumpyKernel` (the IR run with the registry's NumPy kernels, after one warning)
otherwise; both are called the same way: ``fn(*arrays, out=None) -> ndarray``. Inputs
may be non-contiguous views or broadcastable to the kernel's shape: their strides are
passed to the C function, which was compiled for their layout class (see
:mod:`~ember.codegen.layout`); a new class compiles one more variant. Zero-size outputs
return without calling C.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import warnings
from dataclasses import replace

import numpy as np

from . import cache, interp
from .ir import Kernel, ReduceKernel
from .layout import coalesce, coalesce_rows
from .prelude import prelude
from .render_c import render_elementwise, render_reduction
from .toolchain import find_compiler

_P_VOID = ctypes.POINTER(ctypes.c_void_p)
_P_I64 = ctypes.POINTER(ctypes.c_int64)
_warned = [False]
_threads = {"n": None, "pid": None}


def set_num_threads(n: int | None) -> None:
    """Threads a generated kernel may use (None: ``OMP_NUM_THREADS`` or the CPU count)."""
    _threads["n"] = n


def num_threads() -> int:
    n = _threads["n"] or int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or os.cpu_count() or 1
    pid = os.getpid()
    if _threads["pid"] is None:
        _threads["pid"] = pid
    elif _threads["pid"] != pid:
        return 1      # NOTE: libgomp's thread pool does not survive fork(); stay serial
    return n


def warn_unavailable() -> None:
    if not _warned[0]:
        _warned[0] = True
        warnings.warn("ember.codegen: no working C compiler found ($CC, gcc, clang, cc); "
                      "generated kernels are disabled and the NumPy kernels run instead",
                      RuntimeWarning, stacklevel=3)


def render(kernel, key: tuple) -> tuple:
    """(C text of ``kernel`` for layout class ``key``, its exported symbol) — no prelude."""
    fn = render_reduction if isinstance(kernel, ReduceKernel) else render_elementwise
    text = fn(replace(kernel, name="EMBER_KERNEL"), key)
    sym = f"{kernel.name}_{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    return text.replace("EMBER_KERNEL", sym), sym


def source(kernel, key: tuple, mvec=()) -> str:
    """Full C source (prelude + kernel) of ``kernel`` for layout class ``key``."""
    return prelude(mvec=dict(mvec)) + render(kernel, key)[0]


def _elem_strides(a: np.ndarray, shape: tuple):
    b = np.broadcast_to(a, shape)
    item = b.itemsize
    if any(s % item for s in b.strides):
        b = np.ascontiguousarray(b)
    return b, tuple(s // item for s in b.strides)


class _Base:
    def __init__(self, kernel):
        self.kernel = kernel
        self.shape = kernel.shape if isinstance(kernel, ReduceKernel) else kernel.out.shape

    def _check(self, arrays, out):
        k = self.kernel
        if len(arrays) != len(k.inputs):
            raise TypeError(f"codegen: {k.name} takes {len(k.inputs)} arrays, got {len(arrays)}")
        arrays = [np.asarray(a) for a in arrays]
        for i, (a, s) in enumerate(zip(arrays, k.inputs)):
            if a.dtype != s.dtype.np:
                raise TypeError(f"codegen: {k.name} input {i} must be {s.dtype.name}, "
                                f"got {a.dtype}")
        if out is None:
            out = np.empty(k.out.shape, k.out.dtype.np)
        elif (out.shape != tuple(k.out.shape) or out.dtype != k.out.dtype.np
              or not out.flags.c_contiguous or not out.flags.writeable):
            raise ValueError(f"codegen: out must be a writeable C-contiguous "
                             f"{k.out.dtype.name} array of shape {k.out.shape}")
        return arrays, out


class NumpyKernel(_Base):
    """The kernel evaluated with NumPy (no compiler): same call, same results."""

    def __call__(self, *arrays, out=None):
        arrays, out = self._check(arrays, out)
        run = interp.run_reduction if isinstance(self.kernel, ReduceKernel) \
            else interp.run_elementwise
        return run(self.kernel, arrays, out)


class CompiledKernel(_Base):
    """A kernel compiled to C; one shared object per layout class it is called with."""

    def __init__(self, kernel, cc):
        super().__init__(kernel)
        self.cc = cc
        self._fns: dict = {}

    def layout(self, arrays):
        """(arrays possibly made contiguous, Layout) for a call."""
        views, strides = [], []
        for a in arrays:
            v, s = _elem_strides(a, self.shape)
            views.append(v)
            strides.append(s)
        if isinstance(self.kernel, ReduceKernel):
            lay, copy = coalesce_rows(self.shape, strides, self.kernel.naxes)
            views = [np.ascontiguousarray(v) if c else v for v, c in zip(views, copy)]
            return views, lay
        return views, coalesce(self.shape, strides)

    def source(self, key: tuple) -> str:
        """The C source this kernel compiles to for layout class ``key``."""
        return source(self.kernel, key, mvec=self.cc.mvec)

    def function(self, key: tuple):
        """The ctypes function for layout class ``key`` (compiled or loaded on first use)."""
        fn = self._fns.get(key)
        if fn is None:
            text, sym = render(self.kernel, key)
            self._install(key, cache.load(prelude(mvec=dict(self.cc.mvec)) + text, self.cc),
                          sym)
            fn = self._fns[key]
        return fn

    def _install(self, key, lib, sym):
        fn = getattr(lib, sym)
        fn.argtypes = [_P_VOID, _P_I64, _P_I64, ctypes.c_int64]
        fn.restype = None
        self._fns[key] = fn

    def declared_key(self) -> tuple:
        """Layout class of the kernel's declared input strides."""
        specs = [s.strides for s in self.kernel.inputs]
        if isinstance(self.kernel, ReduceKernel):
            return coalesce_rows(self.shape, specs, self.kernel.naxes)[0].key
        return coalesce(self.shape, specs).key

    def prepare(self) -> "CompiledKernel":
        """Compile (or load) the variant for the kernel's declared input strides now."""
        self.function(self.declared_key())
        return self

    def __call__(self, *arrays, out=None):
        arrays, out = self._check(arrays, out)
        if out.size == 0:
            return out
        views, lay = self.layout(arrays)
        fn = self.function(lay.key)
        ptrs = (ctypes.c_void_p * (len(views) + 1))(
            *[v.ctypes.data for v in views], out.ctypes.data)
        shape = (ctypes.c_int64 * len(lay.shape))(*lay.shape)
        flat = [s for st in lay.strides for s in st]
        strides = (ctypes.c_int64 * max(len(flat), 1))(*flat)
        fn(ptrs, shape, strides, num_threads())
        return out


def compile(kernel: Kernel | ReduceKernel, prepare: bool = True):  # noqa: A001
    """A callable running ``kernel``: compiled C when possible, NumPy otherwise.

    Example:
        >>> fn = compile(Kernel([InputSpec(float32, (1,))], OutSpec(float32, (n,)),
        ...                     call("exp", Load(0))))
        >>> y = fn(x)
    """
    cc = find_compiler()
    if cc is None:
        warn_unavailable()
        return NumpyKernel(kernel)
    ck = CompiledKernel(kernel, cc)
    return ck.prepare() if prepare else ck


def compile_many(kernels) -> list:
    """Compile several kernels into one shared object (one compiler run for all).

    Each kernel's variant for its declared strides is built; other layouts compile
    separately on first use. Without a compiler, NumPy kernels (after one warning).
    """
    cc = find_compiler()
    if cc is None:
        warn_unavailable()
        return [NumpyKernel(k) for k in kernels]
    cks = [CompiledKernel(k, cc) for k in kernels]
    parts = [(ck, ck.declared_key()) + render(ck.kernel, ck.declared_key()) for ck in cks]
    text = prelude(mvec=dict(cc.mvec)) + "".join(p[2] for p in parts)
    lib = cache.load(text, cc)
    for ck, key, _, sym in parts:
        ck._install(key, lib, sym)
    return cks
