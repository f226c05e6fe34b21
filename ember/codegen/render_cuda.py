"""Kernel IR to CUDA C text (for the CUDA backend to compile, e.g. with CuPy's RawKernel).

Same expressions and helpers as the C renderer (the prelude's ``EMBER_FN`` becomes
``__device__``); the loops become a grid-stride loop over output elements (elementwise)
or over rows, one thread per row (reductions; a block-per-row tree reduction is the
obvious next step). Shapes and strides are runtime arguments::

    extern "C" __global__ void NAME(const T0 *in0, ..., TO *out, const int64_t *shape,
                                    const int64_t *strides, int ndim, int64_t n)

where ``n`` is the number of output elements (elementwise) or rows (reductions) and
``strides[k*ndim + j]`` is input k's stride in elements along loop dim j.
"""
from __future__ import annotations

from .. import dtypes as _dt
from .cexpr import CTYPE, CUDA_STORAGE, Emitter
from .ir import Kernel, ReduceKernel
from .prelude import prelude

CUDA_CTYPE = {**CTYPE, "bool": "bool"}


def _load(k: int, d, inner: bool = False) -> str:
    v = f"in{k}[o{k} + i * is{k}]" if inner else f"in{k}[o{k}]"
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


def _signature(name: str, ins, out) -> str:
    args = [f"const {CUDA_STORAGE[d.name].replace('uint16_t', '__nv_bfloat16')} "
            f"*__restrict__ in{k}" if d is _dt.bfloat16 else
            f"const {CUDA_STORAGE[d.name]} *__restrict__ in{k}" for k, d in enumerate(ins)]
    ot = "__nv_bfloat16" if out is _dt.bfloat16 else CUDA_STORAGE[out.name]
    args += [f"{ot} *__restrict__ out", "const int64_t *__restrict__ shape",
             "const int64_t *__restrict__ strides", "int ndim", "int64_t n"]
    return f'extern "C" __global__ void {name}({", ".join(args)})'


def _offsets(nin: int, dims: str, var: str) -> list:
    """Decompose ``var`` over loop dims ``dims`` into each input's element offset."""
    decl = "".join(f", o{k} = 0" for k in range(nin))
    lines = [f"int64_t rem = {var}{decl};", f"for (int d = {dims} - 1; d >= 0; d--) {{",
             "    const int64_t c = rem % shape[d]; rem /= shape[d];"]
    return lines + [f"    o{k} += c * strides[{k} * ndim + d];" for k in range(nin)] + ["}"]


def render_cuda(kernel) -> str:
    """CUDA C source of an elementwise or reduction kernel (prelude included).

    Example:
        >>> print(render_cuda(Kernel([InputSpec(float32, (1,))], OutSpec(float32, (n,)),
        ...                          call("exp", Load(0)))))
    """
    if kernel.extra:
        raise NotImplementedError("codegen: CUDA rendering of multi-output kernels")
    ins = [s.dtype for s in kernel.inputs]
    head = prelude(cuda=True).replace("#include <cuda_fp16.h>",
                                      "#include <cuda_fp16.h>\n#include <cuda_bf16.h>")
    sig = _signature(kernel.name, ins, kernel.out.dtype)
    loop = ["    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;",
            "         idx += (int64_t)blockDim.x * gridDim.x) {"]
    if isinstance(kernel, Kernel):
        emit = Emitter(lambda k: _load(k, ins[k]), ins, ctype=CUDA_CTYPE)
        var, d = emit.value(kernel.body)
        body = _offsets(len(ins), "ndim", "idx") + emit.lines + [
            f"out[idx] = {_store(var, d, kernel.out.dtype)};"]
        return head + "\n".join([sig + " {"] + loop + ["        " + ln for ln in body]
                                + ["    }", "}"]) + "\n"
    return head + _render_reduction(kernel, ins, sig, loop)


def _render_reduction(k: ReduceKernel, ins, sig, loop) -> str:
    rows = list(k.row_dtypes)
    lines = _offsets(len(ins), "ndim - 1", "idx")
    lines += ["const int64_t m = shape[ndim - 1];"]
    lines += [f"const int64_t is{j} = strides[{j} * ndim + ndim - 1];" for j in range(len(ins))]

    def emitter(prefix, nrows):
        return Emitter(lambda j: _load(j, ins[j], True), ins, rows[:nrows], prefix=prefix,
                       ctype=CUDA_CTYPE)
    for j, st in enumerate(k.stages):
        e = emitter(f"p{j}_", j)
        var, d = e.value(st.body)
        acc = "double" if st.dtype.category == _dt.FLOAT else "long long"
        big = "INFINITY" if acc == "double" else "9223372036854775807LL"
        init = {"sum": "0", "mean": "0", "amax": f"-{big}", "amin": big}[st.kind]
        upd = {"sum": f"acc{j} += ({acc}){var};", "mean": f"acc{j} += ({acc}){var};",
               "amax": f"acc{j} = ({var} > acc{j} || {var} != {var}) ? ({acc}){var} : acc{j};",
               "amin": f"acc{j} = ({var} < acc{j} || {var} != {var}) ? ({acc}){var} : acc{j};"}
        lines += [f"{acc} acc{j} = {init};", "for (int64_t i = 0; i < m; i++) {"]
        lines += ["    " + ln for ln in e.lines + [upd[st.kind]]] + ["}"]
        val = f"acc{j} / (double)m" if st.kind == "mean" else f"acc{j}"
        lines.append(f"const {CUDA_CTYPE[st.dtype.name]} row{j} = "
                     f"({CUDA_CTYPE[st.dtype.name]})({val});")
    if k.full:
        e = emitter("e_", len(rows))
        var, d = e.value(k.epilogue)
        lines += ["for (int64_t i = 0; i < m; i++) {"]
        lines += ["    " + ln for ln in e.lines + [
            f"out[idx * m + i] = {_store(var, d, k.out.dtype)};"]] + ["}"]
    elif k.epilogue is not None:
        e = emitter("e_", len(rows))
        var, d = e.value(k.epilogue)
        lines += e.lines + [f"out[idx] = {_store(var, d, k.out.dtype)};"]
    else:
        lines += [f"out[idx] = {_store(f'row{len(rows) - 1}', rows[-1], k.out.dtype)};"]
    return "\n".join([sig + " {"] + loop + ["        " + ln for ln in lines]
                     + ["    }", "}"]) + "\n"
