"""Elementwise kernels as CUDA C: several elements per thread, vector loads when contiguous.

Each :class:`~ember.codegen.ir.Kernel` renders to two entry points over one expression:

* ``NAME`` (strided: any layout, broadcasting by stride 0) — each thread handles
  :data:`ILP` elements ``blockDim.x`` apart (coalesced), first loading every input of all
  of them (independent loads in flight), then computing and storing; offsets from the
  flat index by one division per loop dim (``ember_divmod``: 32-bit when it fits)::

      NAME(const T0 *in0, ..., TO *out, ..., const int64_t *shape,
           const int64_t *strides, int ndim, int64_t n)

* ``NAME_c`` (contiguous) — the loop is one dim and every input is either contiguous or
  one element (a scalar: bit ``k`` of ``flags``); each thread handles :data:`ILP`
  consecutive elements, loaded and stored as one vector (16 bytes for float32) when
  ``flags & EMBER_ALIGNED`` (the launcher checks every pointer is aligned to the
  vector's size), else element by element (a misaligned view, the tail)::

      NAME_c(const T0 *in0, ..., TO *out, ..., int flags, int64_t n)

  Its body (``NAME_cbody``) takes the block's index and the block count, so the
  multi-launch entry ``NAME_m`` (:func:`render_multi_entry`: a table of ``NAME_c``
  launches run as one) runs the very same code over each record's slice of blocks.

Both index with ``unsigned`` (32-bit) arithmetic when ``n`` is below 2**31 (a template
instantiated twice), else ``int64_t``. Out-of-range lanes of the last vector load a valid
element (the first of the vector) and store nothing.

Why: a grid-stride loop moving one 4-byte element per thread per iteration keeps too few
bytes in flight to reach a GPU's copy bandwidth (H200: ~1.6 of 4.0 TB/s measured;
bench/RESULTS.md, "CUDA ... first run").
"""
from __future__ import annotations

from .. import dtypes as _dt
from .cexpr import CTYPE, CUDA_STORAGE, Emitter, index_c

__all__ = ["ILP", "UNROLL", "ALIGNED", "ROW_BIT", "COL_BIT", "VEC_HEAD", "multi_width",
           "render_elementwise", "render_multi_entry", "render_row_entry", "vec_bytes"]

#: elements per thread per loop iteration (one vector of the contiguous entry).
ILP = 4
#: vectors of ILP elements per thread and iteration of the contiguous entry (bytes in
#: flight: ``bench/cuda_ew_sweep.py`` measures 1, 2, 4; 1 until a GPU says otherwise).
UNROLL = 1
#: ``flags`` bit of the contiguous variant: every non-scalar pointer is vector-aligned.
ALIGNED = 1 << 30
#: ``flags`` bit ``ROW_BIT + k`` of the row entry (:func:`render_row_entry`): input ``k``
#: is one row of ``cols`` elements repeated over the output (a bias).
ROW_BIT = 16
#: ``flags`` bit ``COL_BIT + k`` of the row entry: input ``k`` holds one value per row of
#: ``cols`` elements (a layer norm's per-row statistics, keepdims); inputs 0..7 only.
COL_BIT = 8

CUDA_CTYPE = {**CTYPE, "bool": "bool"}

#: vector types for ILP elements of 1, 2, 4 and 8 bytes (4, 8, 16 and 32 bytes).
VEC_HEAD = r"""#ifndef EMBER_VEC_TYPES
#define EMBER_VEC_TYPES
struct __align__(16) ember_v32 { uint4 a, b; };
#define EMBER_ALIGNED (1 << 30)
#endif
"""
_VEC = {1: "unsigned int", 2: "uint2", 4: "uint4", 8: "ember_v32"}


def vec_bytes(itemsize: int) -> int:
    """The alignment (bytes) a pointer needs for the vector path: ``ILP`` elements, at
    most 16 (a 32-byte float64 vector is two 16-byte loads)."""
    return min(16, ILP * itemsize)


def _ptr_type(d) -> str:
    return "__nv_bfloat16" if d is _dt.bfloat16 else CUDA_STORAGE[d.name]


def _convert(v: str, d) -> str:
    """A stored element ``v`` of dtype ``d`` as its compute C value."""
    if d is _dt.bfloat16:
        return f"__bfloat162float({v})"
    if d is _dt.float16:
        return f"__half2float({v})"
    if d is _dt.bool_:
        return f"({v} != 0)"
    return v


def _store(value: str, src, d) -> str:
    if CUDA_CTYPE[src.name] != CUDA_CTYPE[d.name]:
        value = f"(({CUDA_CTYPE[d.name]}){value})"
    if d is _dt.bfloat16:
        return f"__float2bfloat16_rn({value})"
    if d is _dt.float16:
        return f"__float2half_rn({value})"
    return value


def _params(ins, outs) -> list:
    args = [f"const {_ptr_type(d)} *__restrict__ in{k}" for k, d in enumerate(ins)]
    return args + [f"{_ptr_type(d)} *__restrict__ out{j or ''}" for j, d in enumerate(outs)]


def _names(ins, outs) -> str:
    return ", ".join([f"in{k}" for k in range(len(ins))] +
                     [f"out{j or ''}" for j in range(len(outs))])


def _compute(k, ins, flat: str) -> list:
    """Statements computing element ``j`` of every output into ``r<out>[j]`` from the
    loaded ``v<in>[j]``; ``flat``: the element's flat position in the output (what an
    :class:`~ember.codegen.ir.Index` leaf is computed from: a remainder by a constant,
    only in kernels that hold one)."""
    total = 1
    for s in k.out.shape:
        total *= s
    emit = Emitter(lambda i: _convert(f"v{i}[j]", ins[i]), ins, ctype=CUDA_CTYPE,
                   index=lambda e: index_c(e, flat, total))
    stores = []
    for o, (d, e) in enumerate(k.outputs):
        var, vd = emit.value(e)
        stores.append(f"r{o}[j] = {_store(var, vd, d)};")
    return emit.lines + stores


def _ind(lines, n) -> list:
    return ["    " * n + ln for ln in lines]


def _strided(k, ins, outs, name) -> list:
    """The template body of the strided variant."""
    nin = len(ins)
    sig = ", ".join(_params(ins, outs) + ["const int64_t *__restrict__ shape",
                                          "const int64_t *__restrict__ strides",
                                          "int ndim", "I n"])
    decl = [f"{_ptr_type(d)} v{i}[{ILP}];" for i, d in enumerate(ins)]
    decl += [f"{_ptr_type(d)} r{o}[{ILP}];" for o, d in enumerate(outs)]
    offs = ["int64_t rem = (int64_t)idx" + "".join(f", o{i} = 0" for i in range(nin)) + ";",
            "if (ndim == 1) {"]
    offs += [f"    o{i} = rem * strides[{i} * ndim];" for i in range(nin)]
    offs += ["} else {", "    for (int d = ndim - 1; d >= 0; d--) {",
             "        const int64_t c = ember_divmod(rem, shape[d]);"]
    offs += [f"        o{i} += c * strides[{i} * ndim + d];" for i in range(nin)]
    offs += ["    }", "}"] + [f"v{i}[j] = in{i}[o{i}];" for i in range(nin)]
    stores = [f"out{o or ''}[idx] = r{o}[j];" for o in range(len(outs))]
    return ([f"template <typename I> __device__ static inline void {name}_body({sig}) {{",
             f"    const I step = (I)blockDim.x * gridDim.x * {ILP};",
             f"    for (I base = (I)blockIdx.x * blockDim.x * {ILP} + threadIdx.x; base < n;"
             " base += step) {"] + _ind(decl, 2) +
            ["        #pragma unroll", f"        for (int j = 0; j < {ILP}; j++) {{",
             "            const I idx = base + (I)j * blockDim.x;",
             "            if (idx < n) {"] + _ind(offs, 4) + ["            }", "        }",
             "        #pragma unroll", f"        for (int j = 0; j < {ILP}; j++) {{",
             "            const I idx = base + (I)j * blockDim.x;",
             "            if (idx < n) {"] + _ind(_compute(k, ins, "idx") + stores, 4) +
            ["            }", "        }", "    }", "}"])


def _vec_load(i, d, dst=None) -> list:
    t, vt = _ptr_type(d), _VEC[d.itemsize]
    dst = dst or f"v{i}"
    return [f"if (flags & {1 << i}) {{",
            f"    #pragma unroll",
            f"    for (int j = 0; j < {ILP}; j++) {dst}[j] = in{i}[0];",
            "} else if (full && (flags & EMBER_ALIGNED)) {",
            f"    *({vt} *){dst} = *(const {vt} *)(in{i} + base);",
            "} else {",
            "    #pragma unroll",
            f"    for (int j = 0; j < {ILP}; j++) "
            f"{dst}[j] = in{i}[base + j < n ? base + j : base];",
            "}"]


def _vec_store(o, d, src=None) -> list:
    vt = _VEC[d.itemsize]
    nm = f"out{o or ''}"
    src = src or f"r{o}"
    return ["if (full && (flags & EMBER_ALIGNED)) {",
            f"    *({vt} *)({nm} + base) = *(const {vt} *){src};",
            "} else {", "    #pragma unroll",
            f"    for (int j = 0; j < {ILP}; j++) if (base + j < n) {nm}[base + j] = {src}[j];",
            "}"]


def _contiguous(k, ins, outs, name) -> list:
    """The template body of the contiguous variant."""
    sig = ", ".join(_params(ins, outs) + ["int flags", "I n", "I blk", "I nblk"])
    decl = [f"__align__(16) {_ptr_type(d)} v{i}[{ILP}];" for i, d in enumerate(ins)]
    decl += [f"__align__(16) {_ptr_type(d)} r{o}[{ILP}];" for o, d in enumerate(outs)]
    loads = [ln for i, d in enumerate(ins) for ln in _vec_load(i, d)]
    stores = [ln for o, d in enumerate(outs) for ln in _vec_store(o, d)]
    return ([f"template <typename I> __device__ static inline void {name}_cbody({sig}) {{",
             f"    const I step = (I)blockDim.x * nblk * {ILP};",
             f"    for (I base = (blk * blockDim.x + threadIdx.x) * {ILP}; base < n;"
             " base += step) {",
             f"        const bool full = base + {ILP} <= n; (void)full;"] + _ind(decl + loads, 2) +
            ["        #pragma unroll", f"        for (int j = 0; j < {ILP}; j++) {{"] +
            _ind(_compute(k, ins, "base + (I)j"), 3) + ["        }"] + _ind(stores, 2) +
            ["    }", "}"])


def _contiguous_unrolled(k, ins, outs, name, u: int) -> list:
    """The contiguous variant with ``u`` vectors of :data:`ILP` elements per thread and
    iteration, ``blockDim.x`` vectors apart (coalesced): every vector's loads issued
    before any compute, so ``u`` times the bytes are in flight. NOTE: the launch must keep
    ``grid * blockDim.x * ILP * u`` below 2**31 (the 32-bit index's step)."""
    w = ILP * u
    sig = ", ".join(_params(ins, outs) + ["int flags", "I n", "I blk", "I nblk"])
    decl = [f"__align__(16) {_ptr_type(d)} v{i}[{w}];" for i, d in enumerate(ins)]
    decl += [f"__align__(16) {_ptr_type(d)} r{o}[{w}];" for o, d in enumerate(outs)]
    loads = [ln for i, d in enumerate(ins) for ln in _vec_load(i, d, f"(v{i} + u * {ILP})")]
    stores = [ln for o, d in enumerate(outs)
              for ln in _vec_store(o, d, f"(r{o} + u * {ILP})")]
    vec = ["#pragma unroll", f"for (int u = 0; u < {u}; u++) {{",
           f"    const I base = base0 + (I)u * blockDim.x * {ILP};",
           f"    const bool full = base + {ILP} <= n; (void)full;", "    if (base < n) {"]
    return ([f"template <typename I> __device__ static inline void {name}_cbody({sig}) {{",
             f"    const I step = (I)blockDim.x * nblk * {w};",
             f"    for (I base0 = blk * blockDim.x * {w} + (I)threadIdx.x * {ILP};"
             " base0 < n; base0 += step) {"] + _ind(decl + vec + _ind(loads, 2), 2) +
            ["            }", "        }", "        #pragma unroll",
             f"        for (int j = 0; j < {w}; j++) {{"] +
            _ind(_compute(k, ins, f"base0 + (I)(j / {ILP}) * blockDim.x * {ILP} + "
                                  f"(I)(j % {ILP})"), 3) +
            ["        }"] + _ind(vec + _ind(stores, 2), 2) + ["            }", "        }",
                                                               "    }", "}"])


def render_elementwise(k, unroll: int | None = None) -> str:
    """CUDA C of kernel ``k``'s two entry points (module docstring); needs
    :data:`VEC_HEAD` and the NVRTC head before it. ``unroll``: vectors per thread and
    iteration of the contiguous entry (default :data:`UNROLL`; 1 is the text above)."""
    ins = [s.dtype for s in k.inputs]
    outs = [o[0] for o in k.outputs]
    name, names = k.name, _names(ins, outs)
    params = _params(ins, outs)
    strided_sig = ", ".join(params + ["const int64_t *__restrict__ shape",
                                      "const int64_t *__restrict__ strides", "int ndim",
                                      "int64_t n"])
    u = UNROLL if unroll is None else unroll
    lines = _strided(k, ins, outs, name) + (
        _contiguous(k, ins, outs, name) if u == 1 else _contiguous_unrolled(k, ins, outs,
                                                                             name, u))
    lines += [f'extern "C" __global__ void {name}({strided_sig}) {{',
              "    if (n < 0x7fffffffLL)",
              f"        {name}_body<unsigned>({names}, shape, strides, ndim, (unsigned)n);",
              "    else",
              f"        {name}_body<int64_t>({names}, shape, strides, ndim, n);", "}",
              f'extern "C" __global__ void {name}_c({", ".join(params + ["int flags", "int64_t n"])}) {{',
              "    if (n < 0x7fffffffLL)",
              f"        {name}_cbody<unsigned>({names}, flags, (unsigned)n, blockIdx.x, "
              "gridDim.x);",
              "    else",
              f"        {name}_cbody<int64_t>({names}, flags, n, blockIdx.x, gridDim.x);",
              "}"]
    return "\n".join(lines) + "\n"


def multi_width(k) -> int:
    """int64 slots of one record of kernel ``k``'s ``NAME_m`` table
    (:func:`render_multi_entry`): its pointers, ``flags``, ``n``, its first block."""
    return len(k.inputs) + len(k.outputs) + 3


def render_multi_entry(k) -> str:
    """CUDA C of kernel ``k``'s multi-launch entry point: several ``NAME_c`` launches of
    one kernel as one (PyTorch's ``multi_tensor_apply``: an optimizer's per-parameter
    updates)::

        NAME_m(const int64_t *recs, int nrec)

    ``recs`` holds ``nrec`` records of :func:`multi_width` int64s: the launch's input
    and output pointers, its ``flags`` and ``n`` (as ``NAME_c``'s) and the index of its
    first block, ascending (a record with ``n == 0`` owns no block: the next one starts
    at the same index). A block finds its record by binary search over the first-block
    indices and runs ``NAME_c``'s body as block ``blockIdx.x - first`` of that record's
    blocks: one implementation of the math, and the same elements a thread (results
    bit for bit ``NAME_c``'s). Needs ``NAME_c`` (:func:`render_elementwise`) before it.

    Why: a GPU step's launches cost host time (~5-10 us of CuPy each plus Ember's plan);
    AdamW updating 150 parameters was 150 launches of one kernel."""
    ins = [s.dtype for s in k.inputs]
    outs = [o[0] for o in k.outputs]
    name, names, w = k.name, _names(ins, outs), multi_width(k)
    nio = len(ins) + len(outs)
    ptrs = [f"    const {_ptr_type(d)} *__restrict__ in{i} = (const {_ptr_type(d)} *)r[{i}];"
            for i, d in enumerate(ins)]
    ptrs += [f"    {_ptr_type(d)} *__restrict__ out{j or ''} = ({_ptr_type(d)} *)"
             f"r[{len(ins) + j}];" for j, d in enumerate(outs)]
    lines = [f'extern "C" __global__ void {name}_m(const int64_t *__restrict__ recs, '
             "int nrec) {",
             "    const int64_t b = blockIdx.x;",
             "    int lo = 0, hi = nrec - 1;",
             "    while (lo < hi) {     /* the last record whose first block is <= b */",
             "        const int mid = (lo + hi + 1) >> 1;",
             f"        if (recs[(int64_t)mid * {w} + {w - 1}] <= b) lo = mid; "
             "else hi = mid - 1;",
             "    }",
             f"    const int64_t *r = recs + (int64_t)lo * {w};",
             f"    const int64_t first = r[{w - 1}];",
             f"    const int64_t nb = (lo + 1 < nrec ? r[{w + w - 1}] : (int64_t)gridDim.x)"
             " - first;"] + ptrs + [
             f"    const int flags = (int)r[{nio}];",
             f"    const int64_t n = r[{nio + 1}];",
             "    if (n < 0x7fffffffLL)",
             f"        {name}_cbody<unsigned>({names}, flags, (unsigned)n, (unsigned)(b - first),"
             " (unsigned)nb);",
             "    else",
             f"        {name}_cbody<int64_t>({names}, flags, n, b - first, nb);", "}"]
    return "\n".join(lines) + "\n"


def _row_load(i, d) -> list:
    """Loads of input ``i`` in the row entry: a repeated row read at ``index % cols``, a
    per-row value at ``index / cols`` (one per vector: an aligned vector stays in its
    row), else as the contiguous entry's."""
    vt = _VEC[d.itemsize]
    col = [] if i >= ROW_BIT - COL_BIT else [
        f"}} else if (flags & {1 << (COL_BIT + i)}) {{",
        "    if (full && (flags & EMBER_ALIGNED)) {",
        "        #pragma unroll",
        f"        for (int j = 0; j < {ILP}; j++) v{i}[j] = in{i}[base / cols];",
        "    } else {",
        "        #pragma unroll",
        f"        for (int j = 0; j < {ILP}; j++) "
        f"v{i}[j] = in{i}[(base + j < n ? base + j : base) / cols];",
        "    }"]
    return [f"if (flags & {1 << (ROW_BIT + i)}) {{",
            "    if (full && (flags & EMBER_ALIGNED)) {",
            f"        *({vt} *)v{i} = *(const {vt} *)(in{i} + cb);",
            "    } else {",
            "        #pragma unroll",
            f"        for (int j = 0; j < {ILP}; j++) "
            f"v{i}[j] = in{i}[(base + j < n ? base + j : base) % cols];",
            "    }"] + col + ["} else {"] + _ind(_vec_load(i, d), 1) + ["}"]


def row_body(fn: str, sig: str, prologue: list, compute: list, stores: list) -> list:
    """The ``__device__`` body of a row entry (``NAME_r``, ``cuda_pitch``'s ``NAME_rp``):
    a grid-stride loop of ILP elements a thread, ``cb`` the first one's column;
    ``prologue`` declares and loads, ``compute`` fills ``r*[j]``, ``stores`` writes."""
    return ([f"template <typename I> __device__ static inline void {fn}({sig}) {{",
             f"    const I step = (I)blockDim.x * gridDim.x * {ILP};",
             f"    for (I base = ((I)blockIdx.x * blockDim.x + threadIdx.x) * {ILP}; base < n;"
             " base += step) {",
             f"        const bool full = base + {ILP} <= n; (void)full;",
             "        const I cb = base % cols; (void)cb;"] + _ind(prologue, 2) +
            ["        #pragma unroll", f"        for (int j = 0; j < {ILP}; j++) {{"] +
            _ind(compute, 3) + ["        }"] + _ind(stores, 2) + ["    }", "}"])


def render_row_entry(k) -> str:
    """CUDA C of kernel ``k``'s row-broadcast entry point (eager ops: ``x + bias``; fused
    graph kernels reading a bias or per-row statistics)::

        NAME_r(const T0 *in0, ..., TO *out, ..., int flags, int64_t n, int64_t cols)

    As ``NAME_c`` (:data:`ILP` consecutive elements a thread, one vector when ``flags &
    EMBER_ALIGNED``), but an input with bit ``ROW_BIT + k`` set is a row of ``cols``
    elements repeated over the output: element ``i`` reads ``in[i % cols]`` (one modulo
    per vector; the launcher sets ``EMBER_ALIGNED`` only when ``cols`` is a multiple of
    :data:`ILP`, so a vector never crosses a row's end); one with bit ``COL_BIT + k`` (k <
    8) holds a value per row: element ``i`` reads ``in[i / cols]``. Needs
    :data:`VEC_HEAD` before it.

    Why: the strided entry turns every element's flat index into coordinates (a division
    per dim) and loads element by element: a float16 bias add of (8192, 3072) ran at
    ~0.8 TB/s on an H100 against 3+ for a copy."""
    ins = [s.dtype for s in k.inputs]
    outs = [o[0] for o in k.outputs]
    name, names = k.name, _names(ins, outs)
    params = _params(ins, outs)
    sig = ", ".join(params + ["int flags", "I n", "I cols"])
    decl = [f"__align__(16) {_ptr_type(d)} v{i}[{ILP}];" for i, d in enumerate(ins)]
    decl += [f"__align__(16) {_ptr_type(d)} r{o}[{ILP}];" for o, d in enumerate(outs)]
    loads = [ln for i, d in enumerate(ins) for ln in _row_load(i, d)]
    stores = [ln for o, d in enumerate(outs) for ln in _vec_store(o, d)]
    lines = row_body(f"{name}_rbody", sig, decl + loads, _compute(k, ins, "base + (I)j"),
                     stores)
    head = ", ".join(params + ["int flags", "int64_t n", "int64_t cols"])
    lines += [f'extern "C" __global__ void {name}_r({head}) {{',
              "    if (n < 0x7fffffffLL)",
              f"        {name}_rbody<unsigned>({names}, flags, (unsigned)n, (unsigned)cols);",
              "    else",
              f"        {name}_rbody<int64_t>({names}, flags, n, cols);", "}"]
    return "\n".join(lines) + "\n"
