"""float16/bfloat16 (and TF32) GEMMs on a GPU: one ``cublasGemmEx`` with float32 sums.

``matmul``'s ``"cuda"`` kernel sends low-precision products here: the operands stay in
their 2-byte storage (tensor cores read them as they are), cuBLAS accumulates in float32
(``CUBLAS_COMPUTE_32F``) and rounds the result once — what the CPU's conversion path
computes, and what PyTorch does. float32 products use ``CUBLAS_COMPUTE_32F_FAST_TF32`` when
``ember.backends.cuda.matmul.allow_tf32`` is set (PyTorch's flag; off by default), else
they stay with CuPy's ``matmul``. Calls are explicit rather than left to ``cupy.matmul``
so that the compute type never depends on CuPy's global ``set_compute_type`` and a
bfloat16 buffer is a bfloat16 operand whatever array type carries it.

Row-major to cuBLAS's column-major: ``C = A @ B`` (m x n) is ``Cᵀ = Bᵀ Aᵀ`` with C's rows
as columns (``ldc = n``); a C-contiguous operand is its transpose in column-major (no op),
a transposed view (``x.mT`` of a contiguous x) is itself (``CUBLAS_OP_T``). A batch
(equal leading dims, or a 2-D right operand shared by all: stride 0) is one
``cublasGemmStridedBatchedEx``. :func:`gemm_plan` is pure Python (tested on the CPU with a
NumPy model of cuBLAS's column-major GEMM); :func:`matmul` runs it through
``cupy_backends.cuda.libs.cublas``.

Alignment: cuBLAS's fast half-precision kernels need 16-byte aligned base pointers and
leading dims (8 halves). An LM head's odd vocabulary (50257) makes the logits' ``ldc`` odd
and cuBLAS falls back to Turing-era kernels (~96 against ~600 TFLOP/s on an H100). A GEMM
of at least :data:`PAD_MIN_FLOPS` with an unaligned operand or output therefore runs on
padded buffers (:func:`_padded`): an unaligned operand is copied, in its own orientation,
into a buffer whose leading dim is a multiple of 8, the reduction dim padded to a multiple
of 8 with zeros (they add nothing to the sums); an unaligned output is computed into such
a buffer and copied into the C-ordered result (:func:`finish`) — callers and ``out=`` get
what they got before. On a GPU the 2-D copies are pitched ``cudaMemcpy2DAsync`` calls.
The float32 sums are the same up to cuBLAS's own summation order.
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import bfloat16 as _bfloat16

__all__ = ["CUDA_TYPE", "PAD_MIN_FLOPS", "cached_plan", "finish", "gemm_plan", "matmul",
           "supported"]

#: cudaDataType of each storage dtype (library_types.h).
CUDA_TYPE = {"float16": 2, "bfloat16": 14, "float32": 0}
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99
OP_N, OP_T = 0, 1
#: 2*m*n*k*batch from which an unaligned float16/bfloat16 GEMM runs on padded buffers.
PAD_MIN_FLOPS = 1 << 30
ALIGN = 16          # bytes: base pointers, leading dims and batch strides


def supported(x, y, tf32: bool = False) -> bool:
    """Whether :func:`matmul` takes ``x @ y``: both 2-byte floats of one dtype (float32
    with ``tf32``), at least 2-D, ``y`` 2-D or with ``x``'s leading dims."""
    d = x.dtype
    # NOTE: dtype sets, not dtype.name (a Python property building a string: ~0.3 us)
    return (d == y.dtype and (d in _LOWP or tf32 and d == _F32) and x.ndim >= 2
            and y.ndim >= 2 and (y.ndim == 2 or tuple(y.shape[:-2]) == tuple(x.shape[:-2]))
            and x.shape[-1] == y.shape[-2])


_LOWP = frozenset((np.dtype(np.float16), np.dtype(_bfloat16.np)))
_F32 = np.dtype(np.float32)


def _operand(a, xp):
    """``(array, op, ld)`` of a row-major (r, c) matrix stack as cuBLAS's column-major
    operand of the transposed product: rows contiguous -> (no op, ld = row stride, c when
    C-contiguous); a transposed view -> (OP_T, ld = column stride); anything else is
    copied to C order first."""
    it = a.itemsize
    r, c = a.shape[-2:]
    s0, s1 = a.strides[-2:]
    if s1 == it and r == 1:
        return a, OP_N, max(c, 1)
    if s1 == it and s0 >= c * it and s0 % it == 0:       # rows ld apart (a padded buffer)
        return a, OP_N, max(s0 // it, 1)
    if s0 == it and c == 1:
        return a, OP_T, max(r, 1)
    if s0 == it and s1 >= r * it and s1 % it == 0:
        return a, OP_T, max(s1 // it, 1)
    a = xp.ascontiguousarray(a)
    return a, OP_N, max(c, 1)


def _batch_stride(a, batch: int) -> int:
    """Elements between consecutive matrices of the stack (0: one matrix for all)."""
    if a.ndim == 2 or batch == 1:
        return 0
    return a.strides[-3] // a.itemsize        # leading dims merge (gemm_plan checks)


def gemm_plan(x, y, xp=np, tf32: bool = False, out=None) -> dict:
    """The cuBLAS call computing ``x @ y`` (see the module doc) and its output array.

    Returns a dict: ``fn`` (``"gemmEx"`` or ``"gemmStridedBatchedEx"``), ``transa``,
    ``transb``, ``m``, ``n``, ``k`` (cuBLAS's), ``A``/``lda``/``strideA`` (= ``y``),
    ``B``/``ldb``/``strideB`` (= ``x``), ``C``/``ldc``/``strideC``, ``batch``, ``type``
    (cudaDataType of A, B, C), ``compute`` and ``out`` (C as ``x @ y``'s shape).
    """
    m, k = x.shape[-2:]
    n = y.shape[-1]
    lead = tuple(x.shape[:-2])
    batch = math.prod(lead)
    if x.ndim > 3 and not _merges(x):
        x = xp.ascontiguousarray(x)
    if y.ndim > 3 and not _merges(y):
        y = xp.ascontiguousarray(y)
    x, opx, ldx = _operand(x, xp)
    y, opy, ldy = _operand(y, xp)
    c = xp.empty(lead + (m, n), x.dtype) if out is None else out
    ldc, result, npad = max(n, 1), c, n
    if _pads(x, ldx, y, ldy, c, ldc, batch, k):
        kp = -(-k // 8) * 8
        if not _aligned(c, ldc, batch):
            # NOTE: n padded too, not only ldc: on an H200 an aligned ldc alone left cuBLAS
            # on its slow kernel for the odd n of an LM head (8.3 ms vs 1.8 ms for dx, whose
            # dims were all multiples of 8 once padded: bench/cuda_gemm_align.py)
            npad = ldc = -(-n // 8) * 8
            result = xp.empty(lead + (m, ldc), x.dtype)[..., :n]
        if kp != k or not _aligned(x, ldx, batch):
            x, opx, ldx = _operand(_padded(x, m, kp, xp), xp)
        if kp != k or npad != n or not _aligned(y, ldy, batch):
            y, opy, ldy = _operand(_padded(y, kp, npad, xp), xp)
        k = kp
    name = x.dtype.name
    compute = CUBLAS_COMPUTE_32F_FAST_TF32 if name == "float32" and tf32 else CUBLAS_COMPUTE_32F
    return {"fn": "gemmEx" if batch == 1 else "gemmStridedBatchedEx",
            "transa": opy, "transb": opx, "m": npad, "n": m, "k": k,
            "A": y, "lda": ldy, "strideA": _batch_stride(y, batch),
            "B": x, "ldb": ldx, "strideB": _batch_stride(x, batch),
            "C": result, "ldc": ldc, "strideC": m * ldc, "batch": batch,
            "type": CUDA_TYPE[name], "compute": compute, "out": c,
            "copy": result is not c, "shape": lead + (m, n)}


def finish(p):
    """The plan's result as ``x @ y`` after the GEMM ran: a padded output copied into
    ``p["out"]`` (C order, or the caller's ``out=``)."""
    if p["copy"]:
        _copy(p["out"], p["C"])
    return p["out"]


def _copy(dst, src) -> None:
    """``dst[...] = src``; on a GPU, a copy whose rows are contiguous and whose leading
    dims merge into one row index is one ``cudaMemcpy2DAsync`` (a pitched copy at copy
    bandwidth: CuPy's elementwise copy of a strided view moves one element a thread)."""
    rows = None if type(dst) is np.ndarray else _pitched(dst, src)  # NumPy: the CPU model
    if rows is None:
        dst[...] = src
        return
    import cupy
    rt = cupy.cuda.runtime
    rt.memcpy2DAsync(dst.data.ptr, dst.strides[-2], src.data.ptr, src.strides[-2],
                     dst.shape[-1] * dst.itemsize, rows, rt.memcpyDeviceToDevice,
                     cupy.cuda.get_current_stream().ptr)


def _pitched(dst, src) -> int | None:
    """The rows of ``src`` -> ``dst`` as a pitched 2-D copy (same shape and dtype,
    elements contiguous in each row, rows at least a row's bytes apart, leading dims one
    row stride apart: a (B, T, V) logits view of a padded buffer too), else None.

    NOTE: 3-D views once took CuPy's strided copy: 1.9 ms for an LM head's (8, 1024,
    50257) float16 logits on an H100, ~0.3 ms as one pitched copy."""
    if dst.ndim < 2 or dst.shape != src.shape or dst.dtype != src.dtype or dst.size == 0:
        return None
    row = dst.shape[-1] * dst.itemsize
    for a in (dst, src):
        st, sh = a.strides, a.shape
        if st[-1] != a.itemsize or st[-2] < row:
            return None
        if any(st[i] != st[i + 1] * sh[i + 1] for i in range(a.ndim - 2) if sh[i] > 1):
            return None
    return math.prod(dst.shape[:-1])


def _ptr(a) -> int:
    """The base address of ``a`` (a CuPy array, or NumPy's on the CPU stand-in)."""
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def _aligned(a, ld: int, batch: int) -> bool:
    """Whether cuBLAS's vectorised kernels can read ``a``: 16-byte base pointer, leading
    dim and batch stride."""
    step = ALIGN // a.itemsize
    return (_ptr(a) % ALIGN == 0 and ld % step == 0
            and _batch_stride(a, batch) % step == 0)


def _pads(x, ldx, y, ldy, c, ldc, batch, k) -> bool:
    """Whether to run on padded buffers: a big 2-byte GEMM with something unaligned."""
    if x.itemsize != 2 or 2 * c.size * k < PAD_MIN_FLOPS:
        return False
    return not (_aligned(x, ldx, batch) and _aligned(y, ldy, batch) and _aligned(c, ldc, batch))


def _padded(a, rows: int, cols: int, xp):
    """``a`` (..., r, c) in the top-left corner of a (..., rows, cols) view, zeros elsewhere,
    over a fresh buffer in ``a``'s orientation whose leading dim is a multiple of 8."""
    lead = tuple(a.shape[:-2])
    t = a.strides[-2] == a.itemsize and a.shape[-2] > 1    # columns contiguous: keep so
    src = a.swapaxes(-1, -2) if t else a                     # rows contiguous in memory
    rr, cc = (cols, rows) if t else (rows, cols)
    r, c = src.shape[-2:]
    buf = xp.empty(lead + (rr, -(-cc // 8) * 8), a.dtype)
    _copy(buf[..., :r, :c], src)
    if rr > r:
        buf[..., r:rr, :cc] = 0
    if cc > c:
        buf[..., :rr, c:cc] = 0
    view = buf[..., :rr, :cc]
    return view.swapaxes(-1, -2) if t else view


def _merges(a) -> bool:
    """Whether the leading dims of ``a`` are one stride apart (a batch cuBLAS can walk)."""
    lead, st = a.shape[:-2], a.strides[:-2]
    return all(st[i] == st[i + 1] * lead[i + 1] for i in range(len(lead) - 1))


def matmul(xp, x, y, tf32: bool = False, out=None):
    """``x @ y`` by one cuBLAS call, float32 accumulation (CuPy arrays; see :func:`supported`).

    Example:
        >>> c = matmul(cupy, a16, b16)      # doctest: +SKIP (needs a GPU)
    """
    p = cached_plan(x, y, xp, tf32, out)
    if p["m"] == 0 or p["n"] == 0 or p["batch"] == 0:
        return p["out"]
    if p["k"] == 0:
        p["out"].fill(0)
        return p["out"]
    _cublas(p)
    return finish(p)


#: direct plans (operands passed as they are, no padding) by :func:`_plan_key`.
_plans: dict = {}


def cached_plan(x, y, xp=np, tf32: bool = False, out=None) -> dict:
    """:func:`gemm_plan`'s result, replayed from a plan of the same layout when there is
    one: the same fields with this call's ``x``, ``y`` and output (``out`` or a new
    array). Only plans that pass ``x`` and ``y`` to cuBLAS as they are (no copy, no
    padding) are kept; a padded GEMM is planned (and its buffers made) at every call.

    NOTE: ``gemm_plan`` was ~100 us of Python a call on a GPU (CuPy attribute reads,
    ``empty``), on each of a compiled GPT step's ~150 GEMMs: the step was host-bound.
    """
    key = _plan_key(x, y, xp, tf32, out)
    hit = _plans.get(key)
    if hit is None:
        p = gemm_plan(x, y, xp, tf32, out)
        if p["B"] is x and p["A"] is y and not p["copy"]:
            if len(_plans) > 256:
                _plans.clear()
            _plans[key] = dict(p, A=None, B=None, C=None, out=None)
        return p
    p = dict(hit)
    c = xp.empty(p["shape"], x.dtype) if out is None else out
    p["A"], p["B"], p["C"], p["out"] = y, x, c, c
    return p


def _plan_key(x, y, xp, tf32, out) -> tuple:
    """What :func:`gemm_plan` decides from besides the data: shapes, strides, dtypes, the
    flag, the output's layout, and, for a GEMM big enough to pad (:func:`_pads`), the
    base pointers' 16-byte alignment."""
    sh = x.shape
    big = x.itemsize == 2 and 2 * math.prod(sh) * y.shape[-1] >= PAD_MIN_FLOPS
    o = None if out is None else (out.shape, out.strides, big and _ptr(out) % ALIGN == 0)
    return (xp, tf32, sh, x.strides, x.dtype.char, y.shape, y.strides, y.dtype.char, o,
            big and (_ptr(x) % ALIGN, _ptr(y) % ALIGN))


_ONE, _ZERO = np.array(1.0, np.float32), np.array(0.0, np.float32)
#: the host addresses of ``_ONE`` and ``_ZERO`` (cuBLAS's alpha and beta: module-lifetime
#: arrays). NOTE: ``ndarray.ctypes`` builds a ctypes object (~2-5 us): twice a GEMM.
_ALPHA, _BETA = _ONE.ctypes.data, _ZERO.ctypes.data

#: ``(cublas, get_cublas_handle)``, imported on the first GEMM (NOTE: two function-level
#: imports were ~2 us of each of a compiled GPT step's ~150 GEMMs)
_CUBLAS: tuple = ()


def _cublas_modules() -> tuple:
    global _CUBLAS
    from cupy_backends.cuda.libs import cublas
    import cupy
    _CUBLAS = (cublas, cupy.cuda.device.get_cublas_handle)
    return _CUBLAS


def _cublas(p) -> None:
    """Run plan ``p``'s GEMM (the only part that needs a GPU: the host stand-in of
    ``bench/cuda_host.py`` replaces it)."""
    cublas, get_handle = _CUBLAS or _cublas_modules()
    head = (get_handle(), p["transa"], p["transb"], p["m"], p["n"], p["k"], _ALPHA)
    a = (p["A"].data.ptr, p["type"], p["lda"])
    b = (p["B"].data.ptr, p["type"], p["ldb"])
    c = (p["C"].data.ptr, p["type"], p["ldc"])
    tail = (p["compute"], CUBLAS_GEMM_DEFAULT_TENSOR_OP)
    if p["fn"] == "gemmEx":
        cublas.gemmEx(*head, *a, *b, _BETA, *c, *tail)
    else:
        cublas.gemmStridedBatchedEx(*head, *a, p["strideA"], *b, p["strideB"],
                                    _BETA, *c, p["strideC"], p["batch"], *tail)
