"""Single-op generated kernels for eager mode: the dispatcher's fast path.

The dispatcher (:func:`ember.ops.dispatch.apply`) hands a large elementwise op to
:func:`run`, which answers with the result of a generated C kernel (OpenMP threads +
libmvec SIMD math) or ``None`` — then the op's NumPy kernel runs as always. ``run``
takes an op only when all of these hold:

* the fast path is on: ``ember.config.EAGER_KERNELS`` (``EMBER_EAGER_KERNELS=0`` in the
  environment, or ``ember.config.set_eager_kernels(False)``, turns it off);
* the op is in :data:`THRESHOLDS` and the output has at least that many elements. The
  table is measured (``bench/eager_kernels.py``, results in ``bench/RESULTS.md``): only
  ops where the generated kernel beats NumPy on this machine class are listed — the
  transcendental ones (libm calls NumPy runs one element at a time, or Ember's own NumPy
  ``erf``). Memory-bound arithmetic (add, mul, relu...) is not: NumPy is at bandwidth and
  the second thread is not worth a changed code path;
* the inputs are CPU float32/float64 NumPy arrays of one dtype (a Python scalar operand
  rides along as a 0-d array); any layout — broadcast, transposed, sliced — is passed to
  the kernel as strides (one compiled variant per layout class, see :mod:`.layout`);
* float16/bfloat16, from :data:`LOWP_THRESHOLD` elements (the smallest threshold above):
  every op with a C template, computed in float32 inside and rounded once on store
  — NumPy's float16 and ml_dtypes' bfloat16 loops convert element by element, so even
  ``add`` is 3-10x slower than the kernel (except the float16 ops NumPy vectorises itself:
  :func:`_numpy_f16_simd`). (A ``cast`` between float32 and float16/bfloat16 is the
  cast kernel's own business: :mod:`.convert_kernels`, eager and compiled alike);
* a C compiler exists (otherwise NumPy, silently: eager users did not ask for codegen);
* the process has already pushed :data:`WARMUP` elements through this op and dtype in
  NumPy (``EMBER_EAGER_KERNELS_WARMUP``).

Why the warm-up is 0 by default: with it, the switch point would depend on how much work
the process had done, and a run resumed from a checkpoint would compute its first
``WARMUP`` elements per op in NumPy — not the bits of the uninterrupted run. At 0 every
call's path is a function of its op, dtype and size alone. The cost: the first large call
in a process pays ~0.2 s (importing this package, probing the compiler) plus ~0.14 s per
kernel the first time on a machine (then the disk cache has it). ``EMBER_EAGER_KERNELS_WARMUP``
trades that determinism for a cheaper start in short scripts.

Accuracy: the generated kernels call glibc's libm/libmvec (<= 4 ulp by glibc's tables;
a dense sweep of every SIMD variant, SSE to AVX-512, measured up to 3.9 ulp, float32 log)
except float32 ``tanh``, a rational approximation (Eigen's/XLA's, <= 4.5 ulp), and
float32 ``erf``, Ember's own (<= 1.30 ulp over every float32; libmvec's AVX-512 ``erff``
returned 1.0 for |x| in [3.74, 3.92]), so no bound depends on which variant a CPU gets.
That is what XLA and Eigen ship on CPU, well inside the float32 tolerances the op tests
use, so eager accepts it; set ``EMBER_EAGER_KERNELS=0`` for NumPy's bits.
NaN/Inf propagate like NumPy (the registry's templates; tested per op).

``elementwise_kernel(op, dtypes, shapes)`` is the shape-bound variant (bench, tests).
"""
from __future__ import annotations

import ctypes
import os
import warnings

import numpy as np

from .. import config
from .. import dtypes as _dt
from ..ops.arith import POW_FAST
from ..ops.registry import REGISTRY
from .ir import InputSpec, Kernel, Load, OutSpec, call, infer
from .layout import coalesce
from . import convert_kernels as _cvt
from . import runtime as _rt
from .runtime import CompiledKernel, compile, num_threads
from .toolchain import CompileError, find_compiler

_cache: dict = {}

#: op -> (float32, float64) minimum output elements for the eager fast path (None: never).
#: Chosen from ``bench/eager_kernels.py`` (bench/RESULTS.md, "Issue 5 — eager kernels"):
#: where NumPy calls scalar libm (or Ember's NumPy erf family) the kernel's libmvec SIMD
#: loop wins 2-40x from 32K elements on, even on one thread; NumPy's own SIMD float32
#: exp only loses to the kernel's second thread, which starts at 64K elements
#: (render_c.PARALLEL_THRESHOLD). Not listed (NumPy at memory bandwidth, or SIMD already):
#: add, sub, mul, div, neg, abs, relu, sqrt, floor/round, clamp, comparisons, where.
THRESHOLDS = {op: (1 << 15, 1 << 15) for op in (
    "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "erfinv", "pow",
    "atan2", "hypot")}
THRESHOLDS["exp"] = (1 << 16, 1 << 15)
#: relu's backward: one pass instead of NumPy's compare + mask AND (or ``where``, which
#: branches per element): 18.6 vs 27.3 us at (128, 512) float32, one thread (issue 19)
THRESHOLDS["threshold_backward"] = (1 << 15, 1 << 15)
_DEFAULT_THRESHOLDS = dict(THRESHOLDS)

#: elements an (op, dtype) runs in NumPy in this process before its kernel is built.
WARMUP = config.EAGER_KERNELS_WARMUP

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_F64 = _FLOATS[1]
_LOWP = (_cvt.F16, _cvt.BF16)
#: minimum output elements of a float16/bfloat16 op.
LOWP_THRESHOLD = 1 << 15
#: ops left out in float16/bfloat16: ``cast``'s own kernel converts (``convert_kernels``).
LOWP_EXCLUDE = frozenset(("cast",))
#: float16 ops NumPy does on the bits (memory speed everywhere).
NUMPY_F16_BITOPS = frozenset(("abs", "neg"))
#: float16 ops NumPy (>= 1.25) vectorises through SVML on AVX512_SKX CPUs.
NUMPY_F16_SVML = frozenset((
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh"))
_seen: dict = {}          # (op name, dtype) -> elements run in NumPy so far
_kernels: dict = {}       # (op name, dtype, nin, params) -> CompiledKernel or False
_state = {"cc": None, "probed": False}
_threads: dict = {}
#: calls this process ran through generated kernels (tests and benchmarks read it).
stats = {"runs": 0}
_P_VOID = ctypes.c_void_p


def run(op, arrays, params):
    """``op(*arrays, **params)`` through a generated kernel, or None (caller runs NumPy).

    ``arrays`` are what the dispatcher would pass to the op's NumPy kernel: arrays
    already in the compute dtype, or Python scalars.
    """
    if not config.EAGER_KERNELS:
        return None
    need = THRESHOLDS.get(op.name)
    dt = None
    for a in arrays:
        if a.__class__ is np.ndarray:
            if dt is None:
                dt = a.dtype
            elif a.dtype != dt:
                return None
        elif a.__class__ is not float and a.__class__ is not int:
            return None
    if dt is None:
        return None
    if dt in _LOWP:
        need = _lowp_need(op, dt)
    elif need is None or dt not in _FLOATS:
        return None
    else:
        need = need[dt is _F64]
    if need is None:
        return None
    shape = _broadcast(arrays)
    if shape is None:
        return None
    size = 1
    for n in shape:
        size *= n
    if size < need:
        return None
    key = (op.name, dt)
    seen = _seen.get(key, 0)
    if seen < WARMUP:
        _seen[key] = seen + size
        return None
    if op.name == "pow" and arrays[1].__class__ is not np.ndarray and arrays[1] in POW_FAST:
        # NOTE: x**2, x**0.5... without a pow call: NumPy's POW_FAST kernel (memory speed)
        # in float32/float64, a kernel with the exponent written in (cexpr.template) else.
        fn = _pow_kernel(dt, arrays[1]) if dt in _LOWP else None
        return None if fn is None else _count(_launch(fn, [arrays[0]], shape, dt))
    fn = _kernel(op.name, dt, len(arrays), params)
    if fn is None:
        return None
    views = [a if a.__class__ is np.ndarray else np.asarray(a, dt) for a in arrays]
    out = _launch(fn, views, shape, dt)
    if out is not None:
        stats["runs"] += 1
    return out


def _lowp_need(op, dt):
    """Minimum size for a float16/bfloat16 op; None: never.

    NOTE: NumPy runs every float16/bfloat16 ufunc one element at a time through scalar
    conversions (float16 add: ~3 ns an element where float32 is at memory speed), so
    every op with a C template takes the kernel, from the smallest eager threshold on.
    """
    ok = op.expr is not None and op.name not in LOWP_EXCLUDE and not (
        dt is _cvt.F16 and op.name in _numpy_f16_simd())
    return LOWP_THRESHOLD if ok else None


def _numpy_f16_simd() -> frozenset:
    """float16 ops NumPy runs in SIMD on this CPU (left to it: 2-4x faster than a kernel
    converting in software; measured, bench/RESULTS.md "Issue 16")."""
    ops = _state.get("f16_simd")
    if ops is None:
        core = getattr(np, "_core", None) or getattr(np, "core", None)
        feats = getattr(getattr(core, "_multiarray_umath", None), "__cpu_features__", {})
        skx = bool(feats.get("AVX512_SKX", False))
        ops = _state["f16_simd"] = NUMPY_F16_BITOPS | (NUMPY_F16_SVML if skx else frozenset())
        return ops
    return ops


def _broadcast(arrays):
    shapes = [a.shape for a in arrays if a.__class__ is np.ndarray]
    s0 = shapes[0]
    if all(s == s0 for s in shapes):
        return s0
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None            # NOTE: NumPy then raises the dispatcher's ShapeError


def _kernel(name, dt, nin, params):
    """The CompiledKernel for (op, dtype, params), built on first use; None if impossible."""
    items = tuple(sorted(params.items()))
    key = (name, dt, nin, items)
    fn = _kernels.get(key)
    if fn is None:
        fn = False
        cc = _compiler()
        if cc is not None:
            d = _dt.as_dtype(dt)
            compute, out = infer(name, [d] * nin, dict(items))
            if out is d:
                body = call(name, *[Load(i) for i in range(nin)], compute=compute,
                            **dict(items))
                # NOTE: the declared shape/strides are placeholders: the C function is
                # specialised to a layout class only, chosen per call in _launch.
                fn = CompiledKernel(Kernel([InputSpec(d, (1,))] * nin, OutSpec(d, (1,)),
                                           body, name=f"ember_eager_{name}"), cc)
        _kernels[key] = fn
    return fn or None


def _pow_kernel(dt, e):
    """The CompiledKernel of ``x ** e`` for a :data:`POW_FAST` exponent ``e``; None if none."""
    key = ("pow", dt, e.__class__, e)
    fn = _kernels.get(key)
    if fn is None:
        fn = False
        cc = _compiler()
        if cc is not None:
            d = _dt.as_dtype(dt)
            compute, out = infer("pow", [d, d], {})
            if out is d:
                body = call("pow", Load(0), e, compute=compute)
                fn = CompiledKernel(Kernel([InputSpec(d, (1,))], OutSpec(d, (1,)), body,
                                           name="ember_eager_pow_const"), cc)
        _kernels[key] = fn
    return fn or None


def _count(out):
    if out is not None:
        stats["runs"] += 1
    return out


def _compiler():
    if not _state["probed"]:
        _state["cc"] = find_compiler()
        _state["probed"] = True
    return _state["cc"]


def _launch(ck, arrays, shape, dt):
    """Run ``ck`` over ``shape``: inputs by their (broadcast) element strides."""
    out = np.empty(shape, dt)
    size = out.size
    if size == 0:
        return out
    if all(a.shape == shape and a.flags.c_contiguous for a in arrays):
        views, key = arrays, (1, ("c",) * len(arrays))       # NOTE: the common case
        dims, flat = (size,), [1] * len(arrays)
        fast = _fast_launch(ck, key, size, len(arrays))
        if fast is not None:
            # NOTE: launch.py's one-call launcher reads the data pointers from the arrays
            # (``a.ctypes.data`` ~0.8 us each, plus the pointer table: ~3 us a call)
            fast[0](fast[1], tuple(arrays) + (out,), fast[2], fast[3], _nthreads())
            return out
    else:
        views, lay = _layout(arrays, shape, dt.itemsize)
        key, dims = lay.key, lay.shape
        flat = [s for st in lay.strides for s in st]
    try:
        fn = ck._fns.get(key) or ck.function(key)
    except (CompileError, OSError) as e:
        _disable(ck, e)
        return None
    ptrs = (_P_VOID * (len(views) + 1))(*[v.ctypes.data for v in views], out.ctypes.data)
    fn(ptrs, (ctypes.c_int64 * len(dims))(*dims), (ctypes.c_int64 * len(flat))(*flat),
       _nthreads())
    return out


_fast: dict = {}          # (kernel id, layout key, size, arrays) -> launch data or False


def _fast_launch(ck, key, size, n):
    """(launcher, kernel address, dims address, strides address) of a contiguous launch
    of ``ck`` over ``size`` elements, or None (no one-call launcher here, or the kernel's
    layout did not build: the ctypes path reports it)."""
    k = (id(ck), key, size, n)
    f = _fast.get(k)
    if f is None:
        from . import launch
        run = launch.launcher()
        if run is None:
            _fast[k] = False
            return None
        fn = ck._fns.get(key)
        if fn is None:          # NOTE: built by this call's ctypes path, taken next time
            return None
        if len(_fast) > 256:
            _fast.clear()
        dims, flat = (ctypes.c_int64 * 1)(size), (ctypes.c_int64 * n)(*([1] * n))
        # NOTE: ck, fn and both tables stay referenced here (their addresses are used)
        f = _fast[k] = (run, ctypes.cast(fn, _P_VOID).value, ctypes.addressof(dims),
                        ctypes.addressof(flat), ck, fn, dims, flat)
    return f or None


def _layout(arrays, shape, item):
    views, strides = [], []
    for a in arrays:
        if a.shape != shape:
            a = np.broadcast_to(a, shape)
        st = a.strides
        if any(s % item for s in st):
            a = np.ascontiguousarray(a)        # NOTE: misaligned view: copy it
            st = a.strides
        views.append(a)
        strides.append(tuple(s // item for s in st))
    return views, coalesce(shape, strides)


def _nthreads() -> int:
    # NOTE: runtime.num_threads() asks os.cpu_count() each call (~15 us here); memoised per
    # process and setting (set_num_threads, fork: runtime's own rule, 1 in a child).
    k = (os.getpid(), _rt._threads["n"])
    n = _threads.get(k)
    if n is None:
        _threads.clear()
        n = _threads[k] = num_threads()
    return n


def _disable(ck, err) -> None:
    for k, v in list(_kernels.items()):
        if v is ck:
            _kernels[k] = False
    warnings.warn(f"ember: the eager kernel for {ck.kernel.name} failed to build; NumPy runs "
                  f"it instead ({str(err)[:300]})", RuntimeWarning, stacklevel=4)


def configure(thresholds: dict | None = None, warmup: int | None = None,
              reset: bool = False) -> None:
    """Change the fast path's table or warm-up (tests, benchmarks); ``reset``: defaults.

    Also drops this process's warm-up counts and compiled-kernel memo (the disk cache
    stays), and lowers the dispatcher's size gate to the smallest threshold.

    Example:
        >>> configure(thresholds={"exp": 1}, warmup=0)    # every float exp, from now on
    """
    global WARMUP
    from ..ops import dispatch
    if reset:
        THRESHOLDS.clear()
        THRESHOLDS.update(_DEFAULT_THRESHOLDS)
        WARMUP = config.EAGER_KERNELS_WARMUP
    if thresholds is not None:
        THRESHOLDS.clear()
        THRESHOLDS.update({k: v if isinstance(v, tuple) else (v, v)
                           for k, v in thresholds.items()})
    if warmup is not None:
        WARMUP = int(warmup)
    _seen.clear()
    _kernels.clear()
    _state["probed"] = False
    dispatch._EAGER_MIN = min_threshold()
    dispatch._EAGER_OPS = frozenset(k for k, v in THRESHOLDS.items() if v != (None, None))


def min_threshold() -> int:
    """The smallest size any op takes the fast path at (the dispatcher's gate)."""
    return min((n for v in THRESHOLDS.values() for n in v if n is not None), default=1 << 62)


def elementwise_kernel(op_name: str, dtypes, shapes, strides=None, params=None):
    """A compiled single-op kernel: ``fn(*arrays) -> ndarray`` (None without a compiler).

    Args:
        op_name: a registry primitive with a C template (``"exp"``, ``"add"``...).
        dtypes: the inputs' Ember dtypes (or names); ``shapes``: their shapes.
        strides: their element strides (default: C-contiguous); the compiled variant
            serves every call with the same layout class, whatever the shape.
        params: the op's params (``{"min": 0.0}`` for clamp...).

    Example:
        >>> fn = elementwise_kernel("tanh", [ember.float32], [(4096, 1024)])
        >>> y = fn(x)          # x: a float32 NumPy array of that shape
    """
    if find_compiler() is None:
        return None
    dts = tuple(_dt.as_dtype(d) for d in dtypes)
    out_shape = np.broadcast_shapes(*[tuple(s) for s in shapes])
    strides = strides or [_contig(tuple(s)) for s in shapes]
    specs = tuple(InputSpec(d, _bstrides(tuple(s), tuple(st), out_shape))
                  for d, s, st in zip(dts, shapes, strides))
    items = tuple(sorted((params or {}).items()))
    compute, out_dt = infer(op_name, list(dts), dict(items))
    key = (op_name, dts, items, out_shape, tuple(sp.strides for sp in specs))
    fn = _cache.get(key)
    if fn is None:
        body = call(op_name, *[Load(i) for i in range(len(dts))], compute=compute, **dict(items))
        fn = compile(Kernel(specs, OutSpec(out_dt, tuple(out_shape)), body,
                            name=f"ember_{op_name}"))
        _cache[key] = fn
    return fn


def _contig(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc if n != 1 else 0)
        acc *= n
    return tuple(reversed(out))


def _bstrides(in_shape, in_strides, out_shape):
    """Element strides of an input over the broadcast output shape (0 on broadcast dims)."""
    pad = len(out_shape) - len(in_shape)
    st = [0] * pad
    for n, s, o in zip(in_shape, in_strides, out_shape[pad:]):
        st.append(0 if n == 1 and o != 1 else s)
    return tuple(st)


def supported(op_name: str) -> bool:
    """Whether ``op_name`` has a C template (and so a generated kernel)."""
    op = REGISTRY.get(op_name)
    return op is not None and op.expr is not None


#: integer ops whose kernels cannot match eager: eager raises on an integer division by
#: zero (``IntegerDivisionByZero``) and on negative integer powers (NumPy's ValueError),
#: while a C kernel has no way to raise (the prelude's helpers return 0 / a wrapped value
#: instead of trapping). A fusion pass must leave these nodes to eager when their compute
#: dtype is an integer or bool; the eager fast path never takes integers.
INT_UNSAFE = frozenset(("floor_divide", "trunc_divide", "remainder", "fmod", "pow"))


def fusible(op_name: str, compute) -> bool:
    """Whether a generated kernel of ``op_name`` in ``compute`` dtype behaves like eager.

    Example:
        >>> fusible("remainder", ember.int64), fusible("remainder", ember.float32)
        (False, True)
    """
    if not supported(op_name):
        return False
    return op_name not in INT_UNSAFE or _dt.as_dtype(compute).is_floating_point
