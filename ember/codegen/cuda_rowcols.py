"""Row reductions that also sum full-size values over their rows: column partials (GPU).

A layer norm's backward is a row reduction (dx needs two per-row sums of ``dy * g`` and
``dy * g * x_hat``) beside two column sums over the same rows (``dbeta = sum(dy)``,
``dgamma = sum(dy * x_hat)``). As separate kernels each column sum read its ``(N, d)``
operand once more, and ``dy * x_hat`` was written and read back. A
:class:`ColReduceKernel` is a :class:`~ember.codegen.ir.ReduceKernel` with ``cols``: full
expressions summed over all rows. Its CUDA text (:func:`render_cols`) keeps the row
reduction's stages as they were (the same loops, so per-row values and full outputs are
the same expressions in the same order), and its walk over the row that stores the full
outputs also adds each column sum's value into shared memory: a region per warp
(``"warp"``: lane ``l`` owns columns ``l + 32 s``, no other lane touches them) or one per
block (``"block"``). After its last row a block adds its warps' regions in warp order and
writes one partial row; a second launch (``NAME_cf_<dtype>``) adds each column's block
partials in a fixed order and rounds once. No atomics: the same bits at every run (the
grid is fixed per row count).

Sums accumulate in float32 (float64 for float64), as :mod:`.cuda_reduce`'s column sums.
Rows wider than :data:`MAX_COLS`, a thread-per-row strategy, or accumulators beyond
:data:`MAX_SHARED` get no column sums (the fusion pass leaves those sums alone:
:mod:`ember.graph.passes.fuse_colsum`). At a GPT's 768-wide rows under a warp per row two
sums fit (48 KB); the kernel is bounded to 128 registers (``__launch_bounds__(256, 2)``,
no spills: ``tests/cuda/test_nvrtc_rowcols.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtypes as _dt
from .ir import ReduceKernel, Row, typed
from .render_cuda_ew import _store

__all__ = ["ColReduceKernel", "COL_BLOCKS", "MAX_COLS", "MAX_SHARED", "acc_dtype",
           "col_slots", "col_runner", "render_cols", "shared_bytes"]

#: at most this many blocks (= partial rows) a launch; rows beyond are grid-strided. A
#: guess (4 blocks of 8 warps per SM of an H100 = 50% occupancy): ``bench/cuda_layernorm.py``.
COL_BLOCKS = 512
#: the widest row that gets column sums.
MAX_COLS = 1024
#: static shared memory a block may use for its column sums (CUDA's static limit).
MAX_SHARED = 48 * 1024
#: threads a block (:data:`ember.codegen.cuda_launch.BLOCK`).
BLOCK = 256


@dataclass(frozen=True)
class ColReduceKernel(ReduceKernel):
    """A :class:`ReduceKernel` plus ``cols``: ``((dtype, full expr), ...)``, each summed
    over every row into a ``shape[-1]``-element output of ``dtype`` (after the kernel's
    other outputs). One reduced axis (``naxes == 1``)."""

    cols: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        if self.naxes != 1:
            raise ValueError(f"codegen: column sums need one reduced axis, got {self.naxes}")
        ins = [s.dtype for s in self.inputs]
        object.__setattr__(self, "cols", tuple((d, typed(e, ins, list(self.row_dtypes)))
                                               for d, e in self.cols))


def acc_dtype(d):
    """The dtype column sums of ``d`` accumulate in."""
    return _dt.float64 if d is _dt.float64 else _dt.float32


def col_slots(m: int, strategy: str) -> int:
    """Columns a thread owns in a row of ``m`` (its accumulators per column sum)."""
    step = 32 if strategy == "warp" else BLOCK
    return max(1, -(-m // step))


def shared_bytes(m: int, strategy: str, ncol: int, acc) -> int:
    """Shared memory of a kernel's ``ncol`` column sums over rows of ``m`` accumulating in
    ``acc``: a region per warp (``"warp"``) or one a block, ``col_slots`` columns a thread,
    plus the block reduction's scratch (``"block"``)."""
    regions = BLOCK // 32 if strategy == "warp" else 1
    extra = 0 if strategy == "warp" else 33 * 8
    return regions * ncol * col_slots(m, strategy) * (32 if strategy == "warp" else BLOCK) \
        * acc.itemsize + extra


def _groups(k) -> list:
    """``[(dtype, [col index...])]``: the column sums by output dtype, in first-seen order
    (one final launch each; partials laid out in this order)."""
    out: dict = {}
    for j, (d, _e) in enumerate(k.cols):
        out.setdefault(d, []).append(j)
    return list(out.items())


def _layout(k) -> list:
    """The partial row's column-sum order (grouped by dtype)."""
    return [j for _d, js in _groups(k) for j in js]


_BOUNDS = f"""#ifndef EMBER_COLS_BOUNDS
#ifdef EMBER_EMU
#define EMBER_COLS_BOUNDS
#else
#define EMBER_COLS_BOUNDS __launch_bounds__({BLOCK}, 2)
#endif
#endif
"""


def render_cols(k, ins, sig: str, strategy: str, parts) -> str:
    """CUDA text of column-sum kernel ``k`` (see the module docstring) and its finals.

    ``parts``: :mod:`.render_cuda`'s helpers ``(_row_setup, _emitter, _stage_parts,
    _update, _row_value, _stores, _indent)`` (passed in: that module imports this one)."""
    if strategy not in ("warp", "block"):
        raise ValueError(f"render_cuda: column sums need the warp or block strategy, "
                         f"got {strategy!r}")
    warp = strategy == "warp"
    cap = col_slots(k.shape[-1], strategy) * (32 if warp else BLOCK)
    acc = "double" if acc_dtype(k.cols[0][0]) is _dt.float64 else "float"
    region, nreg = len(k.cols) * cap, (BLOCK // 32 if warp else 1)   # a region a warp/block
    lines = _stages(k, ins, warp, parts) + _stores_and_sums(k, ins, warp, cap, acc, parts)
    head, loop = _head(warp, acc, region, nreg)
    # NOTE: at most 128 registers (two 256-thread blocks an SM): 130 without the bound
    # (m = 768, warp) left one block, 8 warps, an SM. On a declaration: the emulator's
    # signature parser reads the definition
    decl = _BOUNDS + sig.replace('__global__ void ', '__global__ void EMBER_COLS_BOUNDS ', 1)
    text = [decl + ";", sig + " {"] + head + loop + parts[6](lines, 2) + ["    }"] + \
        _combine(k, acc, cap, region, nreg)
    return "\n".join(text) + "\n}\n" + _finals(k, acc)


def _loop(warp: bool) -> list:
    first, stride = ("lane", "32") if warp else ("threadIdx.x", "blockDim.x")
    return ["#pragma unroll 4", f"for (int64_t i = {first}; i < m; i += {stride}) {{"]


def _stages(k, ins, warp, parts) -> list:
    """The row's setup and reduction stages: :mod:`.render_cuda`'s loops, unchanged."""
    row_setup, emitter, stage_parts, update, row_value, _stores, indent = parts
    rows = list(k.row_dtypes)
    lines = row_setup(ins)
    for j, st in enumerate(k.stages):
        e = emitter(ins, rows, f"p{j}_", j, k)
        var, _ = e.value(st.body)
        sacc, ident, op = stage_parts(j, st, var)
        lines += [f"{sacc} acc{j} = {ident};"] + _loop(warp)
        lines += indent(e.lines + [update(j, op, sacc, var)]) + ["}"]
        lines.append(f"acc{j} = ember_warp_allreduce<{op}>(acc{j});" if warp else
                     f"acc{j} = ember_block_reduce<{op}>(acc{j}, ({sacc}){ident}, "
                     f"({sacc} *)ember_sh);")
        lines.append(row_value(j, st))
    return lines


def _stores_and_sums(k, ins, warp, cap, acc, parts) -> list:
    """Per-row stores, then one walk of the row storing the full outputs and adding each
    column sum's value into this warp's (block's) shared accumulators."""
    _s, emitter, _p, _u, _v, stores, indent = parts
    rows = list(k.row_dtypes)
    outs = [(f"out{j or ''}", d, Row(len(rows) - 1) if e is None else e, f)
            for j, (d, e, f) in enumerate(k.outputs)]
    lines = []
    per_row = [(nm, d, e) for nm, d, e, f in outs if not f]
    if per_row:
        body = ["const int64_t i = 0; (void)i;"] + stores(
            emitter(ins, rows, "e_", len(rows), k), per_row, "idx")
        lines += [f"if ({'lane' if warp else 'threadIdx.x'} == 0) {{"] + indent(body) + ["}"]
    em = emitter(ins, rows, "f_", len(rows), k)
    body = []
    for nm, d, e in [(nm, d, e) for nm, d, e, f in outs if f]:
        var, vd = em.value(e)
        body.append(f"{nm}[idx * m + i] = {_store(var, vd, d)};")
    for c, (_d, e) in enumerate(k.cols):
        var, _vd = em.value(e)
        body.append(f"ember_cw[{c * cap} + i] += ({acc}){var};")
    return lines + _loop(warp) + indent(em.lines + body) + ["}"]


def _head(warp, acc, region, nreg) -> tuple:
    """``(head, row loop)``: the zeroed shared accumulators, this warp's (block's) region
    ``ember_cw``, the grid-stride loop over rows."""
    head = ([] if warp else ["    __shared__ long long ember_sh[33];"]) + [
        f"    __shared__ {acc} ember_csh[{nreg * region}];",
        f"    for (int t = threadIdx.x; t < {nreg * region}; t += blockDim.x) ember_csh[t] = 0;",
        "    __syncthreads();"]
    if not warp:
        return head + [f"    {acc} *const ember_cw = ember_csh;"], [
            "    for (int64_t idx = blockIdx.x; idx < n; idx += gridDim.x) {"]
    head += ["    const int lane = threadIdx.x & 31;",
             "    const int64_t wpb = blockDim.x >> 5;",
             f"    {acc} *const ember_cw = ember_csh + (threadIdx.x >> 5) * {region};"]
    return head, ["    for (int64_t idx = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); idx < n;",
                  "         idx += (int64_t)gridDim.x * wpb) {"]


def _combine(k, acc, cap, region, nreg) -> list:
    """The block's partial row: its warps' column sums (shared memory) added in warp
    order, written to partial row ``blockIdx.x`` (and zeros to rows ``blockIdx.x +
    gridDim.x...`` below ``nparts``: a launch cut to fewer blocks still fills every
    partial row)."""
    part = f"out{len(k.outputs)}"
    order = _layout(k)
    lines = ["    __syncthreads();", "    const int64_t mc = shape[ndim - 1];",
             "    const int64_t ld = (int64_t)" + str(len(order)) + " * mc;",
             "    for (int64_t j = blockIdx.x; j < nparts; j += gridDim.x) {",
             "        for (int64_t t = threadIdx.x; t < ld; t += blockDim.x) {",
             "            const int64_t q = t / mc, i = t - q * mc;",
             "            int c = 0;"]
    lines += [f"            if (q == {pos}) c = {c};" for pos, c in enumerate(order) if pos]
    lines += [f"            {acc} v = ember_csh[c * {cap} + i];",
              f"            for (int w = 1; w < {nreg}; w++) v += ember_csh[w * {region} + "
              f"c * {cap} + i];",
              f"            {part}[j * ld + t] = j == blockIdx.x ? v : ({acc})0;",
              "        }", "    }"]
    return lines


def _finals(k, acc) -> str:
    """``NAME_cf_<dtype>``: each of ``C`` columns' ``nparts`` partials (row stride ``ld``,
    from column ``off``) added in order and rounded once to the dtype. A block of 256
    threads owns 32 columns; its 8 lanes sum every 8th partial row, then lane 0 adds the
    8 lane sums in order (grid-stride over the column tiles)."""
    from .render_cuda_ew import _ptr_type
    acc_d = _dt.float64 if acc == "double" else _dt.float32
    text = []
    for d, _js in _groups(k):
        text.append(
            f'extern "C" __global__ void {k.name}_cf_{d.name}(const {acc} *__restrict__ part,\n'
            f"        {_ptr_type(d)} *__restrict__ out, int64_t nparts, int64_t ld,"
            " int64_t off, int64_t C) {\n"
            f"    __shared__ {acc} sh[256];\n"
            "    const int cx = threadIdx.x & 31, ry = threadIdx.x >> 5;\n"
            "    for (int64_t c0 = (int64_t)blockIdx.x * 32; c0 < C;\n"
            "         c0 += (int64_t)gridDim.x * 32) {\n"
            "        const int64_t c = c0 + cx;\n"
            f"        {acc} s = 0;\n"
            "        if (c < C)\n"
            "            for (int64_t r = ry; r < nparts; r += 8) s += part[r * ld + off + c];\n"
            "        sh[threadIdx.x] = s;\n"
            "        __syncthreads();\n"
            "        if (ry == 0 && c < C) {\n"
            "            for (int l = 1; l < 8; l++) s += sh[l * 32 + cx];\n"
            f"            out[c] = {_store('s', acc_d, d)};\n"
            "        }\n"
            "        __syncthreads();\n"
            "    }\n}\n")
    return "".join(text)


def col_runner(module, k, metas, dev_xp):
    """``run(xp, *arrays, out=None, outs=None)`` of column-sum kernel ``k``: the kernel's
    outputs (new, or ``outs`` buffers) then each column sum (new arrays of ``metas``'
    shapes). Two launches or more: the kernel, one final per column-sum dtype."""
    from .cuda_launch import _Plan, _layout_key, kernel_plan
    nmain, geo, plans, fns = len(k.outputs), {}, {}, {}
    groups = _groups(k)
    acc = acc_dtype(k.cols[0][0]).np

    def fn(name):
        f = fns.get(name)
        if f is None:
            f = fns[name] = module.function(name)
        return f

    def run(xp, *arrays, out=None, outs=None, **_params):
        xp = dev_xp or xp
        given = list(outs)[:nmain] if outs is not None else [out] + [None] * (nmain - 1)
        if metas is not None:
            given = [xp.empty(sh, dt) if o is None else o
                     for o, (sh, dt) in zip(given, metas[:nmain])]
        key = _layout_key(arrays, given, xp.ndarray)
        plan = plans.get(key) if key is not None else None
        if plan is None:
            name, grid, block, args, res = kernel_plan(k, arrays, xp, module.strategy,
                                                       given, geo)
            if tuple(block) != (BLOCK,):    # NOTE: the text has BLOCK // 32 warp regions
                raise RuntimeError(f"{k.name}: column sums need blocks of {BLOCK} threads, "
                                   f"planned {tuple(block)}")
            plan = _Plan(k, arrays, name, grid, block, args, res, xp.ndarray)
            if key is not None:
                plans[key] = plan
        name, grid, block, args, res = plan.args(xp, arrays, given)
        rows, m = int(args[-1]), k.shape[-1] if metas is None else _m(metas, nmain)
        nparts = max(1, min(grid[0], COL_BLOCKS))
        ld = len(k.cols) * m
        part = xp.empty((nparts, ld), acc)
        nio = len(arrays) + nmain
        cols = [None] * len(k.cols)
        if rows and m:
            fn(name)((nparts,), block, args[:nio] + (part,) + args[nio:] + (np.int64(nparts),))
        off = 0
        for d, js in groups:
            flat = xp.empty(len(js) * m, d.np)
            if not rows:
                flat[...] = 0
            elif m:
                fn(f"{k.name}_cf_{d.name}")((-(-len(js) * m // 32),), (256,), (
                    part, flat, np.int64(nparts), np.int64(ld), np.int64(off),
                    np.int64(len(js) * m)))
            for q, j in enumerate(js):
                shape = metas[nmain + j][0] if metas is not None else (m,)
                cols[j] = flat[q * m:(q + 1) * m].reshape(shape)
            off += len(js) * m
        res = (given if metas is not None else list(res)) + cols
        return tuple(res)
    return run


def _m(metas, nmain) -> int:
    """A column sum's length: its output's element count."""
    n = 1
    for s in metas[nmain][0]:
        n *= s
    return n
