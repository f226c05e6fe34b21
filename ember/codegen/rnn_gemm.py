"""float32 LSTM layers as one C call per sequence: Ember's own GEMM micro-kernel for the
recurrent step, W_hh packed once per call, the gate nonlinearities as its epilogue.

Why not NumPy's GEMM per step (:mod:`ember.ops._rnn_cpu`'s float64 path): the recurrent
product of a step is small (``(N, H) @ (H, 4H)``, 32 x 128 x 512 in the benchmark), and
through ``numpy.matmul`` each cost ~38 us on this CPU (OpenBLAS repacks W_hh every call, and
Python runs between steps), against ~21 us in PyTorch (oneDNN/MKL). Here a whole sequence,
forward or backward, is one call (C text and layouts in :mod:`.rnn_gemm_c`); the weight
gradient over all steps stays one BLAS GEMM in the caller.

Variants, chosen at run time: ``avx512`` (AVX-512F), ``avx2`` (AVX2 + FMA), ``generic``
(GNU C vectors). :data:`mode` (``EMBER_RNN_GEMM`` at import: ``auto``, ``avx512``, ``avx2``,
``generic``, ``off``/``0``) picks one; ``auto`` is ``avx512`` or else ``avx2`` where this
CPU runs them, never ``generic`` (on a baseline x86-64 build it measured ~7 ms per layer
direction here, the per-step path ~1.5 ms: it is there for tests and other CPUs). A variant
this CPU cannot run, or ``off``, makes :func:`lstm_forward`/:func:`lstm_backward` return
None (the caller then runs the per-step path). Measured here (32 steps, N = 32, H = 128,
one thread): per step and direction ~25-33 us (avx512), ~52 us (avx2: no faster than the
per-step path on this CPU, where it also has AVX-512's 32 vector registers; not measured on
an AVX2-only CPU).

Accuracy: float32 sums in another order than BLAS's (one FMA chain per output over ``k``,
the backward's in blocks of :data:`.rnn_gemm_c.KC`); ``tests/nn/test_rnn_fast_gemm.py``
bounds the difference to a float64 reference. Results are bitwise the same for any
thread count (each batch row's arithmetic does not depend on how rows are split).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from . import pool as _pool
from .rnn_gemm_c import VL, source
from .runtime import num_threads
from .toolchain import find_compiler

F32 = np.dtype(np.float32)
ISAS = {"generic": 1, "avx2": 2, "avx512": 3}

#: which variant runs: ``"auto"`` (the widest this CPU runs), a name of :data:`ISAS`, or
#: ``"off"`` (never: the per-step path). ``EMBER_RNN_GEMM`` sets it at import.
mode = {"0": "off"}.get(os.environ.get("EMBER_RNN_GEMM", "auto"),
                        os.environ.get("EMBER_RNN_GEMM", "auto"))
_state: dict = {}


def _lib():
    """``(lib, fns)`` or None without a C compiler."""
    if "fns" not in _state:
        _state["fns"] = None
        if find_compiler() is not None:
            loaded = _pool.load_kernels(source(), ["lstm_seq_fwd_f32", "lstm_seq_bwd_f32"])
            if loaded is not None:
                lib, fns = loaded
                lib.ember_rnn_gemm_isas.restype = ctypes.c_int64
                lib.ember_rnn_gemm_isas.argtypes = []
                _state["isas"] = int(lib.ember_rnn_gemm_isas())
                _state["lib"], _state["fns"] = lib, fns
    return _state["fns"]


def runnable() -> list[str]:
    """The variants this CPU runs (empty without a C compiler)."""
    if _lib() is None:
        return []
    return [name for name, code in ISAS.items() if _state["isas"] >> (code - 1) & 1]


def _isa(variant):
    """The isa code for ``variant`` (default :data:`mode`), or None if it cannot run."""
    want = mode if variant is None else variant
    if want == "off" or _lib() is None:
        return None
    if want == "auto":     # NOTE: never the generic variant (slower than NumPy's GEMM per step)
        return 3 if _state["isas"] & 4 else 2 if _state["isas"] & 2 else None
    code = ISAS.get(want)
    if code is None:
        raise ValueError(f"rnn_gemm: unknown variant {want!r} (rnn_gemm.mode or "
                         f"EMBER_RNN_GEMM); valid: auto, off, {', '.join(ISAS)}")
    return code if _state["isas"] >> (code - 1) & 1 else None


def work_size(H: int, IN: int = 0, N: int = 0) -> int:
    """float32 elements of the packing space (either direction, any variant) for hidden
    size ``H``, input size ``IN`` and batch ``N``."""
    v = max(VL.values())    # the panels, padded: forward (IN + H) x 4(H + v), backward
    # 4H x (H + IN + 2 panels of 4v); the forward's projection rows N x 4v
    return 4 * (H + v) * (H + IN + 8 * v) + 4 * v * N


def _call(name, arrays, geometry):
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    g = np.asarray(geometry, dtype=np.int64)
    _state["fns"][name](ptrs, g.ctypes.data, num_threads())


def _rows(a) -> int:
    return a.strides[0] // a.itemsize


def _fits(*arrays) -> bool:
    return all(a.dtype == F32 and (a.shape[-1] <= 1 or a.strides[-1] == 4) for a in arrays)


def _check_work(work, size):
    if work.dtype != F32 or work.ndim != 1 or work.size < size or work.strides[0] != 4:
        raise ValueError(f"rnn_gemm: work must be contiguous float32 of at least {size} "
                         f"elements (work_size); got {work.dtype} {work.shape}")


def _c(a):
    return np.ascontiguousarray(a, dtype=F32)


def lstm_forward(x, h0, c0, w_ih, w_hh, b, work, variant=None):
    """``lstm_layer``'s output ``(L, N, 6H)`` for float32 operands, or None.

    Args:
        x: ``(L, N, IN)`` layer input (any row strides, unit last stride).
        h0, c0: ``(N, H)`` (unit last stride).
        w_ih, w_hh, b: ``(4H, IN)``, ``(4H, H)`` weights and ``(4H,)`` bias.
        work: float32 scratch of at least :func:`work_size` ``(H, IN, N)`` elements.
        variant: ``None`` (:data:`mode`), ``"auto"`` or a name of :data:`ISAS`.

    Returns:
        The output, or None where this path does not apply (see the module docstring).
    """
    isa = _isa(variant)
    L, N, IN = x.shape
    H = h0.shape[-1]
    if isa is None or not _fits(x, h0, c0) or min(L, N, H) == 0:
        return None
    _check_work(work, work_size(H, IN, N))
    out = np.empty((L, N, 6 * H), dtype=F32)
    _call("lstm_seq_fwd_f32", (x, h0, c0, work, out, _c(w_ih), _c(w_hh), _c(b)),
          (L, N, H, isa, _rows(x), _rows(x[0]), _rows(h0), _rows(c0), IN))
    return out


def lstm_backward(gout, out, c0, w_ih, w_hh, work, dg, dhr, dc, dh0, dx, variant=None):
    """BPTT of :func:`lstm_forward` into ``dg`` (L, N, 4H), ``dc``, ``dh0`` (N, H) and
    ``dx`` (L, N, IN); the weight and bias gradients are sums over ``dg`` (the caller's).

    Args:
        gout: ``(L, N, 6H)`` gradient of the output (unit last stride).
        out: the forward's output, contiguous.
        c0: ``(N, H)``.
        w_ih, w_hh: ``(4H, IN)``, ``(4H, H)``.
        work: float32 scratch of :func:`work_size` elements; ``dhr``: ``(N, H)`` scratch.
        dg, dc, dh0, dx: contiguous outputs (``dc`` ends as the gradient of ``c0``).
        variant: as in :func:`lstm_forward`.

    Returns:
        True, or None where this path does not apply (nothing written).
    """
    isa = _isa(variant)
    L, N, S = out.shape
    if isa is None or not _fits(gout, out, c0) or min(L, N, S) == 0:
        return None
    _check_work(work, work_size(S // 6, dx.shape[-1]))
    _call("lstm_seq_bwd_f32", (gout, out, c0, work, dg, dhr, dc, dh0, _c(w_ih), _c(w_hh), dx),
          (L, N, S // 6, isa, _rows(gout), _rows(gout[0]), _rows(c0), 0, dx.shape[-1]))
    return True
