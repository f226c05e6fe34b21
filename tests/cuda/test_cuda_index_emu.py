"""Index leaves (``codegen.ir.Index``: the loop coordinate along one axis, no array read) in
every CUDA entry point, run from their text on the CPU emulator (``_cuda_emu``) against
the kernel IR's NumPy interpreter, and compiled by NVRTC + ptxas.

Entries: contiguous ``NAME_c`` (vector path and element path, aligned and misaligned,
``UNROLL`` 1 and 2), row ``NAME_r`` (a bias row and per-row targets beside the leaves),
strided ``NAME`` (a transposed operand), multi-launch ``NAME_m`` (records of one kernel),
and the reductions' block, warp and thread strategies (leaves inside the row, outside it,
in the prologue, the per-element epilogue and a per-row output). Sizes are small and odd
(the emulator runs every thread of a block in turn)."""
import re

import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import interp, nvrtc
from ember.codegen.cuda_launch import kernel_plan, row_plan
from ember.codegen.ir import (Index, InputSpec, Kernel, Load, OutSpec, Reduce, ReduceKernel,
                              Row, call, index_of)
from ember.codegen.render_cuda import _render_one, render_cuda_many
from ember.codegen.render_cuda_ew import (ALIGNED, render_elementwise, render_multi_entry,
                                         render_row_entry, vec_bytes)

import _cuda_emu

needs_emu = pytest.mark.skipif(not _cuda_emu.available(),
                               reason="no g++ with C++20 <ucontext.h> to run the CUDA text on")
needs_nvrtc = pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                                 reason="NVRTC or the CUDA fp16/bf16 headers are not installed")

R, C = 5, 37            # C odd: the row entry's element path (no vector crosses a row)
RA, CA = 3, 36          # C a multiple of 4: its vector path
SHAPE3 = (3, 5, 7)
SHAPE_U = (4, 37, 11)   # > 256 * 4 elements: UNROLL 2's second vector of a thread runs


def _f(e):
    return call("cast", e, dtype=dt.float32)


def _one_hot(shape, name):
    """The cross-entropy backward's shape: ``where(t == col, g, 0) + x * row + bias`` over
    ``shape``, targets ``t`` per row (int64), ``x`` full (float16), ``bias`` a row, and an
    int64 second output ``col + 1000 * row`` (the leaves' values, exactly)."""
    col, row = index_of(shape, -1), index_of(shape, 0)
    t, x, b = Load(0), Load(1), Load(2)
    body = call("where", call("eq", t, col), 1.5, 0.0) + \
        call("cast", x, dtype=dt.float32) * _f(row) + b
    return Kernel([InputSpec(dt.int64, (1, 0)), InputSpec(dt.float16, (shape[1], 1)),
                   InputSpec(dt.float32, (0, 1))], OutSpec(dt.float32, shape), body, name,
                  extra=((dt.int64, col + row * 1000),))


def _flat(shape, name):
    """Full and scalar operands only (the contiguous and multi entries): every axis's
    leaf of a 3-d space (the middle one: a division and a remainder)."""
    i0, i1, i2 = (index_of(shape, d) for d in range(3))
    x, s = Load(0), Load(1)
    body = x * s + _f(i0 * 100 + i1 * 10 + i2)
    st = (shape[1] * shape[2], shape[2], 1)
    return Kernel([InputSpec(dt.float32, st), InputSpec(dt.float32, (0, 0, 0))],
                  OutSpec(dt.float32, shape), body, name, extra=((dt.int32, call(
                      "cast", i1, dtype=dt.int32)),))


def _reduction(shape, naxes, name):
    """A row reduction reading leaves in its prologue (inside and outside the row), its
    per-element epilogue and a per-row output."""
    inner, outer = index_of(shape, -1), index_of(shape, 0)
    mid = index_of(shape, len(shape) // 2)
    x = Load(0)
    st = tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))
    stages = [Reduce("sum", x * _f(inner) + _f(outer)), Reduce("amax", x + _f(inner))]
    epi = x - Row(0) + _f(inner * 7 + outer + mid * 100)
    return ReduceKernel([InputSpec(dt.float32, st)], shape, naxes, stages, epi,
                        OutSpec(dt.float32, shape), full=True, name=name,
                        extra=((dt.float32, Row(1) + _f(outer), False),))


KERNELS = {
    "hot": _one_hot((R, C), "ix_hot"), "hot_a": _one_hot((RA, CA), "ix_hot_a"),
    "flat": _flat(SHAPE3, "ix_flat"), "flat_u2": _flat(SHAPE_U, "ix_flat_u2"),
}
REDUCTIONS = [("block", _reduction((R, C), 1, "ix_red_block")),
              ("warp", _reduction((R, C), 1, "ix_red_warp")),
              ("thread", _reduction((R, C), 1, "ix_red_thread")),
              ("block", _reduction(SHAPE3, 2, "ix_red3"))]


def _source():
    ks = [KERNELS[n] for n in ("hot", "hot_a", "flat")]
    src = render_cuda_many(ks + [REDUCTIONS[0][1]], REDUCTIONS[0][0])   # + block reduce
    src += "".join(render_row_entry(k) for k in ks[:2]) + render_multi_entry(KERNELS["flat"])
    src += render_elementwise(KERNELS["flat_u2"], unroll=2)
    return src + "".join(_render_one(k, st) for st, k in REDUCTIONS[1:])


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return _cuda_emu.EmuModule(_source(), str(tmp_path_factory.mktemp("index_emu")), 2)


def _check(got, k, arrays):
    want = interp.run_reduction(k, arrays) if isinstance(k, ReduceKernel) else \
        interp.run_elementwise(k, [np.broadcast_to(a, k.out.shape) for a in arrays])
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=1e-6, atol=1e-5,
                                   err_msg=k.name)
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g.reshape(w.shape), w, err_msg=k.name)


def _hot_arrays(k, rng, misalign=False):
    r, c = k.out.shape
    t = rng.integers(-1, c + 1, (r, 1)).astype(np.int64)     # some out of range: no hit
    x = _cuda_emu.sample(dt.float16, r * c + 1, rng)
    x = (x[1:] if misalign else x[:-1]).reshape(r, c)
    return [t, x, _cuda_emu.sample(dt.float32, c, rng)]


@needs_emu
@pytest.mark.parametrize("name,misalign", [("hot", False), ("hot_a", False),
                                           ("hot_a", True)])
def test_row_entry_computes_the_column_and_row_leaves(module, name, misalign):
    k = KERNELS[name]
    arrays = _hot_arrays(k, np.random.default_rng(0), misalign)
    entry, grid, block, args, outs = row_plan(k, arrays, k.out.shape, np)
    assert entry == k.name + "_r"
    assert bool(int(args[-3]) & ALIGNED) == (name == "hot_a" and not misalign)
    module.get_function(entry)(grid, block, args)
    _check(outs, k, arrays)


@needs_emu
def test_strided_entry_computes_the_leaves_over_a_transposed_operand(module):
    k = KERNELS["hot"]
    t, x, b = _hot_arrays(k, np.random.default_rng(1))
    xt = np.ascontiguousarray(x.T).T                        # column-major: strided entry
    entry, grid, block, args, outs = kernel_plan(k, [t, xt, b], np)
    assert entry == k.name
    module.get_function(entry)(grid, block, args)
    _check(outs, k, [t, xt, b])
    k3 = KERNELS["flat"]
    x3 = _cuda_emu.sample(dt.float32, 105, np.random.default_rng(2)).reshape(7, 5, 3).T
    entry, grid, block, args, outs = kernel_plan(k3, [x3, np.float32(2.0)], np)
    assert entry == k3.name
    module.get_function(entry)(grid, block, args)
    _check(outs, k3, [x3, np.float32(2.0)])


@needs_emu
@pytest.mark.parametrize("name", ["flat", "flat_u2"])
@pytest.mark.parametrize("misalign", [False, True])
def test_contiguous_entry_computes_every_axis_leaf(module, name, misalign):
    k = KERNELS[name]
    shape = k.out.shape
    x = _cuda_emu.sample(dt.float32, int(np.prod(shape)) + 1, np.random.default_rng(3))
    x = (x[1:] if misalign else x[:-1]).reshape(shape)
    entry, grid, block, args, outs = kernel_plan(k, [x, np.float32(-0.5)], np)
    assert entry == k.name + "_c"
    assert bool(int(args[-2]) & ALIGNED) == (not misalign)
    module.get_function(entry)(grid, block, args)
    _check(outs, k, [x, np.float32(-0.5)])


def _aligned(*arrays) -> bool:
    return all(a.ctypes.data % vec_bytes(a.itemsize) == 0 for a in arrays)


@needs_emu
def test_multi_entry_computes_the_leaves_of_each_record(module):
    """Three records of one kernel (one misaligned): each output equals the interpreter's
    for that record's arrays (each record's flat index starts at 0)."""
    k = KERNELS["flat"]
    rng = np.random.default_rng(4)
    n = int(np.prod(SHAPE3))
    recs, runs, first = [], [], 0
    for misalign in (False, True, False):
        x = _cuda_emu.sample(dt.float32, n + 1, rng)
        x = x[1:] if misalign else x[:-1]
        s = np.asarray([rng.standard_normal()], np.float32)
        outs = [np.full(n, np.nan, np.float32), np.zeros(n, np.int32)]
        flags = 2 | (ALIGNED if _aligned(x, *outs) else 0)
        recs.append([x.ctypes.data, s.ctypes.data] + [o.ctypes.data for o in outs] +
                    [flags, n, first])
        runs.append((x, s, outs))
        first += 1                                  # n < 256 * 4: one block a record
    table = np.asarray(recs, np.int64)
    module.get_function(k.name + "_m")((first,), (256,), (table, np.int32(len(recs))))
    for x, s, outs in runs:
        _check(outs, k, [x.reshape(SHAPE3), s[0]])


@needs_emu
@pytest.mark.parametrize("strategy,k", REDUCTIONS, ids=[k.name for _, k in REDUCTIONS])
def test_reductions_compute_the_leaves_inside_and_outside_the_row(module, strategy, k):
    x = _cuda_emu.sample(dt.float32, int(np.prod(k.shape)), np.random.default_rng(5))
    x = x.reshape(k.shape)
    entry, grid, block, args, outs = kernel_plan(k, [x], np, strategy)
    module.get_function(entry)(grid, block, args)
    _check(outs, k, [x])


def test_leaves_render_as_a_remainder_by_a_constant_and_only_where_used():
    """The column of the row and contiguous entries is ``flat % C`` (a literal: a multiply
    and a shift); a row reduction's in-row column is its loop variable itself; a kernel
    without leaves renders as before (no remainder in its compute)."""
    src = render_elementwise(KERNELS["hot"]) + render_row_entry(KERNELS["hot"])
    assert f"((base + (I)j) % {C})" in src and f"((idx) % {C})" in src
    assert f"((base + (I)j) / {C})" in src           # the first axis: no remainder
    red = _render_one(REDUCTIONS[0][1], "block")
    assert "(int64_t)((i));" in red and "(int64_t)((idx));" in red
    plain = Kernel([InputSpec(dt.float32, (C, 1))], OutSpec(dt.float32, (R, C)),
                   Load(0) * 2.0, "plain")
    assert " % " not in "".join(ln for ln in render_elementwise(plain).splitlines()
                                if "const float t" in ln)


def test_an_index_leaf_must_tile_the_loop_space():
    with pytest.raises(ValueError, match="no axis of the loop space"):
        Kernel([], OutSpec(dt.int64, (4, 6)), Index(5) + 0, "bad")
    with pytest.raises(ValueError, match="integer dtype"):
        Index(5, 1, dt.float32)
    assert index_of((4, 6, 7), 1) == Index(6, 7) and index_of((4, 6), -1) == Index(6, 1)


@needs_nvrtc
def test_nvrtc_compiles_every_entry_with_leaves_without_spills():
    src = _source()
    _cubin, log = nvrtc.compile_sass(src, "ember_index_test")
    made = set(re.findall(r"Function properties for (\w+)", log))
    want = {"ix_hot", "ix_hot_c", "ix_hot_r", "ix_hot_a_r", "ix_flat_c", "ix_flat_m",
            "ix_flat_u2_c"} | {k.name for _, k in REDUCTIONS}
    assert want <= made, want - made
    assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log


@needs_emu
def test_bench_pair_writes_the_same_bits(tmp_path):
    """``bench/cuda_iota.py``'s two CE backward kernels (int64 iota row / Index leaf) on
    the row entry, as the graph launches them: the same float16 bits."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "cuda_iota.py")
    spec = importlib.util.spec_from_file_location("cuda_iota", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows, vocab = 3, 41
    a, b = mod.kernels(rows, vocab)
    emu = _cuda_emu.EmuModule(render_cuda_many([a, b]) + render_row_entry(a) +
                              render_row_entry(b), str(tmp_path), 2)
    rng = np.random.default_rng(6)
    t = rng.integers(0, vocab, (rows, 1)).astype(np.int64)
    x = _cuda_emu.sample(dt.float16, rows * vocab, rng).reshape(rows, vocab)
    lse = np.log(np.exp(x.astype(np.float32)).sum(1, keepdims=True))
    g = np.full((rows, 1), -1.0 / rows, np.float32)
    iota = np.arange(vocab, dtype=np.int64).reshape(1, vocab)
    got = []
    for k, ins in ((a, [t, iota, g, x, lse, g]), (b, [t, g, x, lse, g])):
        name, grid, block, args, outs = row_plan(k, ins, (rows, vocab), np)
        assert name == k.name + "_r"
        emu.get_function(name)(grid, block, args)
        got.append(outs[0])
    np.testing.assert_array_equal(got[0].view(np.uint16), got[1].view(np.uint16))
    assert np.count_nonzero(got[0].astype(np.float32) < 0) >= rows   # the selected ones
