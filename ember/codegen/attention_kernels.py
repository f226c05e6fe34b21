"""Hand-written C loops for the ``sdpa`` / ``sdpa_grad`` primitives (fused attention).

Composed of Ember ops, causal attention on the W3 GPT's ``(16, 4, 64, 32)`` heads is two
batched matmuls, a mask, a softmax and their backward: NumPy runs every stacked matmul
as one BLAS call per 64x64 matrix (~4 us of call overhead around ~3 us of work) and each
step between them is a full-size pass over the ``T x T`` scores. Here one call does all
of it, one ``(batch, head)`` at a time, parallel over the heads on Ember's worker pool
(:mod:`.pool`); the scores never leave a row buffer in L1:

* ``sdpa(q, k, v) -> O``: per query row ``i``, ``s_j = scale * q_i . k_j`` over the keys
  it sees (all, or ``j <= i`` when causal: masked columns are skipped, not computed),
  ``e_j = exp(s_j - max s)``, ``O_i = sum_j e_j v_j / sum_j e_j``;
* ``sdpa_grad(dO, q, k, v) -> dq, dk, dv`` (one flat array), a whole head at a time: by
  blocks of 4 query rows ``P`` is recomputed, ``dP = dO vᵀ``, ``dS = P (dP - rowsum(P dP))``
  and ``dq = scale dS k``; then by blocks of 4 keys ``dk = scale dSᵀ q`` and ``dv = Pᵀ dO``
  (key ``j`` summed over the query rows that see it) from the head's ``P`` / ``dS``.

Every product is one register-blocked micro-kernel (:c:func:`ember_blk`: a 4 x 16 float32
block of C in 8 AVX registers across the whole k loop; each row's own k range, so a masked
key never enters a row's sum, not even as ``0 * NaN``). Each head's operands are first
copied into small contiguous tiles (``kᵀ``/``vᵀ`` by 8 x 8 AVX transposes; any input
strides: the GPT's permuted views cost no ``ascontiguousarray``); ``exp`` runs on whole
vectors only (float32 with AVX2: an inline polynomial within 1 ulp of ``expf``, 0 below
-87.3; else libmvec's SIMD variant). The last products store straight into dq, dk, dv /
O when a head's row is a whole number of register blocks.
Sums run in the dtype (float32 for float32), in another order than BLAS: results agree
with the NumPy kernel within rounding, not bitwise. NaN/Inf propagate like the NumPy
kernel (``ember.ops.attention``): a NaN/Inf score poisons its row; masked positions take
no part in any sum (a NaN in a key or value row only reaches the rows that see it).

Each output has its own pointer and strides: by default ``O`` is a new C-ordered array and
dq, dk, dv the three parts of one flat array, but ``out=`` takes any arrays whose heads are
strided views with a unit last stride (a compiled graph has ``O`` land as ``(B, T, H, D)``
and dq, dk, dv in the slots of the ``(B, T, 3, H, D)`` gradient of a packed qkv: see
:mod:`ember.graph.passes.sdpa_layout`) — the same arithmetic, only the stores move.

Geometry is one int64 array ``g = [nb, b1, Tq, Tk, D, Dv, causal, q strides (4), k
strides (4), v strides (4), dO strides (4), out strides (4) x 3, plus_zero]``: the batch is
``nb`` heads indexed ``(p // b1, p % b1)``; strides are in elements, for the ``(b0, b1,
T, D)`` views (the outputs': O, or dq, dk, dv); ``plus_zero`` makes the backward write
``x + 0.0`` (``-0.0`` becomes ``+0.0``, as the sum in unbind's gradient does).
float32 and float64 only; :func:`kernels` returns None without a C compiler, and the
primitives' ``"cpu"`` kernels then run their NumPy kernels. Calls go through a cached
per-layout plan and :mod:`.launch`'s one-call launcher (see :func:`_plan`). The C text
is :mod:`.attention_kernels_c` (and :mod:`.attention_grad_c`).
"""
from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from . import cache as _cache
from . import launch as _launch
from . import pool as _pool
from .attention_grad_c import BWD
from .attention_kernels_c import BODY, FWD, HEAD, TAIL
from .prelude import mvec_decls
from .runtime import num_threads
from .toolchain import find_compiler

#: dtypes with a kernel: (C type, exp function, suffix).
DTYPES = {np.dtype(np.float32): ("float", "expf", "f32"),
          np.dtype(np.float64): ("double", "exp", "f64")}
_state: dict = {}


def source(mvec=(), suffixes=None, part=None) -> str:
    """The C source of the kernels for the dtypes whose suffix is in ``suffixes`` (default
    all; ``mvec``: the compiler's libmvec): both, or only ``part`` (``"fwd"``: ``sdpa``,
    ``"bwd"``: ``sdpa_grad``)."""
    chosen = [d for d in DTYPES.values() if suffixes is None or d[2] in suffixes]
    want = {name: arity for name, arity in mvec
            if name in {e for _, e, _ in chosen}}
    kernels = {None: BODY + FWD + BWD, "fwd": BODY + FWD, "bwd": BODY + BWD}[part] + TAIL
    body = "".join(
        f"#define T {t}\n#define EXP {e}\n"
        + kernels.replace("{S}", s)
        + "#undef T\n#undef EXP\n" for t, e, s in chosen)
    return HEAD + mvec_decls(want) + body


class _PerDtype(dict):
    """``{"sdpa_f32": ...}`` filled one library at a time: the first lookup of an entry
    builds (or loads) that dtype's forward or backward library only -- a float32 model
    never waits for the float64 kernels' compile, nor its forward for the backward's."""

    def __missing__(self, name):
        op, suffix = name.rsplit("_", 1)
        _load(suffix, "bwd" if op.startswith("sdpa_grad") else "fwd")
        return dict.__getitem__(self, name)


def _load(suffix: str, part: str) -> None:
    """Build or load dtype ``suffix``'s ``part`` library (``"fwd"``: ``sdpa``, ``"bwd"``:
    ``sdpa_grad``) into ``_state``. Loading the forward starts building the backward on a
    thread: on an empty kernel cache the backward's compiler run (the longer one) overlaps
    the forward's and whatever runs before the first backward."""
    cc = find_compiler()
    if cc is None:
        raise RuntimeError("attention_kernels: no C compiler; check available() first")
    threads = _state.setdefault("threads", {})
    if part == "fwd" and suffix not in threads:
        bwd = source(cc.mvec, (suffix,), "bwd")

        def build_backward():
            try:
                _cache.load(bwd, cc)
            except Exception:  # noqa: BLE001 - the backward's own load reports it
                pass
        threads[suffix] = threading.Thread(target=build_backward, name="ember-sdpa-build",
                                           daemon=True)
        threads[suffix].start()
    elif part == "bwd" and suffix in threads:
        threads[suffix].join()
    op = {"fwd": "sdpa", "bwd": "sdpa_grad"}[part]
    names = [f"{op}_{suffix}"]
    lib, fns = _pool.load_kernels(source(cc.mvec, (suffix,), part), names)
    _state.setdefault("libs", {})[f"{part}_{suffix}"] = lib   # NOTE: keeps it mapped
    dict.update(_state["fns"], fns)
    dict.update(_state["fast"], _pool.fast_addresses(lib, names))


def kernels():
    """``{"sdpa_f32": fn, ...}``: the compiled libraries' entry points (each dtype's built
    on its first use), or None (no compiler)."""
    if "fns" not in _state:
        if find_compiler() is None:
            return None
        _state["fast"] = _PerDtype()
        _state["fns"] = _PerDtype()
    return _state["fns"]


def available() -> bool:
    """Whether the kernels can be built here (a working C compiler)."""
    return find_compiler() is not None


def fits(*arrays) -> bool:
    """Whether the kernels take these operands: one float32/float64 dtype, no empty dim."""
    dt = arrays[0].dtype
    return dt in DTYPES and all(a.dtype == dt and a.size for a in arrays)


def _heads(a: np.ndarray, b0: int, b1: int) -> np.ndarray:
    """``a`` as ``(b0, b1, T, D)``: a view when its strides allow, else a contiguous copy."""
    shape = (b0, b1) + a.shape[-2:]
    try:
        return np.reshape(a, shape, copy=False)
    except ValueError:
        return np.ascontiguousarray(a).reshape(shape)


def _out_heads(a: np.ndarray, b0: int, b1: int):
    """Output ``a`` as a ``(b0, b1, T, D)`` view with a unit last stride, or None."""
    try:
        h = np.reshape(a, (b0, b1) + a.shape[-2:], copy=False)
    except ValueError:
        return None
    return h if h.shape[3] <= 1 or h.strides[3] == h.itemsize else None


def _batch2(batch) -> tuple:
    """The batch dims collapsed into two, ``(b0, b1)``."""
    return (math.prod(batch[:-1]), batch[-1]) if batch else (1, 1)


def _geometry(arrays, outs, is_causal, plus_zero):
    """(g, 4-D input views, 4-D output views): ``outs`` must have :func:`_out_heads`."""
    b0, b1 = _batch2(arrays[-3].shape[:-2])
    views = [_heads(a, b0, b1) for a in arrays]
    oviews = [_out_heads(o, b0, b1) for o in outs]
    q, k, v = views[-3:]
    geo = [b0 * b1, b1, q.shape[2], k.shape[2], q.shape[3], v.shape[3], int(bool(is_causal))]
    for a in views[-3:] + (views[:1] if len(views) == 4 else [views[-1]]) + \
            oviews + oviews[-1:] * (3 - len(oviews)):
        geo.extend(s // a.itemsize for s in a.strides)
    geo.append(int(bool(plus_zero)))
    return np.array(geo, np.int64), views, oviews


def _run(name, dtype, views, g, scale):
    fn = _state["fns"][f"{name}_{DTYPES[dtype][2]}"]
    err = ctypes.c_int(0)
    sc = ctypes.c_double(scale)
    ptrs = [a.ctypes.data for a in views] + [ctypes.addressof(sc), ctypes.addressof(err)]
    fn((ctypes.c_void_p * len(ptrs))(*ptrs), g.ctypes.data, num_threads())
    if err.value:
        raise MemoryError(f"attention_kernels.{name}: out of memory for a head's scratch")


# The plain path's Python cost per call (the 4-D views, the geometry array, a ctypes
# pointer per operand: ~25-45 us) was 5-7% of the W3 forward's ~0.55 ms. A plan caches,
# per operand layout (types, dtypes, shapes, strides of inputs and outputs, scale, causal,
# plus_zero), the geometry and the scale as arrays; a call is then one ember_launch
# (:mod:`.launch`: it reads the operands' data pointers from the array objects; ~10 us).
# Only for plain ndarrays whose (b0, b1, T, D) views share their data pointers (no copy to
# keep alive); the rest, or a build where the launcher's layout check failed, take the
# plain path.
_plans: dict = {}
_MAX_PLANS = 256
_NO_PLAN = object()


def _plan(name, arrays, outs, scale, is_causal, plus_zero=False):
    """(launcher, kernel address, g, scale array) for these operands, or None (plain path)."""
    try:
        key = (name, float(scale), bool(is_causal), bool(plus_zero))
        key += tuple((type(a), a.dtype, a.shape, a.strides) for a in arrays + outs)
    except TypeError:
        return None
    plan = _plans.get(key)
    if plan is None:
        plan = _NO_PLAN
        raw = _launch.raw()
        b0, b1 = _batch2(arrays[-3].shape[:-2])
        if raw is not None and all(type(a) is np.ndarray for a in arrays + outs) and \
                all(_out_heads(o, b0, b1) is not None for o in outs):
            g, views, _ = _geometry(arrays, outs, is_causal, plus_zero)
            if all(v.ctypes.data == a.ctypes.data for v, a in zip(views, arrays)):
                plan = (raw, _state["fast"][f"{name}_{DTYPES[arrays[0].dtype][2]}"], g,
                        np.array([scale], np.float64))
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
    return None if plan is _NO_PLAN else plan


def _launch_plan(name, plan, arrays):
    raw, kfn, g, sc = plan
    err = np.zeros(1, np.intc)
    args = arrays + (sc, err, g)
    raw(kfn, args, None, None, num_threads(), len(args), _launch.ITEMS_OFF,
        _launch.DATA_OFF)
    if err[0]:
        raise MemoryError(f"attention_kernels.{name}: out of memory for a head's scratch")


def _call(name, arrays, outs, scale, is_causal, plus_zero=False) -> None:
    """Run kernel ``name`` on ``arrays``, writing into ``outs`` (any strides)."""
    _loaded()
    plan = _plan(name, arrays, outs, scale, is_causal, plus_zero)
    if plan is not None:
        _launch_plan(name, plan, arrays + outs)
        return
    b0, b1 = _batch2(arrays[-3].shape[:-2])
    # an output whose heads are no unit-stride view is written to a new array, then copied
    tmp = tuple(o if _out_heads(o, b0, b1) is not None else np.empty(o.shape, o.dtype)
                for o in outs)
    g, views, oviews = _geometry(arrays, tmp, is_causal, plus_zero)
    _run(name, arrays[0].dtype, views + oviews, g, scale)
    for o, t in zip(outs, tmp):
        if t is not o:
            o[...] = t


def _loaded() -> None:
    if kernels() is None:
        raise RuntimeError("attention_kernels: no C compiler; check available() first")


def _check_out(name, out, shape, dtype):
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"attention_kernels.{name}: out must be {dtype}{list(shape)}, got "
                         f"{out.dtype}{list(out.shape)}")


def sdpa(q, k, v, scale: float, is_causal: bool, out=None) -> np.ndarray:
    """``softmax(q kᵀ * scale [causal]) v`` for operands that :func:`fits`.

    ``out``: an array of the result's shape and dtype to write it into (any strides, e.g.
    a transposed view of the buffer a reader wants); returned. Default: a new C array.
    """
    shape = q.shape[:-1] + v.shape[-1:]
    if out is None:
        out = np.empty(shape, q.dtype)
    _check_out("sdpa", out, shape, q.dtype)
    _call("sdpa", (q, k, v), (out,), scale, is_causal)
    return out


def sdpa_grad(grad, q, k, v, scale: float, is_causal: bool, out=None, plus_zero=False):
    """The gradients ``dq, dk, dv`` of :func:`sdpa` for output gradient ``grad``.

    Default: one flat array ``dq | dk | dv`` (each C-ordered), returned. ``out=(dq, dk,
    dv)``: arrays of q's, k's and v's shapes and dtype (any strides) to write them into;
    returned. ``plus_zero`` writes ``x + 0.0`` (``-0.0`` as ``+0.0``).
    """
    if out is None:
        flat = np.empty(q.size + k.size + v.size, q.dtype)
        a, b = q.size, q.size + k.size
        parts = (flat[:a].reshape(q.shape), flat[a:b].reshape(k.shape),
                 flat[b:].reshape(v.shape))
        _call("sdpa_grad", (grad, q, k, v), parts, scale, is_causal, plus_zero)
        return flat
    if len(out) != 3:
        raise ValueError(f"attention_kernels.sdpa_grad: out must be (dq, dk, dv), got "
                         f"{len(out)} arrays")
    for o, x in zip(out, (q, k, v)):
        _check_out("sdpa_grad", o, x.shape, q.dtype)
    _call("sdpa_grad", (grad, q, k, v), tuple(out), scale, is_causal, plus_zero)
    return out
