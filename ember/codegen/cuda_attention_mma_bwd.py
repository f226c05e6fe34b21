"""Tensor-core (``mma.sync``) kernels for ``sdpa_grad``'s dk/dv and dq on a GPU.

FlashAttention-2's backward for float16/bfloat16 q, k, v with head dims up to 64: the
same inputs, outputs and masking as the scalar kernels of :mod:`.cuda_attention` (which
still runs the ``delta`` kernel before them, and every other case), but the five products
of a tile (``S``, ``dP``, ``dV``, ``dK``, ``dQ``) on tensor cores with float32 sums, and 64
keys (dk/dv) or 64 query rows (dq) a block. P and dS are rounded to the storage dtype
before their products (as FlashAttention-2 and PyTorch's flash backward do); every sum is
float32 and each gradient is rounded once. The CUDA text is
:mod:`.cuda_attention_mma_bwd_c`; a variant per (dtype, head dims rounded up to 32) is
rendered on demand and loaded once through the kernel cache. Tiles whose every pair is
visible take an unguarded path (:data:`FULL_TILES`; bitwise the same gradients).

``EMBER_FLASH_MMA_BWD=0`` (read at import) keeps the scalar kernels (A/B benchmarks).
"""
from __future__ import annotations

import math
import os

from .cuda_attention_c import HEAD
from .cuda_attention_mma_bwd_c import BWD, DKDV, DQ_KERNEL, ENTRIES

__all__ = ["MAX_HEAD_DIM", "STORAGE", "enabled", "entries", "render", "route", "supported",
           "variant"]

#: NumPy dtype name -> (suffix, CUDA storage type, mma, pack, exponent mask).
STORAGE = {"float16": ("f16", "__half", "ember_mma_f16", "ember_pack_f16", "0x7c00u"),
           "bfloat16": ("bf16", "__nv_bfloat16", "ember_mma_bf16", "ember_pack_bf16",
                        "0x7f80u")}
#: the largest q/k and v head dims these kernels take (larger: the scalar kernels).
MAX_HEAD_DIM = 64
#: rows (keys for dk/dv, queries for dq) a block owns.
BLOCK = 64
#: query (dk/dv) or key (dq) columns of the scores a warp holds at once: 16, 32 or 64
#: (fewer registers and more blocks per SM vs more independent products; benchmarks pick).
SUB = 16
#: stage the next tile by cp.async into a second buffer during this tile's math (2x the
#: shared memory, no registers) instead of loading each tile between two barriers. On an
#: H200 (``bench/cuda_attention_bwd.py --quick``, the GPT's (8, 12, 1024, 64) causal float16,
#: 2026-11-26): backward 0.483 ms with it vs 0.608 without at SUB=16 (SUB=32: 0.564/0.713,
#: SUB=64: 0.595/0.719; the scalar kernels 5.41, torch's sdpa 0.341).
ASYNC = True
#: tiles whose every (query, key) pair is visible (no ``Tq``/``Tk`` tail, not the causal
#: diagonal) take an unguarded path: no masks, no diagonal tests, no Inf/NaN checks
#: (FlashAttention-2's split of the tile loop; the same operations, so bitwise the same
#: gradients). False: every tile the masked code (the old kernels, suffix ``m``: A/B,
#: ``bench/cuda_attention_bwd.py``'s ``-old`` column). The default untimed: it drops work
#: only, at the same registers (:mod:`.cuda_attention_mma_bwd_c`).
FULL_TILES = True
THREADS = 128
enabled = os.environ.get("EMBER_FLASH_MMA_BWD", "1") != "0"


def variant(dtype_name: str, d: int, dv: int) -> tuple:
    """``(suffix, storage type, DQ, DV)``: head dims rounded up to 32 (at most 64),
    :data:`SUB`, :data:`ASYNC` (suffix ``a``) and :data:`FULL_TILES` (off: suffix ``m``)."""
    tag, ctype = STORAGE[dtype_name][:2]
    dq, dvv = 32 * max(1, -(-d // 32)), 32 * max(1, -(-dv // 32))
    return (f"{tag}_d{dq}_v{dvv}_s{SUB}{'a' if ASYNC else ''}{'' if FULL_TILES else 'm'}",
            ctype, dq, dvv)


def render(dtype_name: str, d: int, dv: int) -> str:
    """The CUDA source of one variant: its two ``extern "C"`` kernels."""
    from .cuda_mma import MMA
    _, _, mma, pack, mask = STORAGE[dtype_name]
    defs = f"#define EMBER_MMA {mma}\n#define EMBER_PACK {pack}\n#define EMBER_EXP16 {mask}\n"
    return HEAD + MMA + defs + BWD + DKDV + DQ_KERNEL + entries(dtype_name, d, dv)


def entries(dtype_name: str, d: int, dv: int) -> str:
    """The two ``extern "C"`` kernels of one variant (:func:`variant`: the module constants
    now), after :func:`render`'s text; the entries of several variants may share a source."""
    s, t, dq, dvv = variant(dtype_name, d, dv)
    return (ENTRIES.replace("{S}", s).replace("{T}", t).replace("{DQ}", str(dq))
            .replace("{DV}", str(dvv)).replace("{SUB}", str(SUB))
            .replace("{ASYNC}", "true" if ASYNC else "false")
            .replace("{FT}", "true" if FULL_TILES else "false"))


def supported(q, k, v) -> bool:
    """Whether these q, k, v take the tensor-core backward (16-bit, head dims <= 64)."""
    return (enabled and q.dtype.name in STORAGE and k.dtype == q.dtype and v.dtype == q.dtype
            and 0 < q.shape[-1] <= MAX_HEAD_DIM and 0 < v.shape[-1] <= MAX_HEAD_DIM)


def _module(dtype_name: str, d: int, dv: int, cache: dict):
    key = "bwd_mma_" + variant(dtype_name, d, dv)[0]
    mod = cache.get(key)
    if mod is None:
        from .cuda_cache import load_module
        mod = cache[key] = load_module(render(dtype_name, d, dv), f"ember_flash_{key}")
    return mod


def route(mod, launches, q, k, v, cache: dict) -> list:
    """``[(module, name, grid, block, args)]`` for the scalar backward's launches
    (``cuda_attention.backward_plans``: delta, dkdv, dq): with :func:`supported` arrays
    the dkdv and dq launches go to this module's kernels (same arguments, 64 rows a
    block; the module loaded once into ``cache``, ``cuda_attention``'s), the rest stays
    on ``mod``."""
    if not supported(q, k, v):
        return [(mod, *x) for x in launches]
    s = variant(q.dtype.name, q.shape[-1], v.shape[-1])[0]
    mma = _module(q.dtype.name, q.shape[-1], v.shape[-1], cache)
    nb = math.prod(q.shape[:-2])
    rows = {"dkdv": k.shape[-2], "dq": q.shape[-2]}
    out = []
    for name, grid, block, args in launches:
        kind = name.split("_")[2]
        if kind in rows:
            grid = (max(1, -(-rows[kind] // BLOCK)), nb, 1)
            out.append((mma, f"ember_flash_{kind}_mma_{s}", grid, (THREADS, 1, 1), args))
        else:
            out.append((mod, name, grid, block, args))
    return out
