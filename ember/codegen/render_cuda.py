"""Kernel IR to CUDA C text (compiled by NVRTC: ``ember.codegen.nvrtc``, ``cupy.RawModule``).

Same expressions and helpers as the C renderer (the prelude's ``EMBER_FN`` becomes
``__device__``). Elementwise kernels are grid-stride loops with several elements per thread
and two entry points, ``NAME`` (any strides) and ``NAME_c`` (contiguous or scalar operands,
16-byte vector loads when aligned): :mod:`.render_cuda_ew`.
Reductions are one block per row by default (``strategy="block"``): the block's threads
stride over the row, combine their partial results with warp shuffles
(``__shfl_down_sync``) and one shared-memory step across warps, and every thread reads
the row's value for the epilogue; ``strategy="warp"`` gives each row one warp (rows of a
few hundred to a few thousand elements: a layer norm's 768; shuffles only, 8 rows a
256-thread block) and ``strategy="thread"`` one thread (short rows, many of them). The
block size must be a multiple of 32 (the launcher uses 256).
Shapes and strides are runtime arguments::

    extern "C" __global__ void NAME(const T0 *in0, ..., TO *out, TO1 *out1, ...,
                                    const int64_t *shape, const int64_t *strides,
                                    int ndim, int64_t n)

where ``n`` is the number of output elements (elementwise) or rows (reductions; the
elementwise ``NAME_c`` variant takes ``int flags, int64_t n`` instead of shape/strides),
``strides[k*ndim + j]`` is input k's stride in elements along loop dim j, and ``out1...``
are the extra outputs of a multi-output kernel (contiguous; per element or per row).

NOTE: NVRTC has no libc headers, so the text declares the fixed-width integer types
itself under NVRTC (``__CUDACC_RTC__``) and includes ``<stdint.h>`` under ``nvcc``, where
redefining them with ``long long`` clashed with glibc's ``long``.
"""
from __future__ import annotations

import math

from .. import dtypes as _dt
from .cexpr import CTYPE, Emitter, index_row_c
from .ir import Kernel, ReduceKernel, Row, has_philox
from .prelude import CUDA_HEAD, prelude
from .render_cuda_ew import VEC_HEAD, _convert, _params, _store, render_elementwise

CUDA_CTYPE = {**CTYPE, "bool": "bool"}

#: replaces the prelude's CUDA head: integer types NVRTC lacks, libm's constants, fp16/bf16.
NVRTC_HEAD = r"""#if defined(__CUDACC_RTC__)
typedef long int64_t;            /* LP64, as glibc's <stdint.h> on x86-64 and aarch64 */
typedef unsigned long uint64_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef signed char int8_t;
typedef unsigned char uint8_t;
#else
#include <stdint.h>
#include <math.h>
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define EMBER_FN __device__ static inline
EMBER_FN float ember_round_f16(float f) { return __half2float(__float2half_rn(f)); }
/* rem % s, leaving rem / s in rem: one division, 32-bit when both fit (most tensors) */
EMBER_FN int64_t ember_divmod(int64_t &rem, int64_t s) {
    if (((rem | s) >> 31) == 0) {
        const unsigned r = (unsigned)rem, q = r / (unsigned)s;
        rem = q;
        return (int64_t)(r - q * (unsigned)s);
    }
    const int64_t q = rem / s, c = rem - q * s;
    rem = q;
    return c;
}
"""

#: block-level reduction helpers (warp shuffles, then one shared-memory step).
BLOCK_REDUCE = r"""struct EmberSum { template <typename T> __device__ static T f(T a, T b) {
    return a + b; } };
struct EmberMax { template <typename T> __device__ static T f(T a, T b) {
    return (b > a || b != b) ? b : a; } };
struct EmberMin { template <typename T> __device__ static T f(T a, T b) {
    return (b < a || b != b) ? b : a; } };
template <typename Op, typename T>
__device__ static inline T ember_warp_reduce(T v) {
    for (int o = 16; o > 0; o >>= 1) v = Op::f(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}
/* Every lane of the warp gets the reduction of the warp's 32 values (butterfly). */
template <typename Op, typename T>
__device__ static inline T ember_warp_allreduce(T v) {
    for (int o = 16; o > 0; o >>= 1) v = Op::f(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Every thread of the block gets the reduction of all threads' v (blockDim.x % 32 == 0). */
template <typename Op, typename T>
__device__ static inline T ember_block_reduce(T v, T identity, T *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = ember_warp_reduce<Op>(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sh[lane] : identity;
        v = ember_warp_reduce<Op>(v);
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    v = sh[32];
    __syncthreads();   /* NOTE: sh is reused by the next stage */
    return v;
}
"""

STRATEGIES = ("block", "thread", "warp")


def _load(k: int, d, inner: bool = False) -> str:
    return _convert(f"in{k}[o{k} + i * is{k}]" if inner else f"in{k}[o{k}]", d)


def _signature(name: str, ins, outs) -> str:
    args = _params(ins, outs) + ["const int64_t *__restrict__ shape",
                                 "const int64_t *__restrict__ strides", "int ndim", "int64_t n"]
    return f'extern "C" __global__ void {name}({", ".join(args)})'


def _offsets(nin: int, dims: str, var: str) -> list:
    """Decompose ``var`` over loop dims ``dims`` into each input's element offset.

    NOTE: one loop dim (what the launcher's ``collapse`` leaves of contiguous or
    row-broadcast operands) needs no division: a 64-bit ``%``/``/`` per dim and element
    would make an elementwise kernel compute-bound."""
    decl = "".join(f", o{k} = 0" for k in range(nin))
    lines = [f"int64_t rem = {var}{decl};", f"if ({dims} == 1) {{"]
    lines += [f"    o{k} = rem * strides[{k} * ndim];" for k in range(nin)]
    lines += ["} else {", f"    for (int d = {dims} - 1; d >= 0; d--) {{",
              "        const int64_t c = ember_divmod(rem, shape[d]);"]
    lines += [f"        o{k} += c * strides[{k} * ndim + d];" for k in range(nin)]
    return lines + ["    }", "}"]


def _stores(emit: Emitter, outs, index: str) -> list:
    """Statements storing every ``(name, dtype, expr)`` of ``outs`` at ``index``."""
    stores = []
    for name, d, e in outs:
        var, vd = emit.value(e)
        stores.append(f"{name}[{index}] = {_store(var, vd, d)};")
    return emit.lines + stores


def _indent(lines, n: int = 1) -> list:
    return ["    " * n + ln for ln in lines]


def render_cuda(kernel, strategy: str = "block") -> str:
    """CUDA C source of an elementwise or reduction kernel (prelude included).

    Args:
        kernel: a :class:`Kernel` or :class:`ReduceKernel` (extra outputs included).
        strategy: for reductions, ``"block"`` (a block per row, warp-shuffle tree
            reduction) or ``"thread"`` (a thread per row).

    Example:
        >>> print(render_cuda(Kernel([InputSpec(float32, (1,))], OutSpec(float32, (n,)),
        ...                          call("exp", Load(0)))))
    """
    return render_cuda_many([kernel], strategy)


def render_cuda_many(kernels, strategy: str = "block") -> str:
    """One CUDA C source holding every kernel of ``kernels`` (one prelude, one NVRTC run:
    how a graph's kernels compile together). Kernel names must be distinct."""
    if strategy not in STRATEGIES:
        raise ValueError(f"render_cuda: strategy must be one of {STRATEGIES}, got {strategy!r}")
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise ValueError(f"render_cuda_many: kernel names must be distinct, got {names}")
    parts = [NVRTC_HEAD + prelude(cuda=True)[len(CUDA_HEAD):]]
    if any(isinstance(k, ReduceKernel) for k in kernels):
        parts.append(BLOCK_REDUCE)
    if any(isinstance(k, Kernel) for k in kernels):
        parts.append(VEC_HEAD)
    if any(has_philox(k) for k in kernels):
        from .cuda_philox import DEVICE_TEXT, LEAF_TEXT
        parts.append(DEVICE_TEXT + LEAF_TEXT)
    for k in kernels:
        parts.append(_render_one(k, strategy))
    return "".join(parts)


def _render_one(kernel, strategy: str) -> str:
    ins = [s.dtype for s in kernel.inputs]
    sig = _signature(kernel.name, ins, [o[0] for o in kernel.outputs])
    if isinstance(kernel, Kernel):
        return render_elementwise(kernel)
    if getattr(kernel, "cols", ()):         # NOTE: a row reduction with column sums
        from .cuda_rowcols import render_cols
        sig = _signature(kernel.name, ins, [o[0] for o in kernel.outputs] + [
            _COL_ACC[kernel.cols[0][0].name == "float64"]])[:-1] + ", int64_t nparts)"
        return render_cols(kernel, ins, sig, strategy, (
            _row_setup, _emitter, _stage_parts, _update, _row_value, _stores, _indent))
    return _render_reduction(kernel, ins, sig, strategy)


#: a column-sum kernel's partials' dtype (float32, float64 for float64 sums).
_COL_ACC = {False: _dt.float32, True: _dt.float64}


def _row_setup(ins) -> list:
    lines = _offsets(len(ins), "ndim - 1", "idx") + ["const int64_t m = shape[ndim - 1];"]
    return lines + [f"const int64_t is{j} = strides[{j} * ndim + ndim - 1];"
                    for j in range(len(ins))]


def _emitter(ins, rows, prefix, nrows, k=None):
    """The Emitter of a reduction's expressions: input ``j``'s element ``i`` of row
    ``idx``; an :class:`~ember.codegen.ir.Index` leaf from ``idx`` or ``i`` alone where
    its axis is outside or inside the row (``k``'s shape tells)."""
    index = None
    if k is not None:
        lead = len(k.shape) - k.naxes
        m, count = math.prod(k.shape[lead:]), math.prod(k.shape[:lead])
        index = lambda e: index_row_c(e, "idx", "i", m, count, "idx * m + i")  # noqa: E731
    return Emitter(lambda j: _load(j, ins[j], True), ins, rows[:nrows], prefix=prefix,
                   ctype=CUDA_CTYPE, index=index)


def _stage_parts(j: int, st, var: str):
    """(accumulator type, identity, combine functor) of reduction stage ``j``."""
    is_float = st.dtype.category == _dt.FLOAT
    if st.kind in ("sum", "mean"):
        return ("double" if is_float else "long long"), "0", "EmberSum"
    acc = "double" if is_float else "long long"
    big = "INFINITY" if is_float else "9223372036854775807LL"
    if st.kind == "amax":
        return acc, (f"-{big}" if is_float else f"(-{big} - 1)"), "EmberMax"
    return acc, big, "EmberMin"


def _update(j: int, op: str, acc: str, var: str) -> str:
    if op == "EmberSum":
        return f"acc{j} += ({acc}){var};"
    return f"acc{j} = {op}::f(acc{j}, ({acc}){var});"


def _row_value(j: int, st) -> str:
    ct = CUDA_CTYPE[st.dtype.name]
    val = f"acc{j} / (double)m" if st.kind == "mean" else f"acc{j}"
    return f"const {ct} row{j} = ({ct})({val});"


def _epilogue(k: ReduceKernel, ins, rows, row_loop: list, first_only: list) -> list:
    """Stores of every output: per row (``first_only`` guards them) and per element."""
    last = len(rows) - 1
    outs = [(f"out{j or ''}", d, Row(last) if e is None else e, f)
            for j, (d, e, f) in enumerate(k.outputs)]
    per_row = [(nm, d, e) for nm, d, e, f in outs if not f]
    full = [(nm, d, e) for nm, d, e, f in outs if f]
    lines = []
    if per_row:
        body = ["const int64_t i = 0; (void)i;"] + _stores(
            _emitter(ins, rows, "e_", len(rows), k), per_row, "idx")
        lines += first_only[:1] + _indent(body) + first_only[1:]
    if full:
        body = _stores(_emitter(ins, rows, "f_", len(rows), k), full, "idx * m + i")
        lines += row_loop + _indent(body) + ["}"]
    return lines


def _render_reduction(k: ReduceKernel, ins, sig, strategy: str) -> str:
    """A row reduction: one thread block per row (``"block"``: the block's threads stride
    over the row and combine in shared memory), one warp per row (``"warp"``: lanes
    stride over it and combine by shuffles alone, no ``__syncthreads``; blockDim.x / 32
    rows a block) or one thread per row (``"thread"``)."""
    rows = list(k.row_dtypes)
    block, warp = strategy == "block", strategy == "warp"
    # NOTE: unrolled by 4 so a thread has 4 independent loads in flight (a wide row: the
    # GPT's 50257-wide log-softmax); each thread still adds its elements in index order
    if block:
        row_loop = ["#pragma unroll 4",
                    "for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {"]
    elif warp:
        row_loop = ["#pragma unroll 4", "for (int64_t i = lane; i < m; i += 32) {"]
    else:
        row_loop = ["for (int64_t i = 0; i < m; i++) {"]
    lines = _row_setup(ins)
    for j, st in enumerate(k.stages):
        e = _emitter(ins, rows, f"p{j}_", j, k)
        var, _ = e.value(st.body)
        acc, ident, op = _stage_parts(j, st, var)
        lines += [f"{acc} acc{j} = {ident};"] + row_loop
        lines += _indent(e.lines + [_update(j, op, acc, var)]) + ["}"]
        if block:
            lines.append(f"acc{j} = ember_block_reduce<{op}>(acc{j}, ({acc}){ident}, "
                         f"({acc} *)ember_sh);")
        elif warp:
            lines.append(f"acc{j} = ember_warp_allreduce<{op}>(acc{j});")
        lines.append(_row_value(j, st))
    if block:
        lines += _epilogue(k, ins, rows, row_loop, ["if (threadIdx.x == 0) {", "}"])
        loop = ["    __shared__ long long ember_sh[33];",
                "    for (int64_t idx = blockIdx.x; idx < n; idx += gridDim.x) {"]
    elif warp:
        # NOTE: idx is the same on a warp's 32 lanes: the shuffles see them all
        lines += _epilogue(k, ins, rows, row_loop, ["if (lane == 0) {", "}"])
        loop = ["    const int lane = threadIdx.x & 31;",
                "    const int64_t wpb = blockDim.x >> 5;",
                "    for (int64_t idx = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); idx < n;",
                "         idx += (int64_t)gridDim.x * wpb) {"]
    else:
        lines += _epilogue(k, ins, rows, row_loop, ["{", "}"])
        loop = ["    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;",
                "         idx += (int64_t)blockDim.x * gridDim.x) {"]
    return "\n".join([sig + " {"] + loop + _indent(lines, 2) + ["    }", "}"]) + "\n"
