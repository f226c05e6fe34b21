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
from . import pool as _pool
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
    """Threads a kernel launch asks for: ``set_num_threads``, else ``OMP_NUM_THREADS``, else
    the CPUs this process may run on; 1 in a forked child (the pool's threads stay behind)."""
    pid = os.getpid()
    if _threads["pid"] is None:
        _threads["pid"] = pid
    elif _threads["pid"] != pid:
        return 1
    n = _threads["n"]
    if n:
        return n
    # NOTE: os.cpu_count() reads sysfs (~20 us); the environment is re-read each call so a
    # user's OMP_NUM_THREADS change still applies.
    env = os.environ.get("OMP_NUM_THREADS")
    if env:
        try:
            return max(int(env.split(",")[0]), 1)
        except ValueError:
            pass
    if _threads.get("cpus") is None:
        _threads["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
    return _threads["cpus"]


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

    def out_shapes(self) -> list:
        """``[(shape, dtype)]`` of every output, the main one first."""
        k = self.kernel
        if isinstance(k, ReduceKernel):
            outer = tuple(k.shape[:len(k.shape) - k.naxes])
            return [(tuple(k.shape) if f else outer, d) for d, _, f in k.outputs]
        return [(tuple(k.out.shape), d) for d, _ in k.outputs]

    def _check(self, arrays, out, extra_outs=None):
        k = self.kernel
        if len(arrays) != len(k.inputs):
            raise TypeError(f"codegen: {k.name} takes {len(k.inputs)} arrays, got {len(arrays)}")
        arrays = [np.asarray(a) for a in arrays]
        for i, (a, s) in enumerate(zip(arrays, k.inputs)):
            if a.dtype != s.dtype.np:
                raise TypeError(f"codegen: {k.name} input {i} must be {s.dtype.name}, "
                                f"got {a.dtype}")
        outs = [out] + list(extra_outs or [None] * len(k.extra))
        if len(outs) != len(k.extra) + 1:
            raise TypeError(f"codegen: {k.name} has {len(k.extra) + 1} outputs, got "
                            f"{len(outs)} buffers")
        checked = []
        for o, (shape, d) in zip(outs, self.out_shapes()):
            if o is None:
                o = np.empty(shape, d.np)
            elif (o.size != _prod(shape) or o.dtype != d.np
                  or not o.flags.c_contiguous or not o.flags.writeable):
                raise ValueError(f"codegen: out must be a writeable C-contiguous "
                                 f"{d.name} array of shape {shape}")
            checked.append(o)
        return arrays, checked


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


class NumpyKernel(_Base):
    """The kernel evaluated with NumPy (no compiler): same call, same results."""

    def __call__(self, *arrays, out=None, extra_outs=None):
        arrays, outs = self._check(arrays, out, extra_outs)
        run = interp.run_reduction if isinstance(self.kernel, ReduceKernel) \
            else interp.run_elementwise
        return run(self.kernel, arrays, outs[0], outs[1:])


class Launch:
    """A kernel prepared for one input layout: the ctypes function, its ``shape`` and
    ``strides`` arguments, and their addresses (for :mod:`~ember.codegen.launch`)."""

    __slots__ = ("fn", "shape", "strides", "fn_addr", "shape_addr", "strides_addr")

    def __init__(self, fn, shape, strides):
        self.fn, self.shape, self.strides = fn, shape, strides
        self.fn_addr = ctypes.cast(fn, ctypes.c_void_p).value
        self.shape_addr = ctypes.addressof(shape)
        self.strides_addr = ctypes.addressof(strides)


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
        _pool.install(lib)
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

    def __call__(self, *arrays, out=None, extra_outs=None):
        arrays, outs = self._check(arrays, out, extra_outs)
        result = tuple(outs) if len(outs) > 1 else outs[0]
        if all(o.size == 0 for o in outs):
            return result
        views, lay = self.layout(arrays)
        fn = self.function(lay.key)
        ptrs = (ctypes.c_void_p * (len(views) + len(outs)))(
            *[v.ctypes.data for v in views], *[o.ctypes.data for o in outs])
        shape = (ctypes.c_int64 * len(lay.shape))(*lay.shape)
        flat = [s for st in lay.strides for s in st]
        strides = (ctypes.c_int64 * max(len(flat), 1))(*flat)
        fn(ptrs, shape, strides, num_threads())
        return result

    def launcher(self, arrays, order=None):
        """``(fn, shape, strides)`` ready to call for arrays laid out like ``arrays``, or
        None when they need a copy first (the caller then uses ``__call__``).

        What a graph's fused node caches per input layout (keyed by the arrays' strides)
        so a run is one ctypes call: ``fn(ptrs, shape, strides, nthreads)``. ``order``
        (an elementwise kernel's): the loop dims in that order, outermost first — the
        output is then written row-major in the permuted shape.
        """
        strides = []
        for a in arrays:
            b = np.broadcast_to(a, self.shape)
            if any(st % b.itemsize for st in b.strides):
                return None
            strides.append(tuple(st // b.itemsize for st in b.strides))
        if isinstance(self.kernel, ReduceKernel):
            lay, copy = coalesce_rows(self.shape, strides, self.kernel.naxes)
            if any(copy):
                return None
        elif order is not None:
            lay = coalesce(tuple(self.shape[d] for d in order),
                           [tuple(st[d] for d in order) for st in strides])
        else:
            lay = coalesce(self.shape, strides)
        fn = self.function(lay.key)
        shape = (ctypes.c_int64 * len(lay.shape))(*lay.shape)
        flat = [s for st in lay.strides for s in st]
        strides = (ctypes.c_int64 * max(len(flat), 1))(*flat)
        return Launch(fn, shape, strides)


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


#: a graph with at least this many distinct kernels, or at least :data:`SPLIT_BYTES` of
#: kernel C text in two or more kernels, compiles them as two shared objects, two compiler
#: runs at once (a cold W3 step: ~90 kernels, 0.9 -> ~0.5 s on two cores). gcc takes
#: ~0.04 s for the prelude a run and ~0.1 s per 10 KB of kernels, so a second run pays
#: from ~8 KB; W3 with the cross-entropy fold (``ce_rows``) has 14 distinct kernels but 63
#: KB of text (one run 0.79 s, two 0.5 s).
SPLIT_KERNELS = 16
SPLIT_BYTES = 16 * 1024


def compile_many(kernels) -> list:
    """Compile several kernels into one shared object (one compiler run for all; two
    concurrent runs, each over about half of their C text, from :data:`SPLIT_KERNELS`
    distinct kernels or :data:`SPLIT_BYTES` of their text).

    Each kernel's variant for its declared strides is built; other layouts compile
    separately on first use. Without a compiler, NumPy kernels (after one warning).
    """
    cc = find_compiler()
    if cc is None:
        warn_unavailable()
        return [NumpyKernel(k) for k in kernels]
    cks = [CompiledKernel(k, cc) for k in kernels]
    parts = [(ck, ck.declared_key()) + render(ck.kernel, ck.declared_key()) for ck in cks]
    texts: dict = {}
    for p in parts:               # NOTE: equal kernels of other shapes render identically
        texts.setdefault(p[3], p[2])
    syms = list(texts)
    sizes = [len(texts[s]) for s in syms]
    split = len(syms) >= SPLIT_KERNELS or (len(syms) >= 2 and sum(sizes) >= SPLIT_BYTES)
    half = _halfway(sizes) if split else len(syms)
    groups = [syms[:half], syms[half:]] if half < len(syms) else [syms]
    head = prelude(mvec=dict(cc.mvec))
    libs = _load_all([head + "".join(texts[s] for s in g) for g in groups], cc)
    where = {s: (lib, text) for g, (lib, text) in zip(groups, libs) for s in g}
    for ck, key, _, sym in parts:
        lib, text = where[sym]
        ck._install(key, lib, sym)
        ck.origin = (text, key, sym)    # what the graph cache needs to load it again
    return cks


def _halfway(sizes) -> int:
    """Where to cut a list of kernel texts so that both halves hold about as much C (the
    two compiler runs then end together; by count, W3's were 0.62 and 0.38 s)."""
    total, acc = sum(sizes), 0
    for i, n in enumerate(sizes):
        acc += n
        if 2 * acc >= total:
            return max(1, min(i + 1, len(sizes) - 1))
    return len(sizes)


def _load_all(sources, cc) -> list:
    """``[(library, source)]`` of each source, the first on a helper thread (the kernel
    cache builds different entries concurrently)."""
    if len(sources) == 1:
        return [(cache.load(sources[0], cc), sources[0])]
    import threading
    got: dict = {}

    def first():
        try:
            got[0] = cache.load(sources[0], cc)
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            got[0] = e
    t = threading.Thread(target=first, name="ember-compile", daemon=True)
    t.start()
    rest = [(cache.load(src, cc), src) for src in sources[1:]]
    t.join()
    if isinstance(got[0], BaseException):
        raise got[0]
    return [(got[0], sources[0])] + rest
