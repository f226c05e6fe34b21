"""The multi-launch entry ``NAME_m`` (``render_cuda_ew.render_multi_entry``) and its runner
(``ember/codegen/cuda_multi.py``): several ``NAME_c`` launches of one kernel as one.

NVRTC + ptxas compile the entry for every dtype the contiguous entry takes (one module
holding all the kernels); the CPU emulator (``_cuda_emu``: the kernel text under g++) runs
a group of records of different sizes — n = 0, sizes that are no multiple of the vector
width, a misaligned view, scalar operands — and each output equals the one launch of
that record alone bit for bit; the table is uploaded again only when a pointer changes;
groups larger than ``MAX_RECORDS`` are several launches; an output given over another
record's input gets a new array. The same on a GPU: ``test_gpu_multi.py``.
"""
import re
from dataclasses import replace

import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import cuda_multi, nvrtc
from ember.codegen.cuda_launch import CudaModule, wants_multi
from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, call
from ember.codegen.render_cuda import render_cuda_many
from ember.codegen.render_cuda_ew import multi_width, render_multi_entry

import _cuda_emu

DTYPES = [dt.float32, dt.float64, dt.float16, dt.bfloat16, dt.int32, dt.int8, dt.bool_]
#: per record: (n, misaligned first input, a Python number as the scalar operand)
RECORDS = [(5, False, False), (0, False, False), (1027, True, False), (4, False, True),
           (2049, False, False), (3, True, True)]


def _kernel(d, name="k", n=8):
    """``x * s + y`` (``(x & s) | y`` for bools), ``s`` one element, and a bool second
    output ``x > y``: a multi-output kernel with a scalar operand, as AdamW's."""
    x, y, s = Load(0), Load(1), Load(2)
    body = call("logical_or", call("logical_and", x, s), y) if d is dt.bool_ else x * s + y
    return Kernel([InputSpec(d, (1,)), InputSpec(d, (1,)), InputSpec(d, (0,))],
                  OutSpec(d, (n,)), body, f"{name}_{d.name}",
                  extra=((dt.bool_, call("gt", x, y)),))


def test_kernels_with_scalar_or_contiguous_specs_want_the_multi_entry():
    k = _kernel(dt.float32)
    assert wants_multi(k) and multi_width(k) == 3 + 2 + 3
    row = Kernel([InputSpec(dt.float32, (4, 1)), InputSpec(dt.float32, (0, 1))],
                 OutSpec(dt.float32, (3, 4)), Load(0) + Load(1), "row")
    assert not wants_multi(row)             # a bias row: the NAME_r entry's
    assert CudaModule([k], multi=True).multi == {k.name}
    assert "_m(" not in CudaModule([k]).source


@pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                    reason="NVRTC or the CUDA fp16/bf16 headers are not installed")
def test_multi_entry_compiles_for_every_dtype_without_spills():
    kernels = [_kernel(d) for d in DTYPES]
    src = render_cuda_many(kernels) + "".join(render_multi_entry(k) for k in kernels)
    _cubin, log = nvrtc.compile_sass(src, "ember_multi_test")
    made = set(re.findall(r"Function properties for (\w+)", log))
    assert {k.name + "_m" for k in kernels} <= made
    assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log


needs_emu = pytest.mark.skipif(not _cuda_emu.available(),
                               reason="no g++ with C++20 <barrier> to run the CUDA text on")

EMU_DTYPES = [dt.float32, dt.float16, dt.bfloat16, dt.int8]


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """``{dtype: CudaModule}`` whose functions run on one emulated module (the text of
    all of them)."""
    kernels = [_kernel(d) for d in EMU_DTYPES]
    src = render_cuda_many(kernels) + "".join(render_multi_entry(k) for k in kernels)
    emu = _cuda_emu.EmuModule(src, str(tmp_path_factory.mktemp("multi_emu")))
    mods = {}
    for d, k in zip(EMU_DTYPES, kernels):
        mods[d] = CudaModule([k], "block", k.name, multi=True)
        mods[d]._module = emu
    return mods


def _records(d, rng):
    """Per record: its kernel IR (its own size), its inputs and output metas."""
    out = []
    for n, shifted, number in RECORDS:
        k = _kernel(d)
        k = replace(k, out=OutSpec(d, (n,)))
        x, y = _cuda_emu.sample(d, n + 1, rng), _cuda_emu.sample(d, n, rng)
        s = _cuda_emu.sample(d, 1, rng)
        s = (s[0].item() if d is not dt.bfloat16 else float(s[0])) if number else s.reshape(())
        out.append((k, [x[1:] if shifted else x[:n], y, s], [((n,), d.np), ((n,), np.bool_)]))
    return out


def _per_launch(mod, recs):
    return [mod.runner(k, metas, np)(np, *ins) for k, ins, metas in recs]


def _same(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()


@needs_emu
@pytest.mark.parametrize("d", EMU_DTYPES, ids=str)
def test_multi_launch_equals_the_launches_one_by_one(modules, d):
    mod = modules[d]
    recs = _records(d, np.random.default_rng(0))
    want = [o for r in _per_launch(mod, recs) for o in r]
    emu = mod._module
    before = len(emu.launches)
    run = mod.multi_runner([k for k, _, _ in recs], [m for _, _, m in recs], np)
    got = run(np, *[a for _, ins, _ in recs for a in ins])
    assert emu.launches[before:] == [recs[0][0].name + "_m"]     # one launch for all
    _same(got, want)
    # the records' first blocks: each its NAME_c grid, n = 0 none
    (table, nrec, nblocks), = run.last.chunks
    firsts = table.reshape(nrec, -1)[:, -1].tolist()
    assert nrec == len(RECORDS) and firsts == [0, 1, 1, 3, 4, 7] and nblocks == 8


@needs_emu
def test_table_is_uploaded_again_only_when_a_pointer_changes(modules):
    d = dt.float32
    mod = modules[d]
    recs = _records(d, np.random.default_rng(1))
    run = mod.multi_runner([k for k, _, _ in recs], [m for _, _, m in recs], np)
    ins = [a for _, i, _ in recs for a in i]
    outs = [np.empty(sh, dt_) for _, _, m in recs for sh, dt_ in m]
    got = run(np, *ins, outs=list(outs))
    assert all(g is o for g, o in zip(got, outs))           # written into the given buffers
    chunks = run.last.chunks
    run(np, *ins, outs=list(outs))
    assert run.last.chunks is chunks                          # same pointers: no upload
    ins2 = [a.copy() if isinstance(a, np.ndarray) else a for a in ins]   # same layout
    got2 = run(np, *ins2, outs=list(outs))
    assert run.last.chunks is not chunks                      # new pointers: one upload
    _same(got2, [o for r in _per_launch(mod, recs) for o in r])


@needs_emu
def test_groups_over_max_records_are_several_launches(modules, monkeypatch):
    monkeypatch.setattr(cuda_multi, "MAX_RECORDS", 4)
    d = dt.float16
    mod = modules[d]
    recs = _records(d, np.random.default_rng(2))
    emu = mod._module
    before = len(emu.launches)
    run = mod.multi_runner([k for k, _, _ in recs], [m for _, _, m in recs], np)
    got = run(np, *[a for _, ins, _ in recs for a in ins])
    assert emu.launches[before:] == [recs[0][0].name + "_m"] * 2
    _same(got, [o for r in _per_launch(mod, recs) for o in r])


@needs_emu
def test_output_given_over_another_records_input_gets_a_new_array(modules):
    d = dt.float32
    mod = modules[d]
    (k, (x, y, s), metas), = _records(d, np.random.default_rng(3))[2:3]     # n = 1027
    shared = y.copy()
    recs = [(k, [x, y, s], metas), (k, [x.copy(), shared, s], metas)]
    want = [o for r in _per_launch(mod, recs) for o in r]
    saved = shared.copy()
    run = mod.multi_runner([k, k], [metas, metas], np)
    # NOTE: record 0 written over record 1's input: blocks of one launch would race
    got = run(np, *recs[0][1], *recs[1][1], outs=[shared, None, None, None])
    assert got[0] is not shared and np.array_equal(shared, saved) and run.last.hazard
    _same(got, want)
