"""FlashAttention-style ``sdpa`` / ``sdpa_grad`` on a GPU: the primitives' ``"cuda"`` kernels.

The forward walks the keys by tiles of 32 with an online softmax (running max and sum per
query row, the accumulator rescaled as the max grows), so the ``(Tq, Tk)`` scores never
exist: memory is O(T) — the output and one float32 log-sum-exp per row. The backward
(FlashAttention-2's) recomputes each score from q, k and that log-sum-exp: ``delta_i =
dO_i . O_i``, then one kernel over key blocks (dk, dv: each key owned by one warp, no
atomics) and one over query blocks (dq). float32, float16 and bfloat16 storage, every sum
in float32, each result rounded once. The CUDA text is :mod:`.cuda_attention_c`; a
variant per (dtype, head dims rounded up to 32, up to 128) is rendered on demand, compiled
by NVRTC into the kernel cache and loaded once (:mod:`.cuda_cache`). float16/bfloat16
forwards with head dims 32/64/128 run on tensor cores (:mod:`.cuda_attention_mma_c`, its
own module: same arguments, same O and lse; ``MMA_FORWARD``). float16/bfloat16
with head dims <= 64 run dk/dv and dq on tensor cores instead (:mod:`.cuda_attention_mma_bwd`,
same arguments; ``backward_plans`` still lists the scalar launches it reroutes).

The ``sdpa`` primitive has one output, so the log-sum-exp travels beside the registry:
a forward run with ``save=True`` (the op's ``"cuda"`` kernel, while grad mode is on) keeps
``(copy of O, lse)`` in :data:`_saved`, keyed by the identities of its q, k and v arrays
and held only while they live (weak references: an entry goes when q, k or v is freed;
arrays without weak references: at most :data:`MAX_SAVED` entries, oldest dropped). The
backward of the same arrays, scale and mask takes the entry (once) and skips the forward
kernel (FlashAttention-2's saved LSE); anything else — a second backward with
``retain_graph``, an entry dropped — reruns the forward kernel for O and lse, as before.
The copy of O (one device copy, ~1 % of the forward's time) keeps an in-place write to
the op's output from reaching ``delta``; writes to q, k or v are caught by autograd's
saved-version check before the backward runs.

Launch geometry (a block is 4 warps, ``ROWS`` rows per warp; heads on ``gridDim.y``):
:func:`forward_plan` / :func:`backward_plans` return ``(kernel name, grid, block, args)``
lists that tests check on the CPU with NumPy arrays and a fake module.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from . import cuda_attention_mma_c as _mma_c
from . import cuda_attention_mma_bwd as _mma_bwd
from .cuda_attention_c import DELTA, DKDV, DQ_KERNEL, ENTRIES, FWD, HEAD

__all__ = ["MAX_HEAD_DIM", "STORAGE", "backward", "backward_plans", "forward",
           "forward_plan", "render", "supported", "variant"]

#: NumPy dtype name -> (suffix, CUDA storage type).
STORAGE = {"float32": ("f32", "float"), "float16": ("f16", "__half"),
           "bfloat16": ("bf16", "__nv_bfloat16")}
#: the largest q/k/v head dim with a kernel (larger: the primitive's CuPy kernel).
MAX_HEAD_DIM = 128
#: float16/bfloat16 with head dims in ``cuda_attention_mma_c.HEAD_DIMS``: the tensor-core
#: forward (``mma.sync``, 64 query rows a block, 128 with ``cuda_attention_mma_c.ROWS`` =
#: 32); False: the scalar one (benchmarks, A/B).
MMA_FORWARD = True
THREADS = 128
_modules: dict = {}
#: forward results kept for the backward: (id(q), id(k), id(v)) -> (refs, scale, causal,
#: O copy, lse) (module docstring).
_saved: dict = {}
#: entries kept at most when the arrays take no weak references (strong references then).
MAX_SAVED = 48
#: backward calls that reused a saved lse / reran the forward kernel (tests, benchmarks).
stats = {"lse_reused": 0, "forward_reruns": 0}
#: the backward's device stride arrays by (array module, device, strides): made once per
#: layout. NOTE: each was a host-to-device copy, two per backward call (24 a GPT step).
_stride_arrays: dict = {}


def variant(dtype_name: str, d: int, dv: int) -> tuple:
    """``(suffix, storage type, DQP, DVP, ROWS)`` of the kernels for these head dims."""
    tag, ctype = STORAGE[dtype_name]
    dqp, dvp = max(1, -(-d // 32)), max(1, -(-dv // 32))
    rows = 4 if max(dqp, dvp) <= 2 else 2      # NOTE: 48 KiB of static shared memory
    return f"{tag}_d{dqp * 32}_v{dvp * 32}_r{rows}", ctype, dqp, dvp, rows


def render(dtype_name: str, d: int, dv: int) -> str:
    """The CUDA source of one variant: its four ``extern "C"`` kernels."""
    s, t, dqp, dvp, rows = variant(dtype_name, d, dv)
    entries = (ENTRIES.replace("{S}", s).replace("{T}", t).replace("{DQP}", str(dqp))
               .replace("{DVP}", str(dvp)).replace("{ROWS}", str(rows)))
    return HEAD + FWD + DELTA + DKDV + DQ_KERNEL + entries


def supported(*arrays) -> bool:
    """Whether the kernels take these q, k, v (a dtype with a kernel, head dims <= 128)."""
    q, k, v = arrays[:3]
    return (q.dtype.name in STORAGE and all(a.dtype == q.dtype for a in arrays)
            and q.shape[-1] <= MAX_HEAD_DIM and v.shape[-1] <= MAX_HEAD_DIM)


def _heads(x, xp):
    """``(array, b1, (s0, s1, s2))``: ``x`` (..., T, D) as heads ``p -> (p // b1, p % b1)``
    with element strides, last stride 1 (copied when it is not, or the batch won't merge)."""
    if x.ndim < 2 or (x.shape[-1] > 1 and x.strides[-1] != x.itemsize):
        x = xp.ascontiguousarray(x)
    if x.ndim > 4:
        x = x.reshape((-1,) + x.shape[-3:])     # NOTE: a copy only if the batch won't merge
    it = x.itemsize
    st = [s // it for s in x.strides]
    if x.ndim == 2:
        return x, 1, (0, 0, st[0])
    if x.ndim == 3:
        return x, 1, (st[0], 0, st[1])
    return x, x.shape[1], (st[0], st[1], st[2])


def _in_place(o) -> bool:
    """Whether :func:`_heads` takes output ``o`` as it is (no copy the kernels would write
    instead): at most 4 dims, the last one contiguous."""
    return 2 <= o.ndim <= 4 and (o.shape[-1] <= 1 or o.strides[-1] == o.itemsize)


def _grid(t: int, nb: int, rows: int) -> tuple:
    return (max(1, -(-t // (4 * rows))), nb, 1)


def forward_plan(q, k, v, scale, is_causal, xp=np, out=None):
    """``(name, grid, block, args, o, lse)`` of the forward kernel (``o``: new, or ``out``)."""
    s, _, _, _, rows = variant(q.dtype.name, q.shape[-1], v.shape[-1])
    mma = _mma_c.variant(q.dtype.name, q.shape[-1], v.shape[-1]) if MMA_FORWARD else None
    o = xp.empty(q.shape[:-1] + v.shape[-1:], q.dtype) if out is None else out
    (q, b1, qs), (k, _, ks), (v, _, vs) = _heads(q, xp), _heads(k, xp), _heads(v, xp)
    tq, tk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    nb = math.prod(q.shape[:-2])
    lse = xp.empty((nb, tq), np.float32)
    _, _, os_ = _heads(o, xp)       # NOTE: o's own (C-ordered) array: a view, never a copy
    ints = [np.int32(x) for x in (b1, tq, tk, d, dv, int(bool(is_causal)))]
    strides = [np.int64(x) for x in qs + ks + vs + os_]
    args = (q, k, v, o, lse, *ints, np.float32(scale), *strides)
    if mma:     # NOTE: same arguments; 64 (or 128: _mma_c.ROWS) query rows a block
        return (f"ember_flash_fwd_mma_{mma}", _grid(tq, nb, _mma_c.warp_rows(d, dv)),
                (THREADS, 1, 1), args, o, lse)
    return f"ember_flash_fwd_{s}", _grid(tq, nb, rows), (THREADS, 1, 1), args, o, lse


def backward_plans(g, q, k, v, o, lse, scale, is_causal, xp=np, outs=None):
    """The delta, dk/dv and dq launches ``[(name, grid, block, args)]`` and ``(dq, dk,
    dv)``: three views of one new flat array of q's dtype (``sdpa_grad``'s output), or
    ``outs``."""
    s, _, _, _, rows = variant(q.dtype.name, q.shape[-1], v.shape[-1])
    tq, tk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    nb = math.prod(q.shape[:-2])
    if outs is None:
        flat = xp.empty(q.size + k.size + v.size, q.dtype)
        outs = (flat[:q.size].reshape(q.shape), flat[q.size:q.size + k.size].reshape(k.shape),
                flat[q.size + k.size:].reshape(v.shape))
    heads = [_heads(a, xp) for a in (g, q, k, v, o) + tuple(outs)]
    (g, b1, gs), (q, _, qs), (k, _, ks), (v, _, vs), (o, _, os_) = heads[:5]
    (dq, _, dqs), (dk, _, dks), (dvv, _, dvs) = heads[5:]
    delta = xp.empty((nb, tq), np.float32)
    common = [np.int32(x) for x in (b1, tq, tk, d, dv, int(bool(is_causal)))]
    common.append(np.float32(scale))
    st_kv = _strides_array(xp, tuple(qs + ks + vs + gs + dks + dvs))
    st_q = _strides_array(xp, tuple(qs + ks + vs + gs + dqs))
    pre = (g, o, delta, np.int32(b1), np.int32(tq), np.int32(dv),
           *[np.int64(x) for x in gs + os_])
    launches = [
        (f"ember_flash_delta_{s}", _grid(tq, nb, rows), (THREADS, 1, 1), pre),
        (f"ember_flash_dkdv_{s}", _grid(tk, nb, rows), (THREADS, 1, 1),
         (q, k, v, g, lse, delta, dk, dvv, *common, st_kv)),
        (f"ember_flash_dq_{s}", _grid(tq, nb, rows), (THREADS, 1, 1),
         (q, k, v, g, lse, delta, dq, *common, st_q))]
    return launches, (dq, dk, dvv)


def _strides_array(xp, strides: tuple):
    """The device int64 array of ``strides`` (read-only to the kernels), one per layout."""
    dev = xp.cuda.runtime.getDevice() if hasattr(xp, "cuda") else -1
    key = (xp.__name__, dev, strides)
    a = _stride_arrays.get(key)
    if a is None:
        if len(_stride_arrays) > 256:
            _stride_arrays.clear()
        a = _stride_arrays[key] = xp.asarray(np.array(strides, np.int64))
    return a


def _module(dtype_name: str, d: int, dv: int):
    key = variant(dtype_name, d, dv)[0]
    mod = _modules.get(key)
    if mod is None:
        from .cuda_cache import load_module
        mod = _modules[key] = load_module(render(dtype_name, d, dv), f"ember_flash_{key}")
    return mod


def _fwd_module(name: str, dtype_name: str, d: int, dv: int):
    """The module holding the forward kernel ``name`` (:func:`forward_plan`'s)."""
    if not name.startswith("ember_flash_fwd_mma_"):
        return _module(dtype_name, d, dv)
    key = "mma_" + name[len("ember_flash_fwd_mma_"):]
    mod = _modules.get(key)
    if mod is None:
        from .cuda_cache import load_module
        from .cuda_mma import MMA
        mod = _modules[key] = load_module(_mma_c.render(HEAD, MMA, dtype_name, d, dv),
                                          f"ember_flash_{key}")
    return mod


def _launch(mod, name, grid, block, args) -> None:
    if all(grid):
        mod.get_function(name)(grid, block, args)


def forward(xp, q, k, v, scale, is_causal, out=None, save=False):
    """``softmax(q kᵀ * scale [causal]) v`` by the tiled kernel (``supported`` arrays);
    ``save``: keep O and the log-sum-exp for :func:`backward` of the same arrays."""
    name, grid, block, args, o, lse = forward_plan(q, k, v, scale, is_causal, xp, out)
    mod = _fwd_module(name, q.dtype.name, q.shape[-1], v.shape[-1])
    if q.shape[-2]:
        _launch(mod, name, grid, block, args)
        if save and k.shape[-2]:
            _remember((q, k, v), float(scale), bool(is_causal), o.copy(), lse)
    return o


def _remember(qkv, scale, causal, o, lse) -> None:
    key = tuple(id(a) for a in qkv)

    def drop(ref, key=key):
        e = _saved.get(key)
        if e is not None and any(r is ref for r in e[0]):
            del _saved[key]
    try:
        refs = tuple(weakref.ref(a, drop) for a in qkv)
    except TypeError:       # NOTE: no weak references: hold them, bounded
        refs = tuple(_Strong(a) for a in qkv)
        while len(_saved) >= MAX_SAVED:
            del _saved[next(iter(_saved))]
    _saved.pop(key, None)
    _saved[key] = (refs, scale, causal, o, lse)


class _Strong:
    """A strong reference with ``weakref.ref``'s call interface."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __call__(self):
        return self.obj


def _recall(qkv, scale, causal):
    """``(O, lse)`` a forward of these very arrays saved, taken out; else None."""
    e = _saved.get(tuple(id(a) for a in qkv))
    if e is None:
        return None
    refs, s, c, o, lse = e
    if any(r() is not a for r, a in zip(refs, qkv)) or s != float(scale) or c != bool(causal):
        return None
    del _saved[tuple(id(a) for a in qkv)]
    return o, lse


def backward(xp, g, q, k, v, scale, is_causal, outs=None):
    """``dq | dk | dv`` flattened into one array (the ``sdpa_grad`` primitive's output);
    with ``outs`` (three arrays of q's, k's, v's shapes, any strides with the last dim
    contiguous: slots of the stacked ``qkv`` gradient, ``sdpa_layout``'s node) written
    there instead, and ``outs`` returned."""
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        if outs is None:
            return xp.zeros(q.size + k.size + v.size, q.dtype)
        for o in outs:
            o[...] = 0
        return outs
    if outs is not None and not all(_in_place(o) for o in outs):
        flat, at = backward(xp, g, q, k, v, scale, is_causal), 0
        for o in outs:                  # NOTE: the kernels would write a copy: copy after
            o[...] = flat[at:at + o.size].reshape(o.shape)
            at += o.size
        return outs
    mod = _module(q.dtype.name, q.shape[-1], v.shape[-1])
    if outs is None:
        flat = xp.empty(q.size + k.size + v.size, q.dtype)   # NOTE: the kernels write it all
        parts = (flat[:q.size].reshape(q.shape),
                 flat[q.size:q.size + k.size].reshape(k.shape),
                 flat[q.size + k.size:].reshape(v.shape))
    else:
        flat, parts = outs, tuple(outs)
    kept = _recall((q, k, v), scale, is_causal)
    if kept is not None:
        o, lse = kept
        stats["lse_reused"] += 1
    else:
        name, grid, block, args, o, lse = forward_plan(q, k, v, scale, is_causal, xp)
        _launch(_fwd_module(name, q.dtype.name, q.shape[-1], v.shape[-1]), name, grid, block,
                args)
        stats["forward_reruns"] += 1
    launches, _ = backward_plans(g, q, k, v, o, lse, scale, is_causal, xp, parts)
    # NOTE: float16/bfloat16, head dims <= 64: dk/dv and dq on tensor cores (_mma_bwd)
    for m, name, grid, block, args in _mma_bwd.route(mod, launches, q, k, v, _modules):
        _launch(m, name, grid, block, args)
    return flat
