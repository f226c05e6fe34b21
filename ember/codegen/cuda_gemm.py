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

Padded operands made once: :func:`zero_padded` copies a value into such a buffer (zeros
in the pad) and registers the buffer (a weak reference); a GEMM whose operand is a view
of a registered buffer's values reads the padded buffer itself (:func:`_widen`), no copy
— the call is the one the copy made. A graph whose LM-head values feed several padded
GEMMs pads them once (:mod:`ember.graph.passes.pad_gemm`: the (N, V) logits gradient for
dx and dW, the (V, d) weight for the logits and dx).
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ..device import cuda_graph as _graph
from ..dtypes import bfloat16 as _bfloat16

__all__ = ["CUDA_TYPE", "PAD_MIN_FLOPS", "cached_plan", "finish", "gemm_plan", "matmul",
           "padded_empty", "supported", "zero_padded"]

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


def gemm_plan(x, y, xp=np, tf32: bool = False, out=None, pitched: bool = False) -> dict:
    """The cuBLAS call computing ``x @ y`` (see the module doc) and its output array
    (``pitched``, no ``out``: a padded output is the result as it is, a view with rows
    ``ldc`` apart, not copied).

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
            if pitched and out is None:
                c = None                    # NOTE: dropped before the padded one is made
            result = xp.empty(lead + (m, ldc), x.dtype)[..., :n]
            c = result if c is None else c
        if kp != k or not _aligned(x, ldx, batch):
            x, opx, ldx = _operand(_pad_of(x, m, kp, batch, xp), xp)
        if kp != k or npad != n or not _aligned(y, ldy, batch):
            y, opy, ldy = _operand(_pad_of(y, kp, npad, batch, xp), xp)
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
    if rows is None or getattr(dst, "stand_in", False):     # NOTE: the strict stand-in's
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
    """Whether to run on padded buffers: a big 2-byte GEMM with something unaligned.

    NOTE: a view of a :func:`zero_padded` buffer of columns stands for its value, whose
    leading dim was unaligned: the GEMM pads as it did, reading the buffer (same call)."""
    if x.itemsize != 2 or 2 * c.size * k < PAD_MIN_FLOPS:
        return False
    if not (_aligned(x, ldx, batch) and _aligned(y, ldy, batch) and _aligned(c, ldc, batch)):
        return True
    hx, hy = _root(x), _root(y)
    return bool(hx and hx[3] or hy and hy[3])


def _pad_of(a, rows: int, cols: int, batch: int, xp):
    """``a`` as a (..., rows, cols) operand with zeros beyond its own extent and aligned
    leading dims: a view of its registered padded buffer (:func:`_widen`), else a padded
    copy (:func:`_padded`)."""
    w = _widen(a, rows, cols)
    if w is not None:
        _, _, ld = _operand(w, xp)
        if _aligned(w, ld, batch):
            return w
    return _padded(a, rows, cols, xp)


#: buffers made by :func:`zero_padded`, by ``id``: ``(weak reference, rows, cols,
#: unaligned)`` — the extent of the values in a 2-D buffer whose other elements are zeros,
#: and whether the value's own leading dim (``cols``) was unaligned.
_ZERO_PADDED: dict = {}


def zero_padded(a, xp, rows: bool = False):
    """A copy of ``a`` (..., r, c) as a view of a new zero-padded buffer, registered so that
    GEMMs reading the view (or its reshapes over the leading dims / its transpose, 2-D)
    read the padded buffer instead of copying it (:func:`_pad_of`).

    The buffer is ``(R, ceil8(c))`` with ``R`` the rows of ``a``'s leading dims merged
    (columns padded: an LM head's (N, V) logits gradient, the k of ``dx = dl @ W`` and the
    leading dim of ``dW = dl.mT @ x``), or, ``rows`` (2-D ``a``), ``(ceil8(r), c)`` (the
    (V, d) weight: the k of ``dx`` and the n of ``logits = x @ W.mT``). Nothing but this
    module writes the pad: the views returned exclude it.

    Example:
        >>> v = zero_padded(cupy.ones((4, 5), cupy.float16), cupy)   # doctest: +SKIP
        >>> v.strides                                                  # doctest: +SKIP
        (16, 2)
    """
    if rows:
        r, c = a.shape
        buf = xp.empty((-(-r // 8) * 8, c), a.dtype)
        _copy(buf[:r], a)
        buf[r:] = 0
        view = buf[:r]
    else:
        view = padded_empty(a.shape, a.dtype, xp)
        c = a.shape[-1]
        _copy(_root(view)[0][:, :c], a.reshape(-1, c))
        return view
    _register(buf, r, c, False)
    return view


def padded_empty(shape, dtype, xp):
    """A new (..., c) array as a view of a registered (rows, ceil8(c)) buffer whose pad
    columns are zeros (values: uninitialised), so padded GEMMs read it as it is (see
    :func:`zero_padded`); what a kernel writing an LM head's logits gradient writes into
    (:mod:`.cuda_pitch`)."""
    c = shape[-1]
    r = math.prod(shape[:-1])
    buf = xp.empty((r, -(-c // 8) * 8), dtype)
    buf[:, c:] = 0
    _register(buf, r, c, c % 8 != 0)
    return buf[:, :c].reshape(shape)


def _register(buf, r: int, c: int, unaligned: bool) -> None:
    key = id(buf)
    ref = weakref.ref(buf, lambda _r, k=key: _ZERO_PADDED.pop(k, None))
    _ZERO_PADDED[key] = (ref, r, c, unaligned)


def _root(a):
    """``(buffer, rows, cols, unaligned)`` when ``a`` is a view of a :func:`zero_padded`
    buffer, else None."""
    if not _ZERO_PADDED:
        return None
    root = a
    while True:             # NOTE: a NumPy array's base may be a bytes object, an mmap...
        b = getattr(root, "base", None)
        if b is None or not hasattr(b, "strides"):
            break
        root = b
    hit = _ZERO_PADDED.get(id(root))
    if hit is None or hit[0]() is not root:
        return None
    return (root,) + hit[1:]


def _widen(a, rows: int, cols: int):
    """``a`` (..., r, c) widened to (..., rows, cols) over its :func:`zero_padded` buffer
    (zeros beyond ``a``): when ``a`` is exactly the buffer's values, row-major with the
    buffer's pitch (leading dims merging into its rows; rows widened only in 2-D) or the
    2-D transpose, and the widened view fits in the buffer. Else None."""
    hit = _root(a) if a.ndim >= 2 else None
    if hit is None:
        return None
    buf, r0, c0, _ = hit
    br, bc = buf.shape
    it, sh = a.itemsize, a.shape
    st = tuple(s // it for s in a.strides)
    if _ptr(a) != _ptr(buf) or any(s * it != t for s, t in zip(st, a.strides)):
        return None
    lead = sh[:-1]
    if st[-1] == 1 and (st[-2] == bc or sh[-2] == 1) and sh[-1] == c0 and \
            math.prod(lead) == r0 and _merges_rows(st[:-1], lead, bc):
        if cols > bc or (rows != sh[-2] and (a.ndim != 2 or rows > br)):
            return None
        n = math.prod(sh[:-2]) * rows
        return buf[:n, :cols].reshape(sh[:-2] + (rows, cols))
    if a.ndim == 2 and st == (1, bc) and sh == (c0, r0) and rows <= bc and cols <= br:
        return buf[:cols, :rows].T
    return None


def _merges_rows(st, sh, pitch) -> bool:
    """Whether dims of sizes ``sh`` and element strides ``st`` walk rows ``pitch`` apart."""
    step = pitch
    for s, n in zip(reversed(st), reversed(sh)):
        if n > 1 and s != step:
            return False
        step *= n
    return True


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


def matmul(xp, x, y, tf32: bool = False, out=None, pitched: bool = False):
    """``x @ y`` by one cuBLAS call, float32 accumulation (CuPy arrays; see :func:`supported`).
    ``pitched``: a padded result is returned as the view of its padded buffer (rows a
    multiple of 8 elements apart: an LM head's logits read by kernels taking pitched
    operands, :mod:`.cuda_pitch`), not copied out.

    Example:
        >>> c = matmul(cupy, a16, b16)      # doctest: +SKIP (needs a GPU)
    """
    p = gemm_plan(x, y, xp, tf32, out, True) if pitched else cached_plan(x, y, xp, tf32, out)
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
    # NOTE: and whether an operand is a registered padded buffer's (read widened)
    return (xp, tf32, sh, x.strides, x.dtype.char, y.shape, y.strides, y.dtype.char, o,
            big and (_ptr(x) % ALIGN, _ptr(y) % ALIGN, _root(x) is None, _root(y) is None))


_ONE, _ZERO = np.array(1.0, np.float32), np.array(0.0, np.float32)
#: the host addresses of ``_ONE`` and ``_ZERO`` (cuBLAS's alpha and beta: module-lifetime
#: arrays). NOTE: ``ndarray.ctypes`` builds a ctypes object (~2-5 us): twice a GEMM.
_ALPHA, _BETA = _ONE.ctypes.data, _ZERO.ctypes.data

#: ``(cublas, get_cublas_handle, current stream's pointer)``, imported on the first GEMM
#: (NOTE: two function-level imports were ~2 us of each of a compiled GPT step's ~150 GEMMs)
_CUBLAS: tuple = ()


def _cublas_modules() -> tuple:
    global _CUBLAS
    from cupy_backends.cuda.libs import cublas
    import cupy
    # NOTE: CuPy's get_current_stream_ptr is cdef (not reachable from Python)
    current = cupy.cuda.get_current_stream
    _CUBLAS = (cublas, cupy.cuda.device.get_cublas_handle, lambda: current().ptr)
    return _CUBLAS


def _cublas(p) -> None:
    """Run plan ``p``'s GEMM (the only part that needs a GPU: the host stand-in of
    ``bench/cuda_host.py`` replaces it)."""
    cublas, get_handle, stream_ptr = _CUBLAS or _cublas_modules()
    h = get_handle()
    # NOTE: on the current stream (CuPy's handle keeps whichever stream its last user
    # set): a side stream's work and a CUDA graph capture need their GEMMs on theirs
    cublas.setStream(h, stream_ptr())
    keep = _graph.keeping()
    if keep is not None:            # NOTE: a capture: the graph reads p's arrays
        keep.append(p)
    head = (h, p["transa"], p["transb"], p["m"], p["n"], p["k"], _ALPHA)
    a = (p["A"].data.ptr, p["type"], p["lda"])
    b = (p["B"].data.ptr, p["type"], p["ldb"])
    c = (p["C"].data.ptr, p["type"], p["ldc"])
    tail = (p["compute"], CUBLAS_GEMM_DEFAULT_TENSOR_OP)
    if p["fn"] == "gemmEx":
        cublas.gemmEx(*head, *a, *b, _BETA, *c, *tail)
    else:
        cublas.gemmStridedBatchedEx(*head, *a, p["strideA"], *b, p["strideB"],
                                    _BETA, *c, p["strideC"], p["batch"], *tail)
