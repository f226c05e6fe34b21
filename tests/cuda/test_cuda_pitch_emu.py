"""The ``NAME_rp`` entry (``codegen/cuda_pitch.py``: row-pitched full operands) run from its
text on the CPU emulator, against the ``NAME_r`` entry on contiguous copies (the same
bits), and compiled by NVRTC + ptxas; its launch plan on NumPy arrays.

The kernel is the cross-entropy backward's shape (``test_cuda_index_emu._one_hot``: per-row
targets, Index leaves, a full float16 operand, a bias row, two outputs); the full operand
and the outputs sit in buffers whose rows are padded to a multiple of 8 (an LM head's
padded GEMM output, the zero-padded buffer dx and dW read).
"""
import re
import types

import numpy as np
import pytest

from ember.codegen import cuda_gemm as cg
from ember.codegen import nvrtc
from ember.codegen.cuda_launch import row_plan
from ember.codegen.cuda_pitch import (OUT_BIT, PitchedFusedOp, pitch_of, pitched_plan,
                                      render_pitched_entry)
from ember.codegen.render_cuda import render_cuda_many
from ember.codegen.render_cuda_ew import ALIGNED, render_row_entry

import _cuda_emu
from test_cuda_index_emu import C, CA, R, RA, _hot_arrays, _one_hot

needs_emu = pytest.mark.skipif(not _cuda_emu.available(),
                               reason="no g++ with C++20 <ucontext.h> to run the CUDA text on")
needs_nvrtc = pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                                 reason="NVRTC or the CUDA fp16/bf16 headers are not installed")
KERNELS = {"odd": _one_hot((R, C), "pt_hot"), "even": _one_hot((RA, CA), "pt_hot_a")}


def _source():
    ks = list(KERNELS.values())
    return render_cuda_many(ks) + "".join(render_row_entry(k) + render_pitched_entry(k)
                                          for k in ks)


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return _cuda_emu.EmuModule(_source(), str(tmp_path_factory.mktemp("pitch_emu")), 2)


def _pitched(a, fill):
    """``a`` copied into a buffer of rows padded to a multiple of 8 (pad: ``fill``)."""
    r, c = a.shape
    buf = np.full((r, -(-c // 8) * 8), fill, a.dtype)
    buf[:, :c] = a
    return buf[:, :c]


def test_pitch_of_tells_contiguous_pitched_and_other_layouts():
    buf = np.zeros((2, 5, 40), np.float16)
    assert pitch_of(buf[..., :37], (2, 5, 37)) == 40
    assert pitch_of(np.zeros((10, 37), np.float16), (10, 37)) == 0
    assert pitch_of(buf[:, :4, :37], (2, 4, 37)) is None        # rows not one pitch apart
    assert pitch_of(buf[..., :37].swapaxes(0, 1), (5, 2, 37)) is None
    assert pitch_of(np.zeros((37, 10), np.float16).T, (10, 37)) is None


def test_pitched_plan_classifies_operands_like_the_row_entry():
    k = KERNELS["odd"]
    t, x, b = _hot_arrays(k, np.random.default_rng(0))
    outs = [_pitched(np.zeros((R, C), np.float32), 0), np.zeros((R, C), np.int64)]
    name, grid, block, args = pitched_plan(k, [t, _pitched(x, 0), b], (R, C), np, outs)
    flags, n, cols, pmask, pitch = (int(v) for v in args[-5:])
    assert name == "pt_hot_rp" and n == R * C and cols == C and pitch == 40
    assert pmask == (1 << 1) | (1 << OUT_BIT)                   # x and the first output
    assert flags & (1 << 8) and flags & (1 << 18) and not flags & ALIGNED   # column, row
    other = _pitched(np.zeros((R, C + 8), np.float32), 0)[:, :C]            # pitch 48
    assert pitched_plan(k, [t, _pitched(x, 0), b], (R, C), np, [other, outs[1]]) is None
    assert pitched_plan(k, [t, x.T.copy().T, b], (R, C), np, outs) is None  # column-major


@needs_emu
@pytest.mark.parametrize("name", ["odd", "even"])
def test_pitched_entry_gives_the_row_entrys_bits(module, name):
    k = KERNELS[name]
    t, x, b = _hot_arrays(k, np.random.default_rng(1))
    entry, grid, block, args, want = row_plan(k, [t, x, b], k.out.shape, np)
    module.get_function(entry)(grid, block, args)
    r, c = k.out.shape
    outs = [_pitched(np.zeros((r, c), np.float32), np.nan),
            _pitched(np.zeros((r, c), np.int64), -7)]
    name_, grid, block, args = pitched_plan(k, [t, _pitched(x, np.nan), b], (r, c), np, outs)
    assert bool(int(args[-5]) & ALIGNED) == (c % 4 == 0)
    module.get_function(name_)(grid, block, args)
    for g, w in zip(outs, want):
        assert np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(w).tobytes()
        if c % 8:
            root = g.base
            assert np.isnan(root[:, c:]).all() if g.dtype.kind == "f" else \
                (root[:, c:] == -7).all()                        # the pad is not written


@needs_emu
def test_pitched_op_writes_a_registered_zero_padded_buffer(tmp_path):
    k = _one_hot((R, C), "pt_one")
    k1 = type(k)(k.inputs, k.out, k.body, k.name)               # the first output only
    src = render_cuda_many([k1]) + render_row_entry(k1) + render_pitched_entry(k1)
    mod = _cuda_emu.EmuModule(src, str(tmp_path), 2)
    t, x, b = _hot_arrays(k1, np.random.default_rng(2))
    op = PitchedFusedOp(k1, types.SimpleNamespace(function=mod.get_function),
                        ((R, C), np.float32), np)          # CudaModule's interface
    got = op(np, t, _pitched(x, 0), b)
    entry, grid, block, args, want = row_plan(k1, [t, x, b], (R, C), np)
    mod.get_function(entry)(grid, block, args)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want[0]).tobytes()
    root = cg._root(got)
    assert root is not None and root[1:] == (R, C, True) and not root[0][:, C:].any()
    assert cg._widen(got, R, 40) is not None


@needs_nvrtc
def test_pitched_entry_compiles_under_nvrtc():
    ptx = nvrtc.compile_ptx(_source(), "pt_hot")
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    assert {"pt_hot_rp", "pt_hot_a_rp", "pt_hot_r"} <= entries


def test_a_layout_the_pitched_entry_refuses_runs_the_kernels_own_runner():
    """A full operand neither contiguous nor pitched (column-major): the fallback's result
    copied into the zero-padded buffer (no launch of the pitched entry)."""
    k = _one_hot((R, C), "pt_fb")
    k1 = type(k)(k.inputs, k.out, k.body, k.name)
    t, x, b = _hot_arrays(k1, np.random.default_rng(3))
    ran = []

    def fallback(xp, *arrays):
        ran.append(1)
        return np.full((R, C), 2.5, np.float32)

    def no_launch(name):
        raise AssertionError(name)
    op = PitchedFusedOp(k1, types.SimpleNamespace(function=no_launch),
                        ((R, C), np.float32), np, fallback=fallback)
    got = op(np, t, x.T.copy().T, b)
    assert ran and (got == 2.5).all() and cg._root(got) is not None
    assert not cg._root(got)[0][:, C:].any()
    with pytest.raises(ValueError, match="pt_fb: no pitched launch"):
        PitchedFusedOp(k1, None, ((R, C), np.float32), np)(np, t, x.T.copy().T, b)
