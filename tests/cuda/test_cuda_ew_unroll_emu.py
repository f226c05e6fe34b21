"""The contiguous elementwise entry with ``UNROLL`` vectors per thread (``render_cuda_ew``'s
bytes-in-flight knob that ``bench/cuda_ew_sweep.py`` measures on a GPU).

Unrolled by 2 and 4, the kernels run from their text on the emulator (two blocks, so the
grid-stride loop wraps) on tails, misaligned views and scalar operands in four dtypes and
equal the IR interpreter exactly, as the default entry does in ``test_cuda_vector_emu.py``;
the default (``UNROLL = 1``) text is the one those tests check, and NVRTC compiles the
unrolled float32 entry with all of its 16-byte vector loads.
"""
import re

import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import nvrtc, render_cuda_ew
from ember.codegen.render_cuda import render_cuda_many

import _cuda_emu
from test_cuda_vector_emu import _kernel, _run
from _cuda_emu import sample as _sample

DTYPES = [dt.float32, dt.float16, dt.float64, dt.int8]
SIZES = [1, 5, 1023, 2049, 4097, 9001]


def _source(unroll, names):
    prev, render_cuda_ew.UNROLL = render_cuda_ew.UNROLL, unroll
    try:
        return render_cuda_many([_kernel(d, f"{names}_{d.name}") for d in DTYPES])
    finally:
        render_cuda_ew.UNROLL = prev


def test_default_text_is_unchanged_by_the_knob():
    assert render_cuda_ew.UNROLL == 1
    k = _kernel(dt.float32, "same")
    assert render_cuda_ew.render_elementwise(k) == render_cuda_ew.render_elementwise(k, 1)
    assert render_cuda_ew.render_elementwise(k, 2) != render_cuda_ew.render_elementwise(k)


@pytest.mark.skipif(not _cuda_emu.available(),
                    reason="no g++ with C++20 <barrier> to run the CUDA text on")
@pytest.mark.parametrize("unroll", [2, 4])
def test_unrolled_contiguous_entry_equals_numpy(tmp_path, unroll):
    module = _cuda_emu.EmuModule(_source(unroll, f"u{unroll}"), str(tmp_path), 2)
    rng = np.random.default_rng(unroll)
    for d in DTYPES:
        k = _kernel(d, f"u{unroll}_{d.name}")
        used = set()
        for n in SIZES:
            a, b = _sample(d, n + 1, rng), _sample(d, n + 1, rng)
            used.add(_run(module, k, [a[:n], b[:n]], (n,)))               # aligned
            used.add(_run(module, k, [a[1:], b[:n]], (n,)))               # misaligned
            used.add(_run(module, k, [a[:n], np.asarray(b[0], d.np)], (n,)))   # 0-d
        assert used == {k.name + "_c"}


@pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                    reason="NVRTC or the CUDA headers are not installed")
def test_unrolled_entry_issues_every_vector_load():
    ptx = nvrtc.compile_ptx(_source(4, "p"), "unroll4")
    body = ptx[ptx.index(".entry p_float32_c("):]
    nxt = body.find(".entry", 10)
    body = body if nxt < 0 else body[:nxt]
    # 2 inputs x 4 vectors of 4 floats, in each of the 32/64-bit index instantiations
    assert len(re.findall(r"ld\.global\.nc\.v4\.(?:u32|f32|b32)", body)) >= 2 * 2 * 4
    assert len(re.findall(r"st\.global\.v4\.(?:u32|f32|b32)", body)) >= 2 * 4
