"""One-pass C loops for the default (for-loop) SGD and Adam/AdamW updates, bit-exact.

The optimizers' default step updates each parameter with whole-array NumPy passes
(``ember/optim/_ops.py``): Adam is ``lerp_`` (3 passes), ``mul_``, ``addcmul_`` (3),
``sqrt``, ``div_``, ``add_`` and ``addcdiv_`` (3) — 13 reads and writes of
parameter-sized arrays where PyTorch's for-loop runs 7 fused kernels. Here each parameter's
update is one loop over its elements that performs *the same IEEE operations in the same
order*, each rounded to the parameter's dtype, with every scalar converted to that dtype
by NumPy exactly as the NumPy passes convert it. Floating-point contraction is off
(``a * b + c`` stays two roundings, no FMA) and ``+ - * / sqrt`` are correctly rounded, so
the result equals the NumPy passes bit for bit, NaN/Inf included — unlike ``fused=True``
(``optim/_fused.py``), whose generated kernels contract into FMAs as PyTorch's fused
kernels do. The default step therefore stays bit-identical to ``foreach=True``, to
``ember.compile``'s exact-pass steps and to itself with ``EMBER_OPTIM_KERNELS=0``
(tested in ``tests/eager/test_optim_kernels.py``).

Entry points ``ember_<name>_{f32,f64}(char **ptrs, const int64_t *geo, int64_t nt)``,
``geo = [n, flags]``, contiguous operands of one dtype:

* ``sgd``: ``ptrs = [p, g, buf, s]``, ``s = [weight_decay, momentum, 1 - dampening, -lr]``;
  flags: 1 maximize, 2 weight decay, 4 momentum (``buf`` updated), 8 Nesterov.
* ``sgd_many`` (``ember_sgd_many_{f32,f64}``, called through :mod:`.launch`'s one-call
  launcher): ``ptrs = [geo, s, p0, g0, buf0, p1, ...]``, ``geo = [count, flags, n0, ...]``:
  ``sgd``'s loop for each parameter in turn (:func:`sgd_many`).
* ``adam``: ``ptrs = [p, g, exp_avg, exp_avg_sq, s]``, ``s = [lerp weight (w or 1 - w),
  beta2, 1 - beta2, sqrt(1 - beta2**t), eps, -step_size, 1 - lr * wd, wd]``; flags:
  1 maximize, 2 L2 weight decay (``g + wd * p``), 4 decoupled (``p * (1 - lr wd)``),
  8 lerp's upper form (``w >= 0.5``: ``end - (end - t) * (1 - w)``).

:func:`kernels` returns None without a C compiler (the NumPy passes run then).

On a GPU (``gpu=True``: the device has ``cuda_kernels``) the same per-element steps
(:data:`SGD_STEP`, :data:`ADAM_STEP`) become one CUDA kernel per parameter
(:mod:`.cuda_optim`), its arithmetic CUDA's never-contracted ``__f*_rn`` intrinsics, so
the update equals the element-by-element passes there too.
"""
from __future__ import annotations

import ctypes
import math
import os

import numpy as np

from . import pool as _pool
from .launch import DATA_OFF as _DATA_OFF, ITEMS_OFF as _ITEMS_OFF
from .toolchain import find_compiler

#: dtypes with a kernel, and their entry-point suffix.
DTYPES = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64")}
_NAMES = ("sgd", "adam")
_state: dict = {"enabled": os.environ.get("EMBER_OPTIM_KERNELS", "1") != "0"}
#: parameter updates run through the loops (tests and benchmarks read it).
stats = {"runs": 0}

# NOTE: contraction off, for GCC (its GNU-C default is -ffp-contract=fast) and Clang: a
# fused multiply-add rounds once where the NumPy passes round twice.
_HEAD = r"""
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <stdint.h>
#include <math.h>
"""

# NOTE: each step's update, one element ``i``, written once for the C loops here and the
# CUDA kernels (:mod:`.cuda_optim`). Every arithmetic operation is a macro so that neither
# compiler may contract it into an FMA: plain operators under the C pragma above, CUDA's
# round-to-nearest intrinsics (``__fmul_rn``...: never contracted) on the GPU.
SGD_STEP = r"""
        T gi = g[i];
        if (f & 1) gi = -gi;
        if (f & 2) { T t = MUL(p[i], wd); gi = ADD(gi, t); }
        if (f & 4) {
            T b = MUL(buf[i], mom);
            T t = MUL(gi, damp1);
            b = ADD(b, t);
            buf[i] = b;
            if (f & 8) { T u = MUL(b, mom); gi = ADD(gi, u); } else gi = b;
        }
        T d = MUL(gi, nlr);
        p[i] = ADD(p[i], d);
"""

ADAM_STEP = r"""
        T gi = g[i], pi = p[i];
        if (f & 1) gi = -gi;
        if (f & 4) pi = MUL(pi, pmul);
        if (f & 2) { T t = MUL(pi, wd); gi = ADD(gi, t); }
        T d = SUB(gi, m[i]);
        d = MUL(d, w);
        T mi = (f & 8) ? SUB(gi, d) : ADD(m[i], d);
        m[i] = mi;
        T vi = MUL(v[i], beta2);
        T sq = MUL(gi, gi);
        sq = MUL(sq, omb2);
        vi = ADD(vi, sq);
        v[i] = vi;
        T den = SQRT(vi);
        den = DIV(den, bc2);
        den = ADD(den, eps);
        T q = DIV(mi, den);
        q = MUL(q, nss);
        p[i] = ADD(pi, q);
"""

#: per entry point: the scalar names its step reads, in the order of ``s`` / the kernel's
#: by-value parameters.
SCALARS = {"sgd": ("wd", "mom", "damp1", "nlr"),
           "adam": ("w", "beta2", "omb2", "bc2", "eps", "nss", "pmul", "wd")}
#: per entry point: its arrays, ``(name, written)``, in the order of ``ptrs``.
ARRAYS = {"sgd": (("p", True), ("g", False), ("buf", True)),
          "adam": (("p", True), ("g", False), ("m", True), ("v", True))}
STEPS = {"sgd": SGD_STEP, "adam": ADAM_STEP}

_OPS_C = """#define MUL(a, b) ((a) * (b))
#define ADD(a, b) ((a) + (b))
#define SUB(a, b) ((a) - (b))
#define DIV(a, b) ((a) / (b))
"""


def _c_entry(name: str, s: str) -> str:
    """The C entry point ``ember_<name>_<s>`` (``T``/``SQRT`` defined by the caller)."""
    arrays = ARRAYS[name]
    ptr_lines = [f"    {'' if w else 'const '}T *{a} = ({'' if w else 'const '}T *)ptr[{k}];"
                 for k, (a, w) in enumerate(arrays)]
    sc = SCALARS[name]
    scal = ", ".join(f"{x} = s[{k}]" for k, x in enumerate(sc))
    return (f"void ember_{name}_{s}(char **ptr, const int64_t *geo, int64_t nt) {{\n"
            + "\n".join(ptr_lines) + "\n"
            f"    const T *s = (const T *)ptr[{len(arrays)}];\n"
            "    const int64_t n = geo[0], f = geo[1];\n"
            f"    const T {scal};\n"
            "    (void)nt;\n"
            "    #pragma omp simd\n"
            "    for (int64_t i = 0; i < n; i++) {" + STEPS[name] + "    }\n}\n\n")


# NOTE: several parameters' SGD updates in one call (launch.py's one-call launcher reads
# the pointers): ``ptr = [geo, s, p0, g0, buf0, p1, ...]``, ``geo = [count, flags, n0,
# n1, ...]``; each parameter runs ``ember_sgd``'s loop, in order (the same bits).
_SGD_MANY = """void ember_sgd_many_@S@(char **ptr, const int64_t *shape, const int64_t *st,
                          int64_t nt) {
    const int64_t *geo = (const int64_t *)ptr[0];
    (void)shape; (void)st;
    for (int64_t k = 0; k < geo[0]; k++) {
        char *q[4] = {ptr[2 + 3 * k], ptr[3 + 3 * k], ptr[4 + 3 * k], ptr[1]};
        const int64_t g2[2] = {geo[2 + k], geo[1]};
        ember_sgd_@S@(q, g2, nt);
    }
}

"""


def source() -> str:
    """The C source of the update loops for float32 and float64."""
    body = "".join(f"#define T {t}\n#define SQRT {'sqrtf' if s == 'f32' else 'sqrt'}\n" +
                   "".join(_c_entry(name, s) for name in _NAMES) +
                   _SGD_MANY.replace("@S@", s) + "#undef T\n#undef SQRT\n"
                   for t, s in DTYPES.values())
    return _HEAD + _OPS_C + body


def set_enabled(flag: bool) -> bool:
    """Turn the one-pass update loops on or off (``EMBER_OPTIM_KERNELS=0`` starts off);
    returns the previous setting. Off, the optimizers run their NumPy passes (same bits)."""
    prev = _state["enabled"]
    _state["enabled"] = bool(flag)
    return prev


def kernels():
    """``{"adam_f32": fn, ...}``, or None (turned off, or no C compiler)."""
    if not _state["enabled"]:
        return None
    if "fns" not in _state:
        _state["fns"] = None
        if find_compiler() is not None:
            names = [f"{op}_{s}" for op in _NAMES for _, s in DTYPES.values()]
            loaded = _pool.load_kernels(source(), names)
            if loaded is not None:
                _state["lib"], _state["fns"] = loaded
    return _state["fns"]


class _Call:
    """Reusable pointer/geometry buffers for one entry point (one per dtype and name)."""

    __slots__ = ("fn", "ptrs", "geo", "gp", "dtype", "scalars", "s", "sp")

    def __init__(self, fn, nptr: int, dtype):
        self.fn, self.dtype = fn, dtype
        self.ptrs = (ctypes.c_void_p * nptr)()
        self.geo = np.zeros(2, dtype=np.int64)
        self.gp = self.geo.ctypes.data
        self.scalars = self.s = self.sp = None

    def __call__(self, arrays, scalars, flags: int) -> None:
        # NOTE: NumPy converts the Python scalars to the dtype (round to nearest), as the
        # NumPy passes' ``array * python_float`` does under NEP 50. The converted array of
        # the last call is reused while the scalars repeat (every parameter of a step), and
        # an array passed twice (plain SGD's unused ``buf`` slot is ``p``) is asked for its
        # address once: ``ndarray.ctypes.data`` costs ~1.8 us.
        if not _same(scalars, self.scalars):
            self.s = np.array(scalars, dtype=self.dtype)
            self.scalars, self.sp = scalars, self.s.ctypes.data
        first = arrays[0]
        p0 = first.ctypes.data
        ptrs = [p0]
        for a in arrays[1:]:
            ptrs.append(p0 if a is first else a.ctypes.data)
        ptrs.append(self.sp)
        self.ptrs[:] = ptrs
        self.geo[0], self.geo[1] = arrays[0].size, flags
        self.fn(self.ptrs, self.gp, 1)
        stats["runs"] += 1


def _same(a, b) -> bool:
    """Whether scalar tuples ``a`` and ``b`` convert to the same bits (``==``, and the same
    sign where a value is zero: ``0.0 == -0.0``; a NaN never compares equal)."""
    if a != b:
        return False
    for x, y in zip(a, b):
        if x == 0 and math.copysign(1.0, x) != math.copysign(1.0, y):
            return False
    return True


_calls: dict = {}


def _call(name: str, dtype, nptr: int):
    if not _state["enabled"]:
        return None
    key = (name, dtype)
    c = _calls.get(key)
    if c is None:
        fns = kernels()
        if fns is None:
            return None
        c = _calls[key] = _Call(fns[f"{name}_{DTYPES[dtype][1]}"], nptr, dtype)
    return c


def fits(*arrays) -> bool:
    """Whether the arrays are C-contiguous, of one kernel dtype and one shape."""
    a0 = arrays[0]
    dt, shape = a0.dtype, a0.shape
    if dt not in DTYPES:
        return False
    for a in arrays:
        if a.dtype != dt or a.shape != shape or not a.flags.c_contiguous:
            return False
    return True


def sgd(p, g, buf, *, weight_decay, momentum, dampening, nesterov, maximize, lr,
        gpu: bool = False) -> bool:
    """One SGD update of raw arrays ``p`` (and ``buf``, when momentum) in place; False when
    no kernel runs (the caller's NumPy passes do then). ``gpu``: the arrays are a GPU's
    (one generated CUDA kernel: :mod:`.cuda_optim`)."""
    scalars, flags = sgd_scalars(weight_decay=weight_decay, momentum=momentum,
                                 dampening=dampening, nesterov=nesterov, maximize=maximize,
                                 lr=lr)
    arrays = (p, g, buf if buf is not None else p)
    if gpu:
        return _gpu("sgd", arrays, scalars, flags)
    c = _call("sgd", p.dtype, 4)
    if c is None:
        return False
    c(arrays, scalars, flags)
    return True


#: parameters one :func:`sgd_many` launch updates (launch.py's table holds 64 pointers)
_MANY = 20
_many: dict = {"scalars": None}


def sgd_scalars(*, weight_decay, momentum, dampening, nesterov, maximize, lr) -> tuple:
    """``(s, flags)`` of the ``sgd`` entry points (module docstring)."""
    flags = (1 if maximize else 0) | (2 if weight_decay != 0 else 0) | \
        (4 if momentum != 0 else 0) | (8 if nesterov else 0)
    return (weight_decay, momentum, 1 - dampening, -lr), flags


def sgd_many(arrays, *, weight_decay, momentum, dampening, nesterov, maximize, lr) -> bool:
    """:func:`sgd` for several parameters of one dtype in one C call per :data:`_MANY`:
    ``arrays`` is ``[(p, g, buf or None), ...]`` (each triple as :func:`sgd` takes it and
    :func:`fits` accepts; ``buf`` None for all or for none). The same loop per parameter
    (the same bits), without a ctypes call and two address queries per parameter. False
    when no kernel runs (nothing written)."""
    if not _state["enabled"]:
        return False
    if not arrays:
        return True
    dt = arrays[0][0].dtype
    fn = _many_fn(dt)
    if fn is None:
        return False
    run, addr = fn
    scalars, flags = sgd_scalars(weight_decay=weight_decay, momentum=momentum,
                                 dampening=dampening, nesterov=nesterov, maximize=maximize,
                                 lr=lr)
    m = _many
    if m["scalars"] is None or m["dtype"] != dt or not _same(scalars, m["scalars"]):
        # NOTE: converted by NumPy as _Call converts them (round to nearest)
        m["s"], m["scalars"], m["dtype"] = np.array(scalars, dtype=dt), scalars, dt
    s = m["s"]
    for k in range(0, len(arrays), _MANY):
        part = arrays[k:k + _MANY]
        geo = np.array([len(part), flags] + [p.size for p, _, _ in part], np.int64)
        items = [geo, s]
        for p, g, buf in part:
            items += (p, g, p if buf is None else buf)
        items = tuple(items)
        run(addr, items, 0, 0, 1, len(items), _ITEMS_OFF, _DATA_OFF)
    stats["runs"] += len(arrays)
    return True


def _many_fn(dt):
    """(the launcher, ``ember_sgd_many``'s address) for dtype ``dt``, or None."""
    fn = _many.get(dt)
    if fn is None:
        if dt not in DTYPES or kernels() is None:
            return None
        from . import launch
        run = launch.raw()
        if run is None:
            _many[dt] = fn = False
        else:
            f = getattr(_state["lib"], f"ember_sgd_many_{DTYPES[dt][1]}")
            _many[dt] = fn = (run, ctypes.cast(f, ctypes.c_void_p).value)
    return fn or None


def adam(p, g, m, v, *, lerp_weight, beta2, bias_correction2_sqrt, eps, step_size,
         weight_decay, decoupled, lr, maximize, gpu: bool = False) -> bool:
    """One Adam/AdamW update (no AMSGrad) of raw arrays ``p``, ``m``, ``v`` in place; False
    when no kernel runs. ``lerp_weight`` is ``1 - beta1``; ``gpu`` as in :func:`sgd`."""
    scalars, flags = adam_scalars(
        lerp_weight=lerp_weight, beta2=beta2, bias_correction2_sqrt=bias_correction2_sqrt,
        eps=eps, step_size=step_size, weight_decay=weight_decay, decoupled=decoupled, lr=lr,
        maximize=maximize)
    if gpu:
        return _gpu("adam", (p, g, m, v), scalars, flags)
    c = _call("adam", p.dtype, 5)
    if c is None:
        return False
    c((p, g, m, v), scalars, flags)
    return True


def adam_scalars(*, lerp_weight, beta2, bias_correction2_sqrt, eps, step_size, weight_decay,
                 decoupled, lr, maximize) -> tuple:
    """``(s, flags)`` of the ``adam`` entry points (module docstring)."""
    hi = lerp_weight >= 0.5
    flags = (1 if maximize else 0) | (8 if hi else 0)
    if weight_decay != 0:
        flags |= 4 if decoupled else 2
    return (1 - lerp_weight if hi else lerp_weight, beta2, 1 - beta2, bias_correction2_sqrt,
            eps, -step_size, 1 - lr * weight_decay, weight_decay), flags


def gpu_many(name: str, xp, records, scalars, flags: int) -> bool:
    """Update ``name`` ("sgd" or "adam") of several parameters' GPU arrays (``records``:
    tuples as the one-parameter entry takes them, one dtype) in one multi-tensor launch
    (:func:`.cuda_optim.launch_many`); False when it cannot run (nothing written)."""
    if not gpu_many_ready(records[0][0].dtype):
        return False
    from . import cuda_optim
    return cuda_optim.launch_many(name, xp, records, scalars, flags)


def gpu_many_ready(dtype) -> bool:
    """Whether :func:`gpu_many` runs for GPU arrays of NumPy ``dtype``."""
    from . import cuda_optim
    return _state["enabled"] and cuda_optim.MANY and cuda_optim.has_kernel(dtype)


def _gpu(name: str, arrays, scalars, flags: int) -> bool:
    if not _state["enabled"]:
        return False
    from . import cuda_optim
    return cuda_optim.launch(name, arrays, scalars, flags)
