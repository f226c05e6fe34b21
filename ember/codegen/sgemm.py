"""Ember's own float32 GEMM: ``C = alpha * A @ B + beta * C`` on packed, cache-blocked
panels with a register-tiled micro-kernel (C text and layouts in :mod:`.sgemm_c`).

Why: GEMMs are most of every eager step, and NumPy's OpenBLAS (SkylakeX kernels) is
slower than PyTorch's MKL on the small products of the eager workloads (W1's
``128 x 784 @ 784 x 512`` and its gradients, W3's ``1024 x 128 @ 128 x 512``...).
:func:`matmul` is what ``ops/linalg.py``'s float32 matmul kernel calls; it returns None
wherever :func:`worth` (the measured size rule) or the operands say OpenBLAS should run.

Variants, chosen at run time: ``avx512`` (AVX-512F), ``avx2`` (AVX2 + FMA), ``generic``
(GNU C vectors). :data:`mode` (``EMBER_SGEMM`` at import: ``auto``, ``avx512``, ``avx2``,
``generic``, ``off``/``0``) picks one; ``auto`` is ``avx512`` where this CPU runs it and
otherwise OpenBLAS: the AVX2 variant runs near AVX2's peak here (128x784x512 in 1.13 ms,
~45 G multiply-adds/s, 1.4-1.6x OpenBLAS's AVX-512 kernels) but was never measured
against OpenBLAS's Haswell kernels on an AVX2-only CPU, and the generic one is a portable
fallback; both are there for tests, other CPUs and callers that ask for them. A variant
this CPU cannot run, or ``off``, makes :func:`gemm`/:func:`matmul` return None.

Threads: :func:`gemm` splits whole panels of columns (or rows, when there is one panel of
columns) between Ember's pool threads (:mod:`.pool`: workers sleep between kernels,
never spin), from :data:`PARALLEL_MIN` multiply-adds, as many as
``ember.set_num_threads`` asks and :mod:`ember._contention`'s adaptive policy leaves
BLAS (``EMBER_ADAPTIVE_THREADS=0`` keeps the asked count).

Accuracy: float32 sums in another order than OpenBLAS's (one FMA chain per element over
each ``KC`` block of ``k``, the blocks added in order), so bits differ from NumPy's
``matmul`` (float32 products under :func:`worth` change their last bits, eager and
compiled alike: the executor and ``passes/matmul_t.py`` call :func:`matmul` too);
``tests/codegen/test_sgemm.py`` bounds the difference to a float64 reference. Results are
bitwise the same for any thread count (unlike OpenBLAS's), and the ``avx2`` and
``avx512`` variants give the same bits (the same chains, explicit FMA instructions).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from . import cache, launch
from . import pool as _pool
from .runtime import num_threads
from .sgemm_c import CODES, KC, KC_ONE, KC_T, MC, NC, PROBE, TILES, source
from .toolchain import find_compiler

_ITEMS_OFF, _DATA_OFF = launch.ITEMS_OFF, launch.DATA_OFF

F32 = np.dtype(np.float32)
ISAS = CODES

#: which variant runs: ``"auto"``, a name of :data:`ISAS`, or ``"off"``. ``EMBER_SGEMM``
#: sets it at import.
mode = {"0": "off"}.get(os.environ.get("EMBER_SGEMM", "auto"),
                        os.environ.get("EMBER_SGEMM", "auto"))

#: read a transposed A (unit row stride) in place instead of packing it
COLS = 1

#: in a call with an epilogue (``bias_rows``, ``relu``, ``update``: the compiled graphs'
#: ``gemm_epilogue`` nodes), a ``k`` up to ``KC_MAX`` runs as one block (no pass of C per
#: block) where B's packed block, ``k x N``, takes at most ``ONE_BLOCK_BYTES`` (it stays
#: in L2): W1's feature-major products, one thread, cold caches, 40 alternating calls:
#: 512x784x128 712 -> 691 us, 512x512x128 435 -> 430 (in the compiled step: 679 -> 617
#: and 439 -> 414); with B's block past L2 (128x784x512: 1.6 MB) slower (744 -> 823 us).
#: Not for other calls: the implicit-GEMM convolution (``conv_igemm``) and ``gemm_sum``
#: promise the k blocks of a plain call, and eager products keep their bits. 0: off.
ONE_BLOCK_BYTES, KC_MAX = 1 << 19, 1024

#: multiply-adds (M * N * K, all matrices) from which the pool's threads split the work
PARALLEL_MIN = 1 << 21

_state: dict = {}
_GEOM, _PTRS = ctypes.c_int64 * 24, ctypes.c_void_p * 9


def _probe() -> int:
    """The variants this CPU runs, as bits (1 generic, 2 avx2, 4 avx512); 0 without a C
    compiler. A small library of its own, so no variant is built before it is used."""
    if "isas" not in _state:
        _state["isas"] = 0
        cc = find_compiler()
        if cc is not None:
            lib = cache.load(PROBE, cc)
            lib.ember_sgemm_isas.restype = ctypes.c_int64
            lib.ember_sgemm_isas.argtypes = []
            _state["isas"], _state["probe"] = int(lib.ember_sgemm_isas()), lib
    return _state["isas"]


def _kernel(isa: int) -> tuple:
    """``(ctypes function, the one-call launcher or None, the raw entry's address,
    library)`` of variant ``isa``, built into the kernel cache on first use."""
    k = _kernels.get(isa)
    if k is None:
        name = next(n for n, c in ISAS.items() if c == isa)
        lib, fns = _pool.load_kernels(source(name), ["sgemm_f32"])
        run = launch.raw()               # one ctypes call, no per-array work
        fast = ctypes.cast(lib.ember_sgemm_f32_fast, ctypes.c_void_p).value
        k = _kernels[isa] = (fns["sgemm_f32"], run, fast, lib)
    return k


_kernels: dict = {}


def runnable() -> list[str]:
    """The variants this CPU runs (empty without a C compiler)."""
    m = _probe()
    return [name for name, code in ISAS.items() if m >> (code - 1) & 1]


def _isa(variant):
    """The isa code for ``variant`` (default :data:`mode`), or None if it cannot run."""
    want = mode if variant is None else variant
    if want == "off" or not _probe():
        return None
    if want == "auto":
        return 3 if _state["isas"] & 4 else None
    code = ISAS.get(want)
    if code is None:
        raise ValueError(f"sgemm: unknown variant {want!r} (sgemm.mode or EMBER_SGEMM); "
                         f"valid: auto, off, {', '.join(ISAS)}")
    return code if _state["isas"] >> (code - 1) & 1 else None


def _strides(a):
    """Element strides of a float32 array, or None (not whole elements)."""
    s = a.strides
    return None if any(v % 4 for v in s) else tuple(v // 4 for v in s)


_EPI: list = [None]      # sgemm_epi.gemm_epi, once imported


def gemm(a, b, c=None, alpha: float = 1.0, beta: float = 0.0, variant=None,
         nthreads: int | None = None, bias=None, update=None, *, bias_rows: bool = False,
         relu: bool = False, mask=None, row_sums=None):
    """``c = alpha * a @ b + beta * c`` for float32 ``(M, K)``/``(K, N)`` matrices or
    ``(B, M, K)``/``(B, K, N)`` stacks, any strides (transposed views are not copied);
    with ``bias``, ``c = (alpha * a @ b + beta * c) + bias`` (``torch.addmm``'s and
    ``F.linear``'s bias, added in the last k block's tile stores: no pass of its own);
    with ``relu``, ``c = relu(...)`` after that; with ``mask``, relu's backward after
    that, ``c = 0 where mask <= 0 else c`` (``threshold_backward(c, mask, 0)``); with
    ``row_sums``, each row's sum of the result too (a bias gradient); with ``update =
    (w, w_out, lr)``, also ``w_out = w - lr * c`` (SGD's step, one FMA rounding: a fused
    ``w - c * lr``'s bits) over each block of rows as soon as it is finished (in L2), so
    the gradient is never read back from memory (the compiled graphs' ``gemm_epilogue``
    pass).

    Args:
        a, b: float32 operands; a 3-D operand's batch stride may be 0 (broadcast).
        c: float32 ``(M, N)`` / ``(B, M, N)`` with a unit last stride, not overlapping
            ``a`` or ``b``, or None (a new array; then ``beta`` is ignored).
        alpha, beta: scalars; ``beta == 0`` never reads ``c`` (as BLAS).
        variant: ``None`` (:data:`mode`), ``"auto"`` or a name of :data:`ISAS`.
        nthreads: threads (default: Ember's count from :data:`PARALLEL_MIN` multiply-adds).
        bias: None or a C-contiguous float32 ``(N,)`` array, added to every row of the
            finished product and rounded (the bits of ``c + bias`` after the product);
            with ``bias_rows``, an ``(M,)`` array added to every column (``c + bias[:,
            None]``: a feature-major layer's bias).
        relu: relu of the result (after the bias), as the fused kernels' relu (NaN kept).
        mask: None or a float32 array of C's shape and strides (a relu's output): the
            result is ``+0`` where ``mask <= 0``, kept where ``mask > 0`` or NaN.
        row_sums: None or a C-contiguous float32 ``(M,)`` array (2-D operands only) that
            receives each row's sum of the result, in float32 (threads then split rows).
        update: None or ``(w, w_out, lr)``: float32 arrays of C's shape and strides
            (``w_out`` may be ``w``: updated in place; neither may overlap ``a``/``b``/``c``
            otherwise) and a Python float; not with a batch of 3-D operands' sum.

    Returns:
        ``c``, or None where this GEMM does not run (another dtype, a variant this CPU
        cannot run, :data:`mode` ``"off"``, an unusable ``c``): nothing written.

    Example:
        >>> r = gemm(x, w.T)                   # x: (128, 784), w: (512, 784) float32
        >>> gemm(x, w.T, r, beta=1.0)          # r += x @ w.T
    """
    isa = _isa(variant)
    if isa is None:
        return None
    if update is not None or relu or bias_rows or mask is not None or row_sums is not None:
        epi = _EPI[0]
        if epi is None:         # NOTE: imported once (sgemm_epi imports this module)
            from .sgemm_epi import gemm_epi as epi
            _EPI[0] = epi
        return epi(isa, a, b, c, alpha, beta, variant, nthreads, bias, update, bias_rows,
                   relu, mask, row_sums)
    key = (isa, a.shape, a.strides, b.shape, b.strides,
           None if c is None else (c.shape, c.strides), KC, KC_T, KC_ONE, MC, NC, COLS,
           ONE_BLOCK_BYTES,
           None if bias is None else bias.shape)
    e = _plans.get(key)
    if e is None or a.dtype != F32 or b.dtype != F32 or (c is not None and c.dtype != F32) \
            or (bias is not None and (bias.dtype != F32 or not bias.flags.c_contiguous)):
        return _gemm_new(isa, key, a, b, c, alpha, beta, variant, nthreads, bias)
    g, addr, big, shape, run, fast = e            # a call seen before: no checks again
    if c is None:
        c, beta = np.empty(shape, F32), 0.0
    ab = _AB.get((alpha, beta))
    if ab is None:
        ab = np.array([alpha, beta], F32)
    if nthreads is None:
        nthreads = _threads() if big else 1
    if bias is None:
        run(fast, (a, b, c, ab), addr, addr, nthreads, 4, _ITEMS_OFF, _DATA_OFF)
    else:
        run(fast, (a, b, c, ab, bias), addr, addr, nthreads, 5, _ITEMS_OFF, _DATA_OFF)
    return c


def _gemm_new(isa, key, a, b, c, alpha, beta, variant, nthreads, bias=None, update=None,
              rows=False, relu=False, mask=None, rsum=None):
    """:func:`gemm` for operands whose shapes and strides have no plan yet (or another
    dtype): checks them, runs them, and keeps the plan (under ``key``) where it can."""
    if a.dtype != F32 or b.dtype != F32 or a.ndim != b.ndim or a.ndim not in (2, 3):
        return None
    if update is not None:
        from .sgemm_epi import update_ok
        if not update_ok(a, b, c, update):
            return None
    if rsum is not None and (a.ndim != 2 or rsum.dtype != F32 or rsum.shape != (
            a.shape[0],) or not rsum.flags.c_contiguous):
        return None
    if bias is not None and (bias.dtype != F32 or bias.shape != (
            a.shape[-2] if rows else b.shape[-1],)):
        return None
    if bias is not None and not bias.flags.c_contiguous:
        bias = np.ascontiguousarray(bias)
    M, K = a.shape[-2:]
    N = b.shape[-1]
    bt = a.shape[0] if a.ndim == 3 else 1
    shape = (bt, M, N) if a.ndim == 3 else (M, N)
    if b.shape[-2] != K or (a.ndim == 3 and b.shape[0] != bt):
        raise ValueError(f"sgemm: operands {a.shape} and {b.shape} do not multiply "
                         f"(valid: (M, K) @ (K, N) or (B, M, K) @ (B, K, N))")
    if c is None:
        c, beta = np.empty(shape, F32), 0.0
    elif c.shape != shape or c.dtype != F32 or (N > 1 and c.strides[-1] != 4) \
            or _strides(c) is None:
        return None
    if (update is not None and update[0].strides != c.strides) or (mask is not None and (
            mask.shape != shape or mask.dtype != F32 or mask.strides != c.strides or
            np.may_share_memory(mask, c))):
        return None
    if c.size == 0:
        return c
    if K == 0:
        c[...] = 0 if beta == 0 else beta * c
        if bias is not None:
            c += bias[:, None] if rows else bias
        if relu:
            c[...] = np.where((c > 0) | np.isnan(c), c, np.float32(0))
        if mask is not None:
            c[...] = np.where(mask <= 0, np.float32(0), c)
        if rsum is not None:
            rsum[...] = c.sum(axis=-1)
        if update is not None:
            from .sgemm_epi import update_numpy
            update_numpy(c, update)
        return c
    if _strides(a) is None or _strides(b) is None:     # not whole elements: copy
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        return gemm(a, b, c, alpha, beta, variant, nthreads, bias, update, bias_rows=rows,
                    relu=relu, mask=mask, row_sums=rsum)
    big = bt * M * N * K >= PARALLEL_MIN
    if nthreads is None:
        nthreads = _threads() if big else 1
    epi = update is not None or rows or relu or mask is not None or rsum is not None
    g = _plan(isa, a, b, c, M, N, K, bt, bias=0 if bias is None else 2 if rows else 1,
              upd=update is not None, relu=relu, whole=epi, mask=mask is not None,
              rsum=rsum is not None)
    if update is not None:
        ab = np.array([alpha, beta, update[2]], F32)
    else:
        ab = _AB.get((alpha, beta))
        if ab is None:
            ab = np.array([alpha, beta], F32)
    fn, run, fast, _ = _kernels.get(isa) or _kernel(isa)
    arrays = (a, b, c, ab) if bias is None else (a, b, c, ab, bias)
    if epi:
        w, wo = (c, c) if update is None else update[:2]
        arrays = (a, b, c, ab, c if bias is None else bias, w, wo,
                  c if mask is None else mask, c if rsum is None else rsum)
    if run is not None:
        if len(_plans) > 512:
            _plans.clear()
        _plans[key] = (g, ctypes.addressof(g), big, shape, run, fast)
        run(fast, arrays, g, g, nthreads, len(arrays), _ITEMS_OFF, _DATA_OFF)
    else:
        fn(_PTRS(*(x.ctypes.data for x in arrays)), g, nthreads)
    return c


def _threads() -> int:
    """Ember's thread count, but no more than the adaptive policy (:mod:`ember._contention`,
    ``EMBER_ADAPTIVE_THREADS``) currently gives BLAS: the pool's workers wait passively,
    yet a split still waits for its chunk on a CPU another process holds (2 threads at
    load 5-7 on 2 CPUs: 2-7 ms for a product of 0.8 ms on one)."""
    n = num_threads()
    if n > 1:
        from .. import _contention      # NOTE: its state, read: it has no public getter
        used = _contention._state.get("used")
        if used and _contention.running():
            n = min(n, used)
    return n


#: (isa, operands' shapes and strides, blocking) -> (geometry, its address, whether
#: threads may split it, C's shape, launcher, kernel address): the checks done once
_plans: dict = {}
_AB = {(1.0, 0.0): np.array([1, 0], F32), (1.0, 1.0): np.array([1, 1], F32)}


def _plan(isa, a, b, c, M, N, K, bt, red=0, bias=0, upd=False, relu=False, whole=False,
          mask=False, rsum=False):
    """The kernel's geometry for these operands' shapes and strides (``red``: C is the
    sum of the batch's products, :func:`gemm_sum`; ``bias``: 1, a bias row is added to
    every row, 2, a bias column to every column; ``upd``: the SGD epilogue runs;
    ``relu``: relu after the bias; ``whole``: ``k`` in one block where
    :func:`_one_block` says so; ``mask``: relu's backward mask; ``rsum``: row sums, so
    threads split rows)."""
    sa, sb, sc = _strides(a), _strides(b), _strides(c)
    if a.ndim == 2:
        sa, sb = (0,) + sa, (0,) + sb
    if c.ndim == 2:
        sc = (0,) + sc
    mr, nr = TILES[isa]
    # NOTE: a transposed A read in place only past one k block: in W1's step (cold caches)
    # g.T @ x, (512, 128) @ (128, 784), took 0.77-0.85 ms packed vs 0.82-0.98 in place
    # (its 2 KiB row stride maps the tile's 128 rows to two L1 sets); W3's x.T @ g (K = 1024)
    # is faster in place, in the step and alone (674 vs 722 us).
    cols = bool(COLS) and sa[1] == 1 and K > KC_T
    direct = sa[2] == 1 or K == 1 or cols
    split_n = -(-N // nr) >= 2 and (direct or M <= N or -(-M // mr) < 2) and not rsum
    kc = KC_T if cols and sa[2] != 1 and K != 1 else K if KC < K <= KC_ONE or \
        (whole and _one_block(K, N)) else KC
    return _GEOM(M, N, K, bt, isa, split_n, sa[0], sa[1], 1 if K == 1 else sa[2],
                 sb[0], sb[1], 1 if N == 1 else sb[2], sc[0], sc[1], kc, MC, NC, cols,
                 red, int(bias), int(upd), int(relu), int(mask), int(rsum))


def _one_block(K, N) -> bool:
    """Whether ``k`` runs as one block (:data:`ONE_BLOCK_BYTES`). The same for every
    variant (their panels' widths differ), so their bits stay the same."""
    return K <= KC_MAX and K * N * 4 <= ONE_BLOCK_BYTES


def gemm_sum(a, b, c=None, beta: float = 0.0, variant=None, nthreads: int | None = None):
    """``c = beta * c + sum_t a[t] @ b[t]`` for float32 ``(B, M, K)``/``(B, K, N)`` stacks
    in one call: the same bits as ``gemm(a[0], b[0], c, beta=beta)`` then ``gemm(a[t],
    b[t], c, beta=1.0)`` for each further ``t`` (the products added into C in order, k
    block by k block), without a call per matrix. A convolution's weight gradient
    ``sum_n dy[n] @ cols[n].T``.

    Where B is a transposed view (unit ``k`` stride), A row-major and ``M < N`` (that
    weight gradient: ``(64, 256) @ (256, 288)`` per image), it runs ``C.T = sum B.T @
    A.T`` into a scratch array and copies it into ``c``: B.T is then read in place and
    only the smaller A.T packed (each element's FMA chains are the same: same bits).

    Args:
        a, b: float32 3-D operands (batch strides may be 0).
        c: float32 ``(M, N)`` with a unit last stride, not overlapping ``a`` or ``b``, or
            None (a new array; then ``beta`` is ignored).
        beta: scale of ``c``'s values (0: never read).
        variant, nthreads: as :func:`gemm`.

    Returns:
        ``c``, or None where this GEMM does not run (as :func:`gemm`): nothing written.

    Example:
        >>> dw = gemm_sum(dy, cols.transpose(0, 2, 1))   # (N, Co, L), (N, CK, L) -> (Co, CK)
    """
    isa = _isa(variant)
    if isa is None or a.dtype != F32 or b.dtype != F32 or a.ndim != 3 or b.ndim != 3:
        return None
    bt, M, K = a.shape
    N = b.shape[-1]
    if b.shape[:2] != (bt, K):
        raise ValueError(f"sgemm.gemm_sum: operands {a.shape} and {b.shape} do not "
                         f"multiply (valid: (B, M, K) @ (B, K, N))")
    if c is None:
        c, beta = np.empty((M, N), F32), 0.0
    elif c.shape != (M, N) or c.dtype != F32 or (N > 1 and c.strides[-1] != 4) \
            or _strides(c) is None:
        return None
    if bt == 0 or K == 0 or c.size == 0:
        c[...] = 0 if beta == 0 else beta * c
        return c
    if _strides(a) is None or _strides(b) is None:
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if nthreads is None:
        nthreads = _threads() if bt * M * N * K >= PARALLEL_MIN else 1
    if M < N and beta in (0.0, 1.0) and a.strides[-1] == 4 and b.strides[-2] == 4 \
            and b.strides[-1] != 4:
        ct = np.empty((N, M), F32)
        if beta:
            ct[...] = c.T
        _launch(isa, b.swapaxes(1, 2), a.swapaxes(1, 2), ct, N, M, K, bt, beta, nthreads)
        c[...] = ct.T
        return c
    _launch(isa, a, b, c, M, N, K, bt, beta, nthreads)
    return c


def _launch(isa, a, b, c, M, N, K, bt, beta, nthreads):
    """One summed-batch call of the kernel (:func:`gemm_sum`)."""
    g = _plan(isa, a, b, c, M, N, K, bt, red=1)
    ab = np.array([1.0, beta], F32)
    fn, run, fast, _ = _kernels.get(isa) or _kernel(isa)
    if run is not None:
        run(fast, (a, b, c, ab), g, g, nthreads, 4, _ITEMS_OFF, _DATA_OFF)
    else:
        fn(_PTRS(a.ctypes.data, b.ctypes.data, c.ctypes.data, ab.ctypes.data), g, nthreads)


def worth(M: int, K: int, N: int) -> bool:
    """Whether :func:`matmul` runs this GEMM instead of OpenBLAS: the size rule measured
    on this machine (AVX-512 variant, one thread, CPU time; bench/gemm.py and the sweep in
    bench/RESULTS.md "Issue 19 — float32 GEMM"). Faster from ``N >= 16``, ``M >= 8`` and
    ``2^20`` multiply-adds: W1's 128x784x512-type products 0.83-0.99x OpenBLAS, W3's and
    the LSTM's 1024-row ones 0.8-0.97x, 256x256x16/32 0.83-0.99x, 32x128x512
    0.63-0.85x, 8x512x512 0.63-0.76x. Not below: ``N = 8`` 1.03-1.13x, 64^3 1.05-2.1x
    and 128x64x64 0.9-1.3x (fixed costs); a few rows against a large B would pack all of
    B for little work (GEMV: OpenBLAS).
    """
    return N >= MIN_N and M >= MIN_M and M * N * K >= MIN_MACS


#: the size rule of :func:`worth`
MIN_MACS, MIN_N, MIN_M = 1 << 20, 16, 8


def matmul(x, y, out=None):
    """``x @ y`` for float32 arrays (NumPy's ``matmul`` shapes with at least two dims
    each), or None where OpenBLAS should run (:func:`worth`, :data:`mode`, dtypes, an
    ``out`` that is not C-contiguous or overlaps an operand).

    Example:
        >>> r = matmul(x, w.T)
        >>> r = r if r is not None else np.matmul(x, w.T)
    """
    if mode == "off" or x.dtype != F32 or y.dtype != F32 or x.ndim < 2 or y.ndim < 2:
        return None
    if out is not None and (not out.flags.c_contiguous or np.may_share_memory(out, x)
                            or np.may_share_memory(out, y)):
        return None                             # NumPy copies an operand that overlaps out
    M, K = x.shape[-2:]
    N = y.shape[-1]
    if y.shape[-2] != K:
        return None
    if y.ndim == 2:
        rows = M
        for d in x.shape[:-2]:
            rows *= d
        if not worth(rows, K, N):
            return None
        if x.ndim == 2:
            return gemm(x, y, out)
        x2 = x.view()
        try:                                    # fold x's batch into rows: one 2-D GEMM
            x2.shape = (rows, K)
        except AttributeError:
            x2 = None
        if x2 is not None:
            res = np.empty(x.shape[:-1] + (N,), F32) if out is None else out
            if res.shape != x.shape[:-1] + (N,):
                return None
            return res if gemm(x2, y, res.reshape(rows, N)) is not None else None
    if not worth(M, K, N):
        return None
    bshape = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    bt = 1
    for d in bshape:
        bt *= d
    res = np.empty(bshape + (M, N), F32) if out is None else out
    if res.shape != bshape + (M, N):
        return None
    r = gemm(_stack(x, bshape, bt), _stack(y, bshape, bt), res.reshape(bt, M, N))
    return None if r is None else res


def addmm(bias, x, y):
    """``bias + x @ y`` for 2-D float32 ``x``/``y`` and a float32 ``(N,)`` ``bias``, the
    bias added in the product's tile stores (:func:`gemm`'s ``bias``): the bits of
    ``matmul(x, y) + bias``. None where :func:`matmul` would return None.

    Example:
        >>> r = addmm(b, x, w.T)              # F.linear(x, w, b)
    """
    if mode == "off" or x.ndim != 2 or y.ndim != 2 or bias.ndim != 1 \
            or x.dtype != F32 or y.dtype != F32 or bias.dtype != F32:
        return None
    M, K = x.shape
    N = y.shape[1]
    if y.shape[0] != K or bias.shape[0] != N or not worth(M, K, N):
        return None
    return gemm(x, y, bias=bias)


def _stack(a, bshape, bt):
    """``a`` broadcast to ``bshape`` batch dims as a 3-D view (a copy if it cannot be)."""
    a = np.broadcast_to(a, bshape + a.shape[-2:])
    v = a.view()
    try:
        v.shape = (bt,) + a.shape[-2:]
    except AttributeError:
        v = np.ascontiguousarray(a).reshape((bt,) + a.shape[-2:])
    return v
