"""Philox leaves (``codegen.ir.Philox``: a draw's element computed where a kernel uses it, no
array holding the sample) in every CUDA entry, run from their text on the CPU emulator.

Each kernel is rendered twice: with the leaf, and with the leaf replaced by a load of the
sample that ``cuda_philox``'s separate kernel writes (the unfused path, also run on the
emulator). The two must agree bit for bit (uniform, Bernoulli and normal draws; float32,
float16 and bfloat16), and both must match ``cuda_philox.reference`` / the kernel IR's
interpreter (uniforms and masks exactly, normals within float32 rounding of the host
libm). Entries: contiguous ``NAME_c`` (aligned and misaligned, ``UNROLL`` 2), strided
``NAME`` (a transposed operand), row ``NAME_r`` (a bias row), multi ``NAME_m`` and the
reductions' block, warp and thread strategies (leaf in the prologue and the epilogue).
Sizes are small and odd (the emulator runs each thread of a block in turn)."""
import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import cuda_cache, cuda_philox, interp, nvrtc
from ember.codegen.cuda_launch import kernel_plan, row_plan
from ember.codegen.ir import (Apply, InputSpec, Kernel, Load, OutSpec, Philox, Reduce,
                              ReduceKernel, Row, call, has_philox)
from ember.codegen.render_cuda import _render_one, render_cuda_many
from ember.codegen.render_cuda_ew import render_elementwise, render_multi_entry, \
    render_row_entry

import _cuda_emu

needs_emu = pytest.mark.skipif(not _cuda_emu.available(),
                               reason="no g++ with C++20 <ucontext.h> to run the CUDA text on")
needs_nvrtc = pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                                 reason="NVRTC or the CUDA fp16/bf16 headers are not installed")

SEED, OFFSET = 2**63 + 12345, 2**32 - 3        # both words' high bits; offset carries
R, C = 5, 37
SHAPE3 = (3, 5, 7)
SHAPE_U = (4, 37, 11)                          # > 256 * 4: UNROLL 2's second vector runs


def _leaf(kind, shape, scalars, dtype=dt.float32, s=1):
    """A draw over ``shape`` reading its key words from inputs ``s`` and ``s + 1``."""
    return Philox(kind, Load(s), Load(s + 1), int(np.prod(shape)), tuple(scalars), dtype)


def _key_ins(nd):
    return [InputSpec(dt.int64, (0,) * nd)] * 2


def _dropout(shape, name, kind="bernoulli", scalars=(0.8,), dtype=dt.float32):
    """``x * draw * 1.25`` over ``shape`` plus the draw itself as a second output (its
    dtype): a dropout's forward with its mask."""
    nd = len(shape)
    st = tuple(int(np.prod(shape[d + 1:])) for d in range(nd))
    d = _leaf(kind, shape, scalars, dtype)
    body = Load(0) * call("cast", d, dtype=dt.float32) * 1.25
    return Kernel([InputSpec(dt.float32, st)] + _key_ins(nd), OutSpec(dt.float32, shape),
                  body, name, extra=((dtype, d),))


def _row(shape, name):
    """A dropout between a bias row and a per-row scale (the row entry's operands)."""
    d = _leaf("bernoulli", shape, (0.6,))
    body = (Load(0) + Load(3)) * d * Load(4)
    ins = [InputSpec(dt.float32, (shape[1], 1))] + _key_ins(2) + [
        InputSpec(dt.float32, (0, 1)), InputSpec(dt.float32, (1, 0))]
    return Kernel(ins, OutSpec(dt.float32, shape), body, name)


def _reduction(strategy, shape, naxes, name):
    """Row sums of ``x * mask`` (the prologue) and ``x * mask - mean`` (per element) plus
    a uniform draw as a per-row output (the row's first element)."""
    st = tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))
    m = _leaf("bernoulli", shape, (0.5,))
    u = _leaf("uniform", shape, (-1.0, 2.0))
    ins = [InputSpec(dt.float32, st)] + _key_ins(len(shape))
    k = ReduceKernel(ins, shape, naxes, [Reduce("mean", Load(0) * m)], Load(0) * m - Row(0),
                     OutSpec(dt.float32, shape), full=True, name=name,
                     extra=((dt.float32, Row(0) + u, False),))
    return strategy, k


KERNELS = {
    "drop": _dropout(SHAPE3, "px_drop"),
    "drop_u2": _dropout(SHAPE_U, "px_drop_u2"),
    "uni16": _dropout((R, C), "px_uni16", "uniform", (-2.0, 5.0), dt.float16),
    "nrm_bf": _dropout((R, C), "px_nrm_bf", "normal", (0.5, 2.0), dt.bfloat16),
    "nrm": _dropout((3, 41), "px_nrm", "normal", (0.0, 1.0)),
    "row": _row((R, C), "px_row"),
}
REDUCTIONS = [_reduction("block", (R, C), 1, "px_red_block"),
              _reduction("warp", (R, C), 1, "px_red_warp"),
              _reduction("thread", (R, C), 1, "px_red_thread"),
              _reduction("block", SHAPE3, 2, "px_red3")]


def unfused(k):
    """Kernel ``k`` with each Philox leaf a load of a new input (the separate kernel's
    sample, C-contiguous over the loop space) and the draws in input order."""
    shape = k.out.shape if isinstance(k, Kernel) else k.shape
    st = tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))
    draws: list = []

    def go(e):
        if isinstance(e, Philox):
            if e not in draws:
                draws.append(e)
            return Load(len(k.inputs) + draws.index(e))
        if isinstance(e, Apply):
            return replace(e, args=tuple(go(a) for a in e.args))
        return e
    if isinstance(k, Kernel):
        out = [go(k.body)] + [go(e) for _, e in k.extra]
        new = Kernel(list(k.inputs) + [InputSpec(d.dtype, st) for d in draws], k.out,
                     out[0], k.name + "_u", tuple((d, e) for (d, _), e in zip(k.extra, out[1:])))
    else:
        stages = [Reduce(s.kind, go(s.body)) for s in k.stages]
        epi, extra = go(k.epilogue), [(d, go(e), f) for d, e, f in k.extra]
        new = ReduceKernel(list(k.inputs) + [InputSpec(d.dtype, st) for d in draws], k.shape,
                           k.naxes, stages, epi, k.out, k.full, k.name + "_u", extra=extra)
    return new, draws


def _source():
    ks = [KERNELS[n] for n in ("drop", "uni16", "nrm_bf", "nrm", "row")]
    ks += [unfused(k)[0] for k in ks]
    src = render_cuda_many(ks + [k for _, k in REDUCTIONS[:1]], "block")
    src += render_row_entry(KERNELS["row"]) + render_row_entry(unfused(KERNELS["row"])[0])
    src += render_multi_entry(KERNELS["drop"])
    src += render_elementwise(KERNELS["drop_u2"], unroll=2)
    src += render_elementwise(unfused(KERNELS["drop_u2"])[0], unroll=2)
    src += _render_one(unfused(REDUCTIONS[0][1])[0], "block")
    for strategy, k in REDUCTIONS[1:]:
        src += _render_one(k, strategy) + _render_one(unfused(k)[0], strategy)
    return src


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return _cuda_emu.EmuModule(_source(), str(tmp_path_factory.mktemp("philox_leaf")), 2)


@pytest.fixture
def emu_loader(monkeypatch, tmp_path_factory):
    work = str(tmp_path_factory.getbasetemp())
    monkeypatch.setattr(cuda_cache, "module_loader",
                        lambda src, name: _cuda_emu.EmuModule(src, work, 2))
    monkeypatch.setattr(cuda_philox, "_module", {})


def _words():
    return [np.array(v, np.uint64).view(np.int64) for v in (SEED, OFFSET)]


def _samples(draws, shape):
    """Each draw's array from the separate kernel (``cuda_philox.launch``, emulated)."""
    key = np.array([SEED, OFFSET], np.uint64).view(np.int64)
    return [cuda_philox.launch(np, key, d.kind, shape, d.scalars, dtype=d.dtype.np)
            for d in draws]


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16) if a.itemsize == 2 else a.view(np.uint32)


def _run(module, k, arrays, plan=kernel_plan, strategy="block"):
    if plan is row_plan:
        entry, grid, block, args, outs = row_plan(k, arrays, k.out.shape, np)
    else:
        entry, grid, block, args, outs = kernel_plan(k, arrays, np, strategy)
    module.get_function(entry)(grid, block, args)
    return entry, outs


def _both(module, k, arrays, plan=kernel_plan, strategy="block"):
    """(fused outputs, unfused outputs, entry) of ``k`` on ``arrays`` (+ key words)."""
    shape = k.out.shape if isinstance(k, Kernel) else k.shape
    u, draws = unfused(k)
    entry, got = _run(module, k, arrays[:1] + _words() + arrays[1:], plan, strategy)
    _, ref = _run(module, u, arrays[:1] + _words() + arrays[1:] + _samples(draws, shape),
                  plan, strategy)
    return got, ref, entry


def _check(k, got, ref, arrays):
    """Bitwise fused == unfused; both near the interpreter (exact for uniform/mask)."""
    want = interp.run_reduction(k, arrays) if isinstance(k, ReduceKernel) else \
        interp.run_elementwise(k, arrays)
    want = want if isinstance(want, tuple) else (want,)
    normal = "normal" in repr(k)
    for g, r, w in zip(got, ref, want):
        np.testing.assert_array_equal(_bits(g), _bits(r), err_msg=k.name)
        g32 = np.asarray(g, np.float32).reshape(w.shape)
        if normal:
            np.testing.assert_allclose(g32, w.astype(np.float32), rtol=2e-2, atol=2e-3)
        else:
            np.testing.assert_allclose(g32, w.astype(np.float32), rtol=1e-6, atol=1e-6)


@needs_emu
@pytest.mark.parametrize("name", ["drop", "uni16", "nrm_bf", "nrm", "drop_u2"])
@pytest.mark.parametrize("misalign", [False, True])
def test_contiguous_entry_equals_the_separate_kernel(module, emu_loader, name, misalign):
    k = KERNELS[name]
    n = int(np.prod(k.out.shape))
    x = _cuda_emu.sample(dt.float32, n + 1, np.random.default_rng(0))
    x = (x[1:] if misalign else x[:-1]).reshape(k.out.shape)
    got, ref, entry = _both(module, k, [x])
    assert entry == k.name + "_c"
    _check(k, got, ref, [x] + _words())


@needs_emu
def test_draws_are_the_reference_numbers(module, emu_loader):
    """The leaf's own output is ``cuda_philox.reference``'s draw: mask bits exactly."""
    k = KERNELS["drop"]
    x = np.ones(SHAPE3, np.float32)
    got, _, _ = _both(module, k, [x])
    n = int(np.prod(SHAPE3))
    want = cuda_philox.reference("bernoulli", SEED, OFFSET, n, (0.8,))
    np.testing.assert_array_equal(got[1].reshape(-1), want)
    assert 0 < want.sum() < n


@needs_emu
def test_strided_entry_equals_the_separate_kernel(module, emu_loader):
    k = KERNELS["drop"]
    x = _cuda_emu.sample(dt.float32, 105, np.random.default_rng(1)).reshape(7, 5, 3).T
    got, ref, entry = _both(module, k, [x])
    assert entry == k.name
    _check(k, got, ref, [x] + _words())


@needs_emu
def test_row_entry_equals_the_separate_kernel(module, emu_loader):
    k = KERNELS["row"]
    rng = np.random.default_rng(2)
    x = _cuda_emu.sample(dt.float32, R * C, rng).reshape(R, C)
    b = _cuda_emu.sample(dt.float32, C, rng).reshape(1, C)
    s = _cuda_emu.sample(dt.float32, R, rng).reshape(R, 1)
    got, ref, entry = _both(module, k, [x, b, s], row_plan)
    assert entry == k.name + "_r"
    _check(k, got, ref, [x] + _words() + [b, s])


@needs_emu
@pytest.mark.parametrize("strategy,k", REDUCTIONS, ids=[k.name for _, k in REDUCTIONS])
def test_reductions_equal_the_separate_kernel(module, emu_loader, strategy, k):
    x = _cuda_emu.sample(dt.float32, int(np.prod(k.shape)), np.random.default_rng(3))
    x = x.reshape(k.shape)
    got, ref, _ = _both(module, k, [x], strategy=strategy)
    _check(k, got, ref, [x] + _words())


@needs_emu
def test_multi_entry_draws_each_records_numbers(module, emu_loader):
    """Two records of one kernel with different keys: each is its own draw's dropout."""
    k = KERNELS["drop"]
    n = int(np.prod(SHAPE3))
    rng = np.random.default_rng(4)
    recs, runs = [], []
    for r, (seed, off) in enumerate([(SEED, OFFSET), (7, 0)]):
        x = _cuda_emu.sample(dt.float32, n, rng)
        ws = [np.array([v], np.uint64).view(np.int64) for v in (seed, off)]
        outs = [np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)]
        recs.append([x.ctypes.data] + [w.ctypes.data for w in ws] +
                    [o.ctypes.data for o in outs] + [2 | 4, n, r])   # inputs 1, 2: scalars
        runs.append((x, ws, outs))
    module.get_function(k.name + "_m")((2,), (256,), (np.asarray(recs, np.int64),
                                                      np.int32(2)))
    for x, ws, outs in runs:
        want = interp.run_elementwise(k, [x.reshape(SHAPE3), ws[0][0], ws[1][0]])
        for g, w in zip(outs, want):
            np.testing.assert_array_equal(g.reshape(SHAPE3), w)


def test_leaf_checks_and_text():
    """Bad leaves are refused; a kernel without one has no Philox text; the leaf's C reads
    the element's flat index (no mask array among the entry's parameters)."""
    with pytest.raises(ValueError, match="Philox needs"):
        Philox("gamma", Load(1), Load(2), 4, ())
    with pytest.raises(ValueError, match="Philox needs"):
        Philox("uniform", Load(1), Load(2), 4, (0.0, 1.0), dt.float64)
    with pytest.raises(ValueError, match="Philox draw of 5 elements"):
        Kernel(_key_ins(1), OutSpec(dt.float32, (4,)), _leaf("uniform", (5,), (0, 1), s=0))
    with pytest.raises(TypeError, match="seed and offset are int64"):
        Kernel([InputSpec(dt.float32, (0,))] * 2, OutSpec(dt.float32, (4,)),
               _leaf("uniform", (4,), (0, 1), s=0))
    plain = Kernel([InputSpec(dt.float32, (1,))], OutSpec(dt.float32, (4,)), Load(0) * 2.0)
    assert not has_philox(plain) and "philox" not in render_cuda_many([plain])
    k = KERNELS["drop"]
    assert has_philox(k) and has_philox(REDUCTIONS[0][1])
    src = render_elementwise(k)
    assert "ember_philox_bernoulli(" in src and "((double)0.8)" in src
    u16 = render_elementwise(KERNELS["uni16"])
    assert "ember_round_f16(ember_philox_uniform_f16(" in u16
    from ember.codegen.cexpr import Emitter
    with pytest.raises(TypeError, match="only CUDA renderers"):      # the C renderers'
        Emitter(lambda i: f"in{i}[i]", [dt.float32, dt.int64, dt.int64],
                index=lambda e: "i").value(k.body)


@needs_nvrtc
def test_nvrtc_compiles_every_entry_with_leaves_without_spills():
    src = _source()
    _cubin, log = nvrtc.compile_sass(src, "ember_philox_leaf_test")
    made = set(re.findall(r"Function properties for (\w+)", log))
    want = {"px_drop", "px_drop_c", "px_drop_m", "px_drop_u2_c", "px_row_r", "px_nrm_bf_c",
            "px_uni16_c"} | {k.name for _, k in REDUCTIONS}
    assert want <= made, want - made
    assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log


def test_reference_half_uniforms_have_the_dtypes_digits():
    u = cuda_philox.reference("uniform", 3, 0, 64, (0.0, 1.0), ml_dtypes.bfloat16)
    assert u.dtype == np.dtype(ml_dtypes.bfloat16) and float(u.astype(np.float32).max()) < 1
    w = cuda_philox.words(3, 0, 64)
    np.testing.assert_array_equal(u.astype(np.float32),
                                  (w >> 24).astype(np.float32) * np.float32(2 ** -8))
