"""Kernel IR to C: OpenMP-parallel outer loops around ``omp simd`` inner loops.

Every generated function has one C signature, whatever the kernel::

    void NAME(char **ptrs, const int64_t *shape, const int64_t *strides, int64_t nthreads)

``ptrs`` holds the inputs then the output; ``shape`` the coalesced loop dimensions (for a
reduction: outer dims then the reduced length); ``strides[k*ndim + j]`` input k's stride
in elements along dim j. The work (elements of a 1-d loop, rows otherwise) is split into
one contiguous range per thread when it is large; a small call runs on the calling
thread with no OpenMP region at all (the same vectorised loop: an ``if()`` clause on
``parallel for simd`` would run a slow scalar fallback instead).
"""
from __future__ import annotations

import re

from .. import dtypes as _dt
from .cexpr import CTYPE, STORAGE, Emitter, index_c, index_row_c
from .ir import Index, Kernel, ReduceKernel, Row, nodes_of

#: elements of work below which a kernel runs on the calling thread only.
PARALLEL_THRESHOLD = 1 << 18


def load_c(ptr: str, index: str, d) -> str:
    """``ptr[index]`` of storage dtype ``d`` converted to its compute C type."""
    v = f"{ptr}[{index}]"
    if d is _dt.bfloat16:
        return f"ember_bf16_to_f32({v})"
    if d is _dt.float16:
        return f"ember_f16_to_f32({v})"
    if d is _dt.bool_:
        return f"({v} != 0)"
    return v


def store_c(value: str, src, d) -> str:
    """``value`` (of dtype ``src``) converted to storage dtype ``d``."""
    if src is not d and CTYPE[src.name] != CTYPE[d.name]:
        value = f"(({CTYPE[d.name]}){value})"
    if d is _dt.bfloat16:
        return f"ember_f32_to_bf16({value})"
    if d is _dt.float16:
        return f"ember_f32_to_f16({value})"
    if d is _dt.bool_:
        return f"(uint8_t)({value} != 0)"
    return value


#: Ember's own float32 polynomials (``prelude.py``): compute-bound, explicit ``fmaf``.
_WIDE_HELPERS = ("ember_erf_f32(", "ember_tanh_f32(")
#: libm calls (GCC may vectorise them through libmvec, whose variants differ by width).
_LIBM_CALL = re.compile(r"\b(?:exp|exp2|expm1|log|log2|log10|log1p|sin|cos|tan|asin|acos|"
                        r"atan|atan2|sinh|cosh|tanh|erf|erfc|pow|hypot|fmod)f?\(")


def _wide(body: list) -> bool:
    """Whether an elementwise loop runs 512-bit vectors where GCC targets AVX-512.

    NOTE: only loops whose cost is Ember's own float32 erf/tanh (GELU: the erf form's
    forward 0.44 -> 0.29 ms at 524K elements) and that call no libm function: their bits
    are the same at any vector width (``tests/codegen/test_erf_f32.py``), and libmvec's
    512-bit variants are not (they once returned erf = 1.0 early). No reduction either:
    its ``omp simd`` lanes would sum in another order.
    """
    text = "\n".join(body)
    return any(h in text for h in _WIDE_HELPERS) and not _LIBM_CALL.search(text)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _index(kind: str, k: int, var: str = "i") -> str:
    return {"c": var, "b": "0", "g": f"{var} * s{k}"}[kind]


def _indent(lines, n):
    return ["    " * n + ln for ln in lines]


def _pointers(ins, out_dtype, ndim, kinds, offsets: bool) -> list:
    """Typed input/output pointer declarations (row-offset when ``offsets``)."""
    lines = []
    for k, d in enumerate(ins):
        off = f" + o{k}" if offsets else ""
        lines.append(f"const {STORAGE[d.name]} *restrict in{k} = "
                     f"(const {STORAGE[d.name]} *)ptrs[{k}]{off};")
        if kinds[k] == "g":
            lines.append(f"const int64_t s{k} = st[{k * ndim + ndim - 1}];")
    lines.append(f"{STORAGE[out_dtype.name]} *restrict out = "
                 f"({STORAGE[out_dtype.name]} *)ptrs[{len(ins)}]"
                 f"{' + r * n' if offsets else ''};")
    return lines


def _extra_pointers(nin: int, extra, offsets) -> list:
    """Pointers ``out1, out2...`` of extra outputs; ``offsets[j]``: "" or a row offset."""
    return [f"{STORAGE[d.name]} *restrict out{j + 1} = ({STORAGE[d.name]} *)"
            f"ptrs[{nin + 1 + j}]{off};" for j, (d, off) in enumerate(zip(extra, offsets))]


def _row_offsets(nin: int, ndim: int) -> list:
    """Decompose row ``r`` over the outer dims into each input's element offset."""
    decl = ", ".join(f"o{k} = 0" for k in range(nin))
    lines = [f"int64_t rem = r{', ' + decl if decl else ''};",
             f"for (int k = {ndim - 2}; k >= 0; k--) {{",
             "    const int64_t c = rem % shape[k]; rem /= shape[k];"]
    lines += [f"    o{k} += c * st[{k * ndim} + k];" for k in range(nin)]
    return lines + ["}", "(void)rem;"]


def _driver(name: str, ndim: int, rows: bool) -> list:
    work = "shape[0]" if not rows else " * ".join(
        [f"shape[{j}]" for j in range(ndim - 1)] or ["1"])
    total = " * ".join(f"shape[{j}]" for j in range(ndim))
    align = 1 if rows else 16
    return f"""void {name}(char **ptrs, const int64_t *shape, const int64_t *st, int64_t nthreads) {{
    const int64_t work = {work}, total = {total};
    if (nthreads > 1 && work > 1 && total >= {PARALLEL_THRESHOLD} && ember_parallel_hook) {{
        ember_parallel_hook({name}_run, ptrs, shape, st, work, {align}, nthreads);
        return;
    }}
    (void)nthreads; (void)total;
    {name}_run(ptrs, shape, st, 0, work);
}}
""".splitlines()


def _body(emit: Emitter, root, store_to: str, out_dtype) -> list:
    var, d = emit.value(root)
    return emit.lines + [f"{store_to} = {store_c(var, d, out_dtype)};"]


def _bodies(emit: Emitter, outs, index: str = "i") -> list:
    """Statements storing every ``(name, dtype, expr)`` of ``outs`` at ``index``."""
    stores = []
    for name, dt, e in outs:
        var, d = emit.value(e)
        stores.append(f"{name}[{index}] = {store_c(var, d, dt)};")
    return emit.lines + stores


def render_elementwise(k: Kernel, key: tuple) -> str:
    """The C function of elementwise kernel ``k`` for layout class ``key``."""
    ndim, kinds = key
    ins = [s.dtype for s in k.inputs]
    flat, total = ("i" if ndim == 1 else "r * n + i"), _numel(k.out.shape)
    emit = Emitter(lambda i: load_c(f"in{i}", _index(kinds[i], i), ins[i]), ins,
                   index=lambda e: index_c(e, flat, total))
    body = _bodies(emit, [("out" if j == 0 else f"out{j}", d, e)
                          for j, (d, e) in enumerate(k.outputs)])
    extra = [d for d, _ in k.extra]
    head = f"static void {k.name}_run(char **ptrs, const int64_t *shape, const int64_t *st, " \
           f"int64_t lo, int64_t hi) {{"
    if ndim == 1:
        lines = [head] + _indent(_pointers(ins, k.out.dtype, 1, kinds, False), 1) + \
            _indent(_extra_pointers(len(ins), extra, [""] * len(extra)), 1) + [
            "    (void)shape;", "    #pragma omp simd",
            "    for (int64_t i = lo; i < hi; i++) {"] + _indent(body, 2) + ["    }", "}"]
    else:
        lines = [head, f"    const int64_t n = shape[{ndim - 1}];",
                 "    for (int64_t r = lo; r < hi; r++) {"]
        lines += _indent(_row_offsets(len(ins), ndim), 2)
        lines += _indent(_pointers(ins, k.out.dtype, ndim, kinds, True), 2)
        lines += _indent(_extra_pointers(len(ins), extra, [" + r * n"] * len(extra)), 2)
        loop = ["#pragma omp simd", "for (int64_t i = 0; i < n; i++) {"] + \
            _indent(body, 1) + ["}"]
        if _has_index(k) and k.out.shape and k.out.shape[-1]:
            loop = _row_loop(k, ins, kinds) + ["} else {"] + _indent(loop, 1) + ["}"]
        lines += _indent(loop, 2) + ["    }", "}"]
    lines += _driver(k.name, ndim, rows=ndim > 1)
    if _wide(body):     # NOTE: the driver too: GCC vectorises an inlined loop as its caller
        lines = ["EMBER_WIDE_BEGIN"] + lines + ["EMBER_WIDE_END"]
    return "\n".join(lines) + "\n"


def _has_index(k) -> bool:
    return any(isinstance(a, Index) for _, e in k.outputs
               for a in (e,) + tuple(x for nd in nodes_of(e) for x in nd.args))


def _row_loop(k: Kernel, ins, kinds) -> list:
    """``if (n == C) {`` and the inner loop of a kernel with Index leaves when its loop's
    last dim is the output's last axis (``C`` elements): a leaf of that axis is ``i``
    itself, one of an outer axis a function of ``r`` (no remainder per element: a 64-bit
    one would keep GCC from vectorising the loop, ~7x slower)."""
    last = k.out.shape[-1]
    rows = _numel(k.out.shape) // last
    emit = Emitter(lambda i: load_c(f"in{i}", _index(kinds[i], i), ins[i]), ins,
                   index=lambda e: index_row_c(e, "r", "i", last, rows, "r * n + i"))
    body = _bodies(emit, [("out" if j == 0 else f"out{j}", d, e)
                          for j, (d, e) in enumerate(k.outputs)])
    return [f"if (n == {last}) {{", "    #pragma omp simd",
            "    for (int64_t i = 0; i < n; i++) {"] + _indent(body, 2) + ["    }"]


_INIT = {("amax", True): "-INFINITY", ("amin", True): "INFINITY",
         ("amax", False): "(-9223372036854775807LL-1)", ("amin", False): "9223372036854775807LL"}


def _stage(j: int, st, emit: Emitter) -> list:
    """One reduction stage over the row: ``row{j}`` = reduce(prologue)."""
    is_float = st.dtype.category == _dt.FLOAT
    var, d = emit.value(st.body)
    acc = "double" if is_float else "int64_t"
    if st.kind in ("sum", "mean"):
        lines = [f"{acc} acc{j} = 0;", f"#pragma omp simd reduction(+:acc{j})",
                 "for (int64_t i = 0; i < n; i++) {"]
        lines += _indent(emit.lines + [f"acc{j} += ({acc}){var};"], 1) + ["}"]
        val = f"acc{j} / (double)n" if st.kind == "mean" else f"acc{j}"
        return lines + [f"const {CTYPE[st.dtype.name]} row{j} = "
                        f"({CTYPE[st.dtype.name]})({val});"]
    acc = "double" if st.dtype is _dt.float64 else "float" if is_float else "int64_t"
    cmp = ">" if st.kind == "amax" else "<"
    red = "max" if st.kind == "amax" else "min"
    nan = f" reduction(|:nan{j})" if is_float else ""
    lines = [f"{acc} acc{j} = {_INIT[st.kind, is_float]};"]
    lines += [f"int nan{j} = 0;"] if is_float else []
    lines += [f"#pragma omp simd reduction({red}:acc{j}){nan}",
              "for (int64_t i = 0; i < n; i++) {"]
    upd = [f"acc{j} = ({acc}){var} {cmp} acc{j} ? ({acc}){var} : acc{j};"]
    upd += [f"nan{j} |= {var} != {var};"] if is_float else []
    lines += _indent(emit.lines + upd, 1) + ["}"]
    val = f"nan{j} ? NAN : acc{j}" if is_float else f"acc{j}"
    return lines + [f"const {CTYPE[st.dtype.name]} row{j} = ({CTYPE[st.dtype.name]})({val});"]


def render_reduction(k: ReduceKernel, key: tuple) -> str:
    """The C function of reduction kernel ``k`` for layout class ``key``."""
    ndim, kinds = key
    ins, rows = [s.dtype for s in k.inputs], list(k.row_dtypes)
    lead = len(k.shape) - k.naxes
    m, count = _numel(k.shape[lead:]), _numel(k.shape[:lead])

    def emitter(prefix, nrows):
        return Emitter(lambda i: load_c(f"in{i}", _index(kinds[i], i), ins[i]), ins,
                       rows[:nrows], prefix=prefix,
                       index=lambda e: index_row_c(e, "r", "i", m, count, "r * n + i"))
    lines = [f"static void {k.name}_run(char **ptrs, const int64_t *shape, const int64_t *st, "
             f"int64_t lo, int64_t hi) {{", f"    const int64_t n = shape[{ndim - 1}];",
             "    for (int64_t r = lo; r < hi; r++) {"]
    lines += _indent(_row_offsets(len(ins), ndim), 2)
    ptrs = _pointers(ins, k.out.dtype, ndim, kinds, True)
    if not k.full:
        ptrs[-1] = ptrs[-1].replace(" + r * n", " + r")
    lines += _indent(ptrs, 2)
    lines += _indent(_extra_pointers(len(ins), [d for d, _, _ in k.extra],
                                     [" + r * n" if f else " + r" for _, _, f in k.extra]), 2)
    for j, st in enumerate(k.stages):
        lines += _indent(_stage(j, st, emitter(f"p{j}_", j)), 2)
    last = len(rows) - 1
    outs = [("out" if j == 0 else f"out{j}", d, Row(last) if e is None else e, f)
            for j, (d, e, f) in enumerate(k.outputs)]
    per_row = [(nm, d, e) for nm, d, e, f in outs if not f]
    full = [(nm, d, e) for nm, d, e, f in outs if f]
    if per_row:
        lines += _indent(["{", "    const int64_t i = 0; (void)i;"] + _indent(
            _bodies(emitter("e_", len(rows)), per_row, "0"), 1) + ["}"], 2)
    if full:
        emit = emitter("f_", len(rows))
        lines += ["        #pragma omp simd", "        for (int64_t i = 0; i < n; i++) {"]
        lines += _indent(_bodies(emit, full), 3) + ["        }"]
    lines += ["    }", "}"]
    return "\n".join(lines + _driver(k.name, ndim, rows=True)) + "\n"
